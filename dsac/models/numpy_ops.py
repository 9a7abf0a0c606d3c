"""Numpy versions of the catalog's MLP pieces, for acting without TensorFlow."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dsac.models.vision import conv_output_shape, default_conv_filters, image_layout

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


def conv2d_valid(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    """Keras' ``Conv2D(padding="valid")`` on channels-last ``x`` (N, H, W, C): strided windows
    and one matrix product (no Python loop over pixels); ``kernel`` is (kh, kw, C, out)."""
    kh, kw, channels, out = kernel.shape
    windows = sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]  # (N, Ho, Wo, C, kh, kw)
    n, ho, wo = windows.shape[:3]
    columns = windows.reshape(n * ho * wo, channels * kh * kw)  # one copy: im2col
    weights = kernel.transpose(2, 0, 1, 3).reshape(channels * kh * kw, out)
    return (columns @ weights + bias).reshape(n, ho, wo, out)


def image_features(weights: dict[str, np.ndarray], prefix: str, obs: np.ndarray, obs_shape, filters,
                   activation: str = "relu") -> np.ndarray:
    """The catalog's conv encoder (:func:`dsac.models.catalog.image_torso`) in numpy: a batch
    of observations to flat features. ``filters`` None: the defaults for ``obs_shape``."""
    axes, (height, width, channels) = image_layout(obs_shape)
    act = ACTIVATIONS[activation]
    x = obs.astype(np.float32)
    if obs.dtype == np.uint8:
        x *= np.float32(1 / 255)
    if axes is not None:
        x = x.transpose(axes)
    x = x.reshape(len(obs), height, width, channels)
    for i, (_, _, stride) in enumerate(filters or default_conv_filters(obs_shape)):
        x = act(conv2d_valid(x, weights[f"{prefix}conv_{i}/kernel"], weights[f"{prefix}conv_{i}/bias"], stride))
    return x.reshape(len(obs), -1)


def encoder_shapes(obs, model, prefix: str) -> tuple[dict[str, tuple[int, ...]], int]:
    """``({prefix}conv_<i>/kernel|bias: shape}, features)`` of the conv encoder of image
    observations (``obs``: an :class:`dsac.models.vision.ObsInput`; ``model``: the model section),
    or ``({}, flat size)``."""
    if not obs.is_image:
        return {}, obs.flat_dim
    filters = model.conv_filters or default_conv_filters(obs.shape)
    shapes, channels = {}, image_layout(obs.shape)[1][2]
    for i, (out, kernel, _) in enumerate(filters):
        shapes[f"{prefix}conv_{i}/kernel"] = (kernel, kernel, channels, out)
        shapes[f"{prefix}conv_{i}/bias"] = (out,)
        channels = out
    height, width, channels = conv_output_shape(obs.shape, filters)
    return shapes, height * width * channels
