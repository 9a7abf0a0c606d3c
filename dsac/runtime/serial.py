"""The serial runner (``launch.py --local``, or ``--num_workers 0`` as RLlib's
``num_env_runners=0``): the loops of :mod:`dsac.runtime.roles` that the Ray tasks run take turns in one
process without Ray, on in-process ports, so that a custom env, model, policy or callback can be
stepped through in a debugger and tiny runs start in seconds. Same output directory and files.
"""

from __future__ import annotations

import logging
import time
from collections import deque

from dsac.envs.make import EnvCrashed
from dsac.output.recorder import Recorder, custom_metric_means
from dsac.runtime import build, cpu, roles
from dsac.runtime.build import role_seeds
from dsac.runtime.learning import NonFiniteUpdates
from dsac.runtime.messages import Evaluation, Latest, LearnerState
from dsac.runtime.preparation import Prepared
from dsac.runtime.run_loop import Step, run_status
from dsac.settings.registry import callbacks_for

log = logging.getLogger("dsac")


class SerialRun:
    """One process whose roles take turns, the update ratio kept by the replay the shards use; driven
    as a distributed run (``step()``, ``status()``, ``stop()``) by :func:`dsac.runtime.run_loop.run_until_stopped`
    and ``Trainer(local=True)``. ``insert_limit`` (None: ``total_env_steps``); a resumed run's ``checkpoint``."""

    def __init__(self, prepared: Prepared, started_at: float, insert_limit: int | None = None,
                 checkpoint: dict | None = None):
        config = self.config = prepared.config
        self.output_dir = prepared.output_dir
        spaces = self.observation_space, self.action_space = prepared.observation_space, prepared.action_space
        meta = (checkpoint or {}).get("meta", {})
        seeds = role_seeds(config.run.seed, 1)  # those of rollout worker 0 and the evaluator of a distributed run
        self.callbacks = callbacks_for(config.run)
        # No Ray to give it a GPU: TensorFlow set up as for a learner given one (no warning without), and all cores.
        self.loop, device, _ = roles.learner_loop(config, *spaces, seeds.learner, 1, None, self.callbacks,
                                                  prepared.initial_weights, checkpoint["state"] if checkpoint else None)
        self.replay = build.local_replay(config, *spaces, checkpoint)
        self.set_insert_limit(insert_limit)
        self.reports = roles.LocalReports(config.resources.env_restarts)
        self.weights = roles.LocalWeights(lambda: self.loop.report(self.replay.added), int(meta.get("version", 0)))
        port = roles.LocalReplay(self.replay, config.algorithm.batch_size, config.flow.batches_per_sample)
        # One process: pushes by update count and chunks ended by the ratio's budget (1e9 s: never
        # by the clock), so a seed gives the same run however fast the machine is.
        self.learn = roles.Learn(self.loop, port, self.weights, push_interval=0.0)
        self.learn.push()  # the first weights
        self.collect = roles.Collect(config, 0, seeds.workers[0], 1, self.callbacks, self.reports,
                                     self.weights.reader, port, chunk_seconds=1e9)
        self.evaluate = roles.Evaluate(config, *spaces, seeds.evaluator, self.weights.reader, self.reports, 1,
                                       self.replay.added)
        self.recorder = Recorder(config, self.output_dir, *spaces, started_at, seeds.evaluator, meta)
        self.weights_path, self.last_checkpoint = self.recorder.weights_path, time.monotonic()
        self.failure, self.recent_returns, self.episode_metrics = None, deque(maxlen=20), []
        log.info("serial run (--local): the roles take turns in this process, no Ray; learner on %s", device)

    def _turns(self, final: bool = False) -> None:
        """Each role's turn (the final evaluation's alone), until one fails."""
        turns = [("evaluator: ", self.evaluate.final)] if final else [
            ("rollout_worker_0: ", self.collect.step), ("learner failed: NonFiniteUpdates: ", self._learn),
            ("evaluator: ", self.evaluate.step)]
        for failure, turn in turns:
            try:
                turn()
            except (EnvCrashed, NonFiniteUpdates) as exc:
                self.failure = f"{failure}{exc}"
                return

    def _learn(self) -> None:
        while self.learn.step():  # every sample call the update ratio allows now
            pass

    def _record(self, evaluation: Evaluation) -> dict:
        """The progress line of an evaluation, and its weights saved."""
        restarts = self.reports.env_restarts.by_env()
        line = self.recorder.evaluation(evaluation, {
            "env_steps_collected": self.replay.added, **({"restarts": restarts} if restarts else {}),
            **({"skipped_updates": self.loop.skipped} if self.loop.skipped else {}),
            **custom_metric_means(self.episode_metrics)})
        self.episode_metrics = []
        self.recorder.save_weights(evaluation.weights, evaluation.weights_version, self.counters)
        return line

    def _checkpoint(self) -> None:
        """The full training state, as the distributed run's checkpoint holds it."""
        replay = [self.replay.storage.state_dict()] if self.config.output.checkpoint_replay else None
        self.recorder.checkpoint(self.loop.state(), self.weights.weights, self.weights.version, self.counters, replay)
        self.last_checkpoint = time.monotonic()

    @property
    def counters(self) -> dict:
        return {"env_steps": self.replay.added, "updates": self.loop.updates, "version": self.weights.version}

    @property
    def learner_stats(self) -> dict:
        return self.loop.stats

    def latest(self) -> Latest:
        return Latest(self.weights.version, self.weights.weights, self.weights.report)

    def full_state(self) -> LearnerState:
        return LearnerState(self.loop.state(), self.weights.report)

    def set_insert_limit(self, total_env_steps: int | None) -> None:
        self.replay.insert_limit = self.config.run.total_env_steps if total_env_steps is None else total_env_steps

    def status(self) -> dict:
        """Counters for the progress display and TensorBoard."""
        storage = self.replay.storage
        return run_status({**self.counters, "version_lag": 0, "replay_size": storage.size,
                           "replay_capacity": storage.capacity}, self.config.run.total_env_steps,
                          self.recorder.wall_s(), self.recorder.last_eval, self.recent_returns)

    def step(self, timeout: float | None = None, final: bool = False) -> Step:
        """A round of turns: a chunk, what the update ratio allows learned, an evaluation if due (or
        only the ``final`` one), a checkpoint every ``checkpoint_every`` s; nothing waits ``timeout``."""
        self._turns(final)
        episodes, evaluations = self.reports.drain()
        self.recent_returns.extend(e.episode_return for e in episodes)
        self.episode_metrics.extend(e.custom_metrics for e in episodes if e.custom_metrics)
        lines = [self._record(evaluation) for evaluation in evaluations]
        if self.failure or final:
            return Step(lines, episodes)
        self.recorder.system(self.status(), episodes, self.loop.stats)
        every = self.config.output.checkpoint_every
        if every is not None and time.monotonic() - self.last_checkpoint >= every:
            self._checkpoint()
        return Step(lines, episodes)

    def stop(self, reason: str) -> dict:
        """A last evaluation (unless the run just reached its return), the final weights and
        checkpoint, and ``summary.json``; returns the summary."""
        log.info("stopping (%s)", self.failure or reason)
        if reason != "stop_return" and not self.failure:
            self.step(final=True)
        self.recorder.save_weights(self.weights.weights, self.weights.version, self.counters)
        self._checkpoint()
        self.collect.close()
        return self.recorder.summary(reason, self.failure, self.counters, {
            "mode": "serial", "restarts": self.reports.env_restarts.by_env(), "skipped_updates": self.loop.skipped,
            "replay_add_calls": self.replay.add_calls,
            "transitions_per_add": round(self.replay.added / max(1, self.replay.add_calls), 1),
            # One process: the roles' parts, and the process's whole CPU (start-up included).
            "cpu": cpu.section(self.loop.cpu.parts, [self.collect.collector.cpu.parts], self.evaluate.cpu.parts,
                               process=time.process_time()),
        })

