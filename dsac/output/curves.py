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


# The most rows dsac reads of a progress.jsonl: a run evaluating every 1,000 env steps for 10^9
# of them. With the file within TEXT_LIMIT and each line within JSON_LIMIT, this bounds what
# reading one costs (docs/safety.md), however small its rows.
MAX_PROGRESS_ROWS = 1_000_000


def _numbered_rows(progress: str):
    """``(line number, JSON value)`` of every non-blank line of ``progress``, one at a time (read
    as every text file dsac reads: a regular file, within :data:`dsac.formats.files.TEXT_LIMIT`; each
    line within :data:`dsac.formats.files.JSON_LIMIT`, at most :data:`MAX_PROGRESS_ROWS` of them)."""
    from dsac.formats.files import JSON_LIMIT, read_text

    text = read_text(progress, progress)
    start, number, rows = 0, 0, 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line, start, number = text[start:end], end + 1, number + 1
        if not line.strip():
            continue
        rows += 1
        if rows > MAX_PROGRESS_ROWS:
            raise DsacError(f"{progress} has more than {MAX_PROGRESS_ROWS:,} rows, more than a run writes")
        if len(line) > JSON_LIMIT:
            raise DsacError(f"{progress}: line {number} is longer than the {JSON_LIMIT // 2**20} MiB a row may be")
        try:
            yield number, json.loads(line)
        except (ValueError, RecursionError):
            raise DsacError(f"{progress}: line {number} is not JSON") from None


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
    from dsac.formats.files import read_json

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
    # Only the numbers a curve reads are kept of each row, as it is read.
    points = np.array([[row[key] for key in ROW_NUMBERS] for row in (
        _checked_row(progress, number, row) for number, row in _numbered_rows(progress))], dtype=np.float64)
    if not len(points):
        raise DsacError(f"{progress} has no evaluations yet")
    config = read_config(path)
    points = points[np.argsort(points[:, 0], kind="stable")]
    return Run(
        name=os.path.basename(os.path.normpath(path)),
        config=config,
        env_steps=points[:, 0],
        wall_s=points[:, 1],
        returns=points[:, 2],
    )


def experiment_key(run: Run) -> str:
    """Runs with the same key are the same experiment with different seeds. A run without
    a config.json is an experiment of its own. Settings of another algorithm than the run's,
    which a config.json of an older run holds and a newer one does not, are left out."""
    from dsac.config import ALGORITHMS_OF
    from dsac.settings.records import RECORD_EXCLUDED_KEYS

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
