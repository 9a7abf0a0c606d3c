"""The Ray actors ``ReplayBuffer`` and ``ParameterServer`` (with several learners,
:class:`dsac.distributed.gradient_averager.GradientAverager` too; the run's reports go to
:class:`dsac.distributed.monitor.RunMonitor`).

They are asyncio actors: a call that has to wait (a writer over its insert budget, a learner
ahead of the update ratio) awaits a condition instead of polling, and never blocks the
other callers. Neither knows which algorithm runs.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import time

import numpy as np
import psutil
import ray

from dsac.distributed.board_writer import BoardLoop
from dsac.distributed.topology import describe_process
from dsac.replay.buffer import check_fits_in_memory, storage_bytes
from dsac.runtime import build
from dsac.runtime.messages import (
    Chunk,
    Grant,
    Latest,
    LearnerOrders,
    LearnerReport,
    PullReply,
    SampledBatches,
    ShardStats,
)

log = logging.getLogger("dsac")

# Longest a blocked add/sample waits before returning empty-handed, so callers can look
# at the stop flag even if nothing else happens.
MAX_WAIT_S = 1.0
# Longest a pull waits for a newer version: a push or the stop flag answers it at once, so a
# long wait costs nothing, while each timeout is one more call per worker: with many workers,
# short waits would keep the server busy answering pulls that bring nothing.
MAX_PULL_WAIT_S = 30.0


# Methods called many times a second (every chunk, sample, pull, push, poll): Ray would record
# an event per call in its GCS for the dashboard's task list, which nobody reads for these, and
# over a long run those events take much of the GCS's memory.
hot_path = ray.method(enable_task_events=False)


async def wait_until(changed: asyncio.Condition, predicate, seconds: float) -> None:
    """Wait, holding nothing, until ``predicate()`` holds (checked whenever ``changed`` is
    notified) or ``seconds`` have passed."""
    async with changed:
        try:
            await asyncio.wait_for(changed.wait_for(predicate), seconds)
        except TimeoutError:
            pass


def process_id() -> str:
    """This process, as node:pid. A restarted actor has a new one: the driver compares it
    with the one it met first to know that the actor needs the run's state back."""
    where = describe_process()
    return f"{where['node']}:{where['pid']}"


