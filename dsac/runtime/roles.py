"""The three roles of a run — collect, learn, evaluate — as loops that run the same in the
serial runner's one process and in the Ray tasks (as Acme's ``run_experiment`` and RLlib's
``EnvRunner``: the same objects locally and remotely). Free of Ray.

A role reaches the rest of the run only through ports: small objects, in-process for the serial
runner (below; the learner is its own weights source), on the actors for the Ray tasks:

- replay writer: ``send(chunk, keep)`` (None: asks for budget only; the writer holds ``keep``);
  ``wait(handle, poll)``: the reply (a :class:`Grant`: more budget, counters), polling meanwhile;
- sampler: ``next()``: ``(source, batches)`` of a sample call, None while the ratio holds the
  learner back; ``update_priorities(source, ...)``, not waited for; ``wait_s``;
- weights source, a policy's: ``poll()``, ``refresh(wait_s)``, ``wait_for_weights()`` apply
  newer weights; ``version``, ``report`` (the learner's), ``stop``;
- weights sink: ``push(loop, report)``; ``idle(loop, report)``: no batches came, take orders;
- reports sink: ``episodes``, ``evaluation``, ``evaluator_alive(steps, final)``, and
  ``env_crashed(role, error)``: whether ``role`` may rebuild its env (``--env_restarts``).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable

from dsac.envs.make import env_restart_message, one_line
from dsac.output import video
from dsac.replay.buffer import Replay
from dsac.replay.frames import frame_layout
from dsac.runtime import build
from dsac.runtime.build import EnvRestartBudget
from dsac.runtime.cpu import CpuMeter
from dsac.runtime.evaluation import EvaluationBudget
from dsac.runtime.learning import UpdateLoop
from dsac.runtime.messages import Chunk, Evaluation, FinishedEpisode, Grant, LearnerReport, SampledBatches

log = logging.getLogger("dsac")

# A chunk waits for at least this many transitions (up to MAX_CHUNK_S) before it is sent: with a
# slow env, a chunk every --chunk_seconds would be a few transitions per add call, and the call,
# not the env, would be most of a worker's CPU.
MIN_CHUNK_TRANSITIONS = 128
MAX_CHUNK_S = 1.0


def next_chunk_seconds(chunk_seconds: float, steps: int, seconds: float) -> float:
    """How long the next chunk collects: ``chunk_seconds``, or long enough for
    ``MIN_CHUNK_TRANSITIONS`` at the rate of the last chunk (``steps`` in ``seconds``), at most
    ``MAX_CHUNK_S``."""
    if steps <= 0 or seconds <= 0:
        return chunk_seconds
    return min(max(chunk_seconds, MIN_CHUNK_TRANSITIONS * seconds / steps), max(chunk_seconds, MAX_CHUNK_S))


def next_evaluation(env_steps: int, every: int) -> int:
    """When the evaluation after one at ``env_steps`` is due: the next multiple of ``every``."""
    return (env_steps // every + 1) * every


def env_crash_handler(reports, role: str, limit: int) -> Callable[[BaseException], bool]:
    """Whether ``role`` may rebuild an env that raised (``--env_restarts``: ``limit`` in the
    whole run): one question to the reports sink per crash, never per step."""
    def allowed(exc: BaseException) -> bool:
        return limit > 0 and reports.env_crashed(role, one_line(exc))
    return allowed


def learner_loop(config, observation_space, action_space, seed: int, num_gpus: float, num_cpus: float | None,
                 callbacks=None, initial_weights: dict | None = None, initial_state: dict | None = None):
    """TensorFlow set up for this process before any model (GPU memory growth, thread pools),
    then the learner's :class:`dsac.runtime.learning.UpdateLoop` (:func:`dsac.runtime.build.learner_loop`);
    returns ``(loop, device, warning)`` (the device used; a GPU given but not seen). ``num_cpus``
    None: a process whose updates run while nothing else of the run does (the serial runner),
    whose TF threads may use the machine's cores, up to 4."""
    from dsac.runtime.tf_setup import configure_tensorflow

    if num_cpus is None:
        num_cpus = min(4, len(os.sched_getaffinity(0)))
    device, warning = configure_tensorflow(num_gpus, num_cpus, config.resources.learner_threads, config.output.verbose)
    return build.learner_loop(config, observation_space, action_space, seed, callbacks, initial_weights,
                              initial_state), device, warning


