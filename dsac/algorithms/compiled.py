"""The compiled-update skeleton SAC's and DQN's learners share.

A learner defines ``to_tensors(batch)`` (the batch as its graph takes it),
``_gradients_of(batch) -> (stats, gradients)`` and ``_apply_gradients(gradients)``, and may
extend ``_after_step`` (e.g. a target-network copy). It gets the fused ``update`` of one
learner and the split ``compute_gradients`` / ``apply_gradients`` of data-parallel learners,
each compiled once with ``tf.function``.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


class CompiledUpdate:
    """Mixin: ``update``, ``compute_gradients`` and ``apply_gradients`` from the learner's
    gradient and apply steps. The learner counts its applied updates in ``self.updates``."""

    @tf.function
    def _update(self, batch):
        stats, grads = self._gradients_of(batch)
        self._apply_gradients(grads)
        return stats

    @tf.function
    def _gradients(self, batch):
        return self._gradients_of(batch)

    @tf.function
    def _apply(self, grads):
        self._apply_gradients(grads)

    def _after_step(self) -> None:
        """Runs after every applied update."""
        self.updates += 1

    def update(self, batch: dict[str, np.ndarray]) -> dict:
        """One gradient step; returns float stats and per-transition ``td_abs``."""
        stats = self._update(self.to_tensors(batch))
        self._after_step()
        return stats_to_numpy(stats)

    def compute_gradients(self, batch: dict[str, np.ndarray]) -> tuple[list[np.ndarray], dict]:
        """:meth:`update`'s gradients without applying them (data-parallel learners average
        them first); returns ``(gradients, stats)``."""
        stats, grads = self._gradients(self.to_tensors(batch))
        return [g.numpy() for g in grads], stats_to_numpy(stats)

    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        """:meth:`update`'s step with the given gradients."""
        self._apply([tf.convert_to_tensor(g) for g in grads])
        self._after_step()


def stats_to_numpy(stats: dict) -> dict:
    """Scalar stats as floats; ``td_abs`` (one value per transition) as an array."""
    out = {k: float(v) for k, v in stats.items() if k != "td_abs"}
    out["td_abs"] = stats["td_abs"].numpy()
    return out
