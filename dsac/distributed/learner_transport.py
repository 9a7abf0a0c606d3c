"""The learner task's ports on Ray, around the Ray-free :class:`dsac.runtime.roles.Learn` loop: the
replay shards' batches in and priorities back (:class:`ShardedSampler`), weights and state out
(:class:`LearnerTransport`), and with several learners the gradients averaged
(:class:`GradientSync`, the learner's side of
:class:`dsac.distributed.gradient_averager.GradientAverager`).
"""

from __future__ import annotations

import collections
import hashlib
import time

import numpy as np
import ray

from dsac.distributed.gradient_averager import REGROUP
from dsac.runtime.learning import UpdateLoop
from dsac.runtime.messages import LearnerOrders, LearnerReport

# How long a learner waits for the gradient averager to come back after its process died,
# and how often it tries to rejoin meanwhile.
REJOIN_TIMEOUT_S = 120.0
REJOIN_POLL_S = 0.5


class ShardedSampler:
    """Keeps ``prefetch`` sample calls in flight on every replay shard and hands out their
    results round-robin, so the next batches arrive while the current ones train."""

    def __init__(self, shards: list, batch_size: int, num_batches: int, prefetch: int):
        self.shards = shards
        self.batch_size = batch_size
        self.num_batches = num_batches
        self.in_flight = collections.deque(
            (i, shard.sample.remote(batch_size, num_batches)) for _ in range(prefetch) for i, shard in enumerate(shards)
        )
        self.wait_s = 0.0

    def next(self):
        """``(shard index, SampledBatches or None)`` of the oldest call; a new call replaces it at once."""
        shard, ref = self.in_flight.popleft()
        started = time.monotonic()
        result = ray.get(ref)
        self.wait_s += time.monotonic() - started
        self.in_flight.append((shard, self.shards[shard].sample.remote(self.batch_size, self.num_batches)))
        return shard, result

    def update_priorities(self, shard: int, indices, generations, priorities) -> None:
        """New priorities to the shard the batches came from, in one call, not waited for."""
        self.shards[shard].update_priorities.remote(indices, generations, priorities)


class GradientSync:
    """A learner's side of :class:`dsac.distributed.gradient_averager.GradientAverager`: joins the learner
    group (every replica takes the state of the one with the most updates), then flattens the
    policy's gradients into one array, averages it with the other learners', applies the mean.
    When the group re-forms (a learner or the averager was restarted) it joins again.
    """

    def __init__(self, averager, index: int, num_learners: int = 1):
        self.averager = averager
        self.index, self.num_learners = index, int(num_learners)
        # --normalize_obs: this learner's shards' latest moments, by run-wide shard index, sent
        # with the next gradient; every learner takes all learners' from the averager alike.
        self.held_moments: dict = {}
        self.env_steps = 0  # run-wide, summed over the learners' shards at the last step
        self.group = 0
        self.regroup = False  # the last update found the group gone: join() before the next

    def join(self, loop: UpdateLoop) -> bool:
        """Join the learner group and continue from its state (this one's own, when it has the
        most updates); False when the run stopped first. Waits out a restart of the averager."""
        deadline = time.monotonic() + REJOIN_TIMEOUT_S
        while True:
            try:
                reply = ray.get(self.averager.join.remote(self.index, loop.updates))
                if reply is None:
                    return False
                group, state = reply
                if state is None and not ray.get(self.averager.share.remote(self.index, group, loop.state())):
                    continue  # a newer group started forming meanwhile
                if state is not None:
                    loop.set_state(state)
                self.group, self.regroup = group, False
                return True
            except ray.exceptions.RayActorError:  # the averager's process died: Ray restarts it
                if time.monotonic() > deadline:
                    raise
                time.sleep(REJOIN_POLL_S)

    def hold_obs_moments(self, source: int, moments) -> None:
        """A sample's observation moments from this learner's shard ``source`` (learner j
        samples shards j, j + N, ...), for the next update."""
        self.held_moments[self.index + source * self.num_learners] = moments

    def update_fn(self, policy, first_step: int, own_env_steps: int):
        """A ``learn`` function for :meth:`UpdateLoop.step`: every update is the mean of all
        learners' gradients (the results so far when the run stopped meanwhile, or the group
        has to re-form: :attr:`regroup`)."""
        def learn(batches: list[dict]) -> list[dict]:
            results = []
            for i, batch in enumerate(batches):
                result = self.learn(policy, batch, first_step + i, own_env_steps)
                if result is None:  # the run stopped, or the group is gone
                    break
                results.append(result)
            return results
        return learn

    def learn(self, policy, batch: dict, step: int, own_env_steps: int) -> dict | None:
        """One synchronous update; its stats, or None when the run stopped meanwhile or the
        group has to re-form (:attr:`regroup` set; nothing applied)."""
        flat, shapes, stats = flat_gradients(policy, batch)
        held = self.held_moments or None
        try:
            reply = ray.get(self.averager.average.remote(self.index, self.group, step, flat, own_env_steps, held))
        except ray.exceptions.RayActorError:  # the averager's process died: Ray restarts it
            reply = REGROUP
        if isinstance(reply, str) and reply == REGROUP:
            self.regroup = True
            return None
        if reply is None:
            return None
        mean, self.env_steps, beside = reply
        if held is not None:
            self.held_moments = {}
        for moments in beside:  # in learner order: every replica merges the same in the same order
            for source, value in sorted((moments or {}).items()):
                policy.observe_obs_moments(source, value)
        return apply_mean(policy, mean, shapes, stats)


