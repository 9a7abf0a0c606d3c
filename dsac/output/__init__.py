"""What a run shows and leaves: recorder, progress, curves, trackers, TensorBoard, videos."""
