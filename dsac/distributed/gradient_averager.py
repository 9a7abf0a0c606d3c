"""Synchronous data-parallel training (``--num_learners N``): the :class:`GradientAverager`
actor, whose learner side is :class:`dsac.distributed.learner_transport.GradientSync`.
"""

from __future__ import annotations

import asyncio

import numpy as np
import ray

from dsac.distributed.actors import MAX_WAIT_S, hot_path, process_id
from dsac.distributed.topology import describe_process

# What GradientAverager.average answers a learner of a group that no longer exists: it joins
# the group being formed (GradientAverager.join) and goes on from the group's state.
REGROUP = "regroup"


@ray.remote
class GradientAverager:
    """Synchronous data-parallel training for ``--num_learners N``: at every step each
    learner sends the gradient of its own batch (one flat float32 array) and gets back the
    mean of all N. Every learner applies the same mean with the same optimizer state, so the
    N replicas stay identical (what an update moves from its own batch besides the gradients,
    such as CrossQ's running statistics, is averaged in the same array) and every learner's
    batch is in every update — none is lost or overwritten. The mean over N batches of B is
    the gradient of one batch of N·B.

    ``average`` also sums a number per learner (the env steps its replay shards hold), so the
    learners know the run-wide count, and hands every learner what each sent beside its
    gradient (``--normalize_obs``: its shards' observation moments), in learner order, so that
    all take the same in the same order.

    **The group.** Learners train together once they formed a group (:meth:`join`): all N
    joined, and the one with the most updates (the lowest index among equals) sent its full
    state (:meth:`share`), which every other takes. A learner that joins again — a restarted
    one (its process died), or any learner after this actor itself was restarted (Ray restarts
    it; its calls in flight then fail) — starts a new group: the learners still in the old one
    are answered :data:`REGROUP` and join it too. So a replacement continues from the
    survivors' state, not from its checkpoint, and no update is lost or applied twice.
    """

    def __init__(self, num_learners: int):
        self.num_learners = num_learners
        self.sums: dict[int, np.ndarray] = {}
        self.counts: dict[int, int] = {}
        self.totals: dict[int, float] = {}
        self.results: dict[int, tuple[np.ndarray, float, list]] = {}
        self.beside: dict[int, dict[int, object]] = {}  # step -> learner -> what it sent beside its gradient
        self.readers: dict[int, int] = {}
        self.contributions = [0] * num_learners
        self.changed = asyncio.Condition()
        self.stopped = False
        self.group = 1  # the group being formed or trained in
        self.joined: dict[int, int] | None = {}  # learner -> its updates while the group forms; None once formed
        self.source: int | None = None  # whose state the group being formed starts from
        self.group_state: dict | None = None  # that state, until every other learner took it
        self.state_takers: set[int] = set()
        self.groups_formed = 0
        self.process = process_id()

    def _new_group(self) -> None:
        """Start forming a new group; rounds of the old one are dropped (its learners regroup)."""
        self.group += 1
        self.joined, self.source, self.group_state, self.state_takers = {}, None, None, set()
        self.sums, self.counts, self.totals, self.results, self.readers, self.beside = {}, {}, {}, {}, {}, {}
        self.changed.notify_all()

    async def join(self, learner: int, updates: int) -> tuple[int, dict | None] | None:
        """Join the group being formed (a learner that already joined it starts a new one: it
        was restarted). ``(group, state)`` once all N joined: ``state`` is None for the
        learner whose state the group starts from (it then calls :meth:`share`), else that
        state, to set. None when the run stops first."""
        async with self.changed:
            if self.joined is None or learner in self.joined:
                self._new_group()
            group = self.group
            self.joined[learner] = int(updates)
            self.changed.notify_all()
            while not self.stopped:
                if self.group != group:  # a newer group is forming: join that one
                    group = self.group
                    self.joined[learner] = int(updates)
                    self.changed.notify_all()
                if self.joined is not None and self.source is None and len(self.joined) == self.num_learners:
                    self.source = max(self.joined, key=lambda j: (self.joined[j], -j))
                    self.changed.notify_all()
                if self.source == learner and self.joined is not None:
                    return group, None
                if self.group_state is not None and self.joined is None:
                    state = self.group_state
                    self.state_takers.add(learner)
                    if len(self.state_takers) == self.num_learners - 1:
                        self.group_state = None  # all took it
                    return group, state
                try:
                    await asyncio.wait_for(self.changed.wait(), MAX_WAIT_S)
                except TimeoutError:
                    pass
            return None

    async def share(self, learner: int, group: int, state: dict) -> bool:
        """The source's state: the group is formed and trains from it. False when a newer
        group started forming meanwhile (the caller joins that one)."""
        async with self.changed:
            if group != self.group or self.source != learner:
                return False
            self.group_state, self.joined, self.source = state, None, None
            self.groups_formed += 1
            self.changed.notify_all()
            return True

    @hot_path
    async def average(self, learner: int, group: int, step: int, gradient: np.ndarray, count: float = 0.0,
                      beside=None):
        """``(mean gradient, summed count, [each learner's beside])`` of ``step`` once all
        learners sent theirs; None when the run stops first; :data:`REGROUP` when ``group`` is
        no longer the group that trains (the learner joins the new one)."""
        async with self.changed:
            if self.stopped:
                return None
            if group != self.group or self.joined is not None:
                return REGROUP
            total = self.sums.get(step)
            # The first array arrives read-only from the object store: sum into a copy.
            self.sums[step] = gradient.astype(np.float32, copy=True) if total is None else total + gradient
            self.counts[step] = self.counts.get(step, 0) + 1
            self.totals[step] = self.totals.get(step, 0.0) + float(count)
            self.beside.setdefault(step, {})[learner] = beside
            self.contributions[learner] += 1
            if self.counts[step] == self.num_learners:
                mean = self.sums.pop(step) / self.num_learners
                sent = self.beside.pop(step)
                self.results[step] = (mean, self.totals.pop(step), [sent.get(j) for j in range(self.num_learners)])
                del self.counts[step]
                self.changed.notify_all()
            while step not in self.results and not self.stopped and group == self.group:
                try:
                    await asyncio.wait_for(self.changed.wait(), MAX_WAIT_S)
                except TimeoutError:
                    pass
            if group != self.group:
                return REGROUP
            if step not in self.results:
                return None
            result = self.results[step]
            self.readers[step] = self.readers.get(step, 0) + 1
            if self.readers[step] == self.num_learners:
                del self.results[step], self.readers[step]
            return result

    async def stats(self) -> dict:
        """Gradients received per learner, groups formed, and this actor's process."""
        return {"contributions": list(self.contributions), "groups_formed": self.groups_formed,
                "process": self.process}

    async def stop(self) -> None:
        """Wake every waiting learner (they get None)."""
        async with self.changed:
            self.stopped = True
            self.changed.notify_all()

    async def where(self) -> dict:
        return {**describe_process(), "process": self.process}
