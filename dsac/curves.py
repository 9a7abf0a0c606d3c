"""Learning curves from run directories: read ``progress.jsonl``, group runs that differ
only in their seed, and average a group on a common x grid (for ``dsac-plot``)."""

from __future__ import annotations

import json
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


def read_progress(path: str) -> list[dict]:
    """The rows of a run's ``progress.jsonl`` (``path``: the file or its run directory), in the
    order they were written; ``[]`` when the run has none yet. One line per evaluation with
    ``env_steps``, ``updates``, ``wall_s`` (seconds from the program's start) and the
    ``eval_*`` fields (docs/guide.md: Output)."""
    progress = os.path.join(path, "progress.jsonl") if os.path.isdir(path) else path
    if not os.path.isfile(progress):
        return []
    rows = []
    with open(progress) as f:
        for number, text in enumerate(f, 1):
            if text.strip():
                try:
                    rows.append(json.loads(text))
                except json.JSONDecodeError:
                    raise DsacError(f"{progress}: line {number} is not JSON") from None
    return rows


def read_run(path: str) -> Run:
    """The evaluations in ``path/progress.jsonl`` (and its ``config.json``, if any)."""
    progress = os.path.join(path, "progress.jsonl")
    if not os.path.isfile(progress):
        raise DsacError(f"{path} is not a run directory (no progress.jsonl)")
    lines = read_progress(progress)
    if not lines:
        raise DsacError(f"{progress} has no evaluations yet")
    config = {}
    config_path = os.path.join(path, "config.json")
    if os.path.isfile(config_path):
        with open(config_path) as f:
            config = json.load(f)
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
    from dsac.config import ALGORITHMS_OF

    if not run.config:
        return f"run:{run.name}"
    algo = run.config.get("algo")
    return json.dumps({k: v for k, v in run.config.items() if k not in NOT_THE_EXPERIMENT
                       and algo in ALGORITHMS_OF.get(k, (algo,))}, sort_keys=True)


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
