"""Learning curves from run directories: read ``progress.jsonl``, group runs that differ
only in their seed, and average a group on a common x grid (for ``dsac-plot``)."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass

import numpy as np

from dsac.errors import DsacError

# Keys of config.json that do not make two runs different experiments.
NOT_THE_EXPERIMENT = {"seed", "output_dir", "resume", "address", "log_every", "progress_bar", "tensorboard",
                      "dsac_record"}  # dsac_record: the marker of a config.json dsac wrote (dsac.config)


@dataclass
class Run:
    """One run directory's evaluations."""

    name: str
    config: dict
    env_steps: np.ndarray
    wall_s: np.ndarray
    returns: np.ndarray


@dataclass
class Curve:
    """Mean and std of a group's returns on a common x grid (std is 0 for a single run)."""

    label: str
    runs: int
    x: np.ndarray
    mean: np.ndarray
    std: np.ndarray


def _numbered_rows(progress: str) -> list[tuple[int, object]]:
    """``(line number, JSON value)`` of every non-blank line of ``progress`` (read as every text
    file dsac reads: a regular file, within :data:`dsac.files.TEXT_LIMIT`)."""
    from dsac.files import read_text

    rows = []
    for number, text in enumerate(read_text(progress, progress).splitlines(), 1):
        if text.strip():
            try:
                rows.append((number, json.loads(text)))
            except (ValueError, RecursionError):
                raise DsacError(f"{progress}: line {number} is not JSON") from None
    return rows


def read_progress(path: str) -> list[dict]:
    """The rows of a run's ``progress.jsonl`` (``path``: the file or its run directory), in the
    order they were written; ``[]`` when the run has none yet. One line per evaluation with
    ``env_steps``, ``updates``, ``wall_s`` (seconds from the program's start) and the
    ``eval_*`` fields (docs/guide.md: Output)."""
    progress = os.path.join(path, "progress.jsonl") if os.path.isdir(path) else path
    if not os.path.exists(progress):
        return []
    return [row for _, row in _numbered_rows(progress)]


# What a curve reads of each progress row: finite numbers for its axes; the return may be NaN.
ROW_NUMBERS = {"env_steps": True, "wall_s": True, "eval_return_mean": False}


def _checked_row(progress: str, number: int, row) -> dict:
    """A progress row with the numbers a curve reads, else one line naming the line and the key."""
    if not isinstance(row, dict):
        raise DsacError(f"{progress}: line {number} is a JSON {type(row).__name__}, not a row of a run's progress")
    for key, finite in ROW_NUMBERS.items():
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or (finite and not math.isfinite(value)):
            raise DsacError(f"{progress}: line {number}: {key} must be a {'finite ' if finite else ''}number, "
                            f"got {repr(value)[:80]}")
    return row


def read_config(path: str) -> dict:
    """A run's ``config.json`` for grouping its curve (``{}`` when it has none): a mapping read as
    every text file dsac reads, never as code — it names nothing dsac-plot imports or contacts."""
    from dsac.files import read_json

    config_path = os.path.join(path, "config.json")
    if not os.path.lexists(config_path):
        return {}
    config = read_json(config_path, config_path)
    if not isinstance(config, dict):
        raise DsacError(f"{config_path} holds a JSON {type(config).__name__}, not a run's config (a mapping)")
    return config


def read_run(path: str) -> Run:
    """The evaluations in ``path/progress.jsonl`` (and its ``config.json``, if any). A row or a
    config that is not what dsac writes is refused in one line naming the file (not skipped: a
    curve missing rows would look like a run that learned otherwise)."""
    progress = os.path.join(path, "progress.jsonl")
    if not os.path.lexists(progress):
        raise DsacError(f"{path} is not a run directory (no progress.jsonl)")
    lines = [_checked_row(progress, number, row) for number, row in _numbered_rows(progress)]
    if not lines:
        raise DsacError(f"{progress} has no evaluations yet")
    config = read_config(path)
    lines.sort(key=lambda line: line["env_steps"])
    return Run(
        name=os.path.basename(os.path.normpath(path)),
        config=config,
        env_steps=np.array([line["env_steps"] for line in lines], dtype=np.float64),
        wall_s=np.array([line["wall_s"] for line in lines], dtype=np.float64),
        returns=np.array([line["eval_return_mean"] for line in lines], dtype=np.float64),
    )


def experiment_key(run: Run) -> str:
    """Runs with the same key are the same experiment with different seeds. A run without
    a config.json is an experiment of its own. Settings of another algorithm than the run's,
    which a config.json of an older run holds and a newer one does not, are left out."""
    from dsac.config import ALGORITHMS_OF, RECORD_EXCLUDED_KEYS

    if not run.config:
        return f"run:{run.name}"
    algo = run.config.get("algo")
    left_out = NOT_THE_EXPERIMENT.union(RECORD_EXCLUDED_KEYS)  # where a run went and connected, not what it ran
    try:
        return json.dumps({k: v for k, v in run.config.items() if k not in left_out
                           and algo in ALGORITHMS_OF.get(k, (algo,))}, sort_keys=True)
    except (RecursionError, TypeError, ValueError):  # nested deeper than the encoder goes: a run of its own
        return f"run:{run.name}"


def group_label(names: list[str]) -> str:
    """The runs' common name without a trailing seed (``sac-s0``, ``sac-s1`` -> ``sac``)."""
    if len(names) == 1:
        return names[0]
    prefix = os.path.commonprefix(names)  # noqa: RUF071 - the names' common characters, not a path
    prefix = re.sub(r"[-_.]*(seed|s)?[-_.=]*\d*$", "", prefix) or names[0]
    return f"{prefix} ({len(names)} seeds)"


def average(runs: list[Run], axis: str, points: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and std of the runs' returns against ``axis`` (``env_steps`` or ``wall_s``),
    linearly interpolated on a grid over the range every run covers."""
    xs = [getattr(run, axis) for run in runs]
    if len(runs) == 1:
        return xs[0], runs[0].returns, np.zeros_like(runs[0].returns)
    low, high = max(x[0] for x in xs), min(x[-1] for x in xs)
    if high <= low:  # no common range: show where they all start
        grid = np.array([low])
    else:
        grid = np.linspace(low, high, points)
    values = np.stack([np.interp(grid, x, run.returns) for x, run in zip(xs, runs, strict=True)])
    return grid, values.mean(axis=0), values.std(axis=0)


def curves(paths: list[str], axis: str, group: bool = True) -> list[Curve]:
    """One curve per experiment (or per run when ``group`` is False), in the order given."""
    runs = [read_run(p) for p in paths]
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(experiment_key(run) if group else f"run:{len(groups)}", []).append(run)
    out = []
    for members in groups.values():
        x, mean, std = average(members, axis)
        out.append(Curve(group_label([m.name for m in members]), len(members), x, mean, std))
    return out
