"""The Q-network of DQN: the catalog's MLP torso with dueling heads (Wang et al. 2016) and
optionally C51's atoms, or a user's custom model (its output taken as Q-values or logits)."""

from __future__ import annotations

from dsac.models.catalog import build_model


def build_q_network(obs_dim: int, num_actions: int, config, name: str):
    """obs -> Q(s, ·), or with ``config.num_atoms > 1`` the logits of C51's return distribution
    over a fixed support, shape (actions, atoms). Layers are named ``hidden_<i>`` and
    ``value``/``advantage`` (dueling) or ``out``, so weight names are stable (``q/hidden_0/kernel``).
    A custom model gives ``num_actions * num_atoms`` outputs; dueling does not apply to it."""
    import keras

    num_atoms = int(config.num_atoms)
    shape = (num_actions,) if num_atoms == 1 else (num_actions, num_atoms)
    if config.custom_model:
        inner = build_model(obs_dim, num_actions * num_atoms, config, name=f"{name}_custom")
        inputs = keras.Input(shape=(obs_dim,), name="inputs")
        return keras.Model(inputs, keras.ops.reshape(inner(inputs), (-1, *shape)), name=name)
    inputs = keras.Input(shape=(obs_dim,), name="inputs")
    x = inputs
    for i, size in enumerate(config.fcnet_hiddens):
        x = keras.layers.Dense(size, activation=config.fcnet_activation, name=f"hidden_{i}")(x)
    if config.dueling:
        value = keras.layers.Dense(num_atoms, name="value")(x)
        advantage = keras.layers.Dense(num_actions * num_atoms, name="advantage")(x)
        value = keras.ops.reshape(value, (-1, 1) if num_atoms == 1 else (-1, 1, num_atoms))
        advantage = keras.ops.reshape(advantage, (-1, *shape))
        out = value + advantage - keras.ops.mean(advantage, axis=1, keepdims=True)
    else:
        out = keras.ops.reshape(keras.layers.Dense(num_actions * num_atoms, name="out")(x), (-1, *shape))
    return keras.Model(inputs, out, name=name)
