"""TensorBoard event files in ``<output_dir>/tb``: the standard ``events.out.tfevents.*`` that
``tf.summary`` writes, produced with the tensorboard package's record writer and protos, so the
driver does not pay TensorFlow's ~5 s import and ~500 MB (tensorboardX would import PyTorch
wherever it is installed). Written by :class:`dsac.output.recorder.Recorder`.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import time

from dsac.formats.files import open_for_writing, real_dir
from dsac.output.progress import RateMeter


class EventWriter:
    """Scalars into one ``events.out.tfevents.*`` file (TFRecord-framed ``Event`` protos)."""

    def __init__(self, logdir: str):
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = Event, Summary
        real_dir(logdir)  # a folder of its own, never a symlink's target (docs/safety.md)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        self._file = open_for_writing(os.path.join(logdir, name))
        self._records = RecordWriter(self._file)
        self._records.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())

    def add_scalars(self, scalars: dict[str, float], step: int) -> None:
        """One event holding every scalar, at ``step``; flushed at once."""
        values = [self._summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
        event = self._event(wall_time=time.time(), step=int(step), summary=self._summary(value=values))
        self._records.write(event.SerializeToString())
        self._records.flush()

    def add_image(self, tag: str, encoded: bytes, height: int, width: int, step: int) -> None:
        """One encoded image (PNG, or an animated GIF, which TensorBoard plays) at ``step``."""
        image = self._summary.Image(height=height, width=width, colorspace=3, encoded_image_string=encoded)
        event = self._event(wall_time=time.time(), step=int(step),
                            summary=self._summary(value=[self._summary.Value(tag=tag, image=image)]))
        self._records.write(event.SerializeToString())
        self._records.flush()

    def close(self) -> None:
        self._records.close()


class TensorBoardLog:
    """Scalars in ``<output_dir>/tb`` against env steps (like SB3's ``num_timesteps``).

    Tags: ``eval/*`` at every evaluation; ``rollout/*`` from the workers' finished episodes;
    ``learner/*`` (losses, alpha, entropy, TD-error stats: whatever the algorithm reports,
    averaged over the updates since the learner's last push, plus the share of time it
    waited for data); ``throughput/*``; ``replay/*``; ``weights/*`` (version, lag of the
    slowest worker); ``custom_metrics/*`` from callbacks.
    """

    def __init__(self, logdir: str, every_s: float = 5.0):
        self.writer = EventWriter(logdir)
        self.logdir = logdir
        self.every_s = every_s
        self.rates = RateMeter(window_s=every_s)
        self.last_write = -math.inf
        self.episodes: list[tuple[float, int]] = []

    def evaluation(self, line: dict) -> None:
        """One progress line (an evaluation) of ``progress.jsonl``."""
        scalars = {"eval/return_mean": line["eval_return_mean"], "eval/return_std": line["eval_return_std"]}
        scalars.update({f"eval/{k[len('eval_'):]}": line[k]
                        for k in ("eval_length_mean", "eval_truncated", "eval_success_rate") if k in line})
        scalars.update({k: v for k, v in line.items() if k.startswith("custom_metrics/")})
        self.writer.add_scalars(scalars, int(line["env_steps"]))

    def video(self, gif: tuple, step: int) -> None:
        """An evaluation's video as ``eval/video``: a small animated GIF (``(gif, height,
        width)``, made by the evaluator) in the Images tab."""
        self.writer.add_image("eval/video", *gif, step)

    def system(self, status: dict, episodes: list, learner_stats: dict, force: bool = False) -> None:
        """Collect ``episodes``; every ``every_s`` seconds (and when ``force``d, at the end)
        write the system's scalars."""
        self.episodes.extend((float(r), int(n)) for r, n, *_ in episodes)
        now = time.monotonic()
        rates = self.rates.update(now, status)
        if now - self.last_write < self.every_s and not force:
            return
        self.last_write = now
        step = int(status["env_steps"])
        scalars = {
            "throughput/env_steps_per_s": rates["env_steps"],
            "throughput/updates_per_s": rates["updates"],
            "learner/wait_fraction": min(1.0, rates["learner_wait_s"]),
            "learner/updates": status["updates"],
            "replay/size": status["replay_size"],
            "replay/fill": status["replay_fill"],
            "weights/version": status["version"],
            "weights/version_lag": status.get("version_lag"),
        }
        if self.episodes:
            returns = [r for r, _ in self.episodes]
            scalars["rollout/episode_return_mean"] = statistics.fmean(returns)
            scalars["rollout/episode_return_min"] = min(returns)
            scalars["rollout/episode_return_max"] = max(returns)
            scalars["rollout/episode_length_mean"] = statistics.fmean(n for _, n in self.episodes)
            scalars["rollout/episodes"] = len(self.episodes)
            self.episodes = []
        for key, value in learner_stats.items():
            scalars[f"learner/{key}"] = value
        self.writer.add_scalars(
            {tag: v for tag, v in scalars.items() if isinstance(v, int | float) and math.isfinite(v)}, step
        )

    def close(self) -> None:
        self.writer.close()
