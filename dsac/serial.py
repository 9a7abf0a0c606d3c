"""The serial runner (``launch.py --local``, or ``--num_workers 0`` as RLlib's
``num_env_runners=0``): rollout, replay, learner and evaluator in one process, without Ray,
built from the classes the distributed run uses — :class:`dsac.rollout.EnvCollector`,
:class:`dsac.replay.ReplayStorage` with its :class:`dsac.replay.RateLimiter`,
:class:`dsac.learning.LearnerLoop`, :func:`dsac.evaluation.evaluate` and
:class:`dsac.recorder.Recorder` — so that a custom env, model, policy or callback can be
stepped through in a debugger, and tiny runs start in seconds. Same output directory and files.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import deque

import numpy as np

from dsac import video
from dsac.config import Config
from dsac.envs import EnvCrashed, env_restart_message, one_line
from dsac.evaluation import evaluation_seed, play_episodes
from dsac.frames import FrameEncoder
from dsac.learning import LearnerLoop, NonFiniteUpdates
from dsac.messages import Chunk, Evaluation, FinishedEpisode, Latest, LearnerState
from dsac.preparation import Prepared, check_resume_state, prepare, resume_checkpoint
from dsac.recorder import Recorder, custom_metric_means
from dsac.registry import callbacks_for, policy_class_for
from dsac.replay import PrioritizedReplayStorage, RateLimiter, ReplayStorage, annealed_beta, replay_specs
from dsac.rollout import EnvCollector
from dsac.run_loop import Step, run_until_stopped

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
        checkpoint: a resumed run's checkpoint (:func:`dsac.files.read_checkpoint`).
    """

    def __init__(self, prepared: Prepared, started_at: float, insert_limit: int | None = None,
                 checkpoint: dict | None = None):
        config = self.config = prepared.config
        self.output_dir = prepared.output_dir
        obs_space, act_space = self.observation_space, self.action_space = (
            prepared.observation_space, prepared.action_space)
        meta = (checkpoint or {}).get("meta", {})
        # The seeds rollout worker 0 and the evaluator get in the distributed run.
        worker_seed = int(np.random.SeedSequence(config.seed).spawn(1)[0].generate_state(1)[0])
        self.eval_seed = evaluation_seed(config.seed)
        self.callbacks = callbacks_for(config.run)
        self.env_restarts: dict[str, int] = {}  # "<role>/env" -> envs rebuilt (--env_restarts)
        self.collector = EnvCollector(
            config.env, config.envs_per_worker, worker_seed, config.gamma, config.n_step, callbacks=self.callbacks,
            worker_index=0, env_kwargs=config.env_kwargs, flatten_obs=config.flatten_obs,
            atari=config.frames, env_step_ms=config.env_step_ms,
            env_reset_ms=config.env_reset_ms, on_env_crash=self._env_crash_handler("rollout_worker_0"),
        )
        cls = policy_class_for(config.run)
        learner_policy = cls(obs_space, act_space, config, build_learner=True, seed=config.seed)
        if prepared.initial_weights is not None:
            learner_policy.set_weights(prepared.initial_weights)
        self.actor = cls(obs_space, act_space, config, seed=worker_seed, worker_index=0, num_workers=1)
        self.evaluator = cls(obs_space, act_space, config, seed=self.eval_seed)
        self.loop = LearnerLoop(learner_policy, config.push_every, config.max_nonfinite_updates, self.callbacks)
        if checkpoint is not None:
            self.loop.set_state(checkpoint["state"])
        self.storage, warmup = self._storage(obs_space, act_space, checkpoint)
        self.limiter = RateLimiter(config.updates_per_step, warmup, config.max_steps_ahead)
        self.insert_limit = config.total_env_steps if insert_limit is None else insert_limit
        self.version = int(meta.get("version", 0))
        self.recorder = Recorder(config, prepared.output_dir, obs_space, act_space, started_at, self.eval_seed, meta)
        self.weights_path = self.recorder.weights_path
        self.next_eval = (self.storage.added // config.eval_every + 1) * config.eval_every
        self.evaluated_version = -1
        self.evaluations = 0  # this process's, for --video_every
        if config.video_every:
            video.prepare_headless_rendering()
        self.last_checkpoint = time.monotonic()
        self.add_calls = 0
        self.failure: str | None = None
        self.state_wanted = False
        self.recent_returns: deque[float] = deque(maxlen=20)
        self.episode_metrics: list[dict] = []
        self.publish()
        log.info("serial run (--local): rollout, replay, learner and evaluator in this process; no Ray")

    def _storage(self, obs_space, act_space, checkpoint: dict | None):
        """The replay storage (a resumed run's contents, or its count), and its warm-up."""
        config, meta = self.config, (checkpoint or {}).get("meta", {})
        specs, frames = replay_specs(obs_space, act_space)
        self.encoder = FrameEncoder(frames, config.envs_per_worker, config.n_step) if frames else None
        if config.prioritized:
            storage = PrioritizedReplayStorage(specs, config.buffer_size, config.seed, alpha=config.priority_alpha,
                                               frames=frames)
        else:
            storage = ReplayStorage(specs, config.buffer_size, config.seed, frames=frames)
        warmup = config.learning_starts
        replay = (checkpoint or {}).get("replay") or []
        if len(replay) == 1:
            storage.load_state_dict(replay[0])
        elif meta:  # resumed without the replay's contents: count on, warm up again
            storage.added = int(meta["env_steps"])
            warmup += storage.added
        return storage, warmup

    def _env_crash_handler(self, role: str):
        """Whether the run may rebuild ``role``'s env that raised: ``--env_restarts`` in all."""
        def allowed(exc: BaseException) -> bool:
            used = sum(self.env_restarts.values())
            if used >= self.config.env_restarts:
                return False
            self.env_restarts[f"{role}/env"] = self.env_restarts.get(f"{role}/env", 0) + 1
            log.warning(env_restart_message(role, one_line(exc), used + 1, self.config.env_restarts))
            return True
        return allowed

    # --- the roles, in turn ----------------------------------------------------------------
    def publish(self) -> None:
        """What a push and the workers' pull do: the acting policy takes the learner's weights."""
        self.weights = self.loop.policy.get_weights()
        self.actor.set_weights(self.weights)
        self.version += 1

    def collect(self) -> list[FinishedEpisode]:
        """One chunk of env steps, as far as the rate limiter lets collection run ahead."""
        config, storage = self.config, self.storage
        headroom = self.limiter.insert_headroom(storage.added, storage.sampled_batches, 0)
        room = min(headroom, config.max_chunk, self.insert_limit - storage.added)
        if room <= 0:
            return []
        if storage.added < config.start_steps:
            act = lambda obs: self.actor.random_actions(len(obs))  # noqa: E731
        else:
            self.actor.set_env_steps(storage.added)  # schedules follow the run's (checkpointed) count
            act = lambda obs: self.actor.compute_actions(obs, explore=True)  # noqa: E731
        batch = self.actor.postprocess_trajectory(self.collector.collect(act, room))
        if self.callbacks is not None:
            batch = self.callbacks.on_sample_end(worker_index=0, batch=batch)
        chunk = Chunk.from_batch(batch)
        if self.encoder is not None:
            chunk = chunk._replace(transitions=self.encoder.encode(chunk.transitions))
        if chunk.size:
            if self.config.prioritized:
                storage.add(chunk.transitions, chunk.priorities)
            else:
                storage.add(chunk.transitions)
            self.add_calls += 1
        return self.collector.drain_episodes()

    def learn(self) -> None:
        """Every sample call the update ratio allows now, each through the learner's loop."""
        config, storage = self.config, self.storage
        while self.limiter.can_sample(storage.added, storage.sampled_batches, config.batches_per_sample):
            if config.prioritized:
                beta = annealed_beta(config.priority_beta, storage.added, config.total_env_steps)
                sampled = storage.sample(config.batch_size, config.batches_per_sample, beta)
            else:
                sampled = storage.sample(config.batch_size, config.batches_per_sample)
            step = self.loop.step(sampled.batches)
            if step.priorities is not None and sampled.indices is not None:
                storage.update_priorities(sampled.indices, sampled.generations, step.priorities)
            if step.push:
                self.publish()

    def evaluate_if_due(self, final: bool = False) -> list[dict]:
        """``eval_episodes`` deterministic episodes every ``eval_every`` env steps (and of the
        final weights); returns the progress lines written."""
        config = self.config
        if not (self.storage.added >= self.next_eval or (final and self.evaluated_version != self.version)):
            return []
        self.evaluator.set_weights(self.weights)
        started = time.monotonic()
        self.evaluations += 1
        frames = video.Frames() if video.wanted(config.video_every, self.evaluations, final) else None
        episodes = play_episodes(lambda obs: self.evaluator.compute_actions(obs, explore=False), config.env,
                                 config.eval_episodes, self.eval_seed, config.env_kwargs, config.flatten_obs,
                                 config.frames, self._env_crash_handler("evaluator"), frames)
        self.next_eval = (self.storage.added // config.eval_every + 1) * config.eval_every
        self.evaluated_version = self.version
        mp4, video_error, gif = video.finish(frames, gif=config.tensorboard)
        line = self.recorder.evaluation(Evaluation(
            env_steps=self.storage.added, updates=self.loop.updates, weights_version=self.version,
            eval_seconds=time.monotonic() - started, weights=self.weights,
            video=mp4, video_error=video_error, video_gif=gif, **episodes.summary(),
        ), {"env_steps_collected": self.storage.added,
            **({"restarts": dict(self.env_restarts)} if self.env_restarts else {}),
            **({"skipped_updates": self.loop.skipped} if self.loop.skipped else {}),
            **custom_metric_means(self.episode_metrics)})
        self.episode_metrics = []
        self.recorder.save_weights(self.weights, self.version, self.counters)
        return [line]

    def checkpoint(self) -> None:
        """The full training state, as the distributed run's checkpoint holds it."""
        replay = [self.storage.state_dict()] if self.config.checkpoint_replay else None
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
        self.insert_limit = self.config.total_env_steps if total_env_steps is None else total_env_steps

    def status(self) -> dict:
        """Counters for the progress display and TensorBoard."""
        last = self.recorder.last_eval.get("eval_return_mean")
        return {
            **self.counters, "total_env_steps": self.config.total_env_steps, "version_lag": 0,
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
        every = self.config.checkpoint_every
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
            "mode": "serial", "restarts": dict(self.env_restarts), "skipped_updates": self.loop.skipped, "replay_add_calls": self.add_calls,
            "transitions_per_add": round(self.storage.added / max(1, self.add_calls), 1),
        })


def start_serial(config: Config, started_at: float, insert_limit: int | None = None,
                 checkpoint: dict | None = None) -> SerialRun:
    """Check the input and build the serial run (:func:`dsac.distributed.driver.start`'s twin)."""
    prepared = prepare(config, local=True)
    if checkpoint is not None:
        check_resume_state(prepared, checkpoint["state"], config.resume or "the checkpoint")
    return SerialRun(prepared, started_at, insert_limit, checkpoint)


def run_serial(config: Config, started_at: float | None = None) -> dict:
    """:func:`dsac.distributed.driver.run` in one process without Ray; returns the summary.

    Raises:
        DsacError: bad input, found before training starts.
        RunFailed: the learner failed during the run (weights so far are saved).
        KeyboardInterrupt: after a graceful stop on Ctrl-C (weights saved).
    """
    started_at = time.time() if started_at is None else started_at
    config = config.validate()
    checkpoint, started_at = resume_checkpoint(config, started_at)
    return run_until_stopped(start_serial(config, started_at, checkpoint=checkpoint))
