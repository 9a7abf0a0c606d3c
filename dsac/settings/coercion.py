"""How a setting's value is read, wherever it comes from — a flag's text, a resumed run's
``config.json``, ``Config(...)`` and ``Trainer`` dicts, Tune's search spaces, rl-zoo's YAML (``1e6``
as a string) — and how a section checks its ranges: anything of the wrong type or out of range
is a one-line :class:`DsacError` naming the flag.

Not a flags library such as tyro or simple-parsing: the same coercion reads what does not come
from the command line, which a flags library does not cover, so it would add a second coercion,
not replace this one."""

from __future__ import annotations

import argparse
import json
import math

from dsac.errors import DsacError
from dsac.settings import schedules

# Settings that take a schedule (dsac.settings.schedules) as well as a number.
SCHEDULED = ("lr",)


def _json_flag(text: str, kind: type, example: str):
    """A flag's JSON value of type ``kind`` (argparse reports the error in one line)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(value, kind):
        name = {dict: "object", list: "list"}[kind]
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON {name} like '{example}'")
    return value


def json_object(text: str) -> dict:
    """``--env_kwargs`` and the like: a JSON object."""
    return _json_flag(text, dict, '{"key": 1}')


def json_list(text: str) -> list:
    """``--conv_filters``: a JSON list."""
    return _json_flag(text, list, "[[32, 8, 4], [64, 4, 2]]")


def _utf8(name: str, value) -> None:
    """Refuse text that is not valid UTF-8 (undecodable bytes on the command line arrive as
    lone surrogates), wherever it sits in a nested value."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise DsacError(f"--{name} is not valid UTF-8 text") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _utf8(name, key)
            _utf8(name, item)
    elif isinstance(value, list | tuple):
        for item in value:
            _utf8(name, item)


def _to_int(name: str, value) -> int:
    """An integer from an int, an integral float or a string of one (YAML reads ``1e6`` as a
    string)."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip()) if any(c in value for c in ".eE") else int(value.strip())
        except ValueError:
            raise DsacError(f"--{name} must be an integer, got {value!r}") from None
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int):
        raise DsacError(f"--{name} must be an integer, got {value!r}")
    return number


def _to_float(name: str, value) -> float:
    """A float from a number or a string of one (``"0.99"``, YAML's ``1e-3``)."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise DsacError(f"--{name} must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DsacError(f"--{name} must be a number, got {value!r}")
    return float(value)


def _to_bool(name: str, value) -> bool:
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not isinstance(value, bool):
        raise DsacError(f"--{name} must be true or false, got {value!r}")
    return value


def coerce_field(name: str, annotation: str, value):
    """``value`` as the type of field ``name`` (its annotation, e.g. ``"float | None"``):
    strings that read as numbers become numbers; anything else of the wrong type is a
    one-line error."""
    _utf8(name, value)
    base = annotation.replace(" | None", "").strip()
    if value is None:
        if "None" in annotation or base == "object":
            return None
        raise DsacError(f"--{name} needs a value, got null")
    if name == "framestack":
        return framestack_value(value)
    if name in SCHEDULED:
        return schedules.as_config_value(name, value)
    if base == "int":
        return _to_int(name, value)
    if base == "float":
        return _to_float(name, value)
    if base == "bool":
        return _to_bool(name, value)
    if base == "str" and not isinstance(value, str):
        raise DsacError(f"--{name} must be a string, got {value!r}")
    if base == "list[int]":
        if not isinstance(value, list | tuple):
            raise DsacError(f"--{name} must be a list of integers like [64, 64], got {value!r}")
        return [_to_int(name, item) for item in value]
    if base == "dict" and not isinstance(value, dict):
        raise DsacError(f"--{name} must be a mapping, got {value!r}")
    return value


def flags_as_typed(values: dict) -> str:
    """``--flag value`` for each setting, as a user types it on the command line (a list as
    its words: ``--fcnet_hiddens 128 128``), for log lines that say what was set."""
    return ", ".join(f"--{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"
                     for flag, value in values.items())


def framestack_value(value) -> int:
    """``--framestack``: a frame count, or RLlib's ``true`` (4 frames) / ``false`` (1)."""
    if isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in ("true", "false")):
        return 4 if _to_bool("framestack", value) else 1
    return _to_int("framestack", value)


def positive_ints(section, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise DsacError(f"--{name} must be a positive integer, got {value!r}")


def at_most(section, **bounds: int) -> None:
    """Counts that set how much is built or held per step (envs, episodes, batches in one
    call, rewards summed): each at most its bound, checked before anything is allocated
    (docs/safety.md lists them)."""
    for name, bound in bounds.items():
        value = getattr(section, name)
        if isinstance(value, int) and not isinstance(value, bool) and value > bound:
            raise DsacError(f"--{name} must be at most {bound:,}, got {value:,}")


def non_negative_ints(section, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise DsacError(f"--{name} must be an integer >= 0, got {value!r}")


def positive_numbers(section, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise DsacError(f"--{name} must be a positive number, got {value!r}")


def optional_positive(section, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise DsacError(f"--{name} must be a positive number, got {value!r}")


def in_unit_interval(section, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
            raise DsacError(f"--{name} must be in [0, 1], got {value!r}")


def in_half_open_unit_interval(section, *names: str) -> None:
    for name in names:
        value = getattr(section, name)
        if not (isinstance(value, int | float) and 0.0 < value <= 1.0):
            raise DsacError(f"--{name} must be in (0, 1], got {value!r}")
