"""Runs dsac (``launch.py`` in a subprocess) and Stable-Baselines3 (``sb3_baseline.py --curve``
in a subprocess) on one task with one set of settings, and reads back their learning curves:
the evaluations both sides make on the same start states (``dsac.runtime.evaluation.evaluation_seed``)
with the same number of deterministic episodes. Used by ``parity.py`` and ``sweep.py``.

Settings use one vocabulary for both programs (:data:`SETTING_KEYS`); :func:`dsac_flags` and
:func:`sb3_kwargs` translate them. Where the two programs cannot express the same thing the
translation says so in a comment.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Rollout workers of the commands the comparisons run, as issue 17's protocol types them:
# `launch.py --algo sac --num_workers 2`, `launch.py --algo dqn --num_workers 4`.
WORKERS = {"sac": 2, "dqn": 4}

# hidden: MLP layer sizes of every network; lr: Adam; batch_size; buffer_size; warmup: env steps of
# uniform random actions before the first update (dsac --start_steps and --learning_starts, SB3
# learning_starts); updates_per_step; gamma; tau (sac, polyak every update); target_every (dqn: hard
# copy every this many updates); exploration_fraction, final_epsilon (dqn, one worker); n_step,
# dueling, double_q, prioritized (dqn).
SETTING_KEYS = ("hidden", "lr", "batch_size", "buffer_size", "warmup", "updates_per_step", "gamma", "tau",
                "target_every", "exploration_fraction", "final_epsilon", "n_step", "dueling", "double_q",
                "prioritized")


def dsac_flags(algo: str, s: dict) -> list[str]:
    """``launch.py`` flags for settings ``s`` (keys missing from ``s`` keep dsac's defaults)."""
    flags = ["--algo", algo]
    if "hidden" in s:
        flags += ["--fcnet_hiddens", *map(str, s["hidden"])]
    plain = {"lr": "lr", "batch_size": "batch_size", "buffer_size": "buffer_size", "gamma": "gamma",
             "updates_per_step": "updates_per_step", "tau": "tau", "target_every": "target_update_every",
             "exploration_fraction": "exploration_fraction", "final_epsilon": "final_epsilon", "n_step": "n_step"}
    for key, flag in plain.items():
        if key in s:
            flags += [f"--{flag}", str(s[key])]
    if "warmup" in s:
        flags += ["--start_steps", str(s["warmup"]), "--learning_starts", str(s["warmup"])]
    for key in ("dueling", "double_q", "prioritized"):
        if key in s:
            flags.append(f"--{'' if s[key] else 'no-'}{key}")
    return flags


def sb3_kwargs(algo: str, s: dict) -> dict:
    """SB3 constructor arguments for settings ``s`` (SB3 has no dueling heads and no
    prioritized replay: asking for them is an error, not a silent difference)."""
    if s.get("dueling") or s.get("prioritized") or (algo == "dqn" and s.get("double_q")):
        raise ValueError("SB3's DQN has no dueling, double-Q or prioritized replay: compare with them off")
    kw: dict = {}
    if "hidden" in s:
        kw["policy_kwargs"] = {"net_arch": list(s["hidden"])}
    for key, name in (("lr", "learning_rate"), ("batch_size", "batch_size"), ("buffer_size", "buffer_size"),
                      ("gamma", "gamma"), ("warmup", "learning_starts"), ("n_step", "n_steps")):
        if key in s:
            kw[name] = s[key]
    u = s.get("updates_per_step", 1.0)
    # SB3 trains every train_freq env steps for gradient_steps updates: the same ratio, in bursts.
    kw["train_freq"], kw["gradient_steps"] = (1, round(u)) if u >= 1 else (round(1 / u), 1)
    if algo == "sac":
        kw["tau"] = s.get("tau", 0.005)
    else:
        kw["tau"] = 1.0
        if "target_every" in s:  # SB3 counts the target period in env steps
            kw["target_update_interval"] = max(1, round(s["target_every"] / u))
        for key, name in (("exploration_fraction", "exploration_fraction"),
                          ("final_epsilon", "exploration_final_eps")):
            if key in s:
                kw[name] = s[key]
    return kw


def read_points(path: str) -> list[dict]:
    """A run's evaluations (``progress.jsonl``) as points {env_steps, updates, wall_s, return},
    and ``success`` (the success rate) where the env reported one."""
    from dsac.output.curves import read_progress

    return [{"env_steps": row["env_steps"], "updates": row["updates"], "wall_s": row["wall_s"],
             "return": row["eval_return_mean"],
             **({"success": row["eval_success_rate"]} if row.get("eval_success_rate") is not None else {})}
            for row in read_progress(path)]


def run_dsac(flags: list[str], env: str, seed: int, budget: int, eval_every: int | None,
             stop_return: float | None = None, timeout: float | None = None, as_typed: bool = False,
             use_output: Callable[[str], None] | None = None) -> dict:
    """``launch.py`` with ``flags`` until ``budget`` env steps (or ``stop_return``): its
    evaluations as points {env_steps, updates, wall_s, return}; wall_s from process start.
    ``eval_every`` None keeps dsac's default; ``as_typed`` runs the command as a user types it
    (otherwise checkpoints hourly and progress lines every 10 minutes, as parity and sweep runs do).
    The run directory is temporary: ``use_output(path)`` may read it before it is removed."""
    tmp = tempfile.mkdtemp(prefix="dsac-harness-")
    try:
        return _run_dsac(os.path.join(tmp, "run"), flags, env, seed, budget, eval_every, stop_return, timeout,
                         as_typed, use_output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_dsac(out, flags, env, seed, budget, eval_every, stop_return, timeout, as_typed, use_output) -> dict:
    cmd = [sys.executable, os.path.join(REPO_ROOT, "launch.py"), *flags, "--env", env, "--seed", str(seed),
           "--total_env_steps", str(budget), "--output_dir", out, "--no-tensorboard"]
    if eval_every is not None:
        cmd += ["--eval_every", str(eval_every)]
    if not as_typed:
        cmd += ["--checkpoint_every", "3600", "--log_every", "600"]
    if stop_return is not None:
        cmd += ["--stop_return", str(stop_return)]
    started = time.time()
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT, timeout=timeout)
        error = None if result.returncode == 0 else (result.stderr.strip().splitlines() or ["?"])[-1]
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout:.0f} s"
    process_s = time.time() - started
    points = read_points(out)
    if use_output is not None and os.path.isdir(out):
        try:
            use_output(out)
        except Exception as exc:  # the points are the record; what reads the directory is extra
            warnings.warn(f"reading {out} failed: {exc}", stacklevel=2)
    summary_path = os.path.join(out, "summary.json")
    driver_s = json.load(open(summary_path))["wall_s"] if os.path.exists(summary_path) else None
    # The driver's clock starts after the interpreter and imports: shift its points onto the
    # process clock so both programs' times start when their process does.
    shift = process_s - driver_s if driver_s is not None else 0.0
    for p in points:
        p["wall_s"] = round(p["wall_s"] + shift, 2)
    # What ran, as a person would type it (the temporary output directory named as such).
    command = ["python", "launch.py", *["<tmp>/run" if arg == out else arg for arg in cmd[2:]]]
    return {"seed": seed, "points": points, "process_s": round(process_s, 1), "error": error, "command": command}


