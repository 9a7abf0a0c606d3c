"""What a person watching a run sees in the console: a live progress bar (or, when stdout is
not a terminal, a summary line every ``--log_every`` seconds) with rates over a trailing window.
Driver-side and free of Ray and TensorFlow: the driver stays a light process.
"""

from __future__ import annotations

import collections
import io
import math
import os
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
    seconds = int(round(seconds))  # noqa: RUF046 - round() of a numpy float is a float
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
