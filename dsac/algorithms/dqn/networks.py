"""The Keras Q-network of DQN, with optional dueling heads (Wang et al. 2016)."""

from __future__ import annotations

import keras


def build_q_network(obs_dim: int, num_actions: int, hiddens: list[int], dueling: bool, name: str,
                    num_atoms: int = 1) -> keras.Model:
    """obs -> Q(s, ·), or with ``num_atoms > 1`` the logits of C51's return distribution over
    a fixed support, shape (actions, atoms). Layers are named ``hidden_<i>`` and
    ``value``/``advantage`` (dueling) or ``out``, so weight names are stable (``q/hidden_0/kernel``)."""
    inputs = keras.Input(shape=(obs_dim,), name="inputs")
    x = inputs
    for i, size in enumerate(hiddens):
        x = keras.layers.Dense(size, activation="relu", name=f"hidden_{i}")(x)
    shape = (num_actions,) if num_atoms == 1 else (num_actions, num_atoms)
    if dueling:
        value = keras.layers.Dense(num_atoms, name="value")(x)
        advantage = keras.layers.Dense(num_actions * num_atoms, name="advantage")(x)
        value = keras.ops.reshape(value, (-1, 1) if num_atoms == 1 else (-1, 1, num_atoms))
        advantage = keras.ops.reshape(advantage, (-1, *shape))
        out = value + advantage - keras.ops.mean(advantage, axis=1, keepdims=True)
    else:
        out = keras.ops.reshape(keras.layers.Dense(num_actions * num_atoms, name="out")(x), (-1, *shape))
    return keras.Model(inputs, out, name=name)
