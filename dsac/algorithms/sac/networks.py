"""Keras networks of SAC: a Gaussian actor and twin Q critics (TensorFlow)."""

from __future__ import annotations

import keras


def build_mlp(input_dim: int, hiddens: list[int], output_dim: int, name: str) -> keras.Model:
    """A ReLU MLP with explicitly named layers (``hidden_<i>``, ``out``), so weight names are
    stable and readable (``actor/hidden_0/kernel``)."""
    inputs = keras.Input(shape=(input_dim,), name="inputs")
    x = inputs
    for i, size in enumerate(hiddens):
        x = keras.layers.Dense(size, activation="relu", name=f"hidden_{i}")(x)
    outputs = keras.layers.Dense(output_dim, name="out")(x)
    return keras.Model(inputs, outputs, name=name)


def build_actor(obs_dim: int, act_dim: int, hiddens: list[int]) -> keras.Model:
    """obs -> [mean, log_std] of a Gaussian over pre-tanh actions (2 * act_dim outputs)."""
    return build_mlp(obs_dim, hiddens, 2 * act_dim, name="actor")


def build_critic(obs_dim: int, act_dim: int, hiddens: list[int], name: str) -> keras.Model:
    """concat(obs, action) -> Q(s, a)."""
    return build_mlp(obs_dim + act_dim, hiddens, 1, name=name)
