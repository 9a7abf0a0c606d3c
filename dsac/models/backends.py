"""The array primitives an acting network's ops (:mod:`dsac.models.acting_net`) call where numpy
and TensorFlow differ: one :class:`Backend` each, so an op's array form is written once for
numpy acting and the SavedModel's serving function."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

# Keras' activations of the same names.
ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "swish": lambda x: x / (1.0 + np.exp(-x)),
    "linear": lambda x: x,
}


def conv2d_valid(x: np.ndarray, kernel: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    """Keras' ``Conv2D(padding="valid")`` on channels-last ``x`` (N, H, W, C): strided windows
    and one matrix product (no Python loop over pixels); ``kernel`` is (kh, kw, C, out)."""
    kh, kw, channels, out = kernel.shape
    windows = sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::stride, ::stride]  # (N, Ho, Wo, C, kh, kw)
    n, ho, wo = windows.shape[:3]
    columns = windows.reshape(n * ho * wo, channels * kh * kw)  # one copy: im2col
    weights = kernel.transpose(2, 0, 1, 3).reshape(channels * kh * kw, out)
    return (columns @ weights + bias).reshape(n, ho, wo, out)


def _numpy_expectation(logits, support):
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (probs / probs.sum(axis=-1, keepdims=True)) @ support


class Backend(SimpleNamespace):
    """The primitives an op's array form calls where numpy and TensorFlow differ (``@``, ``+``,
    ``*``, slicing and indexing are the arrays' own)."""


NUMPY = Backend(
    activation=ACTIVATIONS.__getitem__, float32=lambda x: x.astype(np.float32), transpose=np.transpose,
    reshape=np.reshape, conv2d=conv2d_valid, sqrt=np.sqrt, tanh=np.tanh,
    moments=lambda x: (x.mean(axis=-1, keepdims=True), x.var(axis=-1, keepdims=True)),
    mean=lambda x, axis: x.mean(axis=axis, keepdims=True), expectation=_numpy_expectation,
    argmax=lambda x: np.argmax(x, axis=1), clip=lambda x, low, high: np.minimum(np.maximum(x, low), high),
)


def tf_backend() -> Backend:
    """The same primitives in TensorFlow (imported here: acting never calls this)."""
    import tensorflow as tf

    activations = {"relu": tf.nn.relu, "tanh": tf.tanh, "swish": lambda x: x * tf.sigmoid(x), "linear": lambda x: x}
    return Backend(
        activation=activations.__getitem__, float32=lambda x: tf.cast(x, tf.float32), transpose=tf.transpose,
        reshape=tf.reshape, sqrt=tf.sqrt, tanh=tf.tanh,
        conv2d=lambda x, kernel, bias, stride: tf.nn.conv2d(x, kernel, stride, "VALID") + bias,
        moments=lambda x: tf.nn.moments(x, axes=[-1], keepdims=True),
        mean=lambda x, axis: tf.reduce_mean(x, axis=axis, keepdims=True),
        expectation=lambda logits, support: tf.reduce_sum(tf.nn.softmax(logits, axis=-1) * support, axis=-1),
        argmax=lambda x: tf.argmax(x, axis=1, output_type=tf.int64),
        clip=tf.clip_by_value,
    )
