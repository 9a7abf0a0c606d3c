"""SAC's networks: a Gaussian actor and twin Q critics, built by the model catalog; for image
observations, a conv encoder φ(s) that the critics share (SAC-AE, Yarats et al. 2019; DrQ,
Kostrikov et al. 2020)."""

from __future__ import annotations

from dsac.models.catalog import build_model, image_torso
from dsac.models.vision import ObsInput, default_conv_filters

# Size of the encoder's features φ(s) (SAC-AE's and DrQ's 50).
FEATURE_DIM = 50


def build_actor(input_dim: int, act_dim: int, model):
    """s (or φ(s)) -> [mean, log_std] of a Gaussian over pre-tanh actions (2 * act_dim outputs)."""
    return build_model(input_dim, 2 * act_dim, model, name="actor")


def build_critic(input_dim: int, act_dim: int, model, name: str):
    """concat(s or φ(s), action) -> Q(s, a)."""
    return build_model(input_dim + act_dim, 1, model, name=name)


def build_encoder(obs: ObsInput, model, name: str = "encoder"):
    """image -> φ(s): the catalog's conv encoder, then Dense(50) + LayerNorm + tanh (layers
    ``conv_<i>``, ``head``, ``norm``), as SAC-AE and DrQ."""
    import keras

    inputs = keras.Input(shape=obs.input_shape, dtype=obs.input_dtype, name="inputs")
    filters = model.conv_filters or default_conv_filters(obs.shape)
    x = image_torso(inputs, obs.shape, filters, model.conv_activation, obs.input_dtype == "uint8")
    x = keras.layers.LayerNormalization(name="norm")(keras.layers.Dense(FEATURE_DIM, name="head")(x))
    return keras.Model(inputs, keras.ops.tanh(x), name=name)


def build_acting_network(obs: ObsInput, act_dim: int, model):
    """``(model, actor, encoder)``: obs -> the actor's outputs, through the encoder for images
    (``encoder`` is None for flat observations, and ``model`` is the actor)."""
    if not obs.is_image:
        actor = build_actor(obs.flat_dim, act_dim, model)
        return actor, actor, None
    import keras

    encoder, actor = build_encoder(obs, model), build_actor(FEATURE_DIM, act_dim, model)
    inputs = keras.Input(shape=obs.input_shape, dtype=obs.input_dtype, name="obs")
    return keras.Model(inputs, actor(encoder(inputs)), name="acting"), actor, encoder