@ray.remote
class ReplayBuffer:
    """A replay shard: a :class:`dsac.replay.buffer.Replay` of ``capacity`` transitions of ``specs``
    (``options``: :func:`dsac.runtime.build.replay`'s; a resumed run's ``restore`` is a :meth:`snapshot`)
    whose callers wait — a writer over its budget, a learner ahead of the ratio — up to
    ``max_wait_s`` (then they look at the stop flag), waiting writers first come first served."""

    def __init__(self, specs, capacity, *, max_wait_s: float = MAX_WAIT_S, **options):
        nbytes = storage_bytes(capacity, specs, options.get("frames"))
        check_fits_in_memory(nbytes, psutil.virtual_memory().available, f"node {socket.gethostname()}")
        # After a restart (Ray calls __init__ again in a new process) the buffer starts empty
        # and counts on from where the run was once the driver calls resume().
        self.replay = build.replay(specs, capacity, **options)
        self.process = process_id()
        self.max_wait_s = float(max_wait_s)
        # Writers waiting for budget, first come first served (-> when last heard of), so a
        # writer that just delivered cannot take the budget a waiting one was next in line for.
        self.queue: collections.OrderedDict[int, float] = collections.OrderedDict()
        self.changed = asyncio.Condition()
        self.stopped = False
        self.sample_wait_s = 0.0
        self.added_by_writer: collections.Counter[int] = collections.Counter()
        self.bytes_by_writer: collections.Counter[int] = collections.Counter()
        log.info("ReplayBuffer: %d transitions, %.1f MiB when full", capacity, nbytes / 2**20)

    async def _wait_for_change(self, deadline: float) -> bool:
        """Wait (holding nothing) until another call changes the buffer; False at ``deadline``."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            await asyncio.wait_for(self.changed.wait(), remaining)
            return True
        except TimeoutError:
            return False

    def _forget_gone_writers(self) -> None:
        """Drop writers not heard of for a while (a dead worker must not block the line)."""
        cutoff = time.monotonic() - 3 * self.max_wait_s
        for writer in [w for w, seen in self.queue.items() if seen < cutoff]:
            del self.queue[writer]

    def _status(self, grant: int = 0) -> Grant:
        return Grant(grant, self.stopped, self.replay.added, self.replay.storage.sampled_batches)

    @hot_path
    async def add(self, writer: int, chunk: Chunk | None = None, keep: int = 0) -> Grant:
        """Store a chunk (many transitions) and top up the writer's insert budget. A writer that
        still holds budget (``keep``: it collects with it meanwhile) is answered at once, topped
        up only from headroom no waiting writer is in line for; one without waits its turn while
        collection is ahead of the update ratio: the backpressure that keeps many workers on
        few cores from flooding the learner."""
        keep, replay = max(0, int(keep)), self.replay
        async with self.changed:
            if replay.add(chunk):
                self.added_by_writer[writer] += chunk.size
                self.bytes_by_writer[writer] += chunk.nbytes
                self.changed.notify_all()
            replay.outstanding[writer] = keep
            if keep > 0:  # it goes on collecting meanwhile: answered at once
                self.queue.pop(writer, None)
                return self._status(0 if self.queue else replay.grant(writer, keep))
            self.queue[writer] = time.monotonic()  # a writer already in line keeps its place
            deadline = time.monotonic() + self.max_wait_s
            while not self.stopped:
                self._forget_gone_writers()
                if next(iter(self.queue)) == writer:
                    grant = replay.grant(writer, keep)
                    if grant:
                        del self.queue[writer]
                        self.changed.notify_all()  # the next in line may fit in what is left
                        return self._status(grant)
                if not await self._wait_for_change(deadline):
                    break
            return self._status(0)

    async def writer_counts(self) -> dict[int, int]:
        """``{writer: transitions it delivered}`` since this actor started."""
        return dict(self.added_by_writer)

    async def writer_bytes(self) -> dict[int, int]:
        """``{writer: bytes of the chunks it delivered}`` since this actor started."""
        return dict(self.bytes_by_writer)

    @hot_path
    async def sample(self, batch_size: int, num_batches: int) -> SampledBatches | None:
        """``num_batches`` stacked batches, or ``None`` if the ratio does not allow them within
        ``max_wait_s`` (or the run is stopping)."""
        started, sampled = time.monotonic(), None
        async with self.changed:
            while not self.stopped:
                if self.replay.can_sample(num_batches):
                    sampled = self.replay.sample(batch_size, num_batches)
                    self.changed.notify_all()  # writers may have new budget
                    break
                if not await self._wait_for_change(started + self.max_wait_s):
                    break
            self.sample_wait_s += time.monotonic() - started
            return sampled

    @hot_path
    async def update_priorities(self, indices, generations, priorities) -> int:
        """New priorities (|TD error|) for sampled transitions, in one batch per call."""
        return self.replay.update_priorities(indices, generations, priorities)

    async def set_insert_limit(self, limit: int | None) -> None:
        """Grant no budget past ``limit`` transitions (a Trainer's iteration, a run's total)."""
        async with self.changed:
            self.replay.insert_limit = limit
            self.changed.notify_all()

    async def snapshot(self) -> dict:
        """Transitions, priorities, counters and RNG state as arrays (replay checkpoints)."""
        return self.replay.storage.state_dict()

    async def resume(self, added_before: int, insert_limit: int | None, snapshot: dict | None = None) -> None:
        """After a restart: :meth:`dsac.replay.buffer.Replay.resume`, and every waiting caller woken."""
        async with self.changed:
            self.replay.resume(added_before, insert_limit, snapshot)
            self.changed.notify_all()

    @hot_path
    async def stats(self) -> ShardStats:
        """Counters for progress reports."""
        storage = self.replay.storage
        return ShardStats(storage.added, storage.size, storage.capacity, storage.sampled_batches,
                          self.replay.add_calls, self.sample_wait_s, self.process)

    async def stop(self) -> None:
        """Wake every waiting caller; from now on add/sample return at once."""
        async with self.changed:
            self.stopped = True
            self.changed.notify_all()

    async def where(self) -> dict:
        return {**describe_process(), "process": self.process}


@ray.remote
class ParameterServer:
    """The latest acting weights with a version, and the stop flag (the run's reports go to
    :class:`dsac.distributed.monitor.RunMonitor`).

    ``pull(newer_than=v)`` returns ``None`` when nothing is newer, so polling is cheap.
    With ``by_reference`` (the default) a pull's weights are an ``ObjectRef`` to one copy of
    each version put in Ray's object store at its push: the server serializes a version once
    instead of once per pull, and a node's workers read it from their node's store, which
    fetches it once (:func:`dsac.distributed.weights_client.pulled_weights` resolves either form).

    With ``board`` (a name), it also publishes every version on its node's shared-memory board
    (:mod:`dsac.distributed.weights_board`) for the ``num_workers`` rollout workers there,
    which take it without a call, and reads from the board what they act with.
    """

    def __init__(self, start_version: int = 0, by_reference: bool = True, board: str | None = None,
                 num_workers: int = 0):
        self.version = int(start_version)  # the newest version numbered (a resumed run carries on counting)
        self.weights_version = 0  # the version the weights held carry (below `version` after a restart)
        self.by_reference = bool(by_reference)
        self.weights_ref = None  # the latest weights in the object store (by_reference)
        self.weights: dict | None = None
        self.report = LearnerReport()  # what the learner sent with the latest weights
        self.stopped = False
        self.stop_reason = ""
        self.worker_versions: dict[int, int] = {}
        self.held_versions: dict[int, int] = {}  # what each worker said it acts with
        self.pushes = 0
        self.pulls_answered = 0
        # Weight sync times: a version's push time until every worker holds it (or newer).
        self.push_times: collections.OrderedDict[int, float] = collections.OrderedDict()
        self.synced: collections.deque[float] = collections.deque(maxlen=10_000)
        # After a restart, until the driver calls restore(), versions count from the start
        # again (workers ignore versions below their own).
        self.process = process_id()
        self.changed = asyncio.Condition()  # notified on every push and on stop: waiting pulls answer
        # Versions behind the latest that a worker's weights were when it asked for newer ones
        # while acting (its waiting pulls), per worker and over the last pulls of all.
        self.pull_lags: dict[int, list[int]] = {}  # worker -> [pulls, sum of lags, max lag]
        self.recent_lags: collections.deque[int] = collections.deque(maxlen=100_000)
        self.cache_processes: dict[str, str] = {}  # weights cache -> node:pid, as its last report said
        self.board = BoardLoop(board, num_workers, self._board_readers) if board else None
        self.board_task = asyncio.get_running_loop().create_task(self.board.run()) if board else None

    async def restore(self, version: int, weights: dict | None, weights_version: int, stopped: bool) -> None:
        """After a restart: versions carry on above ``version`` (the last the run saw); the
        ``weights`` last saved, under the version they had (``weights_version``), unless the
        learner pushed newer ones since the restart. A worker already holding that version or a
        newer one is never handed them: pulls compare with the version the weights carry."""
        self.version = int(version) + self.pushes
        self.push_times.clear()
        if self.weights is None and weights is not None:
            self._set_weights(weights)
            self.weights_version = int(weights_version)
            if self.board is not None:
                self.board.publish(self.weights_version, weights, self.report)
        self.stopped = self.stopped or stopped
        if self.stopped and self.board is not None:
            self.board.stop()
        await self._notify()

    @hot_path
    async def push(self, weights: dict, report: LearnerReport | None = None) -> LearnerOrders:
        """Store new weights (versions only increase) with the learner's report."""
        self.version += 1
        self._set_weights(weights)
        self.weights_version = self.version
        self.report = report or LearnerReport()
        self.push_times[self.version] = time.monotonic()  # before a reader can take it
        if self.board is not None:
            self.board.publish(self.version, weights, self.report)
        self.pushes += 1
        while len(self.push_times) > 1_000:  # workers long gone: stop waiting for them
            self.push_times.popitem(last=False)
        await self._notify()
        return self._orders()

    def _set_weights(self, weights: dict) -> None:
        self.weights = weights
        self.weights_ref = ray.put(weights) if self.by_reference else None

    async def _notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    def _has_newer(self, version: int) -> bool:
        return self.weights is not None and self.weights_version > version

    @hot_path
    async def pull(self, newer_than: int = 0, worker: int | None = None, wait_s: float = 0.0) -> PullReply:
        """The stop flag and version; the weights only when newer than ``newer_than``. With
        ``wait_s``, a pull that finds nothing newer waits (at most ``wait_s``, and at most
        ``MAX_PULL_WAIT_S``) for the next push or the stop flag and answers at once: new weights
        reach a waiting worker by notice, one call per version, with no polling in between."""
        if worker is not None:  # what the worker acts with now (for the sync latencies)
            self._note_held({worker: newer_than})
            if wait_s > 0 and self.weights is not None:
                self._note_lag(worker, max(0, self.version - newer_than))
        if wait_s > 0 and not self.stopped and not self._has_newer(newer_than):
            await wait_until(self.changed, lambda: self.stopped or self._has_newer(newer_than),
                             min(wait_s, MAX_PULL_WAIT_S))
        self.pulls_answered += 1
        reply = PullReply(self.stopped, self.version)
        if self._has_newer(newer_than):
            weights = self.weights_ref if self.by_reference else self.weights
            reply = PullReply(self.stopped, self.weights_version, weights, self.report)
            if worker is not None:  # the version the worker acts with once this reply lands
                self.worker_versions[worker] = self.weights_version
        return reply

    def _note_held(self, held: dict[int, int], age_s: float | None = None) -> None:
        self.held_versions.update(held)
        self.worker_versions.update(held)
        self._note_synced(age_s or 0.0)

    def _note_lag(self, worker: int, lag: int) -> None:
        stats = self.pull_lags.setdefault(worker, [0, 0, 0])
        stats[0], stats[1], stats[2] = stats[0] + 1, stats[1] + lag, max(stats[2], lag)
        self.recent_lags.append(lag)

    @hot_path
    async def report_readers(self, cache: str, process: str, held: dict[int, int], lags: list,
                             age_s: float | None = None) -> None:
        """A node's weights cache (:mod:`dsac.distributed.weights_cache`): the version each of
        its node's rollout workers acts with (the last to take one did so ``age_s`` ago), and
        how many versions each skipped at its takes."""
        self.cache_processes[cache] = process
        self._board_readers(held, lags, age_s)

    def _board_readers(self, held: dict[int, int], lags: list, age_s: float | None) -> None:
        for worker, lag in lags:
            self._note_lag(worker, lag)
        if held:
            self._note_held(held, age_s)

    def _note_synced(self, age_s: float = 0.0) -> None:
        slowest = min(self.held_versions.values())
        now = time.monotonic() - age_s
        while self.push_times and next(iter(self.push_times)) <= slowest:
            _, pushed = self.push_times.popitem(last=False)
            self.synced.append(now - pushed)

    @hot_path
    async def status(self, drain_synced: bool = False, telemetry: bool = True) -> dict:
        """What the driver and the benchmarks read: ``version`` (the latest), the learner's
        ``report`` with it, ``stop`` and ``stop_reason``, this actor's ``process`` and the
        weights caches' (``caches``: {cache: node:pid}); how far behind rollout workers'
        weights were: ``held`` ({worker: version it acts with}), ``per_worker`` ({worker:
        {pulls, mean, max}} of the versions behind the latest at each pull it made while
        acting), ``pulls_answered``, and ``mean`` / ``p95`` / ``max`` over the last 100k such
        pulls of all workers; and ``synced``: seconds from each push until every rollout worker
        said it acts with that version or a newer one, for the versions synced since the last
        call with ``drain_synced`` (which empties it). Without ``telemetry``, only the version,
        report, stop flag, processes and ``held`` (the driver's poll: no statistics computed)."""
        status = {"version": self.version, "report": self.report, "stop": self.stopped, "stop_reason": self.stop_reason,
                  "process": self.process, "caches": dict(self.cache_processes), "held": dict(self.worker_versions)}
        if not telemetry:
            return status
        lags = np.asarray(self.recent_lags, dtype=np.float64)
        synced = list(self.synced)
        if drain_synced:
            self.synced.clear()
        return {
            **status, "synced": synced,
            "per_worker": {w: {"pulls": n, "mean": total / n, "max": top}
                           for w, (n, total, top) in self.pull_lags.items()},
            "pulls_answered": self.pulls_answered,
            "pulls": len(lags), "mean": float(lags.mean()) if len(lags) else None,
            "p95": float(np.percentile(lags, 95)) if len(lags) else None, "max": int(lags.max()) if len(lags) else None,
        }

    @hot_path
    async def latest(self) -> Latest:
        """The latest weights, their version and the learner's report."""
        return Latest(self.weights_version, self.weights, self.report)

    async def stop(self, reason: str = "") -> None:
        """Raise the stop flag every task watches."""
        if not self.stopped:
            self.stopped = True
            self.stop_reason = reason
            await self._notify()
        if self.board is not None:
            self.board.stop()

    def _orders(self) -> LearnerOrders:
        # Whether the learner's state is wanted is the run monitor's to say (RunMonitor.report_learner).
        return LearnerOrders(self.version, self.stopped, False)

    async def where(self) -> dict:
        """Where this actor runs (host, node, pid, ``process`` = node:pid)."""
        return {**describe_process(), "process": self.process}
