"""The Q-network of DQN: the catalog's torso (the conv encoder for images, then the MLP) with
dueling heads (Wang et al. 2016) and optionally C51's atoms, or a user's custom model (its
output taken as Q-values or logits)."""

from __future__ import annotations

from dsac.models.catalog import build_model, torso
from dsac.models.vision import ObsInput


def build_q_network(obs: ObsInput, num_actions: int, model, name: str, *, dueling: bool = True, num_atoms: int = 1):
    """obs -> Q(s, ·), or with ``num_atoms > 1`` the logits of C51's return distribution
    over a fixed support, shape (actions, atoms). Layers are named ``conv_<i>``, ``hidden_<i>``
    and ``value``/``advantage`` (dueling) or ``out``, so weight names are stable
    (``q/hidden_0/kernel``). A custom model gives ``num_actions * num_atoms`` outputs (it is
    built for ``input_dim`` = the flat size, or an image's shape); dueling does not apply to it.
    ``model``: the model section (:class:`dsac.settings.sections.ModelSettings`)."""
    import keras

    num_atoms = int(num_atoms)
    shape = (num_actions,) if num_atoms == 1 else (num_actions, num_atoms)
    if model.custom_model:
        input_dim = obs.input_shape if obs.is_image else obs.flat_dim
        inner = build_model(input_dim, num_actions * num_atoms, model, name=f"{name}_custom")
        inputs = keras.Input(shape=obs.input_shape, dtype=obs.input_dtype, name="inputs")
        return keras.Model(inputs, keras.ops.reshape(inner(inputs), (-1, *shape)), name=name)
    inputs, x = torso(obs, model)
    if dueling:
        value = keras.layers.Dense(num_atoms, name="value")(x)
        advantage = keras.layers.Dense(num_actions * num_atoms, name="advantage")(x)
        value = keras.ops.reshape(value, (-1, 1) if num_atoms == 1 else (-1, 1, num_atoms))
        advantage = keras.ops.reshape(advantage, (-1, *shape))
        out = value + advantage - keras.ops.mean(advantage, axis=1, keepdims=True)
    else:
        out = keras.ops.reshape(keras.layers.Dense(num_actions * num_atoms, name="out")(x), (-1, *shape))
    return keras.Model(inputs, out, name=name)
