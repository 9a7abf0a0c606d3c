"""What a run shows and leaves: the recorder, the console progress, learning curves, trackers,
TensorBoard and videos.
"""
