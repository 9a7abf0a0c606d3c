"""The learning role of dsac's algorithms (:class:`dsac.algorithms.sac.learner.SACLearner`,
:class:`dsac.algorithms.dqn.learner.DQNLearner`): a learner holds the networks, their optimizers and
the compiled update, and gives the acting weights and its full state.

This base is the compiled-loop plumbing. A learner defines ``_to_tensors(batch)`` (the batch as
its graph takes it), ``_gradients_of(batch) -> (stats, gradients)``, ``_apply_gradients(gradients)``
(optimizer steps and target networks, all in the graph), ``_reset_targets()`` and ``STATS``,
the names of the scalar stats ``_gradients_of`` returns besides ``td_abs``; and sets
``acting_weights`` and ``state`` (:class:`dsac.weights.TensorFlowVariables`). One update is
:meth:`Learner._step`: gradients, then — only if all are finite — the apply step.

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
    """An algorithm's learner: ``learn_on_batch(es)``, the split ``compute_flat_gradients`` /
    ``apply_flat_gradients`` of data-parallel learners, and its weights and state. Updates are counted
    once, by :class:`dsac.runtime.learning.UpdateLoop` (the optimizers count their own steps)."""

    STATS: tuple[str, ...] = ()
    _weights: dict | None = None  # the acting weights as of the last update, fetched when asked

    def _reset_targets(self) -> None:
        """Target networks become copies of the networks they track, for the part of them the
        acting weights set (a warm start). A learner without targets has nothing to do."""

    def _compile_with_xla(self) -> None:
        """Compile :meth:`_update_many`'s graph loop with XLA (``jit_compile``): fused kernels and
        fewer op dispatches per update, at a longer first call (and one per new stack size)."""
        self._update_many = tf.function(jit_compile=True, autograph=False)(
            type(self)._update_many.python_function.__get__(self))

    @staticmethod
    def _all_finite(grads):
        return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])

    def _apply_if_finite(self, grads):
        """Apply the gradients only when all are finite; returns whether they were."""
        finite = self._all_finite(grads)
        tf.cond(finite, lambda: self._apply_gradients(grads), lambda: None)
        return finite

    def _step(self, batch):
        """One update on one batch; its stats with ``skipped`` (1 when not applied)."""
        stats, grads = self._gradients_of(batch)
        return {**stats, "skipped": 1.0 - tf.cast(self._apply_if_finite(grads), tf.float32)}

    # Without autograph: every branch is an explicit tf.cond or tf.while_loop, and converting the
    # update's Python (losses, Keras layers) would cost about a second of each learner's start.
    # A user's Keras layers lose nothing: Keras 3 calls them unconverted either way.
    @tf.function(autograph=False)
    def _update(self, batch):
        return self._step(batch)

    @tf.function(autograph=False)
    def _update_many(self, stack):
        # A graph loop (tf.while_loop) rather than one call per batch: the call's own overhead is
        # a large part of a small network's update.
        count = tf.shape(stack["reward"])[0]
        names = (*self.STATS, "skipped", "td_abs")

        def body(i, arrays):
            stats = self._step({key: value[i] for key, value in stack.items()})
            return i + 1, [array.write(i, stats[name]) for name, array in zip(names, arrays, strict=True)]

        _, arrays = tf.while_loop(lambda i, _: i < count, body,
                                  (tf.constant(0), [tf.TensorArray(tf.float32, size=count) for _ in names]),
                                  maximum_iterations=count)
        return {name: array.stack() for name, array in zip(names, arrays, strict=True)}

    @tf.function(autograph=False)
    def _flat_gradients(self, batch):
        # The replica statistics this batch moves are read back and then restored, in the graph:
        # every replica sets the group's mean of them only with an applied step.
        variables = self._replica_variables()
        before = [tf.identity(v) for v in variables]
        stats, grads = self._gradients_of(batch)
        moved = [tf.identity(v) for v in variables]
        with tf.control_dependencies(moved):
            restored = [v.assign(b) for v, b in zip(variables, before, strict=True)]
        # Trace time: where each part lies in the flat array, for _apply_flat.
        self._flat_layout = ([g.shape for g in grads], [v.shape for v in variables])
        finite = self._all_finite(grads)
        with tf.control_dependencies(restored):
            flat = tf.concat([tf.reshape(tf.cast(t, tf.float32), [-1]) for t in (*grads, *moved)], 0)
        return {**stats, "skipped": 1.0 - tf.cast(finite, tf.float32)}, flat

    @tf.function(autograph=False)
    def _apply_flat(self, flat):
        grad_shapes, replica_shapes = self._flat_layout
        parts = tf.split(flat, [shape.num_elements() for shape in (*grad_shapes, *replica_shapes)])
        count = len(grad_shapes)
        finite = self._apply_if_finite([tf.reshape(p, s) for p, s in zip(parts[:count], grad_shapes, strict=True)])
        variables = self._replica_variables()
        if variables:
            def set_replicas():
                for v, part, shape in zip(variables, parts[count:], replica_shapes, strict=True):
                    v.assign(tf.cast(tf.reshape(part, shape), v.dtype))
            tf.cond(finite, set_replicas, lambda: None)
        return finite

    def learn_on_batch(self, batch: dict[str, np.ndarray]) -> dict:
        """One gradient step; returns float stats and per-transition ``td_abs``."""
        stats = self._update(self._to_tensors(batch))
        self._weights = None
        return stats_to_numpy(stats)

    def learn_on_batches(self, batches: list[dict[str, np.ndarray]]) -> list[dict]:
        """One gradient step per batch, in order, in one compiled call; returns each step's
        stats as :meth:`learn_on_batch` does."""
        tensors = [self._to_tensors(batch) for batch in batches]
        stacked = self._update_many({key: np.stack([t[key] for t in tensors]) for key in tensors[0]})
        self._weights = None
        arrays = {name: value.numpy() for name, value in stacked.items()}
        return [
            {**{name: float(arrays[name][i]) for name in (*self.STATS, "skipped")}, "td_abs": arrays["td_abs"][i]}
            for i in range(len(batches))
        ]

    def compute_flat_gradients(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
        """:meth:`learn_on_batch`'s gradients without applying them (data-parallel learners
        average them first), as one float32 array, and the update's stats (``skipped`` 1 when a
        gradient is not finite). The gradients are followed by the values this batch moved
        :meth:`_replica_variables` to (batch renormalization's running statistics), which are
        put back until :meth:`apply_flat_gradients` sets them: every replica then takes the same
        mean, and a dropped update moves nothing. One array, cut in the graph: a call with a
        tensor per gradient costs more than the update of a small network."""
        stats, flat = self._flat_gradients(self._to_tensors(batch))
        return flat.numpy(), stats_to_numpy(stats)

    def apply_flat_gradients(self, flat: np.ndarray) -> bool:
        """:meth:`learn_on_batch`'s step with gradients laid out as :meth:`compute_flat_gradients`
        returns them (the replica statistics last, set with the step); returns whether they were
        applied (not when any gradient is non-finite: then nothing moves)."""
        if not hasattr(self, "_flat_layout"):
            raise RuntimeError("apply_flat_gradients before any compute_flat_gradients: the layout is unknown")
        applied = bool(self._apply_flat(tf.convert_to_tensor(flat, tf.float32)))
        self._weights = None
        return applied

    def _replica_variables(self) -> list:
        """Variables an update moves from its own batch besides the optimizer's step (batch
        normalization's running statistics); none for most learners."""
        return []

    def get_weights(self) -> dict[str, np.ndarray]:
        """The weights acting needs, by name, as of the last update (what a push sends)."""
        if self._weights is None:
            self._weights = self.acting_weights.get_weights()
        return self._weights

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Start from acting weights (a warm start): the targets of what was given start equal
        to it, not at their random initialization (DQN's target network, SAC's image encoder
        target)."""
        weights = {k: np.asarray(v, np.float32) for k, v in weights.items()}
        self.acting_weights.set_weights(weights)
        self._reset_targets()
        self._weights = weights

    def get_state(self) -> dict[str, np.ndarray]:
        """Networks, targets and optimizer state, by name, for checkpoints; the update count is
        the :class:`dsac.runtime.learning.UpdateLoop`'s."""
        return self.state.get_weights()

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Continue from :meth:`get_state`'s arrays (a checkpoint's state)."""
        state = dict(state)
        state.pop("updates", None)  # the UpdateLoop's counter, in a checkpoint's state
        for name in [n for n in state if n.endswith("/learning_rate") and n not in self.state.names]:
            del state[name]  # older checkpoints kept the optimizers' learning rates: the run's own is used
        self.state.set_weights(state)
        self._weights = None


def stats_to_numpy(stats: dict) -> dict:
    """Scalar stats as floats; ``td_abs`` (one value per transition) as an array."""
    out = {k: float(v) for k, v in stats.items() if k != "td_abs"}
    out["td_abs"] = stats["td_abs"].numpy()
    return out
