"""SAC's actor as a TensorFlow serving function (for a SavedModel): obs -> deterministic action."""

from __future__ import annotations

import numpy as np


def serving(loaded):
    """``(actor model, act)`` for a :class:`dsac.inference.LoadedPolicy`: ``act(obs)`` is
    tanh(mean) scaled to the env's bounds, as the numpy actor acts deterministically."""
    import tensorflow as tf

    from dsac.algorithms.sac.networks import build_acting_network
    from dsac.algorithms.sac.numpy_actor import to_env_action
    from dsac.models.vision import obs_input
    from dsac.weights import TensorFlowVariables, named_variables

    act_dim = int(np.prod(loaded.action_space.shape))
    model, actor, encoder = build_acting_network(obs_input(loaded.observation_space), act_dim, loaded.config.model)
    named = {**(named_variables(encoder, "encoder") if encoder is not None else {}), **named_variables(actor, "actor")}
    TensorFlowVariables(named).set_weights(loaded.payload["weights"])
    low = tf.constant(loaded.action_space.low, tf.float32)
    high = tf.constant(loaded.action_space.high, tf.float32)

    def act(obs):
        return to_env_action(tf.tanh(model(obs)[:, :act_dim]), low, high)

    return model, act
