"""File formats read and written: atomic files, the safe unpickler, checkpoints, weights files for
inference, and redaction of secrets.
"""
