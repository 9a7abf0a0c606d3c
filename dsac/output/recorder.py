"""Every file and dashboard a run writes, on the driver's filesystem: ``config.json``,
``progress.jsonl``, ``weights.pkl``, ``best_weights.pkl``, ``checkpoint/``, ``summary.json`` and
TensorBoard event files. The distributed run and the serial runner write them through the
same :class:`Recorder`, so their output directories are alike. Free of Ray and TensorFlow.

Nothing is written through a symlink, so a run directory from someone else cannot take a write
elsewhere: files are replaced by a rename or opened ``O_NOFOLLOW``, folders are made here, and
``prepare`` refuses a directory where a name dsac writes is a link (:func:`dsac.formats.files.check_run_dir`).
"""

from __future__ import annotations

import logging
import math
import os
import statistics
import time

import dsac
from dsac.config import MODEL_KEYS, Config
from dsac.envs.make import describe_space
from dsac.errors import DsacError
from dsac.formats.checkpoints import write_checkpoint
from dsac.formats.files import append_jsonl, atomic_write_bytes, real_dir, save_weights, write_json
from dsac.output.tensorboard_log import TensorBoardLog
from dsac.output.trackers import Trackers
from dsac.runtime.messages import Evaluation
from dsac.settings.registry import algorithm

log = logging.getLogger("dsac")


def network_keys(config: Config) -> tuple[str, ...]:
    """The settings that shape the networks: the MLP's and the algorithm's own. A weights
    file records them and must match them."""
    return (*MODEL_KEYS, *algorithm(config.run.algo).model_keys)


def custom_metric_means(metrics: list[dict]) -> dict:
    """``custom_metrics/<name>_mean`` over the episodes' custom metrics."""
    values: dict[str, list[float]] = {}
    for m in metrics:
        for key, value in m.items():
            values.setdefault(key, []).append(float(value))
    return {f"custom_metrics/{k}_mean": statistics.fmean(v) for k, v in sorted(values.items())}