def flat_gradients(policy, batch: dict) -> tuple[np.ndarray, list | None, dict]:
    """The policy's gradients on ``batch`` as one float32 array, the shapes to cut the mean back
    into (None: the policy takes it flat, as dsac's learners do) and the update's stats."""
    if hasattr(policy, "compute_flat_gradients"):
        flat, stats = policy.compute_flat_gradients(batch)
        return flat, None, stats
    grads, stats = policy.compute_gradients(batch)
    return np.concatenate([np.asarray(g, np.float32).ravel() for g in grads]), [np.shape(g) for g in grads], stats


def apply_mean(policy, mean: np.ndarray, shapes: list | None, stats: dict) -> dict:
    """Apply the learners' mean gradient (flat, cut into ``shapes`` unless None); ``stats`` with
    ``skipped`` saying whether it was dropped. The policy applies the mean only when all of it
    is finite, so that decides: every learner counts the same dropped update once, even one
    whose own gradients were finite (its local verdict would leave ``skipped_updates`` at 0)."""
    if shapes is None:
        applied = policy.apply_flat_gradients(mean)
    else:
        ends = np.cumsum([int(np.prod(shape)) for shape in shapes])
        applied = policy.apply_gradients([part.reshape(shape) for part, shape in zip(np.split(mean, ends[:-1]), shapes,
                                                                                        strict=True)])
    # The policy's own verdict where it gives one (dsac's learners check the gradients, not what
    # follows them in the array); else the whole mean's.
    return {**stats, "skipped": float(not applied if isinstance(applied, bool) else not np.isfinite(mean).all())}


def weights_digest(weights: dict[str, np.ndarray]) -> str:
    """A hash of weights by name: equal digests, bit-identical weights."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name]).tobytes())
    return digest.hexdigest()[:16]


class LearnerTransport:
    """The learner's weights sink on Ray (see :mod:`dsac.runtime.roles`): weights pushed to
    the parameter server (not waited for: the next push collects the reply and its stop flag),
    the full state to the run monitor when its reply to the last push's report asked for it.

    With several learners (``data_parallel``) only learner 0 pushes weights and state (the
    replicas are identical); each reports its update count to the run monitor.
    """

    def __init__(self, ps, monitor, index: int, data_parallel: bool = False):
        self.ps, self.monitor, self.index, self.data_parallel = ps, monitor, index, data_parallel
        self.primary = index == 0
        self.orders = LearnerOrders(0, False, False)
        self.last_push = None
        self.last_report = None  # the monitor's reply to the last push's report: is the state wanted?

    def _report_to_monitor(self, loop: UpdateLoop):
        """The update count (data-parallel learners) to the run monitor; its reply says
        whether the full state is wanted."""
        return self.monitor.report_learner.remote(self.index, loop.updates if self.data_parallel else None)

    def idle(self, loop: UpdateLoop, report: LearnerReport) -> None:
        """No batches came: the stop flag from the parameter server, and the state when the
        run monitor wants it (e.g. between Trainer.train() calls)."""
        reply, wanted = ray.get([self.ps.pull.remote(self.orders.version), self._report_to_monitor(loop)])
        self.orders = LearnerOrders(max(self.orders.version, reply.version), reply.stop, wanted)
        if wanted and self.primary:
            ray.get(self.monitor.put_state.remote(loop.state(), report))

    def push(self, loop: UpdateLoop, report: LearnerReport) -> None:
        """Push the weights (learner 0), and the state too when the last report's reply asked for it."""
        if not self.primary:
            self._report_to_monitor(loop)
            return
        if self.last_push is not None:
            self.orders = ray.get(self.last_push)  # long done: carries the stop flag
        if self.last_report is not None and ray.get(self.last_report):
            self.orders = self.orders._replace(state_wanted=True)
            self.monitor.put_state.remote(loop.state(), report)
        self.last_push = self.ps.push.remote(loop.get_weights(), report)
        self.last_report = self._report_to_monitor(loop)  # after the state: it says whether more is wanted

    def first_push(self, loop: UpdateLoop, report: LearnerReport) -> None:
        """Learner 0's first weights, waited for (the workers wait for them)."""
        self.push(loop, report)
        if self.last_push is not None:
            self.orders, self.last_push = ray.get(self.last_push), None

    def hand_over(self, loop: UpdateLoop, final: LearnerReport, state: bool) -> None:
        """The ``final`` report, weights and (``state``) full state, waited for: the state goes
        before the push the evaluator waits for."""
        if self.data_parallel:
            ray.get(self.monitor.report_learner.remote(self.index, loop.updates))
        if self.primary:
            if state:
                ray.get(self.monitor.put_state.remote(loop.state(), final))
            ray.get(self.ps.push.remote(loop.get_weights(), final))
