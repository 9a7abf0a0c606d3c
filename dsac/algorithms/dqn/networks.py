"""The Keras Q-network of DQN, with optional dueling heads (Wang et al. 2016)."""

from __future__ import annotations

import keras


def build_q_network(obs_dim: int, num_actions: int, hiddens: list[int], dueling: bool, name: str) -> keras.Model:
    """obs -> Q(s, ·). Layers are named ``hidden_<i>`` and ``value``/``advantage`` (dueling)
    or ``out``, so weight names are stable (``q/hidden_0/kernel``)."""
    inputs = keras.Input(shape=(obs_dim,), name="inputs")
    x = inputs
    for i, size in enumerate(hiddens):
        x = keras.layers.Dense(size, activation="relu", name=f"hidden_{i}")(x)
    if dueling:
        value = keras.layers.Dense(1, name="value")(x)
        advantage = keras.layers.Dense(num_actions, name="advantage")(x)
        q = value + advantage - keras.ops.mean(advantage, axis=1, keepdims=True)
    else:
        q = keras.layers.Dense(num_actions, name="out")(x)
    return keras.Model(inputs, q, name=name)
