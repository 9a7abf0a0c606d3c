"""Acting through a Keras model — the path custom models take in rollout workers, where the
built-in MLPs use a numpy forward pass instead."""

from __future__ import annotations

import numpy as np

from dsac.models.catalog import build_model
from dsac.models.vision import ObsInput


class KerasForward:
    """A catalog-built Keras model behind a ``tf.function`` taking batches of any size.

    Args:
        input_dim: the flat input size, or an :class:`dsac.models.vision.ObsInput` (images).
        output_dim: the flat output size.
        model: the model section (:class:`dsac.settings.sections.ModelSettings`).
        name: the network's name (``actor``, ``q``); also the prefix of its weight names.
        build: the builder to use, ``build(input_dim, output_dim, model, name)``
            (default: the catalog's :func:`build_model`).
        verbose: TensorFlow's own start-up output shown.
    """

    def __init__(self, input_dim, output_dim: int, model, name: str, build=build_model, verbose: bool = False):
        from dsac.runtime.tf_setup import import_tensorflow

        tf = import_tensorflow(verbose)
        from dsac.weights import TensorFlowVariables

        self.model = build(input_dim, output_dim, model, name)
        self.variables = TensorFlowVariables(self.model, prefix=name)
        shape, self.dtype = ((None, *input_dim.input_shape), input_dim.input_dtype) if isinstance(input_dim, ObsInput) \
            else ((None, input_dim), "float32")
        self._forward = tf.function(lambda x: self.model(x), input_signature=[tf.TensorSpec(shape, self.dtype)])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._forward(np.asarray(x, self.dtype)).numpy()

    def set_weights(self, weights: dict) -> None:
        self.variables.set_weights(weights)
