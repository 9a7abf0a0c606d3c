"""Named get/set of a model's variables: the TF2 successor of Ray's removed
``ray.experimental.tf_utils.TensorFlowVariables``.

Names are structural — the position of a layer in its model and the variable's own short
name, e.g. ``actor/hidden_0/kernel`` or ``q1/01_dense/bias`` — so they do not depend on
Keras' global auto-numbering (``dense_7``) or on how many models the process built. Weights
travel as ``dict[str, np.ndarray]`` in a fixed order, which is what Ray ships zero-copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np
import tensorflow as tf


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _is_auto_name(layer) -> bool:
    """True when Keras made the layer's name up (``dense``, ``dense_3``)."""
    return re.fullmatch(rf"{_snake(type(layer).__name__)}(_\d+)?", layer.name) is not None


def _keras_named_variables(model, prefix: str) -> list[tuple[str, object]]:
    """Walk a Keras model's layers in order; user-given layer names are kept, auto names
    are replaced by ``<index>_<class>`` within the parent."""
    out: list[tuple[str, object]] = []
    seen: set[int] = set()
    for index, layer in enumerate(getattr(model, "layers", [])):
        part = f"{index:02d}_{_snake(type(layer).__name__)}" if _is_auto_name(layer) else layer.name
        if getattr(layer, "layers", None):
            inner = _keras_named_variables(layer, f"{prefix}{part}/")
        else:
            inner = [(f"{prefix}{part}/{v.name}", v) for v in layer.weights]
        for name, var in inner:
            if id(var) not in seen:
                seen.add(id(var))
                out.append((name, var))
    # Weights the model owns directly (not through a layer) keep their own names.
    for var in model.weights:
        if id(var) not in seen:
            seen.add(id(var))
            out.append((f"{prefix}{var.name}", var))
    return out


def _dtype_name(var) -> str:
    """Keras variables give their dtype as a string, tf.Variables as a tf.DType."""
    return getattr(var.dtype, "name", var.dtype)


def _short_name(var) -> str:
    return var.name.split(":")[0].split("/")[-1]


class TensorFlowVariables:
    """Named access to a set of TensorFlow / Keras variables.

    Args:
        source: a Keras model, a ``tf.Module``, a ``{name: variable}`` mapping, or a list of
            variables (named ``<index>_<short name>``).
        prefix: prepended to every name, e.g. ``"actor/"``.
    """

    def __init__(self, source, prefix: str = ""):
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if isinstance(source, Mapping):
            named = [(f"{prefix}{k}", v) for k, v in source.items()]
        elif hasattr(source, "layers") and hasattr(source, "weights"):  # Keras model / layer
            named = _keras_named_variables(source, prefix)
        elif isinstance(source, tf.Module):
            named = [
                (prefix + "/".join(str(p) for p in path), var)
                for path, var in source._flatten(
                    predicate=lambda v: isinstance(v, tf.Variable), with_path=True
                )
            ]
        elif isinstance(source, Iterable):
            named = [(f"{prefix}{i:03d}_{_short_name(v)}", v) for i, v in enumerate(source)]
        else:
            raise TypeError(f"cannot take variables from {type(source).__name__}")
        self._vars: dict[str, object] = {}
        for name, var in named:
            if name in self._vars:
                raise ValueError(f"two variables share the name '{name}'")
            self._vars[name] = var

    @property
    def names(self) -> list[str]:
        """Variable names in their fixed order."""
        return list(self._vars)

    @property
    def variables(self) -> list:
        """The variables, in the order of :attr:`names`."""
        return list(self._vars.values())

    def get_weights(self) -> dict[str, np.ndarray]:
        """Current values as ``{name: numpy array}``."""
        return {name: np.array(var.numpy()) for name, var in self._vars.items()}

    def set_weights(self, weights: Mapping[str, np.ndarray]) -> None:
        """Assign every variable; refuses missing, extra or mis-shaped entries, naming them."""
        missing = [n for n in self._vars if n not in weights]
        extra = [n for n in weights if n not in self._vars]
        shapes = [
            f"{n} {tuple(np.shape(weights[n]))} != {tuple(v.shape)}"
            for n, v in self._vars.items()
            if n in weights and tuple(np.shape(weights[n])) != tuple(v.shape)
        ]
        if missing or extra or shapes:
            parts = []
            if missing:
                parts.append(f"missing: {', '.join(missing)}")
            if extra:
                parts.append(f"extra: {', '.join(extra)}")
            if shapes:
                parts.append(f"mis-shaped: {'; '.join(shapes)}")
            raise ValueError("weights do not match the variables (" + " | ".join(parts) + ")")
        for name, var in self._vars.items():
            var.assign(np.asarray(weights[name], dtype=_dtype_name(var)))

    def get_flat(self) -> np.ndarray:
        """All values concatenated into one 1-D array, in name order."""
        if not self._vars:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate([np.ravel(v.numpy()) for v in self._vars.values()])

    def set_flat(self, flat: np.ndarray) -> None:
        """Inverse of :meth:`get_flat`; refuses a vector of the wrong length."""
        flat = np.asarray(flat)
        total = sum(int(np.prod(v.shape)) for v in self._vars.values())
        if flat.ndim != 1 or flat.size != total:
            raise ValueError(f"flat weights have shape {flat.shape}, expected ({total},)")
        offset = 0
        for var in self._vars.values():
            size = int(np.prod(var.shape))
            var.assign(flat[offset : offset + size].reshape(tuple(var.shape)))
            offset += size


def optimizer_state(optimizer, prefix: str) -> dict:
    """``{name: variable}`` of a Keras optimizer's state (its update count and moments) for a
    checkpoint; not its learning rate, which is a setting: a restored run takes its own. The
    names are the same whether the rate is a number (a variable, second in Keras's list) or a
    schedule (no variable), so a checkpoint of either continues in the other."""
    rate = getattr(optimizer, "_learning_rate", None)
    variables = list(optimizer.variables)
    if not any(v is rate for v in variables):
        variables.insert(1, None)
    return {f"{prefix}/{i:03d}_{_short_name(v)}": v for i, v in enumerate(variables) if v is not None and v is not rate}


def named_variables(source, prefix: str = "") -> dict:
    """``{name: variable}`` of anything :class:`TensorFlowVariables` takes, with its names
    (for assembling one state from several models and optimizers)."""
    tfv = TensorFlowVariables(source, prefix)
    return dict(zip(tfv.names, tfv.variables, strict=True))
