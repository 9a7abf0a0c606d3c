"""What a person watching a run sees: a live progress bar (or, when stdout is not a
terminal, a summary line every ``--log_every`` seconds) and TensorBoard event files.

Driver-side and free of Ray and TensorFlow: the driver stays a light process. The event
files are the standard ``events.out.tfevents.*`` that ``tf.summary`` writes, produced with
the tensorboard package's record writer and protos, so the driver does not pay TensorFlow's
~5 s import and ~500 MB (tensorboardX would import PyTorch wherever it is installed).
"""

from __future__ import annotations

import collections
import io
import math
import os
import signal
import socket
import statistics
import sys
import time

# Counters whose growth per second the progress line and TensorBoard show.
RATE_COUNTERS = ("env_steps", "updates", "learner_wait_s")


class RateMeter:
    """Per-second growth of counters over a trailing window of ``window_s`` seconds."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self.samples: collections.deque[tuple[float, dict]] = collections.deque()

    def update(self, now: float, counters: dict) -> dict[str, float]:
        """Add a sample; return ``{name: rate}`` over the window (0 until two samples)."""
        self.samples.append((now, {k: float(counters.get(k) or 0.0) for k in RATE_COUNTERS}))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window_s:
            self.samples.popleft()
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        if t1 <= t0:
            return {k: 0.0 for k in RATE_COUNTERS}
        return {k: max(0.0, (last[k] - first[k]) / (t1 - t0)) for k in RATE_COUNTERS}


def format_duration(seconds: float | None) -> str:
    """``42s``, ``3m05s``, ``1h02m``; ``?`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def eta_seconds(status: dict, rates: dict) -> float | None:
    """Seconds until ``total_env_steps`` at the current collection rate."""
    left = status["total_env_steps"] - status["env_steps"]
    if left <= 0:
        return 0.0
    return left / rates["env_steps"] if rates["env_steps"] > 0 else None


def _fmt(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def summary_fields(status: dict, rates: dict, env_rate: bool = True) -> list[str]:
    """The progress facts, as short ``name value`` strings (the bar's postfix, which shows
    the env step rate itself, and the plain line's body)."""
    return [
        *([f"{_fmt(rates['env_steps'], ',.0f')} steps/s"] if env_rate else []),
        f"{_fmt(rates['updates'], ',.0f')} updates/s",
        f"eval {_fmt(status.get('last_eval_return'), '.1f')}",
        f"episode {_fmt(status.get('recent_episode_return'), '.1f')}",
        f"weights v{status['version']} lag {_fmt(status.get('version_lag'), 'd')}",
        f"replay {_fmt(status.get('replay_fill'), '.0%')}",
    ]


def status_line(status: dict, rates: dict) -> str:
    """One plain line: where the run is, how fast it goes, and how long is left."""
    done, total = status["env_steps"], status["total_env_steps"]
    head = f"{done:,}/{total:,} env steps ({done / total:.0%}), {status['updates']:,} updates"
    tail = f"{format_duration(status['wall_s'])} elapsed, ETA {format_duration(eta_seconds(status, rates))}"
    return " | ".join([head, *summary_fields(status, rates), tail])


def _terminal_columns(stream) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return 0


class ProgressDisplay:
    """A tqdm bar on a terminal; elsewhere (``ray job logs``, a file) ``status_line`` every
    ``log_every`` seconds through ``log``."""

    def __init__(self, total: int, log_every: float, log, use_bar: bool | None = None, stream=None):
        self.stream = stream or sys.stdout
        self.use_bar = self.stream.isatty() if use_bar is None else use_bar
        self.log_every = log_every
        self.log = log
        self.rates = RateMeter(window_s=30.0)
        self.last_line = -math.inf
        self.bar = None
        self._redirect = None
        if self.use_bar:
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            sized = _terminal_columns(self.stream) > 0  # a pty without a size (e.g. `script`) reports 0
            self.bar = tqdm(total=total, unit="step", unit_scale=True, file=self.stream, dynamic_ncols=sized,
                            ncols=None if sized else 160, nrows=None if sized else 50, smoothing=0.1,
                            desc="env steps")
            self._redirect = logging_redirect_tqdm()  # log lines print above the bar, not through it
            self._redirect.__enter__()

    def update(self, status: dict) -> None:
        """Show ``status`` (see ``DistributedRun.status``)."""
        rates = self.rates.update(time.monotonic(), status)
        if self.bar is not None:
            self.bar.total = status["total_env_steps"]
            self.bar.update(max(0, status["env_steps"] - self.bar.n))
            self.bar.set_postfix_str(", ".join(summary_fields(status, rates, env_rate=False)), refresh=True)
        elif time.monotonic() - self.last_line >= self.log_every:
            self.last_line = time.monotonic()
            self.log(status_line(status, rates))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self._redirect.__exit__(None, None, None)
            self.bar = None


class EventWriter:
    """Scalars into one ``events.out.tfevents.*`` file (TFRecord-framed ``Event`` protos)."""

    def __init__(self, logdir: str):
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = Event, Summary
        os.makedirs(logdir, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}"
        self._file = open(os.path.join(logdir, name), "wb")
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
        scalars.update({f"eval/{k[len('eval_'):]}": line[k] for k in ("eval_length_mean", "eval_truncated") if k in line})
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
