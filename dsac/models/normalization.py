"""Observation statistics for ``--normalize_obs`` (no TensorFlow, no Ray): the running mean and
variance of what the rollout workers collect, kept where the observations arrive (each replay
shard: :class:`Moments` of everything it stored) and merged where they are used (the learner:
:class:`ObsStatistics`), then carried in the acting weights as ``obs_norm/count|mean|var``
(:class:`dsac.models.acting_net.Normalize` reads them).

Moments merge with the parallel form of the mean/variance update (Chan, Golub & LeVeque 1979),
exact up to float64 rounding in any order or grouping, so statistics merged from many shards
equal those of the concatenated data.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from dsac.errors import DsacError

# Weight names in the acting weights, and the learner's state (see ObsStatistics.state).
COUNT, MEAN, VAR = "obs_norm/count", "obs_norm/mean", "obs_norm/var"


def check_normalizable(obs) -> None:
    """A one-line refusal of observations ``--normalize_obs`` does not take (an ObsInput of images)."""
    if obs.is_image:
        raise DsacError(f"--normalize_obs takes vector observations; these are images {tuple(obs.shape)} "
                        "(frames are scaled by 1/255 already): leave it off")


class Moments(NamedTuple):
    """Count, mean and sum of squared deviations (M2) of observations, per feature (float64)."""

    count: float
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, dim: int) -> Moments:
        return cls(0.0, np.zeros(dim), np.zeros(dim))

    @classmethod
    def of(cls, obs) -> Moments:
        """The moments of a batch of observations (any shape with the batch first), flattened."""
        x = np.asarray(obs, np.float64)
        x = x.reshape(x.shape[0], int(np.prod(x.shape[1:])))
        if not len(x):
            return cls.empty(x.shape[1])
        mean = x.mean(axis=0)
        return cls(float(len(x)), mean, ((x - mean) ** 2).sum(axis=0))

    def merge(self, other: Moments) -> Moments:
        """The moments of both sets of observations together."""
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        count = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / count)
        return Moments(count, mean, self.m2 + other.m2 + delta ** 2 * (self.count * other.count / count))

    @property
    def var(self) -> np.ndarray:
        """The population variance (ones while there are no observations: no scaling yet)."""
        return self.m2 / self.count if self.count > 0 else np.ones_like(self.m2)

    def weights(self) -> dict[str, np.ndarray]:
        """As acting weights (float32): what the network's Normalize op reads."""
        return {COUNT: np.array([self.count], np.float32), MEAN: self.mean.astype(np.float32),
                VAR: self.var.astype(np.float32)}

    @classmethod
    def from_weights(cls, weights: dict) -> Moments:
        """Back from :meth:`weights` (a warm start from another run's weights)."""
        count, var = float(np.asarray(weights[COUNT]).reshape(-1)[0]), np.asarray(weights[VAR], np.float64)
        return cls(count, np.asarray(weights[MEAN], np.float64), var * count)


def is_moments(value) -> bool:
    """Whether ``value`` is a well-formed :class:`Moments` (a message from another process)."""
    return (isinstance(value, Moments) and isinstance(value.mean, np.ndarray) and isinstance(value.m2, np.ndarray)
            and value.mean.shape == value.m2.shape and value.mean.ndim == 1 and np.isfinite(value.count)
            and value.count >= 0)


class ObsStatistics:
    """The learner's view of the run's observation statistics: each replay shard (``source``)
    reports the moments of everything it stored since it started; they are merged, in the
    sources' order, with ``base`` — what earlier shard processes and the checkpoint the learner
    started from held. A source whose count went down was restarted: its old moments move into
    ``base``. A restored learner also restores each source's last report, so a shard that kept
    running is not counted twice."""

    def __init__(self, dim: int):
        self.dim = int(dim)
        self.base = Moments.empty(self.dim)
        self.by_source: dict[int, Moments] = {}
        self._total: Moments | None = self.base

    def observe(self, source: int, cumulative: Moments) -> None:
        if not is_moments(cumulative) or cumulative.mean.shape != (self.dim,):
            raise ValueError(f"observation moments of shape {getattr(cumulative, 'mean', None)!r} from replay "
                             f"{source}, expected ({self.dim},)")
        previous = self.by_source.get(source)
        if previous is not None and cumulative.count < previous.count:
            self.base = self.base.merge(previous)
        self.by_source[source] = cumulative
        self._total = None

    def total(self) -> Moments:
        if self._total is None:
            total = self.base
            for source in sorted(self.by_source):
                total = total.merge(self.by_source[source])
            self._total = total
        return self._total

    def warm_start(self, moments: Moments) -> None:
        """Start from another run's statistics (its acting weights)."""
        self.base, self.by_source, self._total = moments, {}, None

    def state(self) -> dict[str, np.ndarray]:
        """Everything :meth:`set_state` needs (float64), for a checkpoint."""
        sources = sorted(self.by_source)
        return {
            "obs_norm/base": np.concatenate([[self.base.count], self.base.mean, self.base.m2]),
            "obs_norm/sources": np.array(sources, np.float64),
            "obs_norm/by_source": np.array([np.concatenate([[m.count], m.mean, m.m2])
                                            for m in (self.by_source[s] for s in sources)],
                                           np.float64).reshape(len(sources), 1 + 2 * self.dim),
        }

    def set_state(self, state: dict) -> None:
        d = self.dim

        def moments(row):
            row = np.asarray(row, np.float64)
            if row.shape != (1 + 2 * d,) or not np.all(np.isfinite(row)) or row[0] < 0:
                raise ValueError(f"observation statistics in the state do not fit {d} features")
            return Moments(float(row[0]), row[1:1 + d].copy(), row[1 + d:].copy())

        self.base = moments(state["obs_norm/base"])
        sources = np.asarray(state["obs_norm/sources"]).reshape(-1)
        rows = np.asarray(state["obs_norm/by_source"], np.float64)
        if rows.size != len(sources) * (1 + 2 * d):
            raise ValueError(f"observation statistics in the state do not fit {d} features")
        rows = rows.reshape(len(sources), 1 + 2 * d)
        self.by_source = {int(s): moments(row) for s, row in zip(sources, rows, strict=True)}
        self._total = None