def run_sb3(algo: str, env: str, kwargs: dict, seed: int, budget: int, eval_every: int,
            stop_return: float | None = None, timeout: float | None = None,
            max_seconds: float | None = None) -> dict | None:
    """SB3's ``algo`` (``sac``, ``dqn``; ``crossq``: sb3-contrib's) with constructor ``kwargs``
    (``sb3_baseline.py --curve``), until ``budget`` env steps, ``stop_return`` or ``max_seconds``
    from process start; None when SB3 (or sb3-contrib, for ``crossq``) is not installed."""
    spec = {"algo": algo, "env": env, "kwargs": kwargs, "seed": seed, "budget": budget, "eval_every": eval_every,
            "stop_return": stop_return, "max_seconds": max_seconds}
    result = run_module("benchmarks.sb3_baseline", ["--curve", json.dumps(spec)], timeout)
    if result is not None:
        result["seed"] = seed
    return result


def run_module(module: str, args: list[str], timeout: float | None = None) -> dict | None:
    """``python -m module *args``, a peer's runner that prints its points as its last stdout line
    and exits 3 when its library is not installed: {points, process_s, error, command}; None for
    exit 3."""
    command = ["python", "-m", module, *args]
    started = time.time()
    try:
        result = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, timeout=timeout,
                                cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        return {"points": [], "process_s": round(time.time() - started, 1),
                "error": f"timed out after {timeout:.0f} s", "command": command}
    if result.returncode == 3:
        return None
    process_s = round(time.time() - started, 1)
    if result.returncode != 0:
        return {"points": [], "process_s": process_s, "error": (result.stderr.strip().splitlines() or ["?"])[-1],
                "command": command}
    return {"points": json.loads(result.stdout.strip().splitlines()[-1]), "process_s": process_s, "error": None,
            "command": command}


