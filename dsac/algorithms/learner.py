"""The base of the algorithms' learners (:class:`dsac.algorithms.sac.learner.SACLearner`,
:class:`dsac.algorithms.dqn.learner.DQNLearner`): a learner holds the networks, their optimizers and
the compiled update.

A learner defines ``to_tensors(batch)`` (the batch as its graph takes it),
``_gradients_of(batch) -> (stats, gradients)``, ``_apply_gradients(gradients)`` (optimizer
steps and target networks, all in the graph) and ``STATS``, the names of the scalar stats
``_gradients_of`` returns besides ``td_abs``. It gets ``update`` (one step), ``update_many``
(several steps in one graph loop) and the split ``compute_gradients`` / ``apply_gradients`` of
data-parallel learners, each compiled once with ``tf.function``.

A step whose gradients are not all finite is skipped (nothing is applied: one NaN would
poison every weight) and reported as ``skipped`` = 1.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# Adam's epsilon: PyTorch's (and so Stable-Baselines3's and CleanRL's) 1e-8 rather than Keras'
# 1e-7, so that equal settings mean equal updates in the parity runs (benchmarks/parity.py).
ADAM_EPSILON = 1e-8


class Learner:
    """An algorithm's learner: ``update``, ``update_many``, ``compute_gradients`` and
    ``apply_gradients`` from the subclass's gradient and apply steps. Updates are counted once, by
    :class:`dsac.learning.LearnerLoop` (the optimizers count their own steps)."""

    STATS: tuple[str, ...] = ()

    def reset_targets(self) -> None:
        """Target networks become copies of the networks they track, for the part of them the
        acting weights set (a warm start). A learner without targets has nothing to do."""

    def _apply_if_finite(self, grads):
        """Apply the gradients only when all are finite; returns whether they were."""
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        tf.cond(finite, lambda: self._apply_gradients(grads), lambda: None)
        return finite

    def _step(self, batch):
        """One update on one batch; its stats with ``skipped`` (1 when not applied)."""
        stats, grads = self._gradients_of(batch)
        return {**stats, "skipped": 1.0 - tf.cast(self._apply_if_finite(grads), tf.float32)}

    @tf.function
    def _update(self, batch):
        return self._step(batch)

    @tf.function
    def _update_many(self, stack):
        # A graph loop (tf.while_loop) rather than one call per batch: the call's own overhead
        # is ~1/3 of a small network's update (2x64 SAC: ~840 vs ~560 updates/s on one core).
        count = tf.shape(stack["reward"])[0]
        arrays = {name: tf.TensorArray(tf.float32, size=count) for name in (*self.STATS, "skipped", "td_abs")}
        for i in tf.range(count):
            stats = self._step({key: value[i] for key, value in stack.items()})
            arrays = {name: array.write(i, stats[name]) for name, array in arrays.items()}
        return {name: array.stack() for name, array in arrays.items()}

    def compile_with_xla(self) -> None:
        """Compile :meth:`update_many`'s graph loop with XLA (``jit_compile``): fused kernels and
        fewer op dispatches per update, at a longer first call (and one per new stack size)."""
        self._update_many = tf.function(jit_compile=True)(type(self)._update_many.python_function.__get__(self))

    @tf.function
    def _gradients(self, batch):
        return self._gradients_of(batch)

    @tf.function
    def _apply(self, grads):
        self._apply_if_finite(grads)

    def update(self, batch: dict[str, np.ndarray]) -> dict:
        """One gradient step; returns float stats and per-transition ``td_abs``."""
        stats = self._update(self.to_tensors(batch))
        return stats_to_numpy(stats)

    def update_many(self, batches: list[dict[str, np.ndarray]]) -> list[dict]:
        """One gradient step per batch, in order, in one compiled call; returns each step's
        stats as :meth:`update` does."""
        tensors = [self.to_tensors(batch) for batch in batches]
        stacked = self._update_many({key: np.stack([t[key] for t in tensors]) for key in tensors[0]})
        arrays = {name: value.numpy() for name, value in stacked.items()}
        return [
            {**{name: float(arrays[name][i]) for name in (*self.STATS, "skipped")}, "td_abs": arrays["td_abs"][i]}
            for i in range(len(batches))
        ]

    def compute_gradients(self, batch: dict[str, np.ndarray]) -> tuple[list[np.ndarray], dict]:
        """:meth:`update`'s gradients without applying them (data-parallel learners average
        them first); returns ``(gradients, stats)``."""
        stats, grads = self._gradients(self.to_tensors(batch))
        grads = [g.numpy() for g in grads]
        # The mean of all learners' gradients is applied only if finite (see _apply).
        return grads, {**stats_to_numpy(stats), "skipped": float(not all(np.isfinite(g).all() for g in grads))}

    def apply_gradients(self, grads: list[np.ndarray]) -> None:
        """:meth:`update`'s step with the given gradients (none if any is not finite)."""
        self._apply([tf.convert_to_tensor(g) for g in grads])


def stats_to_numpy(stats: dict) -> dict:
    """Scalar stats as floats; ``td_abs`` (one value per transition) as an array."""
    out = {k: float(v) for k, v in stats.items() if k != "td_abs"}
    out["td_abs"] = stats["td_abs"].numpy()
    return out