class Collect:
    """A rollout worker's loop, a chunk per :meth:`step`: uniformly random actions while the
    run has fewer than ``start_steps`` env steps, then the policy with the newest weights
    (applied as they land, inside a chunk too); each chunk goes to the replay within the insert
    budget it grants, and finished episodes to the reports sink.

    The budget in hand was granted and not yet collected. A chunk's add is in flight while the
    next chunk is collected with budget kept from earlier grants, and its reply (more budget)
    is taken once that chunk is done: the worker waits for the replay only when it kept none.
    ``weights_for(policy)`` makes the acting policy's weights source; ``scale``: run-wide env
    steps per env step the replay counts (replay shards: their number)."""

    def __init__(self, config, index: int, seed: int, num_workers: int, callbacks, reports, weights_for: Callable,
                 writer, chunk_seconds: float | None = None, scale: int = 1):
        self.collector = build.collector(config, seed, index, callbacks, env_crash_handler(
            reports, f"rollout_worker_{index}", config.resources.env_restarts))
        space = self.collector.observation_space
        self.policy = build.acting_policy(config, space, self.collector.action_space, seed, index, num_workers)
        self.encoder = build.frame_encoder(config, frame_layout(space.shape, space.dtype))
        self.index, self.callbacks, self.reports, self.writer, self.scale = index, callbacks, reports, writer, scale
        self.weights = weights_for(self.policy)
        self.start_steps = config.algorithm.start_steps
        self.chunk_seconds = self.chunk_s = chunk_seconds or config.flow.chunk_seconds
        self.chunks, self.in_flight = 0, None
        self.status = writer.wait(writer.send(None, 0), self.weights.poll)
        self.budget = self.status.grant

    def step(self) -> bool:
        """Collect a chunk with the budget in hand (none: only ask for more) and send it; False
        once the run stopped (its last chunk stored)."""
        if self.in_flight is not None and self.budget <= 0:  # nothing left to collect with: wait
            self._take_reply()
        stopped = self.status.stop or self.weights.stop
        act = self._acting() if self.budget > 0 and not stopped else None
        if stopped or (self.budget > 0 and act is None):  # (None: stopped before the first weights)
            if self.in_flight is not None:
                self._take_reply()
            return False
        chunk = None
        if act is not None:
            chunk, wanted = self._collect(act)
        if self.in_flight is not None:  # the last chunk's reply, sent a chunk ago: mostly here already
            self._take_reply()
        if chunk is not None:  # keep what the next chunk is likely to take; the rest goes back
            self.budget = min(self.budget, wanted)
        self.in_flight = self.writer.send(chunk, max(0, self.budget))
        return True

    def _take_reply(self) -> None:
        self.status = self.writer.wait(self.in_flight, self.weights.poll)
        self.budget, self.in_flight = self.budget + self.status.grant, None

    def _acting(self):
        """How the next chunk acts; None when the run stopped before the first weights."""
        policy, env_steps = self.policy, self.status.added * self.scale
        if env_steps < self.start_steps:
            return lambda obs: policy.random_actions(len(obs))
        policy.set_env_steps(env_steps)  # schedules follow the run's (checkpointed) count
        self.weights.wait_for_weights()
        if not policy.has_weights:
            return None
        return lambda obs: policy.compute_actions(obs, explore=True)

    def _collect(self, act) -> tuple[Chunk, int]:
        """A chunk of up to the budget's steps for at most ``chunk_s`` seconds, with about the
        steps the next chunk will take."""
        collector = self.collector
        started, steps_before = time.monotonic(), collector.total_steps
        batch = collector.collect(act, self.budget, started + self.chunk_s, self.weights.poll)
        steps, seconds = collector.total_steps - steps_before, time.monotonic() - started
        chunk = build.make_chunk(batch, self.policy, self.callbacks, self.encoder, self.index, env_steps=steps)
        episodes = collector.drain_episodes()
        if episodes:
            self.reports.episodes(episodes)
        self.budget -= steps
        self.chunk_s = next_chunk_seconds(self.chunk_seconds, steps, seconds)
        self.chunks += 1
        return chunk, math.ceil(steps * self.chunk_s / max(seconds, 1e-6))

    def close(self) -> None:
        self.weights.close()
        self.collector.close()


