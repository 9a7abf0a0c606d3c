"""CPU seconds of a role by part of its work (the learner's update, sampling and pushes; a
rollout worker's env steps and acting; the evaluator's env steps), for ``summary.json``'s
``cpu`` section. Free of Ray and TensorFlow.

A part is timed around a batch of work (one ``learn_on_batches`` call, one step of a batch of
envs), never around a single env step: a CPU clock read is a system call. Each meter's
``total`` is the process's CPU since the meter started, all threads; what the parts leave of
it is the role's ``rest`` (chunks, remote calls, Ray's own threads in that process).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class CpuMeter:
    """CPU seconds by part, summed, and the process's CPU since the meter started.

    Args:
        clock: the clock the parts are timed with. ``time.thread_time`` where the work runs on
            the calling thread (envs, numpy acting); ``time.process_time`` where it runs on a
            pool of threads (TensorFlow's update), which also counts whatever else the
            process's threads do meanwhile.
    """

    def __init__(self, clock: Callable[[], float] = time.process_time):
        self.clock = clock
        self.started = time.process_time()
        self.parts: dict[str, float] = {}

    def now(self) -> float:
        """The parts' clock, to pass to :meth:`add` when the part ends."""
        return self.clock()

    def add(self, part: str, since: float) -> float:
        """Count the CPU since ``since`` (a :meth:`now`) to ``part``; returns the clock now."""
        now = self.clock()
        self.parts[part] = self.parts.get(part, 0.0) + now - since
        return now

    def seconds(self) -> dict[str, float]:
        """``{part: seconds, ..., "total": the process's CPU since the meter started}``."""
        return {**self.parts, "total": time.process_time() - self.started}


def with_rest(parts: dict[str, float]) -> dict[str, float]:
    """A role's seconds by part, with ``rest``: its ``total`` less the parts (never below 0),
    rounded to milliseconds."""
    shown = {key: value for key, value in parts.items() if key != "total"}
    out = {key: round(value, 3) for key, value in shown.items()}
    if "total" in parts:
        out["rest"] = round(max(0.0, parts["total"] - sum(shown.values())), 3)
        out["total"] = round(parts["total"], 3)
    return out


def summed(meters: list[dict[str, float]]) -> dict[str, float]:
    """Several processes' seconds of one role (e.g. every rollout worker), part by part."""
    out: dict[str, float] = {}
    for seconds in meters:
        for key, value in seconds.items():
            out[key] = out.get(key, 0.0) + float(value)
    return out


def useful_seconds(section: dict) -> float:
    """CPU that trains: the learner's updates and the rollout workers' env steps (the
    evaluator's env steps measure, they do not train), from a ``cpu`` section."""
    return float(section.get("learner", {}).get("update", 0.0)
                 + section.get("rollout_workers", {}).get("env_step", 0.0))


def section(learner: dict | None = None, rollout_workers: list[dict] = (), evaluator: dict | None = None,
            **processes: float) -> dict:
    """``summary.json``'s ``cpu`` section: each role's seconds by part with its ``rest``
    (rollout workers summed, with how many reported), the whole-process totals given by name
    (``driver``, or the serial run's one ``process``), and ``useful_s``
    (:func:`useful_seconds`)."""
    out: dict = {}
    if learner:
        out["learner"] = with_rest(learner)
    if rollout_workers:
        out["rollout_workers"] = {**with_rest(summed(list(rollout_workers))), "processes": len(rollout_workers)}
    if evaluator:
        out["evaluator"] = with_rest(evaluator)
    out.update({name: {"total": round(total, 3)} for name, total in processes.items()})
    out["useful_s"] = round(useful_seconds(out), 3)
    return out
