"""The serial runner (``launch.py --local``, or ``--num_workers 0`` as RLlib's
``num_env_runners=0``): rollout, replay, learner and evaluator in one process, without Ray,
built from the classes the distributed run uses — :class:`dsac.rollout.EnvCollector`,
:class:`dsac.replay.ReplayStorage` with its :class:`dsac.replay.RateLimiter`,
:class:`dsac.learning.UpdateLoop`, :func:`dsac.evaluation.evaluate` and
:class:`dsac.recorder.Recorder` — so that a custom env, model, policy or callback can be
stepped through in a debugger, and tiny runs start in seconds. Same output directory and files.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque

from dsac import build, cpu, video
from dsac.build import EnvRestartBudget, role_seeds
from dsac.config import Config
from dsac.envs import EnvCrashed, env_restart_message, one_line
from dsac.evaluation import EvaluationBudget
from dsac.learning import NonFiniteUpdates
from dsac.messages import FinishedEpisode, Latest, LearnerState
from dsac.preparation import Prepared, check_resume_state, prepare
from dsac.recorder import Recorder, custom_metric_means
from dsac.registry import callbacks_for
from dsac.replay import RateLimiter, annealed_beta, replay_specs
from dsac.run_loop import Step
from dsac.tf_setup import configure_tensorflow

log = logging.getLogger("dsac")


class SerialRun:
    """One process that collects, stores, learns and evaluates in turn, keeping the update
    ratio with the same rate limiter the replay actor uses. Steps as the distributed run
    does (``step()``, ``status()``, ``stop()``), so the command line's :func:`dsac.run_loop.run_until_stopped`
    and ``Trainer(config, local=True)`` drive it alike.

    Args:
        prepared: what :func:`dsac.preparation.prepare` checked.
        started_at: ``time.time()`` the run counts its wall seconds from.
        insert_limit: no collection past this many transitions (None: ``total_env_steps``).
        checkpoint: a resumed run's checkpoint (:func:`dsac.checkpoints.read_checkpoint`).
    """

    def __init__(self, prepared: Prepared, started_at: float, insert_limit: int | None = None,
                 checkpoint: dict | None = None):
        config = self.config = prepared.config
        self.output_dir = prepared.output_dir
        obs_space, act_space = self.observation_space, self.action_space = (
            prepared.observation_space, prepared.action_space)
        meta = (checkpoint or {}).get("meta", {})
        # Before any model: memory growth on a GPU TensorFlow sees (one process, no Ray to give
        # it one, so no warning when there is none) and the learner's thread pools.
        self.device, _ = configure_tensorflow(1, 1, config.resources.learner_threads, config.output.verbose)
        seeds = role_seeds(config.run.seed, 1)  # those of rollout worker 0 and the evaluator of a distributed run
        self.eval_seed = seeds.evaluator
        self.callbacks = callbacks_for(config.run)
        self.env_restarts = EnvRestartBudget(config.resources.env_restarts)
        self.collector = build.collector(config, seeds.workers[0], 0, self.callbacks,
                                         self._env_crash_handler("rollout_worker_0"))
        self.actor = build.acting_policy(config, obs_space, act_space, seeds.workers[0], 0, 1)
        self.evaluator = build.acting_policy(config, obs_space, act_space, seeds.evaluator)
        self.evaluator_cpu = cpu.CpuMeter(time.thread_time)
        self.loop = build.learner_loop(config, obs_space, act_space, seeds.learner, self.callbacks,
                                       prepared.initial_weights, checkpoint["state"] if checkpoint else None)
        specs, frames = replay_specs(obs_space, act_space)
        self.encoder = build.frame_encoder(config, frames)
        replay = (checkpoint or {}).get("replay") or []
        self.storage, warmup = build.replay_storage(
            specs, config.replay.buffer_size, seed=config.run.seed, prioritized=config.replay.prioritized,
            priority_alpha=config.replay.priority_alpha, frames=frames,
            learning_starts=config.algorithm.learning_starts,
            restore=replay[0] if len(replay) == 1 else None, start_added=int(meta.get("env_steps", 0)))
        self.limiter = RateLimiter(config.algorithm.updates_per_step, warmup, config.flow.max_steps_ahead)
        self.insert_limit = config.run.total_env_steps if insert_limit is None else insert_limit
        self.version = int(meta.get("version", 0))
        self.recorder = Recorder(config, prepared.output_dir, obs_space, act_space, started_at, self.eval_seed, meta)
        self.weights_path = self.recorder.weights_path
        self.next_eval = (self.storage.added // config.output.eval_every + 1) * config.output.eval_every
        self.evaluated_version = -1
        self.evaluations = 0  # this process's, for --video_every
        # One process: an evaluation stops collection and learning while it plays, so its share
        # is of this process's one core.
        self.eval_budget = EvaluationBudget(config.output.eval_cpu_share, 1)
        if config.output.video_every:
            video.prepare_headless_rendering()
        self.last_checkpoint = time.monotonic()
        self.add_calls = 0
        self.failure: str | None = None
        self.state_wanted = False
        self.recent_returns: deque[float] = deque(maxlen=20)
        self.episode_metrics: list[dict] = []
        self.publish()
        log.info("serial run (--local): rollout, replay, learner and evaluator in this process; no Ray; "
                 "learner on %s", self.device)

    def _env_crash_handler(self, role: str):
        """Whether the run may rebuild ``role``'s env that raised: ``--env_restarts`` in all."""
        def allowed(exc: BaseException) -> bool:
            number = self.env_restarts.allow(role, one_line(exc))
            if number is not None:
                log.warning(env_restart_message(role, one_line(exc), number, self.env_restarts.limit))
            return number is not None
        return allowed

    # --- the roles, in turn ----------------------------------------------------------------
    def publish(self) -> None:
        """What a push and the workers' pull do: the acting policy takes the learner's weights."""
        started = self.loop.cpu.now()
        self.weights = self.loop.get_weights()
        self.actor.set_weights(self.weights)
        self.loop.cpu.add("push", started)
        self.version += 1

    def collect(self) -> list[FinishedEpisode]:
        """One chunk of env steps, as far as the rate limiter lets collection run ahead."""
        config, storage = self.config, self.storage
        headroom = self.limiter.insert_headroom(storage.added, storage.sampled_batches, 0)
        room = min(headroom, config.flow.max_chunk, self.insert_limit - storage.added)
        if room <= 0:
            return []
        if storage.added < config.algorithm.start_steps:
            act = lambda obs: self.actor.random_actions(len(obs))  # noqa: E731
        else:
            self.actor.set_env_steps(storage.added)  # schedules follow the run's (checkpointed) count
            act = lambda obs: self.actor.compute_actions(obs, explore=True)  # noqa: E731
        steps_before = self.collector.total_steps
        batch = self.collector.collect(act, room)
        chunk = build.make_chunk(batch, self.actor, self.callbacks, self.encoder, 0,
                                 env_steps=self.collector.total_steps - steps_before)
        if chunk.size or chunk.steps:
            if self.config.replay.prioritized:
                storage.add(chunk.transitions, chunk.priorities, env_steps=chunk.steps)
            else:
                storage.add(chunk.transitions, env_steps=chunk.steps)
            self.add_calls += 1
        return self.collector.drain_episodes()

    def learn(self) -> None:
        """Every sample call the update ratio allows now, each through the learner's loop."""
        config, storage = self.config, self.storage
        while self.limiter.can_sample(storage.added, storage.sampled_batches, config.flow.batches_per_sample):
            started = self.loop.cpu.now()
            if config.replay.prioritized:
                beta = annealed_beta(config.replay.priority_beta, storage.added, config.run.total_env_steps)
                sampled = storage.sample(config.algorithm.batch_size, config.flow.batches_per_sample, beta)
            else:
                sampled = storage.sample(config.algorithm.batch_size, config.flow.batches_per_sample)
            self.loop.cpu.add("sample", started)
            step = self.loop.step(sampled.batches)
            if step.priorities is not None and sampled.indices is not None:
                storage.update_priorities(sampled.indices, sampled.generations, step.priorities)
            if step.push:
                self.publish()

    def evaluate_if_due(self, final: bool = False) -> list[dict]:
        """``eval_episodes`` deterministic episodes every ``eval_every`` env steps, as the
        evaluation budget allows (``--eval_cpu_share``), and of the final weights; returns the
        progress lines written."""
        config = self.config
        due = self.storage.added >= self.next_eval and self.eval_budget.allows()
        if not (due or (final and self.evaluated_version != self.version)):
            return []
        self.evaluator.set_weights(self.weights)
        self.evaluations += 1
        evaluation = self.eval_budget.timed(lambda: build.evaluate(
            config, self.evaluator, self.eval_seed, self.evaluations, final,
            (self.storage.added, self.loop.updates, self.version), self._env_crash_handler("evaluator"),
            cpu=self.evaluator_cpu))
        self.next_eval = (self.storage.added // config.output.eval_every + 1) * config.output.eval_every
        self.evaluated_version = self.version
        restarts = self.env_restarts.by_env()
        line = self.recorder.evaluation(evaluation, {
            "env_steps_collected": self.storage.added, **({"restarts": restarts} if restarts else {}),
            **({"skipped_updates": self.loop.skipped} if self.loop.skipped else {}),
            **custom_metric_means(self.episode_metrics)})
        self.episode_metrics = []
        self.recorder.save_weights(self.weights, self.version, self.counters)
        return [line]

    def checkpoint(self) -> None:
        """The full training state, as the distributed run's checkpoint holds it."""
        replay = [self.storage.state_dict()] if self.config.output.checkpoint_replay else None
        self.recorder.checkpoint(self.loop.state(), self.weights, self.version, self.counters, replay)
        self.last_checkpoint = time.monotonic()

    # --- what the driver of a run reads ------------------------------------------------------
    @property
    def counters(self) -> dict:
        return {"env_steps": self.storage.added, "updates": self.loop.updates, "version": self.version}

    @property
    def learner_stats(self) -> dict:
        return self.loop.stats

    def latest(self) -> Latest:
        return Latest(self.version, self.weights, self.loop.report(self.storage.added))

    def full_state(self) -> LearnerState:
        return LearnerState(self.loop.state(), self.loop.report(self.storage.added))

    def set_insert_limit(self, total_env_steps: int | None) -> None:
        self.insert_limit = self.config.run.total_env_steps if total_env_steps is None else total_env_steps

    def status(self) -> dict:
        """Counters for the progress display and TensorBoard."""
        last = self.recorder.last_eval.get("eval_return_mean")
        return {
            **self.counters, "total_env_steps": self.config.run.total_env_steps, "version_lag": 0,
            "replay_size": self.storage.size, "replay_fill": self.storage.size / self.storage.capacity,
            "learner_wait_s": 0.0, "wall_s": self.recorder.wall_s(), "last_eval_return": last,
            "recent_episode_return": statistics.fmean(self.recent_returns) if self.recent_returns else None,
        }

    def step(self, timeout: float | None = None) -> Step:
        """One round: collect a chunk, learn what the ratio allows, evaluate if due, and write
        a checkpoint every ``checkpoint_every`` seconds. (``timeout``: the distributed run's
        wait for its tasks; one process has nothing to wait for.)"""
        try:
            episodes = self.collect()
        except EnvCrashed as exc:
            self.failure = f"rollout_worker_0: {exc}"
            return Step([], [])
        self.recent_returns.extend(e.episode_return for e in episodes)
        self.episode_metrics.extend(e.custom_metrics for e in episodes if e.custom_metrics)
        try:
            self.learn()
        except NonFiniteUpdates as exc:
            self.failure = f"learner failed: NonFiniteUpdates: {exc}"
            return Step([], episodes)
        try:
            lines = self.evaluate_if_due()
        except EnvCrashed as exc:
            self.failure = f"evaluator: {exc}"
            return Step([], episodes)
        self.recorder.system(self.status(), episodes, self.loop.stats)
        every = self.config.output.checkpoint_every
        if every is not None and time.monotonic() - self.last_checkpoint >= every:
            self.checkpoint()
        return Step(lines, episodes)

    def stop(self, reason: str) -> dict:
        """A last evaluation (unless the run just reached its return), the final weights and
        checkpoint, and ``summary.json``; returns the summary."""
        log.info("stopping (%s)", self.failure or reason)
        if reason != "stop_return" and not self.failure:
            try:
                self.evaluate_if_due(final=True)
            except EnvCrashed as exc:
                self.failure = f"evaluator: {exc}"
        self.recorder.save_weights(self.weights, self.version, self.counters)
        self.checkpoint()
        self.collector.close()
        return self.recorder.summary(reason, self.failure, self.counters, {
            "mode": "serial", "restarts": self.env_restarts.by_env(), "skipped_updates": self.loop.skipped,
            "replay_add_calls": self.add_calls,
            "transitions_per_add": round(self.storage.added / max(1, self.add_calls), 1),
            # One process: the roles' parts, and the process's whole CPU (start-up included).
            "cpu": cpu.section(self.loop.cpu.parts, [self.collector.cpu.parts], self.evaluator_cpu.parts,
                               process=time.process_time()),
        })


def start_serial(config: Config, started_at: float, insert_limit: int | None = None,
                 checkpoint: dict | None = None) -> SerialRun:
    """Check the input and build the serial run (:func:`dsac.distributed.driver.start`'s twin)."""
    prepared = prepare(config, local=True)
    if checkpoint is not None:
        check_resume_state(prepared, checkpoint["state"], config.run.resume or "the checkpoint")
    return SerialRun(prepared, started_at, insert_limit, checkpoint)