class Learn:
    """The learner's loop around a :class:`dsac.runtime.learning.UpdateLoop`, a sample call per
    :meth:`step`: batches from the sampler, new priorities back to it, and the weights to the
    sink after a block of updates that passed a multiple of ``push_every`` — at most once per
    ``push_interval`` seconds (readers take weights between chunks: a faster learner would pay
    for versions nobody acts with), and at once when the sampler has no batches. With
    data-parallel learners, ``sync`` (a :class:`dsac.distributed.learner_transport.GradientSync`)
    makes every update the mean of all learners' gradients."""

    def __init__(self, loop: UpdateLoop, sampler, sink, push_interval: float = 0.0, sync=None):
        self.loop, self.sampler, self.sink, self.sync = loop, sampler, sink, sync
        self.push_interval = float(push_interval)
        self.push_due, self.pushed_at = False, time.monotonic()
        self.env_steps_by_source: dict[int, int] = {}
        self.stopped = False  # the run stopped midway through an update (data-parallel learners)

    def report(self, final: bool = False) -> LearnerReport:
        """The learner's counters and stats, sent with the weights."""
        env_steps = self.sync.env_steps if self.sync is not None else sum(self.env_steps_by_source.values())
        return self.loop.report(env_steps, self.sampler.wait_s, final)

    def push(self) -> None:
        started = self.loop.cpu.now()
        self.push_due, self.pushed_at = False, time.monotonic()
        self.sink.push(self.loop, self.report())
        self.loop.cpu.add("push", started)

    def step(self) -> bool:
        """One sample call's batches through the loop, its outputs forwarded; False when the
        sampler had none."""
        loop = self.loop
        started = loop.cpu.now()
        source, sampled = self.sampler.next()
        loop.cpu.add("sample", started)
        if sampled is None:  # the ratio holds the learner back, or the run is stopping
            if self.push_due:  # what it learned last reaches the readers while it waits
                self.push()
            self.sink.idle(loop, self.report())
            return False
        self.env_steps_by_source[source] = sampled.env_steps
        if sampled.obs_moments is not None:  # --normalize_obs: the learner's batches use them
            if self.sync is not None:  # every data-parallel learner takes them alike, through the averager
                self.sync.hold_obs_moments(source, sampled.obs_moments)
            else:
                loop.learner.observe_obs_moments(source, sampled.obs_moments)
        learn = None if self.sync is None else self.sync.update_fn(loop.learner, loop.updates,
                                                                   sum(self.env_steps_by_source.values()))
        step = loop.step(sampled.batches, learn)
        if self.sync is not None and self.sync.regroup:  # a learner or the averager was restarted
            self.stopped = not self.sync.join(loop)
            return True
        self.stopped = step.stopped
        if not step.stopped and (step.push or self.push_due):
            self.push_due = time.monotonic() - self.pushed_at < self.push_interval
            if not self.push_due:
                self.push()
        if step.priorities is not None and sampled.indices is not None:
            self.sampler.update_priorities(source, sampled.indices, sampled.generations, step.priorities)
        return True


class Evaluate:
    """The evaluator's loop (:meth:`step`): ``eval_episodes`` deterministic episodes of the
    newest weights every ``eval_every`` env steps, as the evaluation budget allows
    (``--eval_cpu_share`` of ``cores``); :meth:`final` evaluates the final weights. Each
    evaluation goes to the reports sink. ``weights_for(policy)`` makes the policy's weights
    source; ``start_env_steps``: a resumed run's env steps."""

    def __init__(self, config, observation_space, action_space, seed: int, weights_for: Callable, reports,
                 cores: float, start_env_steps: int = 0):
        self.cpu = CpuMeter(time.thread_time)  # its envs and acting run on this thread
        self.config, self.seed, self.reports = config, seed, reports
        self.policy = build.acting_policy(config, observation_space, action_space, seed)
        self.weights = weights_for(self.policy)
        self.budget = EvaluationBudget(config.output.eval_cpu_share, cores)
        self.on_env_crash = env_crash_handler(reports, "evaluator", config.resources.env_restarts)
        self.next_eval = next_evaluation(start_env_steps, config.output.eval_every)
        self.evaluated_version, self.count = 0, 0
        if config.output.video_every:
            video.prepare_headless_rendering()

    def step(self, wait_s: float = 0.0) -> bool:
        """Take newer weights (waiting up to ``wait_s``) and evaluate them if due; False once
        the run stopped."""
        self.weights.refresh(wait_s)
        if self.weights.stop:
            return False
        if self.policy.has_weights and self.weights.report.env_steps >= self.next_eval and self.budget.allows():
            self.evaluate()
        return True

    def evaluate(self, final: bool = False) -> None:
        """Play the weights held and report the evaluation."""
        report, version, config = self.weights.report, self.weights.version, self.config
        self.count += 1
        evaluation = self.budget.timed(lambda: build.evaluate(
            config, self.policy, self.seed, self.count, final, (report.env_steps, report.updates, version),
            self.on_env_crash, on_progress=lambda steps: self.reports.evaluator_alive(steps, final), cpu=self.cpu))
        self.evaluated_version = version
        self.next_eval = next_evaluation(report.env_steps, config.output.eval_every)
        self.reports.evaluation(evaluation)

    def final(self) -> None:
        """Evaluate the final weights, unless they were just evaluated."""
        self.weights.refresh(0.0)
        if self.policy.has_weights and self.weights.version != self.evaluated_version:
            self.evaluate(final=True)


