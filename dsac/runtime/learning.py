"""The learner's update loop, free of Ray (Acme's ``Learner.step``): one sample call's batches in,
what to send out — whether to push weights, the new priorities, the stats — and the one
update counter. Both runners drive it through :class:`dsac.runtime.roles.Learn`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dsac.runtime.cpu import CpuMeter
from dsac.runtime.messages import LearnerReport


class NonFiniteUpdates(RuntimeError):
    """``--max_nonfinite_updates`` updates in a row had non-finite gradients."""


@dataclass
class UpdateStep:
    """What one :meth:`UpdateLoop.step` produced.

    Attributes:
        push: the block passed a multiple of ``push_every`` updates: push the weights now.
        priorities: new priorities (|TD error|), one row per batch, for prioritized replay;
            None when some update gave none (a skipped, non-finite one) or the policy gives none.
        stopped: the update function reported the run stopped midway (data-parallel learners).
    """

    push: bool
    priorities: np.ndarray | None
    stopped: bool = False


class UpdateLoop:
    """Runs a ``learner``'s updates on stacked batches and keeps its books: the ``updates``
    count (a resumed run's to start from), a push after each block of updates that passes a
    multiple of ``push_every``, a stop after ``max_nonfinite_updates`` in a row had non-finite
    gradients, and ``callbacks.on_learn_on_batch`` per update. The learner
    (:func:`dsac.runtime.build.learner_loop`): a :class:`dsac.algorithms.learner.Learner`, or a user's
    :class:`dsac.policy.Policy` built with ``build_learner=True``."""

    def __init__(self, learner, push_every: int, max_nonfinite_updates: int, callbacks=None, updates: int = 0):
        self.learner = learner
        self.push_every = int(push_every)
        self.max_nonfinite_updates = int(max_nonfinite_updates)
        self.callbacks = callbacks
        self.updates = int(updates)  # the one update counter of the run's learner
        self.skipped = 0  # updates with non-finite gradients (not applied)
        self.skipped_in_a_row = 0
        self.stats: dict[str, float] = {}  # means over the updates between the last two pushes
        self._sums: dict[str, float] = {}
        self._count = 0
        # The update runs on TensorFlow's threads: process CPU. Its transport times its own
        # sampling and pushes on the same meter.
        self.cpu = CpuMeter(time.process_time)

    def step(self, stacked: dict[str, np.ndarray],
             learn: Callable[[list[dict]], list[dict] | None] | None = None) -> UpdateStep:
        """Learn from the ``batches_per_sample`` batches stacked in ``stacked`` (as a replay
        sample call returns them), by default in one ``learner.learn_on_batches`` call; ``learn``
        replaces that call (data-parallel learners average gradients first; it returns None
        when the run stopped meanwhile).

        Raises:
            NonFiniteUpdates: ``max_nonfinite_updates`` updates in a row were skipped (the
                weights are still the last good ones).
        """
        started = self.cpu.now()
        count = len(stacked["reward"])
        batches = [{key: value[i] for key, value in stacked.items()} for i in range(count)]
        started = self.cpu.add("sample", started)
        # A user's Policy may define only learn_on_batch; dsac's learners run the batches in one graph.
        one_by_one = lambda batches: [self.learner.learn_on_batch(batch) for batch in batches]  # noqa: E731
        results = (learn or getattr(self.learner, "learn_on_batches", None) or one_by_one)(batches)
        self.cpu.add("update", started)
        block_start = self.updates
        if results is None:
            return UpdateStep(push=False, priorities=None, stopped=True)
        priorities = []
        for batch, result in zip(batches, results, strict=False):
            td_abs = result.pop("td_abs", None)
            if result.get("skipped"):
                self.skipped += 1
                self.skipped_in_a_row += 1
                td_abs = None  # its TD errors are not finite: no priorities from it
            else:
                self.skipped_in_a_row = 0
            priorities.append(td_abs)
            if td_abs is not None:
                result["td_error_mean"], result["td_error_max"] = float(np.mean(td_abs)), float(np.max(td_abs))
            if self.callbacks is not None:
                self.callbacks.on_learn_on_batch(policy=self.learner, batch=batch, result=result)
            for key, value in result.items():
                if np.ndim(value) == 0:  # scalars only: a custom policy may report arrays
                    self._sums[key] = self._sums.get(key, 0.0) + float(value)
            self._count += 1
            self.updates += 1
        push = self.updates // self.push_every > block_start // self.push_every
        if push:
            self.stats = {key: total / self._count for key, total in self._sums.items()}
            self._sums, self._count = {}, 0
        complete = len(priorities) == count and all(p is not None for p in priorities)
        step = UpdateStep(push=push, priorities=np.stack(priorities) if complete else None,
                           stopped=len(results) < count)
        if self.skipped_in_a_row >= self.max_nonfinite_updates:
            raise NonFiniteUpdates(
                f"{self.skipped_in_a_row} updates in a row had non-finite losses or gradients (skipped; "
                f"{self.skipped} in all, of {self.updates}): stopped with the last good weights"
            )
        return step

    def get_weights(self) -> dict[str, np.ndarray]:
        """The weights acting needs, as of the last update (what a push sends)."""
        return self.learner.get_weights()

    def report(self, env_steps: int, learner_wait_s: float = 0.0, final: bool = False) -> LearnerReport:
        """What the learner tells the parameter server with its weights (counters, stats)."""
        return LearnerReport(self.updates, env_steps, self.stats, self.skipped, learner_wait_s, final,
                             self.cpu.seconds())

    def state(self) -> dict[str, np.ndarray]:
        """The learner's full state for a checkpoint, with this loop's update count."""
        # A Policy without a get_state of its own: its weights are all it trains.
        state = (getattr(self.learner, "get_state", None) or self.learner.get_weights)()
        return {**state, "updates": np.array(self.updates)}

    def set_state(self, state: dict) -> None:
        """Continue from a checkpoint's state (networks, optimizer, update count)."""
        (getattr(self.learner, "set_state", None) or self.learner.set_weights)(state)
        self.updates = int(state.get("updates", 0))
