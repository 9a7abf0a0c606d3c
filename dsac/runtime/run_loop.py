"""The command line's loop, the same for the distributed and the serial run: step the run,
hand new results to the callbacks, show progress, and stop on the first stop condition —
gracefully, with everything saved, on Ctrl-C and SIGTERM too. Free of Ray and TensorFlow.

A run is a :class:`Run`: :class:`dsac.distributed.driver.DistributedRun` and
:class:`dsac.runtime.serial.SerialRun`, started by :func:`dsac.runtime.runner.start`. ``Trainer.train`` steps the
same runs.
"""

from __future__ import annotations

import logging
import os
import signal
import statistics
import sys
import threading
from typing import NamedTuple, Protocol

from dsac.errors import RunFailed
from dsac.output.progress import ProgressDisplay
from dsac.runtime.messages import FinishedEpisode, Latest, LearnerState

log = logging.getLogger("dsac")


class Step(NamedTuple):
    """What one ``step()`` of a run brought."""

    lines: list[dict]  # progress.jsonl lines written (one per evaluation)
    episodes: list[FinishedEpisode]  # training episodes finished


def run_status(counters: dict, total_env_steps: int, wall_s: float, last_eval: dict, recent_returns) -> dict:
    """Counters for the progress display and TensorBoard, as both runners report them:
    ``counters`` holds env steps, updates and version, and may hold the version lag, the replay's
    size and capacity and the learner's wait for batches."""
    size = counters.get("replay_size", 0)
    return {"env_steps": counters["env_steps"], "total_env_steps": total_env_steps, "updates": counters["updates"],
            "version": counters["version"], "version_lag": counters.get("version_lag"), "replay_size": size,
            "replay_fill": size / max(1, counters.get("replay_capacity", 1)),
            "learner_wait_s": counters.get("learner_wait_s", 0.0), "wall_s": wall_s,
            "last_eval_return": last_eval.get("eval_return_mean"),
            "recent_episode_return": statistics.fmean(recent_returns) if recent_returns else None}


class Run(Protocol):
    """What the command line's loop, ``Trainer`` and Tune drive: a started run, serial or
    distributed."""

    config: object  # the run's resolved dsac.config.Config
    output_dir: str
    callbacks: object  # the run's dsac.runtime.callbacks.Callbacks, or None
    failure: str | None  # why the run failed, once it has
    weights_path: str  # where the latest weights are saved

    @property
    def counters(self) -> dict:
        """``env_steps``, ``updates`` and ``version`` so far."""

    def step(self, timeout: float) -> Step:
        """Advance the run once: collect, learn, evaluate as due; what it brought."""

    def status(self) -> dict:
        """Counters for the progress display and TensorBoard."""

    def latest(self) -> Latest:
        """The newest weights, their version and the learner's report."""

    def full_state(self) -> LearnerState:
        """The learner's whole state (for a checkpoint)."""

    def set_insert_limit(self, total_env_steps: int | None) -> None:
        """No collection past this many env steps (None: ``total_env_steps``)."""

    def stop(self, reason: str) -> dict:
        """Stop everything, save the final weights and checkpoint; returns the summary."""


def stop_reason(run: Run, lines: list[dict], signals: Signals) -> str | None:
    """The first stop condition that holds, or None."""
    config, status = run.config, run.status()
    if run.failure:
        return "failed"
    if signals.received is not None:
        return "sigterm"
    if config.run.stop_return is not None and any(line["eval_return_mean"] >= config.run.stop_return for line in lines):
        return "stop_return"
    if status["env_steps"] >= config.run.total_env_steps:
        return "total_env_steps"
    if config.run.max_seconds is not None and status["wall_s"] >= config.run.max_seconds:
        return "max_seconds"
    return None


def run_until_stopped(run: Run) -> dict:
    """Step ``run`` until a stop condition, stop it and return its summary.

    Raises:
        RunFailed: a role failed (what was learned is saved).
        KeyboardInterrupt: after a graceful stop on Ctrl-C (everything saved).
    """
    config = run.config
    reason = None
    progress = ProgressDisplay(config.run.total_env_steps, config.output.log_every, log.info,
                               use_bar=None if config.output.progress_bar else False)
    with Signals() as signals:
        try:
            while reason is None:
                lines = run.step().lines
                if run.callbacks is not None:
                    for line in lines:
                        run.callbacks.on_train_result(trainer=None, result=dict(line))
                reason = stop_reason(run, lines, signals)
                progress.update(run.status())
        except KeyboardInterrupt:
            reason = "interrupted"
        except OSError as exc:  # e.g. the output disk filled up
            run.failure, reason = f"cannot write to {run.output_dir}: {exc}", "failed"
        signals.shield()
        progress.close()
        summary = run.stop(reason)
    if summary["failure"]:
        raise RunFailed(summary["failure"])
    if reason == "interrupted":
        raise KeyboardInterrupt
    return summary


class Signals:
    """Turns SIGTERM (``ray job stop``) into a graceful stop, like Ctrl-C; once stopping,
    further Ctrl-C / SIGTERM are noted but do not cut the shutdown (and the final save) short."""

    def __init__(self):
        self.received: int | None = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[sig] = signal.getsignal(sig)
            except ValueError:  # not the main thread
                pass
        self._install(signal.SIGTERM, self._handle)
        return self

    def _install(self, sig, handler):
        if sig in self._previous:
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        self.received = signum

    def shield(self):
        """From now on, both signals only set ``received``."""
        self._install(signal.SIGTERM, self._handle)
        self._install(signal.SIGINT, self._handle)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def exit_at_once_on_sigterm() -> None:
    """In a process that Ray ends with SIGTERM once its work is done and saved (a Tune trial's
    actor), exit at once on it. Ray's own handler raises SystemExit wherever the process is:
    inside a weakref callback or a ``__del__`` Python prints that as a traceback on the user's
    console and carries on running until Ray kills it."""

    def handler(signum, frame):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed or broken stream: nothing left to keep
                pass
        os._exit(1)  # Ray's own exit code for a SIGTERM

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
