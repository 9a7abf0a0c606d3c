"""DQN's Q-network as a TensorFlow serving function (for a SavedModel): obs -> greedy action."""

from __future__ import annotations


def serving(loaded):
    """``(Q-network, act)`` for a :class:`dsac.inference.LoadedPolicy`: ``act(obs)`` is the
    greedy action (C51: over the expected value of each action's return distribution)."""
    import tensorflow as tf

    from dsac.algorithms.dqn.networks import build_q_network
    from dsac.algorithms.dqn.numpy_q import c51_support
    from dsac.models.vision import obs_input
    from dsac.weights import TensorFlowVariables

    model = build_q_network(obs_input(loaded.observation_space), int(loaded.action_space.n), loaded.config.model, "q",
                            dueling=loaded.config.algorithm.dueling, num_atoms=loaded.config.algorithm.num_atoms)
    TensorFlowVariables(model, "q").set_weights(loaded.payload["weights"])
    support = c51_support(loaded.config.algorithm)
    start = int(loaded.action_space.start)

    def act(obs):
        q = model(obs)
        if support is not None:
            q = tf.reduce_sum(tf.nn.softmax(q, axis=-1) * support, axis=-1)
        return tf.argmax(q, axis=1, output_type=tf.int64) + start

    return model, act