# --- result records -------------------------------------------------------------------------
def commit() -> str:
    """The checkout's commit (``+`` when it has uncommitted changes): runs pooled from several
    invocations say which code they ran."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO_ROOT).stdout.strip()
    head = git("rev-parse", "--short", "HEAD") or "?"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "dsac", "launch.py", "benchmarks")
    return head + ("+" if dirty else "")


def provenance(command: list[str]) -> dict:
    """What every result record (one JSON line per run) starts with: the command that made it
    (its arguments, quoted for a shell), the commit, the date (UTC) and the machine."""
    return {"command": shlex.join(command), "commit": commit(),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()}}


def append_record(path: str, record: dict) -> None:
    """One result record as a JSON line at the end of ``path`` (its directory made if needed)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_records(path: str) -> list[dict]:
    """The records of the JSON-lines file ``path``, in its order."""
    return [json.loads(line) for line in open(path) if line.strip()]


def every_run(path: str, key_of) -> dict:
    """Every record of the JSON-lines file ``path`` by ``(*key_of(record), k)``: the k-th run
    with that key, in the file's order (:func:`keyed_runs`)."""
    return keyed_runs(read_records(path), key_of)


def keyed_runs(records: list[dict], key_of) -> dict:
    """``records`` by ``(*key_of(record), k)``: the k-th run with that key, in their order. A
    later run of a seed is another sample, not a replacement. ``key_of`` may return the record it
    keys, changed, beside the key."""
    out, seen = {}, {}
    for record in records:
        key, rec = key_of(record)
        out[(*key, seen.get(key, 0))] = rec
        seen[key] = seen.get(key, 0) + 1
    return out


def scores_at_marks(points: list[dict], marks_min: list[float], budget_min: float) -> dict:
    """{minutes: the evaluation that stands at that mark} for a run capped at ``budget_min``
    minutes (``wall_s`` from process start): at an earlier mark, the last evaluation made by
    then; at the budget's own mark, the last evaluation of all (both programs evaluate the
    weights they stop with, which takes a little past the cap)."""
    out = {}
    for mark in marks_min:
        if mark > budget_min:
            continue
        made = points if mark == budget_min else [p for p in points if p["wall_s"] <= 60 * mark]
        if made:
            p = made[-1]
            out[f"{mark:g}"] = {"return": round(p["return"], 1), "env_steps": p["env_steps"],
                                "updates": p.get("updates"), "wall_s": p["wall_s"]}
    return out


# --- reading curves -------------------------------------------------------------------------
def first_reaching(points: list[dict], threshold: float) -> dict | None:
    """The first evaluation at or above ``threshold``."""
    return next((p for p in points if p["return"] >= threshold), None)


def return_at(points: list[dict], budget: float, axis: str = "env_steps") -> float | None:
    """The latest evaluation made at or before ``budget`` on ``axis`` (None before the first)."""
    before = [p for p in points if p[axis] <= budget * 1.02]  # evaluations land a few steps late
    return before[-1]["return"] if before else None


def area_under_curve(points: list[dict], budget: float, axis: str = "env_steps") -> float | None:
    """The mean return over ``[0, budget]`` on ``axis``, each evaluation's return held until the
    next (a step curve; before the first evaluation nothing counts): one number that rewards a
    run for getting good early and for staying good, and marks one that collapses after a
    threshold. None without an evaluation."""
    inside = [p for p in points if p[axis] <= budget * 1.02]
    if not inside:
        return None
    start = inside[0][axis]
    if budget <= start:
        return inside[0]["return"]
    area = 0.0
    for here, after in zip(inside, [*inside[1:], {axis: budget}], strict=True):
        area += here["return"] * (min(after[axis], budget) - here[axis])
    return area / (budget - start)


def add_results_flags(parser, out: str, docs: str, minutes: float | None = None) -> None:
    """A table's flags: ``--out`` (its result records, one JSON line per run; ``docs``: the file
    the docs table is generated from), ``--report`` and, with ``minutes``, each run's wall-clock
    budget ``--minutes`` (checked by :func:`check_minutes`)."""
    if minutes is not None:
        parser.add_argument("--minutes", type=float, default=minutes, help="wall-clock budget of each run")
    parser.add_argument("--out", default=out, help=f"result records (the docs table: {docs})")
    parser.add_argument("--report", action="store_true", help="print the table of --out and stop")


def add_plot_flag(parser, what: str) -> None:
    """``--plot``: draw ``what`` beside ``--out`` and stop (:func:`draw`)."""
    parser.add_argument("--plot", action="store_true", help=f"draw {what} beside --out and stop")


def draw(parser, out: str, plot) -> int:
    """``plot(out, out's directory)``, the figures of the result records in ``out``, their paths
    printed; a one-line error without any."""
    if not os.path.exists(out):
        parser.error(f"no results in {out} yet")
    print("\n".join(plot(out, os.path.dirname(os.path.abspath(out)))))
    return 0


