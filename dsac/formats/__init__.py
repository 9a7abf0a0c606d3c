"""Files read and written: atomic files, the safe unpickler, checkpoints, weights, redaction."""
