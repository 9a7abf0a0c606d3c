"""The SAC actor's forward pass in numpy: what rollout workers and the evaluator act with.

At the batch sizes of acting (a few observations) numpy costs far less than a
``tf.function`` call and keeps TensorFlow out of rollout processes. The MLP is
:func:`dsac.models.numpy_ops.mlp_forward`, which DQN's Q-network uses too; it must agree with
the catalog's Keras MLP (tested to 1e-5). Custom models act through TensorFlow instead.
"""

from __future__ import annotations

import numpy as np

from dsac.models.numpy_ops import encoder_shapes, image_features, mlp_forward

# Bounds of the actor's log standard deviation (as in Stable-Baselines3).
LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0


def actor_layer_names(num_hidden: int, prefix: str = "actor/") -> list[str]:
    """Names of the actor's dense layers, input to output."""
    return [f"{prefix}hidden_{i}" for i in range(num_hidden)] + [f"{prefix}out"]


def squashed_gaussian(mean: np.ndarray, log_std: np.ndarray, explore: bool, rng: np.random.Generator) -> np.ndarray:
    """tanh(mean + std * noise) when exploring, tanh(mean) otherwise; values in [-1, 1]."""
    if not explore:
        return np.tanh(mean)
    log_std = np.minimum(np.maximum(log_std, LOG_STD_MIN), LOG_STD_MAX)  # np.clip, at a third of its cost
    return np.tanh(mean + np.exp(log_std) * rng.standard_normal(mean.shape).astype(mean.dtype))


def to_env_action(unit, low, high):
    """Actions in [-1, 1] (the squashed Gaussian's range) scaled to the env's bounds. Plain
    arithmetic: numpy arrays and TensorFlow tensors alike (acting, learning, export)."""
    return low + (unit + 1.0) * 0.5 * (high - low)


def to_unit_action(action, low, high):
    """The inverse of :func:`to_env_action`: env-space actions (as replay stores them) in [-1, 1]."""
    return (action - low) * 2.0 / (high - low) - 1.0


def encoder_features(weights: dict[str, np.ndarray], obs: np.ndarray, obs_input, model) -> np.ndarray:
    """φ(s) of image observations: the conv encoder, then tanh(LayerNorm(dense)) (Keras'
    LayerNormalization: epsilon 1e-3)."""
    x = image_features(weights, "encoder/", obs, obs_input.shape, model.conv_filters, model.conv_activation)
    x = mlp_forward(weights, ["encoder/head"], x)
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    x = (x - mean) / np.sqrt(var + 1e-3) * weights["encoder/norm/gamma"] + weights["encoder/norm/beta"]
    return np.tanh(x)


def encoder_weight_shapes(obs_input, model) -> dict[str, tuple[int, ...]]:
    """Shapes of the image encoder's weights, by name."""
    from dsac.algorithms.sac.networks import FEATURE_DIM

    shapes, features = encoder_shapes(obs_input, model, "encoder/")
    shapes.update({"encoder/head/kernel": (features, FEATURE_DIM), "encoder/head/bias": (FEATURE_DIM,),
                   "encoder/norm/gamma": (FEATURE_DIM,), "encoder/norm/beta": (FEATURE_DIM,)})
    return shapes
