"""Numpy versions of the catalog's MLP pieces, for acting without TensorFlow."""

from __future__ import annotations

import numpy as np

# Keras' activations of the same names.
ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "swish": lambda x: x / (1.0 + np.exp(-x)),
    "linear": lambda x: x,
}


def mlp_forward(weights: dict[str, np.ndarray], layers: list[str], x: np.ndarray,
                activation: str = "relu") -> np.ndarray:
    """The catalog's MLP: every dense layer but the last is followed by ``activation``."""
    act = ACTIVATIONS[activation]
    for i, name in enumerate(layers):
        x = x @ weights[f"{name}/kernel"] + weights[f"{name}/bias"]
        if i < len(layers) - 1:
            x = act(x)
    return x


def dense_shapes(layers: list[str], sizes: list[int]) -> dict[str, tuple[int, ...]]:
    """``{name/kernel: (in, out), name/bias: (out,)}`` of dense ``layers`` whose widths, input
    first, are ``sizes`` (one more than there are layers)."""
    shapes = {}
    for name, n_in, n_out in zip(layers, sizes, sizes[1:], strict=False):
        shapes[f"{name}/kernel"] = (n_in, n_out)
        shapes[f"{name}/bias"] = (n_out,)
    return shapes
