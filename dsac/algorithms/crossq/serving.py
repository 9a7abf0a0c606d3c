"""CrossQ's actor as a TensorFlow serving function (for a SavedModel): obs -> deterministic action."""

from __future__ import annotations

import numpy as np


def serving(loaded):
    """``(actor model, act)`` for a :class:`dsac.inference.LoadedPolicy`: ``act(obs)`` is
    tanh(mean) of the actor in inference mode, scaled to the env's bounds, as the numpy actor
    acts deterministically."""
    import tensorflow as tf

    from dsac.algorithms.crossq.networks import acting_variables, build_actor
    from dsac.algorithms.sac.numpy_actor import to_env_action
    from dsac.weights import TensorFlowVariables

    obs_dim = int(np.prod(loaded.observation_space.shape))
    act_dim = int(np.prod(loaded.action_space.shape))
    model = build_actor(obs_dim, act_dim, loaded.config.model, loaded.config.algorithm)
    TensorFlowVariables(acting_variables(model)).set_weights(loaded.payload["weights"])
    low = tf.constant(loaded.action_space.low, tf.float32)
    high = tf.constant(loaded.action_space.high, tf.float32)

    def act(obs):
        x = tf.reshape(tf.cast(obs, tf.float32), (-1, obs_dim))
        return to_env_action(tf.tanh(model(x, training=False)[:, :act_dim]), low, high)

    return model, act
