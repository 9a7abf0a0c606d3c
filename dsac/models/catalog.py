"""The model catalog: builds every network an algorithm needs from the model config, as in
RLlib's ``ModelCatalog`` — the built-in MLP (``fcnet_hiddens``, ``fcnet_activation``) or a
user's Keras model registered by name::

    import dsac, keras

    def my_model(input_dim, output_dim, model_config, name):
        inputs = keras.Input((input_dim,))
        x = keras.layers.Dense(model_config.get("width", 64), activation="tanh")(inputs)
        return keras.Model(inputs, keras.layers.Dense(output_dim)(x), name=name)

    dsac.register_custom_model("my_model", my_model)
    trainer = dsac.Trainer({"env": "Pendulum-v1", "model": {"custom_model": "my_model"}})

A builder takes ``(input_dim, output_dim, custom_model_config, name)`` and returns a Keras
model from (batch, input_dim) to (batch, output_dim). The registration travels with the
config to every Ray worker. This module imports TensorFlow only when a model is built.
"""

from __future__ import annotations

from collections.abc import Callable

from dsac.errors import DsacError, did_you_mean
from dsac.models.vision import ObsInput, default_conv_filters, image_layout

ACTIVATIONS = ("relu", "tanh", "swish", "linear")

_REGISTRY: dict[str, Callable] = {}


def register_custom_model(name: str, builder: Callable) -> None:
    """Make ``builder`` available as ``model["custom_model"] = name``."""
    if not callable(builder):
        raise TypeError(f"custom model builder for '{name}' must be callable")
    _REGISTRY[name] = builder


def registered_models() -> dict[str, Callable]:
    """A snapshot of the registry (a run ships its workers the one it names)."""
    return dict(_REGISTRY)


def resolve_builder(name: str, registry: dict[str, Callable]) -> Callable:
    """The builder registered as ``name``; a one-line error with close matches otherwise."""
    if name in registry:
        return registry[name]
    hint = did_you_mean(name, registry)
    known = f"; registered: {', '.join(sorted(registry))}" if registry else "; none are registered"
    raise DsacError(f"unknown custom_model '{name}'{hint}{known}")


def build_mlp(input_dim: int, fcnet_hiddens: list[int], output_dim: int, name: str, activation: str = "relu"):
    """An MLP with explicitly named layers (``hidden_<i>``, ``out``), so weight names are stable
    and readable (``actor/hidden_0/kernel``)."""
    import keras

    inputs = keras.Input(shape=(input_dim,), name="inputs")
    x = inputs
    for i, size in enumerate(fcnet_hiddens):
        x = keras.layers.Dense(size, activation=activation, name=f"hidden_{i}")(x)
    return keras.Model(inputs, keras.layers.Dense(output_dim, name="out")(x), name=name)


def image_torso(inputs, obs_shape, filters: list[list[int]], activation: str, scale: bool):
    """The conv encoder of image observations (see :mod:`dsac.models.vision`): cast to float
    (``/255`` for uint8 frames), channels moved last, 'valid' convolutions ``conv_<i>``, flattened
    in (h, w, c) order."""
    import keras

    axes, (height, width, channels) = image_layout(obs_shape)
    x = keras.ops.cast(inputs, "float32")
    if scale:
        x = x / 255.0
    if axes is not None:
        x = keras.ops.transpose(x, axes)
    x = keras.ops.reshape(x, (-1, height, width, channels))
    for i, (out, kernel, stride) in enumerate(filters):
        x = keras.layers.Conv2D(out, kernel, strides=stride, padding="valid", activation=activation,
                                name=f"conv_{i}")(x)
    return keras.layers.Flatten(name="flatten")(x)


def torso(obs: ObsInput, model):
    """``(inputs, features)``: the network's input and its shared torso — the conv encoder for
    image observations (then the MLP), the MLP for flat ones. Layer names are stable
    (``conv_<i>``, ``hidden_<i>``). ``model``: the model section
    (:class:`dsac.settings.sections.ModelSettings`)."""
    import keras

    inputs = keras.Input(shape=obs.input_shape, dtype=obs.input_dtype, name="inputs")
    x = inputs
    if obs.is_image:
        filters = model.conv_filters or default_conv_filters(obs.shape)
        x = image_torso(inputs, obs.shape, filters, model.conv_activation, obs.input_dtype == "uint8")
    for i, size in enumerate(model.fcnet_hiddens):
        x = keras.layers.Dense(size, activation=model.fcnet_activation, name=f"hidden_{i}")(x)
    return inputs, x


def build_model(input_dim: int, output_dim: int, model, name: str):
    """The network ``name`` (e.g. ``actor``, ``q1``) from the model section ``model``
    (:class:`dsac.settings.sections.ModelSettings`)."""
    if not model.custom_model:
        return build_mlp(input_dim, list(model.fcnet_hiddens), output_dim, name, model.fcnet_activation)
    builder = resolve_builder(model.custom_model, model.custom_models)
    network = builder(input_dim, output_dim, dict(model.custom_model_config), name)
    import keras

    if not isinstance(network, keras.Model):
        raise DsacError(f"custom_model '{model.custom_model}' returned a {type(network).__name__}, not a Keras model")
    out_shape = tuple(network.output_shape)
    if out_shape[-1] != output_dim:
        raise DsacError(
            f"custom_model '{model.custom_model}' built '{name}' with output shape {out_shape}; "
            f"expected (None, {output_dim})"
        )
    return network
