"""The three kinds of Ray task: rollout worker, learner, evaluator.

They move data between the actors and a :class:`dsac.policy.Policy`; the algorithm's math
lives behind that interface. Every remote call carries a batch: a chunk of transitions,
several training batches, a set of weights — never one env step.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import math
import threading
import time

import numpy as np
import ray

from dsac import build, video
from dsac.distributed.actors import REGROUP
from dsac.distributed.topology import describe_process
from dsac.distributed.weights_board import STALE_S, BoardReader
from dsac.envs import one_line
from dsac.frames import frame_layout
from dsac.learning import NonFiniteUpdates, UpdateLoop
from dsac.messages import LearnerOrders, LearnerReport, Placement, PullReply
from dsac.registry import callbacks_for

log = logging.getLogger("dsac")

# How long a task sleeps between polls while it has nothing to do.
IDLE_SLEEP_S = 0.05
# A rollout worker's receiver thread starts pulls at most this often, which bounds its pulls per
# second when the learner pushes faster than that.
MIN_PULL_INTERVAL_S = 0.02
# How long the parameter server holds a pull that finds nothing newer before answering anyway
# (it answers at once on a push or the stop flag).
PULL_WAIT_S = 10.0
# A worker on a weights board reads its counter at every poll, its header every this many polls.
BOARD_CHECK_EVERY = 64
# How long a reader waits for its board to appear before it pulls the parameter server instead.
BOARD_WAIT_S = 10.0
# While a call waits (the replay shard holding a worker back), new weights are applied this often.
POLL_WHILE_WAITING_S = 0.02
# A chunk waits for at least this many transitions (up to MAX_CHUNK_S) before it is sent: with a
# slow env, a chunk every --chunk_seconds would be a few transitions per add call, and the call,
# not the env, would be most of a worker's CPU (benchmarks/scale.py, docs/scaling.md).
MIN_CHUNK_TRANSITIONS = 128
MAX_CHUNK_S = 1.0
# The evaluator's pull waits this long for new weights (it wakes on each version; an idle
# evaluator makes one call a second, not ten).
EVALUATOR_WAIT_S = 1.0
# How long a learner waits for the gradient averager to come back after its process died.
REJOIN_TIMEOUT_S = 120.0


def pulled_weights(weights):
    """A pull reply's weights as a dict: fetched from Ray's object store when the parameter
    server sent a reference (see :class:`dsac.distributed.actors.ParameterServer`)."""
    return ray.get(weights) if isinstance(weights, ray.ObjectRef) else weights


class WeightsClient:
    """Keeps a policy's weights fresh without a call per version where it can.

    - **From the node's board** (``board`` names one this machine has: the parameter server's
      on its node, a weights cache's on the others; :mod:`dsac.distributed.weights_board`):
      :meth:`poll`, which the env loop calls after every batch of env steps, reads the board's
      sequence counter and, when a newer version is there, copies it and applies it, and
      writes in its slot the version the worker acts with. No remote call at all. A board
      whose writer stopped beating for ``STALE_S`` is left for the parameter server.
    - **From the parameter server** (no board here): :meth:`start` runs a receiver thread that
      keeps one ``pull(newer_than=version, worker, wait_s)`` waiting on the server, which
      answers it as soon as a newer version is pushed; the thread fetches the weights (sent
      by reference: from its node's object store) and leaves them for the env loop, which
      applies them at its next :meth:`poll` (one attribute read). The thread's next pull,
      made once they are applied (at most every ``MIN_PULL_INTERVAL_S``), tells the server
      the version the worker acts with.

    The evaluator (no ``worker``) calls :meth:`refresh` instead of running the thread.
    """

    def __init__(self, ps, policy, worker: int | None = None, wait_s: float = PULL_WAIT_S, board: str | None = None):
        self.ps = ps
        self.policy = policy
        self.worker = worker
        self.wait_s = wait_s
        self.version = 0
        self.report = LearnerReport()  # what the learner sent with the weights held
        self.stop = False
        self.board = open_board(board, worker) if board else None
        if board and self.board is None:
            log.info("%s: no weights board %s on this machine; pulling the parameter server", self._role(), board)
        self._board_checked = time.monotonic()
        self._polls = 0
        self._received: tuple | None = None  # (version, weights, report) fetched, not yet applied
        self._applied = threading.Event()  # the env loop took what the thread left
        self._applied.set()
        self._closed = False
        self._started = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def pull(self, wait_s: float = 0.0) -> PullReply:
        """A pull on the parameter server, waiting up to ``wait_s`` for a newer version."""
        return ray.get(self.ps.pull.remote(self.version, self.worker, wait_s))

    def take(self, reply: PullReply) -> None:
        """Apply a ``pull`` reply: new weights if it carries them, and the stop flag."""
        self.stop = self.stop or reply.stop
        if reply.weights is not None and reply.version > self.version:  # a late reply never goes back
            try:
                weights = pulled_weights(reply.weights)
            except ray.exceptions.ObjectLostError:  # its owner, a parameter server since restarted, is gone
                return  # the next pull brings the new server's weights
            self._apply(reply.version, weights, reply.report)

    def _apply(self, version: int, weights: dict, report: LearnerReport | None) -> None:
        self.policy.set_weights(weights)
        self.version = version
        self.report = report or LearnerReport()

    def start(self) -> WeightsClient:
        """Start taking weights: from the board, or by a receiver thread (a daemon; :meth:`close` ends it)."""
        self._started = True
        if self.board is None:
            self._thread = threading.Thread(target=self._receive, name="dsac-weights", daemon=True)
            self._thread.start()
        return self

    def _receive(self) -> None:
        try:
            while True:
                self._applied.wait()
                if self._closed or self.stop:
                    return
                pulled_at = time.monotonic()
                reply = self.pull(self.wait_s)
                if reply.stop:
                    self.stop = True
                if reply.weights is not None and reply.version > self.version:
                    try:
                        weights = pulled_weights(reply.weights)
                    except ray.exceptions.ObjectLostError:  # a restarted server's: pull again
                        continue
                    self._applied.clear()
                    self._received = (reply.version, weights, reply.report)
                    time.sleep(max(0.0, pulled_at + MIN_PULL_INTERVAL_S - time.monotonic()))
        except BaseException as exc:
            if not self._closed:
                self._error = exc
                self.stop = True

    def poll(self, steps: int = 0) -> None:
        """Apply the newest weights there are, if newer (the env loop calls this after every
        batch of ``steps`` env steps, inside chunks too). Raises what ended the receiver."""
        board = self.board
        if board is not None:
            # Per env step: one read of the board's counter; the header (stop flag, the
            # writer's heartbeat) every BOARD_CHECK_EVERY polls.
            self._polls += 1
            if self._polls >= BOARD_CHECK_EVERY or not board.unchanged():
                self._read_board()
            return
        received = self._received
        if received is not None:
            self._received = None
            self._apply(*received)
            self._applied.set()
        if self._error is not None:
            raise self._error

    def _read_board(self) -> None:
        board, self._polls = self.board, 0
        newer = board.newer(self.version)
        if newer is not None:
            version, weights, report = newer
            skipped = max(0, version - self.version - 1)  # versions pushed that it never acted with
            self._apply(version, weights, report)
            board.took(version, skipped)
        self.stop = self.stop or board.stop
        now = time.monotonic()
        if now - self._board_checked > 1.0:
            self._board_checked = now
            if board.refused or (board.heartbeat_age() > STALE_S and not board.stop):  # as newer() just read it
                if not board.refused:  # a refused board said why in its own line
                    log.warning("%s: its node's weights board has had no writer for %.0f s; pulling the parameter "
                                "server", self._role(), STALE_S)
                board.close()
                self.board = None
                if self._started:
                    self.start()

    def _role(self) -> str:
        return "evaluator" if self.worker is None else f"rollout_worker_{self.worker}"

    def refresh(self, wait_s: float) -> None:
        """Apply a newer version, waiting up to ``wait_s`` for one (or the stop flag)."""
        if self.board is None:
            self.take(self.pull(wait_s))
            return
        deadline, before = time.monotonic() + wait_s, self.version
        while True:
            self.poll()
            if self.version != before or self.stop or self.board is None or time.monotonic() >= deadline:
                return
            time.sleep(POLL_WHILE_WAITING_S)

    def get(self, ref):
        """``ray.get(ref)``, applying weights as they arrive meanwhile (a worker the replay
        shard holds back must not come back to stale weights)."""
        while not ray.wait([ref], timeout=POLL_WHILE_WAITING_S)[0]:
            self.poll()
        self.poll()
        return ray.get(ref)

    def wait_for_weights(self) -> None:
        """Block until the policy has weights (or the run stops)."""
        while not self.policy.has_weights and not self.stop:
            self.poll()
            if not self.policy.has_weights:
                time.sleep(IDLE_SLEEP_S / 5)

    def close(self) -> None:
        """End the receiver thread: at once if the run stopped (the server answers waiting
        pulls on the stop flag); else it ends when its waiting pull is answered, unwaited for
        (a daemon, it makes no further call)."""
        self._closed = True
        self._applied.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.board is not None:
            self.board.close()
            self.board = None


def open_board(name: str, slot: int | None, wait_s: float = BOARD_WAIT_S) -> BoardReader | None:
    """The board ``name`` of this machine, waiting up to ``wait_s`` for its writer to make it
    (a task may start before the actor that writes it); None where there is none, at once
    where this user's folder of boards is refused (no board will appear in it)."""
    deadline = time.monotonic() + wait_s
    while ((board := BoardReader.open(name, slot)) is None and not BoardReader.folder_refused
           and time.monotonic() < deadline):
        time.sleep(IDLE_SLEEP_S)
    return board


def next_chunk_seconds(chunk_seconds: float, steps: int, seconds: float) -> float:
    """How long the next chunk collects: ``chunk_seconds``, or long enough for
    ``MIN_CHUNK_TRANSITIONS`` at the rate of the last chunk (``steps`` in ``seconds``), at most
    ``MAX_CHUNK_S``."""
    if steps <= 0 or seconds <= 0:
        return chunk_seconds
    return min(max(chunk_seconds, MIN_CHUNK_TRANSITIONS * seconds / steps), max(chunk_seconds, MAX_CHUNK_S))


def env_crash_handler(ps, role: str, limit: int):
    """Asks the parameter server, which keeps the run-wide count, whether ``role`` may rebuild
    an env that raised (``--env_restarts``): one call per crash, never per step."""
    def allowed(exc: BaseException) -> bool:
        return limit > 0 and ray.get(ps.env_crashed.remote(role, one_line(exc), limit))
    return allowed


@ray.remote
def rollout_worker(index: int, config, replay, ps, seed: int, num_shards: int = 1,
                   chunk_seconds: float | None = None, weights_board: str | None = None) -> dict:
    """Steps ``config.envs_per_worker`` envs, acting on their batch of observations, and sends
    what it gathered to its replay shard in chunks (at least every ``chunk_seconds``, default
    ``config.chunk_seconds``), within the insert budget the shard grants. Weights come from
    its node's weights board (``weights_board``) where this machine has it, else the
    parameter server.

    Uniform random actions while fewer than ``config.start_steps`` transitions have reached
    the replay buffer (counted over all workers; with shards, estimated from this one).
    """
    ps.report_placement.remote(Placement(f"rollout_worker_{index}", **describe_process()))
    callbacks = callbacks_for(config.run)
    collector = build.collector(config, seed, index, callbacks,
                                env_crash_handler(ps, f"rollout_worker_{index}", config.env_restarts))
    policy = build.acting_policy(config, collector.observation_space, collector.action_space, seed, index,
                                 config.num_workers)
    encoder = build.frame_encoder(config, frame_layout(collector.observation_space.shape,
                                                       collector.observation_space.dtype))
    chunk_seconds = chunk_seconds or config.chunk_seconds
    weights = WeightsClient(ps, policy, worker=index, board=weights_board).start()
    chunks_sent = 0
    chunk_s = chunk_seconds
    try:
        # The insert budget in hand: granted by the shard, not yet collected. A chunk's add call
        # is in flight while the next chunk is collected with a budget kept from earlier grants,
        # and its reply (more budget) is taken once that chunk is done: a worker waits for the
        # shard only when it kept no budget (the ratio holding it back, or a fast env that
        # fills its whole grant in one chunk).
        status = ray.get(replay.add.remote(index, None))
        budget, in_flight = status.grant, None
        while not (status.stop or weights.stop):
            chunk = None
            if budget > 0:
                if status.added * num_shards < config.start_steps:
                    act = lambda obs: policy.random_actions(len(obs))  # noqa: E731
                else:
                    policy.set_env_steps(status.added * num_shards)  # schedules follow the run's count
                    weights.wait_for_weights()
                    if not policy.has_weights:  # stopped before the learner's first weights
                        break
                    act = lambda obs: policy.compute_actions(obs, explore=True)  # noqa: E731
                # New weights are applied as they land, also inside a chunk: a chunk of 256
                # steps must not delay them.
                started, steps_before = time.monotonic(), collector.total_steps
                batch = collector.collect(act, budget, started + chunk_s, weights.poll)
                steps, seconds = collector.total_steps - steps_before, time.monotonic() - started
                budget -= steps
                chunk_s = next_chunk_seconds(chunk_seconds, steps, seconds)
                wanted = math.ceil(steps * chunk_s / max(seconds, 1e-6))  # the next chunk's steps, about
                chunk = build.make_chunk(batch, policy, callbacks, encoder, index)
                episodes = collector.drain_episodes()
                if episodes:
                    ps.report_episodes.remote(episodes)
                chunks_sent += 1
            if in_flight is not None:  # the last chunk's reply, sent a chunk ago: mostly here already
                status = weights.get(in_flight)
                budget += status.grant
            if chunk is not None:  # keep what the next chunk is likely to take; the rest goes back to the shard
                budget = min(budget, wanted)
            in_flight = replay.add.remote(index, chunk, max(0, budget))
            if budget <= 0 or status.stop:  # nothing left to collect with: wait for the shard
                status = weights.get(in_flight)
                budget, in_flight = budget + status.grant, None
        if in_flight is not None:  # the last chunk is stored before the worker ends
            weights.get(in_flight)
    finally:
        weights.close()
        collector.close()
    return {"worker": index, "env_steps": collector.total_steps, "chunks": chunks_sent}


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


class GradientSync:
    """A learner's side of :class:`dsac.distributed.actors.GradientAverager`: joins the learner
    group (every replica takes the state of the one with the most updates), then flattens the
    policy's gradients into one array, averages it with the other learners', applies the mean.
    When the group re-forms (a learner or the averager was restarted) it joins again.
    """

    def __init__(self, averager, index: int):
        self.averager = averager
        self.index = index
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
                time.sleep(IDLE_SLEEP_S * 10)

    def learner(self, policy, first_step: int, own_env_steps: int):
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
        grads, stats = policy.compute_gradients(batch)
        shapes = [np.shape(g) for g in grads]
        flat = np.concatenate([np.asarray(g, np.float32).ravel() for g in grads])
        try:
            reply = ray.get(self.averager.average.remote(self.index, self.group, step, flat, own_env_steps))
        except ray.exceptions.RayActorError:  # the averager's process died: Ray restarts it
            reply = REGROUP
        if isinstance(reply, str) and reply == REGROUP:
            self.regroup = True
            return None
        if reply is None:
            return None
        mean, self.env_steps = reply
        return apply_mean(policy, mean, shapes, stats)


def apply_mean(policy, mean: np.ndarray, shapes: list, stats: dict) -> dict:
    """Apply the learners' mean gradient (flat, cut into ``shapes``); ``stats`` with ``skipped``
    saying whether it was dropped. The policy applies the mean only when all of it is finite,
    so that decides: every learner counts the same dropped update once, even one whose own
    gradients were finite (its local verdict would leave ``skipped_updates`` at 0)."""
    ends = np.cumsum([int(np.prod(shape)) for shape in shapes])
    policy.apply_gradients([part.reshape(shape) for part, shape in zip(np.split(mean, ends[:-1]), shapes,
                                                                          strict=True)])
    return {**stats, "skipped": float(not np.isfinite(mean).all())}


def weights_digest(weights: dict[str, np.ndarray]) -> str:
    """A hash of weights by name: equal digests, bit-identical weights."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name]).tobytes())
    return digest.hexdigest()[:16]


class LearnerWiring:
    """The learner's Ray side, around a Ray-free :class:`dsac.learning.UpdateLoop`: feeds it
    the replay shards' batches and forwards what it decides — weights pushed after a block
    that passed a multiple of ``push_every`` updates (not waited for: the next push collects
    the reply and its orders), the full state when asked for, new priorities back to the
    shard they came from in one fire-and-forget call.

    With several learners (``sync`` given) only learner 0 pushes weights and state (the
    replicas are identical); each reports its update count.
    """

    def __init__(self, loop: UpdateLoop, ps, shards: list, sampler: ShardedSampler, index: int,
                 sync: GradientSync | None):
        self.loop, self.ps, self.shards, self.sampler, self.index, self.sync = loop, ps, shards, sampler, index, sync
        self.primary = index == 0
        self.env_steps_by_shard = [0] * len(shards)
        self.orders = LearnerOrders(0, False, False)
        self.last_push = None

    def report(self, final: bool = False) -> LearnerReport:
        env_steps = self.sync.env_steps if self.sync is not None else sum(self.env_steps_by_shard)
        return self.loop.report(env_steps, self.sampler.wait_s, final)

    def step(self) -> None:
        """One sample call's batches through the loop, and its outputs forwarded."""
        shard, sampled = self.sampler.next()
        if sampled is None:  # the ratio holds the learner back, or the run is stopping
            self.orders = ray.get(self.ps.learner_poll.remote())
            if self.orders.state_wanted and self.primary:  # idle, e.g. between Trainer.train() calls
                ray.get(self.ps.put_state.remote(self.loop.state(), self.report()))
            return
        self.env_steps_by_shard[shard] = sampled.env_steps
        learn = None
        if self.sync is not None:
            learn = self.sync.learner(self.loop.learner, self.loop.updates, sum(self.env_steps_by_shard))
        step = self.loop.step(sampled.batches, learn)
        if self.sync is not None and self.sync.regroup:  # a learner or the averager was restarted
            if not self.sync.join(self.loop):
                self.orders = self.orders._replace(stop=True)
            return
        if step.stopped:
            self.orders = self.orders._replace(stop=True)
        elif step.push:
            self.push()
        if step.priorities is not None and sampled.indices is not None:
            self.shards[shard].update_priorities.remote(sampled.indices, sampled.generations, step.priorities)

    def push(self) -> None:
        """Push the weights (learner 0), and the state too when the last reply asked for it."""
        if self.sync is not None:
            self.ps.report_learner.remote(self.index, self.loop.updates)
        if not self.primary:
            return
        if self.last_push is not None:
            self.orders = ray.get(self.last_push)  # long done: carries the stop flag
            if self.orders.state_wanted:
                self.ps.put_state.remote(self.loop.state(), self.report())
        self.last_push = self.ps.push.remote(self.loop.get_weights(), self.report())

    def first_push(self) -> None:
        if self.primary:
            self.orders = ray.get(self.ps.push.remote(self.loop.get_weights(), self.report()))

    def hand_over(self, state: bool) -> None:
        """The final report, weights and (``state``) full state, waited for: the state goes
        before the push the evaluator waits for."""
        final = self.report(final=True)
        if self.sync is not None:
            ray.get(self.ps.report_learner.remote(self.index, self.loop.updates))
        if self.primary:
            if state:
                ray.get(self.ps.put_state.remote(self.loop.state(), final))
            ray.get(self.ps.push.remote(self.loop.get_weights(), final))


def learner_role(index: int, num_learners: int) -> str:
    """A learner's role name: ``learner``, or ``learner_<index>`` among data-parallel learners."""
    return "learner" if num_learners == 1 else f"learner_{index}"


# A GPU learner by default; the driver overrides num_gpus to 0 on a cluster without GPUs.
# max_calls=1: the process exits after the task, so its GPU memory is given back.
@ray.remote(num_gpus=1, max_calls=1)
def learner(config, observation_space, action_space, shards: list, ps, seed: int, num_gpus: float,
            num_cpus: float, initial_weights: dict | None = None, initial_state: dict | None = None,
            index: int = 0, averager=None) -> dict:
    """Trains the policy on batches from its replay shards through a :class:`UpdateLoop`
    (each sample call's batches in one ``learn_on_batches``) and forwards its outputs
    (:class:`LearnerWiring`). ``initial_weights`` (e.g. ``--init_weights``) replace the fresh
    policy's weights before the first push; ``initial_state`` (a resumed run's checkpoint)
    replaces its whole training state. With several learners (``averager`` given), learner
    ``index`` trains on its own shards and every update is the mean of all learners' gradients."""
    from dsac.tf_setup import configure_tensorflow

    device = configure_tensorflow(num_gpus, num_cpus, config.learner_threads, config.verbose)
    ps.report_placement.remote(Placement(learner_role(index, config.num_learners), **describe_process(),
                                         device=device))
    loop = build.learner_loop(config, observation_space, action_space, seed, callbacks_for(config.run),
                              initial_weights, initial_state)
    sync = GradientSync(averager, index) if averager is not None else None
    if sync is not None and not sync.join(loop):
        return {"learner": index, "updates": loop.updates}
    sampler = ShardedSampler(shards, config.batch_size, config.batches_per_sample, config.prefetch)
    wiring = LearnerWiring(loop, ps, shards, sampler, index, sync)
    wiring.first_push()
    try:
        while not wiring.orders.stop:
            wiring.step()
    except NonFiniteUpdates:
        # The weights are still the last good ones (no skipped step changed them): hand them
        # and the counters over, then fail with the reason.
        wiring.hand_over(state=False)
        raise
    wiring.hand_over(state=True)
    return {"learner": index, "updates": loop.updates, "weights_digest": weights_digest(loop.get_weights())}


@ray.remote
def evaluator(config, observation_space, action_space, ps, seed: int, weights_board: str | None = None) -> int:
    """Every ``config.eval_every`` env steps, runs ``config.eval_episodes`` deterministic
    episodes with the latest weights and reports the returns; a last evaluation of the final
    weights when the run stops. Returns the number of evaluations. Weights come from its
    node's weights board (``weights_board``) where this machine has it, else from waiting
    pulls on the parameter server."""
    ps.report_placement.remote(Placement("evaluator", **describe_process()))
    policy = build.acting_policy(config, observation_space, action_space, seed)
    weights = WeightsClient(ps, policy, board=weights_board)
    next_eval, evaluated_version, count = config.eval_every, 0, 0

    if config.video_every:
        video.prepare_headless_rendering()

    def run_evaluation(final: bool = False):
        report = weights.report
        evaluation = build.evaluate(
            config, policy, seed, count + 1, final, (report.env_steps, report.updates, weights.version),
            env_crash_handler(ps, "evaluator", config.env_restarts),
            on_progress=lambda steps: ps.evaluator_alive.remote(steps, final))
        # Waited for: the final report must reach the parameter server before this task ends.
        ray.get(ps.report_eval.remote(evaluation))

    while True:
        weights.refresh(EVALUATOR_WAIT_S)
        if weights.stop:
            break
        env_steps = weights.report.env_steps
        if policy.has_weights and env_steps >= next_eval:
            run_evaluation()
            evaluated_version, count = weights.version, count + 1
            next_eval = (env_steps // config.eval_every + 1) * config.eval_every
    # The final weights: the learner's last push may land just after the stop flag.
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if ray.get(ps.latest.remote()).report.final:
            break
        time.sleep(IDLE_SLEEP_S)
    weights.take(ray.get(ps.pull.remote(weights.version)))  # the server's own: a board may be behind
    weights.close()
    if policy.has_weights and weights.version != evaluated_version:
        run_evaluation(final=True)
        count += 1
    return count