class Recorder:
    """Writes a run's files into ``output_dir``.

    Args:
        config: the run's resolved config (written as ``config.json``).
        output_dir: the run directory (exists and is writable: see ``prepare``).
        observation_space, action_space: the env's spaces (recorded in weights files).
        started_at: ``time.time()`` the run counts its wall seconds from.
        eval_seed: evaluation episode j resets with ``eval_seed + j`` (recorded in weights files).
        meta: a resumed checkpoint's ``meta.json`` (the best return so far, the last evaluation).
    """

    def __init__(self, config: Config, output_dir: str, observation_space, action_space, started_at: float,
                 eval_seed: int, meta: dict | None = None):
        self.config = config
        self.output_dir = output_dir
        self.observation_space = observation_space
        self.action_space = action_space
        self.started_at = started_at
        self.eval_seed = eval_seed
        meta = meta or {}
        self.progress_path = os.path.join(output_dir, "progress.jsonl")
        self.weights_path = os.path.join(output_dir, "weights.pkl")
        self.best_weights_path = os.path.join(output_dir, "best_weights.pkl")
        self.last_eval: dict = meta.get("last_eval", {})
        best = meta.get("best_eval_return")
        self.best_return = -math.inf if best is None else best
        self.checkpoint_path: str | None = None
        self.video_warned = False
        self.best_video_return = meta.get("best_video_return", -math.inf)
        write_json(os.path.join(output_dir, "config.json"), config.record())
        self.tensorboard = TensorBoardLog(os.path.join(output_dir, "tb")) if config.output.tensorboard else None
        self.trackers = Trackers(config.output, config.to_dict(), output_dir)

    def wall_s(self) -> float:
        return round(time.time() - self.started_at, 3)

    def best_eval_return(self) -> float | None:
        return None if self.best_return == -math.inf else self.best_return

    def payload(self, weights: dict, version: int, counters: dict) -> dict:
        """What a weights file holds: plain values and numpy arrays only."""
        config, run = self.config, self.config.run
        values = config.to_dict()
        return {
            "algo": run.algo,
            "env": run.env,
            "env_kwargs": dict(run.env_kwargs),
            "flatten_obs": run.flatten_obs,
            **({"her": True} if run.her else {}),
            "atari": config.frames.as_dict(),
            "observation_space": describe_space(self.observation_space),
            "action_space": describe_space(self.action_space),
            "model": {key: values[key] for key in network_keys(config)},
            "policy_class": values["policy_class"],
            "eval_seed": self.eval_seed,
            "eval_episodes": config.output.eval_episodes,
            "weights": weights,
            "version": version,
            "env_steps": counters.get("env_steps", 0),
            "updates": counters.get("updates", 0),
            "eval_return_mean": counters.get("eval_return_mean"),
            "dsac_version": dsac.__version__,
        }

    def save_weights(self, weights: dict, version: int, counters: dict, path: str | None = None) -> str:
        """Write weights (their eval return only when the last evaluation was of this very
        version) to ``path`` (default ``weights.pkl``); returns the path."""
        evaluated = self.last_eval.get("weights_version") == version
        counters = {**counters, "eval_return_mean": self.last_eval.get("eval_return_mean") if evaluated else None}
        path = path or self.weights_path
        save_weights(path, self.payload(weights, version, counters))
        return path

    def evaluation(self, ev: Evaluation, extra: dict) -> dict:
        """Record one evaluation (what the evaluator reported, with its weights): a
        ``progress.jsonl`` line with ``extra`` fields, TensorBoard, the log, and
        ``best_weights.pkl`` when it is the best so far. Returns the line."""
        line = {
            "env_steps": ev.env_steps,
            "updates": ev.updates,
            "wall_s": self.wall_s(),
            "eval_return_mean": ev.eval_return_mean,
            "eval_return_std": ev.eval_return_std,
            "weights_version": ev.weights_version,
            "eval_episodes": len(ev.eval_returns),
            **({"eval_length_mean": statistics.fmean(ev.eval_lengths), "eval_truncated": int(ev.eval_truncated)}
               if len(ev.eval_lengths) else {}),
            **({"eval_success_rate": ev.eval_success_rate} if ev.eval_success_rate is not None else {}),
            **extra,
        }
        append_jsonl(self.progress_path, line)
        if self.tensorboard is not None:
            self.tensorboard.evaluation(line)
        self.trackers.row(line)
        self.last_eval = line
        log.info(
            "eval at %d env steps (%d updates, %.1f s): return %.1f +- %.1f%s",
            line["env_steps"], line["updates"], line["wall_s"], line["eval_return_mean"], line["eval_return_std"],
            f", success {line['eval_success_rate']:.2f}" if "eval_success_rate" in line else "",
        )
        if ev.eval_return_mean > self.best_return:
            self.best_return = ev.eval_return_mean
            save_weights(self.best_weights_path, self.payload(ev.weights, ev.weights_version, line))
        self.video(ev)
        return line

    def video(self, ev: Evaluation) -> None:
        """An evaluation's video as ``videos/<env_steps>.mp4`` (``<env_steps>-v<weights version>.mp4``
        when an evaluation of other weights at the same env step has one: the final evaluation of
        weights updated after the last env step), and as ``videos/best.mp4`` when its return is the
        best of the recorded ones; a video that could not be made is one warning, once."""
        if ev.video_error and not self.video_warned:
            self.video_warned = True
            log.warning("no evaluation video: %s (%s); the run goes on", ev.video_error, self.config.run.env)
        if not ev.video:
            return
        folder = os.path.join(self.output_dir, "videos")
        try:
            real_dir(folder)  # never a symlink's target (docs/safety.md)
            path = os.path.join(folder, f"{ev.env_steps}.mp4")
            if os.path.lexists(path):
                path = os.path.join(folder, f"{ev.env_steps}-v{ev.weights_version}.mp4")
            atomic_write_bytes(path, ev.video)
            if ev.eval_return_mean > self.best_video_return:
                atomic_write_bytes(os.path.join(folder, "best.mp4"), ev.video)
                self.best_video_return = ev.eval_return_mean
        except (OSError, DsacError) as exc:  # a full disk costs the video, not the run
            log.warning("could not write an evaluation video in %s: %s", folder, getattr(exc, "strerror", None) or exc)
            return
        if self.tensorboard is not None and ev.video_gif is not None:
            self.tensorboard.video(ev.video_gif, ev.env_steps)
        self.trackers.video(path, ev.env_steps)

    def checkpoint(self, state: dict, weights: dict, version: int, counters: dict,
                   replay: list[dict] | None = None, run_dir: str | None = None) -> str:
        """Write the full training state as ``<run_dir>/checkpoint`` (atomically; default
        ``run_dir``: the output directory)."""
        meta = {
            "env_steps": counters["env_steps"],
            "updates": int(counters["updates"]),
            "version": version,
            "wall_s": self.wall_s(),
            "last_eval": self.last_eval,
            "best_eval_return": self.best_eval_return(),
            **({"best_video_return": self.best_video_return} if self.best_video_return > -math.inf else {}),
        }
        payload = self.payload(weights, version, counters)
        path = write_checkpoint(run_dir or self.output_dir, state, meta, payload, replay)
        if run_dir is not None:
            return path
        self.checkpoint_path = path
        log.info("checkpoint at %d env steps, %d updates: %s", meta["env_steps"], meta["updates"],
                 self.checkpoint_path)
        return self.checkpoint_path

    def saved_state(self, directory: str, state: dict, weights: dict, version: int, counters: dict) -> str:
        """``Trainer.save``'s directory: the full state as a run's ``checkpoint/``, the acting
        weights as ``weights.pkl`` (for :func:`dsac.load_policy`) and ``config.json``."""
        self.checkpoint(state, weights, version, counters, run_dir=directory)
        self.save_weights(weights, version, counters, os.path.join(directory, "weights.pkl"))
        write_json(os.path.join(directory, "config.json"), self.config.record())
        return directory

    def system(self, status: dict, episodes: list, learner_stats: dict, force: bool = False) -> None:
        """Throughput, replay, learner and episode scalars for TensorBoard."""
        if self.tensorboard is not None:
            self.tensorboard.system(status, episodes, learner_stats, force=force)

    def summary(self, reason: str, failure: str | None, counters: dict, extra: dict) -> dict:
        """Write ``summary.json`` (why the run stopped, its counters, where its files are) and
        close the TensorBoard files; returns the summary."""
        summary = {
            "stop_reason": reason,
            "failure": failure,
            "env_steps": counters["env_steps"],
            "updates": counters["updates"],
            "weights_version": counters["version"],
            **extra,
            "wall_s": self.wall_s(),
            "last_eval": self.last_eval,
            "best_eval_return": self.best_eval_return(),
            "output_dir": self.output_dir,
            "weights_path": self.weights_path if os.path.exists(self.weights_path) else None,
            "checkpoint_path": self.checkpoint_path,
        }
        try:
            write_json(os.path.join(self.output_dir, "summary.json"), summary)
            if self.tensorboard is not None:
                self.tensorboard.close()
        except OSError as exc:
            log.warning("cannot write summary.json or the TensorBoard files: %s", exc)
        self.trackers.finish(summary)
        log.info(
            "done (%s): %d env steps, %d updates, %.1f s; weights in %s",
            reason, summary["env_steps"], summary["updates"], summary["wall_s"], self.weights_path,
        )
        return summary