# --- the in-process ports (the serial runner) --------------------------------------------------
class LocalReplay:
    """Replay writer and sampler in one process: a :class:`dsac.replay.buffer.Replay` used directly. A
    chunk is stored when sent, its grant reckoned when the reply is taken: after the learner's turn."""

    wait_s = 0.0  # nothing waits in one process

    def __init__(self, replay: Replay, batch_size: int, num_batches: int):
        self.replay, self.batch_size, self.num_batches = replay, batch_size, num_batches

    def send(self, chunk: Chunk | None, keep: int) -> int:
        self.replay.add(chunk)
        return keep

    def wait(self, keep: int, poll=None) -> Grant:
        return Grant(self.replay.grant(0, keep), False, self.replay.added, self.replay.storage.sampled_batches)

    def next(self) -> tuple[int, SampledBatches | None]:
        ready, replay = self.replay.can_sample(self.num_batches), self.replay
        return 0, (replay.sample(self.batch_size, self.num_batches) if ready else None)

    def update_priorities(self, source: int, indices, generations, priorities) -> None:
        self.replay.update_priorities(indices, generations, priorities)


class LocalWeights:
    """The learner as its own weights source: a push is a new version, which every policy that
    reads it (:meth:`reader`) takes at once; ``report`` is the learner's as of now."""

    stop = False

    def __init__(self, report: Callable[[], LearnerReport], version: int = 0):
        self.current_report, self.version, self.weights, self.policies = report, int(version), None, []

    def push(self, loop: UpdateLoop, report: LearnerReport) -> None:
        self.weights, self.version = loop.get_weights(), self.version + 1
        for policy in self.policies:
            policy.set_weights(self.weights)

    def reader(self, policy) -> LocalWeights:
        """The weights source of ``policy``: this one."""
        self.policies.append(policy)
        if self.weights is not None:
            policy.set_weights(self.weights)
        return self

    @property
    def report(self) -> LearnerReport:
        return self.current_report()

    def idle(self, loop: UpdateLoop, report: LearnerReport) -> None: ...
    def poll(self, steps: int = 0) -> None: ...
    def refresh(self, wait_s: float = 0.0) -> None: ...
    def wait_for_weights(self) -> None: ...
    def close(self) -> None: ...


class LocalReports:
    """The reports sink in one process (its run monitor): keeps episodes and evaluations until
    the runner drains them, and the run-wide budget of env rebuilds."""

    def __init__(self, env_restarts: int):
        self.env_restarts = EnvRestartBudget(env_restarts)
        self.finished, self.evaluations = [], []  # FinishedEpisode, Evaluation

    def episodes(self, episodes: list[FinishedEpisode]) -> None:
        self.finished.extend(episodes)

    def evaluation(self, evaluation: Evaluation) -> None:
        self.evaluations.append(evaluation)

    def env_crashed(self, role: str, error: str) -> bool:
        number = self.env_restarts.allow(role, error)
        if number is not None:
            log.warning(env_restart_message(role, error, number, self.env_restarts.limit))
        return number is not None

    def evaluator_alive(self, steps: int, final: bool) -> None: ...

    def drain(self) -> tuple[list[FinishedEpisode], list[Evaluation]]:
        """The episodes and evaluations reported since the last call."""
        drained, self.finished, self.evaluations = (self.finished, self.evaluations), [], []
        return drained