def check_minutes(parser, minutes: float) -> None:
    if not (0 < minutes <= 24 * 60):
        parser.error(f"--minutes must be in (0, 1440], got {minutes:g}")


def print_report(parser, out: str, render) -> int:
    """Print ``render(out)``, the table of the records in ``out``; a one-line error without any."""
    if not os.path.exists(out):
        parser.error(f"no results in {out} yet")
    print(render(out))
    return 0


def add_seed_flags(parser, default: str, prefix: str = "") -> None:
    """``--seeds S ...`` (which seeds) or ``--num_seeds N`` (seeds 0..N-1), never both; with
    ``prefix`` (e.g. ``lunar_``) for a second set; ``default`` says which seeds run without
    either. :func:`seeds_of` reads them."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(f"--{prefix}seeds", nargs="+", type=int, metavar="S",
                       help=f"the seeds, one run each (default: {default})")
    group.add_argument(f"--{prefix}num_seeds", type=int, metavar="N", help="seeds 0..N-1")


def seeds_of(args, default: list[int], prefix: str = "") -> list[int]:
    """The seeds :func:`add_seed_flags` gave, or ``default``."""
    count = getattr(args, f"{prefix}num_seeds")
    if count is not None:
        if count < 1:
            raise SystemExit(f"error: --{prefix}num_seeds must be >= 1, got {count}")
        return list(range(count))
    return list(getattr(args, f"{prefix}seeds") or default)


def spread(values) -> tuple[float | None, float | None, float | None]:
    """Median, minimum and maximum of the values that exist."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None, None, None
    return float(np.median(values)), float(min(values)), float(max(values))


def fmt_spread(med_lo_hi: tuple, spec: str = ",.0f", missing: int = 0) -> str:
    """A :func:`spread` as ``median (min–max)``, plus how many runs did not get there."""
    med, lo, hi = med_lo_hi
    if med is None:
        return "—" + (f" ({missing} not reached)" if missing else "")
    text = format(med, spec) + (f" ({format(lo, spec)}–{format(hi, spec)})" if lo != hi else "")
    return text + (f", {missing} not reached" if missing else "")


def band(runs: list[dict], axis: str, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and a 95% confidence band (normal approximation over seeds) of the return on
    ``grid`` along ``axis``, each run's curve held at its last evaluation (NaN before its first)."""
    curves = []
    for run in runs:
        x = np.array([p[axis] for p in run["points"]], dtype=float)
        y = np.array([p["return"] for p in run["points"]], dtype=float)
        if len(x) == 0:
            continue
        idx = np.searchsorted(x, grid, side="right") - 1
        curves.append(np.where((idx >= 0) & (grid <= x[-1] * 1.02), y[np.clip(idx, 0, None)], np.nan))
    if not curves:
        nan = np.full(len(grid), np.nan)
        return nan, nan, nan
    c = np.array(curves)
    with warnings.catch_warnings():  # grid points no run has reached yet are all-NaN columns
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(c, axis=0)
        n = np.sum(~np.isnan(c), axis=0)
        half = 1.96 * np.nanstd(c, axis=0, ddof=1) / np.sqrt(np.maximum(n, 1)) if len(c) > 1 else 0 * mean
    return mean, mean - half, mean + half


def pyplot():
    """matplotlib's pyplot drawing into files (the Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def random_sac_batches(count: int, size: int, obs_dim: int, act_dim: int, action_bound: float,
                       seed: int = 0) -> list[dict]:
    """``count`` batches of ``size`` random continuous-action transitions (actions uniform in
    ``±action_bound``), as a SAC learner takes them from replay: for timing updates."""
    rng = np.random.default_rng(seed)
    return [{
        "obs": rng.normal(size=(size, obs_dim)).astype(np.float32),
        "action": rng.uniform(-action_bound, action_bound, (size, act_dim)).astype(np.float32),
        "reward": rng.normal(size=size).astype(np.float32),
        "next_obs": rng.normal(size=(size, obs_dim)).astype(np.float32),
        "terminated": np.zeros(size, np.float32), "discount": np.full(size, 0.99, np.float32),
    } for _ in range(count)]


def updates_per_second(policy, batches: list[dict], seconds: float) -> float:
    """A learner policy's updates/s on ``batches`` held in this process, in blocks of
    ``len(batches)`` per call as a learner takes them from replay (after one call to trace)."""
    policy.learn_on_batches(batches)
    updates, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        policy.learn_on_batches(batches)
        updates += len(batches)
    return updates / (time.perf_counter() - started)
