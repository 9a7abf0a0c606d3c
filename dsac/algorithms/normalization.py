"""``--normalize_obs`` on the learning side, as a wrapper around any of dsac's learners (as
Acme's normalization wrapper): the learner's batches are normalized with the run's observation
statistics before its update sees them, and the statistics travel in its acting weights and its
state, so acting, evaluation, exports and a resumed run use the numbers the networks learned with.

Replay keeps raw observations (HER relabels raw goals); each shard sends the moments of what it
stored with every sample (:class:`dsac.runtime.messages.SampledBatches`), and
:class:`dsac.models.normalization.ObsStatistics` merges them exactly.
"""

from __future__ import annotations

import numpy as np

from dsac.models.acting_net import Normalize
from dsac.models.backends import NUMPY
from dsac.models.normalization import COUNT, MEAN, VAR, Moments, ObsStatistics


class NormalizingLearner:
    """``learner`` (a :class:`dsac.algorithms.learner.Learner`) reading observations normalized
    as its acting network's :class:`dsac.models.acting_net.Normalize` op does, with the same
    float32 numbers. Everything else is the learner's.

    Args:
        learner: the algorithm's learner.
        obs_dim: features of one (flat) observation.
    """

    def __init__(self, learner, obs_dim: int):
        self.learner = learner
        self.statistics = ObsStatistics(obs_dim)
        self._normalize = None  # bound to the current statistics; dropped when they change

    def __getattr__(self, name):  # the learner's STATS, spaces, compiled functions
        return getattr(self.__dict__["learner"], name)

    def observe_obs_moments(self, source: int, moments: Moments) -> None:
        """A replay shard's moments of everything it stored (see ``ObsStatistics.observe``)."""
        self.statistics.observe(source, moments)
        self._normalize = None

    def _normalized(self, batch: dict) -> dict:
        if self._normalize is None:
            self._normalize = Normalize().arrays(self.statistics.total().weights(), NUMPY)
        normalize, dim = self._normalize, self.statistics.dim
        return {**batch, "obs": normalize(np.reshape(batch["obs"], (-1, dim))),
                "next_obs": normalize(np.reshape(batch["next_obs"], (-1, dim)))}

    def learn_on_batch(self, batch):
        return self.learner.learn_on_batch(self._normalized(batch))

    def learn_on_batches(self, batches):
        return self.learner.learn_on_batches([self._normalized(batch) for batch in batches])

    def compute_flat_gradients(self, batch):
        return self.learner.compute_flat_gradients(self._normalized(batch))

    def apply_flat_gradients(self, flat):
        return self.learner.apply_flat_gradients(flat)

    def get_weights(self) -> dict[str, np.ndarray]:
        """The learner's acting weights and the statistics its batches were normalized with."""
        return {**self.learner.get_weights(), **self.statistics.total().weights()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """A warm start: the network's weights, and its statistics to carry on from."""
        weights = dict(weights)
        norm = {name: weights.pop(name) for name in (COUNT, MEAN, VAR) if name in weights}
        if len(norm) == 3:
            self.statistics.warm_start(Moments.from_weights(norm))
            self._normalize = None
        self.learner.set_weights(weights)

    def get_state(self) -> dict[str, np.ndarray]:
        """The learner's state, the statistics' own, and their acting view (a state holds the
        acting weights by name, as every learner's does)."""
        return {**self.learner.get_state(), **self.statistics.state(), **self.statistics.total().weights()}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """A checkpoint's state; one saved without statistics starts them afresh."""
        state = dict(state)
        own = {name: state.pop(name) for name in list(state) if name.startswith("obs_norm/")}
        if "obs_norm/base" in own:
            self.statistics.set_state(own)
            self._normalize = None
        self.learner.set_state(state)
