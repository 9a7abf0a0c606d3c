"""dsac: distributed Soft Actor-Critic on Ray, TensorFlow 2 and gymnasium."""

__version__ = "0.1.0"
