"""Schedules of a setting over training, as Stable-Baselines3 and rl-zoo write them.

    --lr 3e-4                     # a constant
    --lr "linear(7.3e-4, 0)"      # from 7.3e-4 to 0 over the run's updates
    --lr "linear(1e-3, 1e-4, 0.5)"  # from 1e-3 to 1e-4 over the first half, then 1e-4
    --lr lin_7.3e-4               # rl-zoo's spelling of linear(7.3e-4, 0)

A schedule is stepped by the learner's update count and reaches its end after ``fraction`` of
the run's updates: ``(total_env_steps - learning_starts) * updates_per_step`` (a run that
``--max_seconds`` stops sooner stops partway along it). Its text is what ``config.json`` keeps;
a plain number stays a number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dsac.errors import DsacError

_NUMBER = r"\s*([-+0-9.eE]+)\s*"
_LINEAR = re.compile(rf"linear\({_NUMBER},{_NUMBER}(?:,{_NUMBER})?\)")
_RL_ZOO = re.compile(r"lin_([-+0-9.eE]+)")


@dataclass(frozen=True)
class Linear:
    """From ``start`` to ``end`` in a straight line over ``fraction`` of the run, then ``end``."""

    start: float
    end: float
    fraction: float = 1.0

    def __str__(self) -> str:
        return f"linear({self.start:g}, {self.end:g}" + (f", {self.fraction:g})" if self.fraction != 1.0 else ")")


def parse(name: str, value) -> float | Linear:
    """``value`` (a number, or a schedule's text) as a float or a :class:`Linear`; anything else
    is a one-line error naming ``--name``."""
    if isinstance(value, Linear):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        zoo = _RL_ZOO.fullmatch(text)
        linear = _LINEAR.fullmatch(text)
        try:
            if zoo:
                return _checked(name, Linear(float(zoo.group(1)), 0.0))
            if linear:
                a, b, f = linear.groups()
                return _checked(name, Linear(float(a), float(b), 1.0 if f is None else float(f)))
        except ValueError:
            pass
    raise DsacError(f"--{name} must be a number or a schedule like 'linear(1e-3, 0)', 'linear(1e-3, 1e-4, 0.5)' "
                    f"or 'lin_7.3e-4', got {value!r}")


def _checked(name: str, schedule: Linear) -> Linear:
    if not all(map(math.isfinite, (schedule.start, schedule.end, schedule.fraction))):
        raise DsacError(f"--{name} {schedule}: its numbers must be finite")
    if not 0.0 < schedule.fraction <= 1.0:
        raise DsacError(f"--{name} {schedule}: its fraction must be in (0, 1]")
    return schedule


def as_config_value(name: str, value):
    """A config field's stored form: a float, or a schedule's text."""
    parsed = parse(name, value)
    return parsed if isinstance(parsed, float) else str(parsed)


def horizon_updates(config) -> int:
    """The run's updates a schedule spans."""
    learning_steps = config.run.total_env_steps - (config.algorithm.learning_starts or 0)
    return max(1, round(learning_steps * config.algorithm.updates_per_step))


def keras_learning_rate(config):
    """``config.lr`` for a Keras optimizer: a float, or a schedule stepped by the optimizer's
    own update count (its ``iterations``, which the checkpoint keeps)."""
    schedule = parse("lr", config.algorithm.lr)
    if isinstance(schedule, float):
        return schedule
    import keras

    steps = max(1, round(schedule.fraction * horizon_updates(config)))
    return keras.optimizers.schedules.PolynomialDecay(schedule.start, steps, schedule.end, power=1.0)
