"""The MuJoCo v5 table: dsac's SAC and CrossQ defaults against Stable-Baselines3's SAC and
sb3-contrib's CrossQ with rl-zoo's settings, each for a wall-clock budget on this machine, one
run at a time, several seeds, with the machine's pace beside every run.

    python -m benchmarks mujoco --envs HalfCheetah-v5 --sides dsac sb3     # 15 minutes each
    python -m benchmarks mujoco --envs Ant-v5 --sides dsac --algos sac crossq --seeds 0 1 2
    python -m benchmarks mujoco --envs Walker2d-v5 --sides sb3-crossq
    python -m benchmarks mujoco --envs Humanoid-v5 --minutes 60
    python -m benchmarks mujoco --report                                  # the tables of --out
    python -m benchmarks mujoco --plot                                    # a curves PNG per env, beside --out

Every side gets rl-zoo's SAC env-step budget (1M; Humanoid 2M) and stops at ``--minutes`` from its
process start, whichever comes first, and every side evaluates 10 deterministic episodes on the
same start states (``dsac.runtime.evaluation.evaluation_seed``):
  dsac        ``python launch.py --algo A --env E --seed S --total_env_steps N --max_seconds M``
              for each A of ``--algos`` (sac, crossq), as a user types it (its defaults: 2 rollout
              workers, evaluation every 10,000 env steps in its own process; ``--max_seconds``
              counts from the driver's start, a few seconds after the process's).
  sb3         SB3's SAC (``benchmarks/sb3_baseline.py``) with rl-zoo's ``hyperparams/sac.yml``
              for the MuJoCo envs (``learning_starts`` 10,000, SB3's defaults otherwise: 2x256
              networks, lr 3e-4, batch 256, one update per env step).
  sb3-crossq  sb3-contrib's CrossQ with rl-zoo's ``hyperparams/crossq.yml`` for the MuJoCo envs
              (``mujoco-defaults``: lr 1e-3, ``learning_starts`` 5,000, ``policy_delay`` 3,
              buffer 1M, actor 2x256 and critics 2x2048; sb3-contrib's defaults otherwise). Its
              ``n_timesteps`` (5M) is not used: the lr is constant, so the budget only caps the run,
              and the wall clock caps it first.
  sb3-matched, sb3-crossq-matched
              the same peers at dsac's settings: rl-zoo's, but with the network widths, batch size
              and updates per env step of dsac's side on that env (its defaults and the env's
              preset; ``matched_settings``), so that a row compares implementations, not settings.
SB3's SAC runs torch at 1 thread (two were no faster, at 2x256 and at 2x64); sb3-contrib's CrossQ
at torch's default, one per core (rl-zoo's 2x2048 critics update 2x faster at two threads on 2
cores, dsac's 2x128 a little faster). Both evaluate every
10,000 env steps in their own process (the evaluations' time is on their clock).

The score at a mark is the last evaluation made by then; at the budget's mark, the evaluation of
the weights the run stopped with. Before its runs an invocation measures the machine's pace
(``python -m benchmarks learner-update --sizes 17x6 --seconds 10 --threads 1 --repeats 1``, the
plain update's rate), so that sittings on different days can be compared. One JSON line per run in
``--out`` (command, commit, date, machine, algo, pace, scores at the marks, the curve, a peer's
constructor settings);
``--report`` prints the per-run table, with rl-zoo's published SAC score after its full budget
(``benchmark.md``, the v3 envs) beside it, the per-configuration table over runs (a
configuration: the settings a run ran, ``benchmarks/settings.py``, not the flags typed): the
median, the interquartile mean with its 95% bootstrap interval (``benchmarks/stats.py``) of the
final score and of the best evaluation, and the same across envs, each score over rl-zoo's.
Records written before the pace was measured take it from ``pace.jsonl`` beside ``--out`` (lines
``{"commit", "date", "pace_updates_per_s", "command"}``), matched by sitting; records without an
``algo`` are SAC's. The SB3 sides need ``requirements-bench.txt`` (a run of a missing side is
recorded as an error).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import statistics
import sys

from benchmarks import harness, settings, stats
from dsac.settings.presets import presets

# env -> rl-zoo's SAC budget (env steps) and its published score after it (benchmark.md, v3).
SUITE = {
    "HalfCheetah-v5": (1_000_000, 9535.5),
    "Hopper-v5": (1_000_000, 2325.5),
    "Walker2d-v5": (1_000_000, 3863.2),
    "Ant-v5": (1_000_000, 4615.8),
    "Humanoid-v5": (2_000_000, 6232.3),
}
ZOO_SAC_MUJOCO = {"learning_starts": 10_000}  # rl-zoo hyperparams/sac.yml: mujoco-defaults
ZOO_CROSSQ_MUJOCO = {  # rl-zoo hyperparams/crossq.yml: mujoco-defaults (n_timesteps aside)
    "learning_rate": 1e-3, "learning_starts": 5_000, "policy_delay": 3, "buffer_size": 1_000_000,
    "policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [2048, 2048]}},
}
SB3_EVAL_EVERY = 10_000
SUITE_MINUTES = (15.0, 60.0)  # the budgets of the suite's rows (Humanoid-v5's is 60), as opposed to A/Bs
MARKS_MIN = (5, 15, 30, 60)
ALGOS = ("sac", "crossq")  # dsac's continuous-action algorithms
# side -> (name in the tables, the algorithm of a peer side, its settings (None: the matched ones,
# :func:`matched_settings`), the package it needs)
SIDES = {
    "dsac": ("dsac", None, None, None),
    "sb3": ("sb3", "sac", ZOO_SAC_MUJOCO, "stable_baselines3"),
    "sb3-crossq": ("sb3-contrib", "crossq", ZOO_CROSSQ_MUJOCO, "sb3_contrib"),
    "sb3-matched": ("sb3 matched", "sac", None, "stable_baselines3"),
    "sb3-crossq-matched": ("sb3-contrib matched", "crossq", None, "sb3_contrib"),
}

# algo -> the peer a dsac row is timed against: its label in the tables and its name in a cell
PEERS = {"sac": ("sb3 sac", "SB3"), "crossq": ("sb3-contrib crossq", "sb3-contrib")}


def matched_settings(env: str, algo: str) -> dict:
    """rl-zoo's settings for the peer of dsac's ``algo`` on ``env`` with dsac's network widths,
    batch size and updates per env step there (its defaults and the env's preset), so that a row
    compares the implementations, not the settings: the peer at dsac's settings."""
    from fractions import Fraction

    from dsac.config import Config

    config = Config.from_dict({"algo": algo, "env": env}).validate()
    ratio = Fraction(config.updates_per_step).limit_denominator(64)  # SB3: gradient_steps every train_freq
    common = {"batch_size": config.batch_size, "train_freq": ratio.denominator, "gradient_steps": ratio.numerator}
    if algo == "sac":  # dsac's SAC: one width list for the actor and both critics, as SB3's net_arch list
        return {**ZOO_SAC_MUJOCO, **common, "policy_kwargs": {"net_arch": list(config.fcnet_hiddens)}}
    return {**ZOO_CROSSQ_MUJOCO, **common,
            "policy_kwargs": {"net_arch": {"pi": list(config.fcnet_hiddens), "qf": list(config.critic_hiddens)}}}


def run(env: str, side: str, seed: int, minutes: float, extra: list[str] | None = None, algo: str = "sac",
        pace: float | None = None) -> dict:
    """One run of ``side`` on ``env`` for ``minutes`` (dsac: of ``algo``, with ``extra``
    launch.py flags, a candidate change): its result record, carrying the machine's ``pace``."""
    budget, _ = SUITE[env]
    cap = 60.0 * minutes
    _, peer_algo, peer_settings, package = SIDES[side]
    ran: dict = {}
    if side == "dsac":
        flags = ["--algo", algo, "--max_seconds", f"{cap:g}", *(extra or [])]
        result = harness.run_dsac(flags, env, seed, budget, None, timeout=cap + 1800, as_typed=True,
                                  use_output=lambda out: ran.update(settings=settings.of_run(out)))
        command = result["command"]
    else:
        algo = peer_algo
        peer_settings = matched_settings(env, algo) if peer_settings is None else peer_settings
        ran["peer_settings"] = peer_settings
        result = harness.run_sb3(algo, env, peer_settings, seed, budget, SB3_EVAL_EVERY, timeout=cap + 1800,
                                 max_seconds=cap)
        if result is None:
            result = {"points": [], "error": f"{package} is not installed (requirements-bench.txt)"}
        command = result.get("command") or ["python", "-m", "benchmarks.sb3_baseline"]
    points = result["points"]
    return {
        "suite": "mujoco", "env": env, "side": side, "algo": algo, "seed": seed, "minutes": minutes,
        "flags": list(extra or []) if side == "dsac" else [], **harness.provenance(command),
        "settings": ran.get("settings"),  # dsac's: what its config.json says it ran (benchmarks/settings.py)
        **({"peer_settings": ran["peer_settings"]} if "peer_settings" in ran else {}),  # a peer's constructor kwargs
        "pace_updates_per_s": pace,
        "scores": harness.scores_at_marks(points, sorted({*(m for m in MARKS_MIN if m < minutes), minutes}), minutes),
        "best": max((p["return"] for p in points), default=None),
        # [env steps, return, seconds from process start, updates] of each evaluation
        "curve": [[p["env_steps"], round(p["return"], 1), p["wall_s"], p.get("updates")] for p in points],
        "error": result["error"],
    }


def algo_of(rec: dict) -> str:
    """The algorithm of a record: records written before dsac had CrossQ carry none, and are SAC's."""
    return rec.get("algo") or "sac"


def label_of(rec: dict) -> str:
    """A record's row label: its side's name, its algorithm and dsac's extra flags (``dsac crossq``,
    ``sb3 sac``, ``dsac sac --fcnet_hiddens 256 256``)."""
    return " ".join([SIDES.get(rec["side"], (rec["side"],))[0], algo_of(rec), *rec.get("flags", [])])


def first_at(curve: list, level: float) -> float | None:
    """Seconds from process start to the first evaluation at or above ``level``."""
    return next((wall_s for _, ret, wall_s, _ in curve if ret >= level), None)


def sitting_of(rec: dict) -> tuple[str, str]:
    """The sitting that made ``rec``: its snapshot commit and its day (UTC). Run a sitting from a
    snapshot of one commit (a ``git worktree``), so that commits made meanwhile do not split it."""
    return rec["commit"], rec["date"][:10]


def configuration_names(records: list[dict], known: dict) -> list[tuple[str, str]]:
    """Each record's configuration, the row it counts in, and its identity: runs whose effective
    settings (:mod:`benchmarks.settings`: the record's own, else ``known``'s line for its commit
    and command) are equal are one configuration, whatever flags were typed, on every env and
    budget. It is named by the row label of its run with the fewest typed flags (the first of
    those); where two configurations would share a name, each adds its values of the settings
    they differ in. A record with no settings (a peer's) is its label's."""
    identities = []
    for rec in records:
        found = rec.get("settings")
        if found is None and rec["side"] == "dsac":
            found = known.get(settings.backfill_key(rec["commit"], rec["command"]))
        identities.append(settings.identity(found, algo_of(rec), rec["env"]) if found is not None
                          else "label:" + label_of(rec))
    first: dict = {}  # identity -> (the label of its run with the fewest typed flags, those flags)
    for rec, identity in zip(records, identities, strict=True):
        if identity not in first or len(rec.get("flags", [])) < len(first[identity][1]):
            first[identity] = (label_of(rec), rec.get("flags", []))
    shared: dict = {}  # label -> its identities
    for identity, (label, _) in first.items():
        shared.setdefault(label, []).append(identity)
    names = {}
    for label, found in shared.items():
        measured = [i for i in found if not i.startswith("label:")]
        diffs = dict(zip(measured, settings.differences(measured), strict=True))
        for identity in found:
            diff = diffs.get(identity)
            if len(found) > 1 and diff is None:
                names[identity] = f"{label} [settings unknown]"
            elif len(found) > 1 and diff:
                names[identity] = f"{label} [{', '.join(f'{k} {v}' for k, v in diff.items())}]"
            else:
                names[identity] = label
    return [(names[identity], identity) for identity in identities]


def load(path: str) -> dict:
    """Every record in ``path``, by (env, budget, seed, configuration, k): the k-th run of that
    seed and configuration (:func:`configuration_names`), in the file's order. Every run counts:
    a seed does not fix a distributed run, so a later run of the same seed is another sample, not
    a replacement. Each record carries its configuration's ``identity``, and one named otherwise
    than its own row label carries the name as ``same_as``."""
    records = harness.read_records(path)
    known = settings.read_backfill(os.path.join(os.path.dirname(os.path.abspath(path)), "settings.jsonl"))
    names = iter(configuration_names(records, known))

    def key_of(rec):
        name, identity = next(names)
        rec = {**rec, "identity": identity}
        if name != label_of(rec):
            rec["same_as"] = name
        return (rec["env"], rec["minutes"], rec["seed"], name), rec

    return harness.keyed_runs(records, key_of)


def read_paces(path: str) -> dict:
    """{sitting: [updates/s, ...]} from a pace side file (``pace.jsonl``: lines ``{"commit", "date",
    "pace_updates_per_s", "command"}``), for records written before runs measured their own; {}
    without the file."""
    paces: dict = {}
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                rec = json.loads(line)
                paces.setdefault(sitting_of(rec), []).append(float(rec["pace_updates_per_s"]))
    return paces


def pace_of(rec: dict, paces: dict) -> float | None:
    """A record's machine pace: its own, else the median of its sitting's in ``paces``, else None."""
    if rec.get("pace_updates_per_s") is not None:
        return rec["pace_updates_per_s"]
    found = paces.get(sitting_of(rec))
    return harness.spread(found)[0] if found else None


def fmt_pace(pace: float | None) -> str:
    return f"{pace:,.0f}" if pace is not None else "—"


def order(key: tuple) -> tuple:
    """Rows in the suite's env order, then by budget, seed or label."""
    return (list(SUITE).index(key[0]) if key[0] in SUITE else 99, *key)


def catch_up(rec: dict, latest: dict) -> str:
    """The time a dsac run took to reach its peer's final return (SB3's SAC for SAC, sb3-contrib's
    CrossQ for CrossQ) on the same env, budget and seed: only where both ran in one sitting."""
    if rec["side"] != "dsac" or algo_of(rec) not in PEERS:
        return "—"
    label, name = PEERS[algo_of(rec)]
    peers = [other for key, other in latest.items() if key[:4] == (rec["env"], rec["minutes"], rec["seed"], label)]
    if not peers:
        return "—"
    other = next((p for p in peers if sitting_of(p) == sitting_of(rec)), None)
    if other is None:
        return f"— ({name} ran in another sitting)"  # a ratio counts only from one sitting
    if not other["curve"]:
        return "—"
    level = other["curve"][-1][1]
    at = first_at(rec["curve"], level)
    return f"{at:,.0f} s ({name}: {level:,.0f} at {other['curve'][-1][2]:,.0f} s)" if at is not None else \
        f"not reached ({name}: {level:,.0f})"


def evaluates_every(rec: dict) -> float | None:
    """The env steps between a run's evaluations (the median gap of its curve; None below 3
    evaluations): dsac's evaluator is throttled by its CPU budget, so the flag alone does not say."""
    steps = [point[0] for point in rec.get("curve") or []]
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    return statistics.median(gaps) if len(gaps) >= 2 else None


def best_of(rec: dict) -> float | None:
    """A run's best evaluation, only where it evaluated as often as the SB3 sides do (every
    ``SB3_EVAL_EVERY`` env steps, 10% either way): a maximum over evaluations grows with their
    number, so bests of runs that evaluated more often do not compare."""
    every = evaluates_every(rec)
    if rec.get("best") is None or every is None or abs(every - SB3_EVAL_EVERY) > 0.1 * SB3_EVAL_EVERY:
        return None
    return rec["best"]


def best_note() -> str:
    return ("The best evaluation only for runs that evaluated every "
            f"{SB3_EVAL_EVERY:,} env steps as the SB3 sides do (dsac's long runs since ad24d77): a maximum "
            "over evaluations grows with their number, and dsac's runs before evaluated every 1,000 to 5,000 "
            "env steps (every 1,000 as far as its evaluator's CPU budget allowed).")


def runs_table(latest: dict, paces: dict) -> list[str]:
    """One row per run: the score at each mark, the best (:func:`best_of`), the time to the peer's final return,
    rl-zoo's SAC score, the machine's pace and the sitting."""
    marks = sorted({float(m) for rec in latest.values() for m in rec["scores"]})
    lines = ["| env | budget | side | " + " | ".join(f"{m:g} min" for m in marks)
             + " | best | dsac reached the peer's final return after | rl-zoo SAC (its budget) | pace (updates/s) "
             "| sitting |",
             "|---|---|---|" + "---|" * len(marks) + "---|---|---|---|---|"]
    for (env, minutes, seed, label, _), rec in sorted(latest.items(), key=lambda kv: order(kv[0])):
        cells = []
        for m in marks:
            s = rec["scores"].get(f"{m:g}")
            cells.append(f"{s['return']:,.0f} ({s['env_steps'] / 1000:,.0f}k)" if s else "—")
        budget, zoo = SUITE.get(env, (None, None))
        best = best_of(rec)
        best = "—" if best is None else f"{best:,.0f}"
        error = f" ({rec['error']})" if rec.get("error") else ""
        typed = f" (typed: {label_of(rec)}, at {rec['commit']})" if rec.get("same_as") else ""
        lines.append(f"| {env} | {minutes:g} min, seed {seed} | {label}{typed}{error} | " + " | ".join(cells)
                     + f" | {best} | {catch_up(rec, latest)} | {f'{zoo:,.0f} ({budget / 1e6:g}M)' if zoo else '—'} "
                     f"| {fmt_pace(pace_of(rec, paces))} | {' '.join(sitting_of(rec))} |")
    return lines


def groups(latest: dict) -> dict:
    """{(env, budget, row label): [every run of it, by seed]}."""
    out: dict = {}
    for (env, minutes, _, label, _), rec in sorted(latest.items(), key=lambda kv: order(kv[0])):
        out.setdefault((env, minutes, label), []).append(rec)
    return out


def groups_table(latest: dict, paces: dict) -> list[str]:
    """One row per env, budget and side over its seeds: how many, the median and the IQM with its
    95% bootstrap interval of the final score and of the best evaluation, the machine's pace
    (median and range over the runs) and the sittings."""
    lines = ["| env | budget | side | runs (seeds) | final: median | final: IQM [95% CI], or the runs "
             "| best: median | best: IQM [95% CI], or the runs | pace (updates/s) | sittings |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (env, minutes, label), recs in groups(latest).items():
        final = stats.summarize(rec["scores"].get(f"{minutes:g}", {}).get("return") for rec in recs)
        best = stats.summarize(best_of(rec) for rec in recs)
        run_paces = [pace_of(rec, paces) for rec in recs]
        missing = sum(p is None for p in run_paces)
        pace = harness.fmt_spread(harness.spread(run_paces)) if missing < len(recs) else "—"
        if 0 < missing < len(recs):
            pace += f", {missing} without"
        seeds = f"{final['n']} ({', '.join(str(rec['seed']) for rec in recs)})" + (
            f", {len(recs) - final['n']} without a score" if final["n"] < len(recs) else "")
        sittings = "; ".join(sorted({" ".join(sitting_of(rec)) for rec in recs}))
        lines.append(f"| {env} | {minutes:g} min | {label} | {seeds} | " + " | ".join(stats.fmt_summary(final))
                     + " | " + " | ".join(stats.fmt_summary(best)) + f" | {pace} | {sittings} |")
    return lines


def aggregate_table(latest: dict) -> list[str]:
    """One row per budget and configuration that ran on two envs or more: each run's final score
    over rl-zoo's published SAC score on its env (:data:`SUITE`), pooled over those envs. Runs
    pool across envs only with equal settings (an env of its own settings is a row of its own)."""
    pooled: dict = {}  # (budget, configuration, identity) -> {env: [normalized final scores]}
    for (env, minutes, _, label, _), rec in sorted(latest.items(), key=lambda kv: order(kv[0])):
        final = rec["scores"].get(f"{minutes:g}", {}).get("return")
        if env in SUITE and final is not None:
            key = (minutes, label, rec.get("identity"))
            pooled.setdefault(key, {}).setdefault(env, []).append(final / SUITE[env][1])
    lines = ["| budget | side | envs (runs) | normalized final: median | normalized final: IQM [95% CI], or the runs |",
             "|---|---|---|---|---|"]
    for (minutes, label, _), by_env in sorted(pooled.items(), key=lambda kv: kv[0][:2]):
        if len(by_env) < 2:
            continue
        summary = stats.summarize_tasks(list(by_env.values()))
        envs = ", ".join(f"{env} ({len(v)})" for env, v in by_env.items())
        lines.append(f"| {minutes:g} min | {label} | {envs} | " + " | ".join(stats.fmt_summary(summary, ".2f")) + " |")
    return lines


def headline(path: str) -> str:
    """The README's MuJoCo table: every configuration of every env at its budget, each with all
    its runs' final scores (their median, and the runs), their commits; then the aggregate across
    envs. No "best": most of dsac's runs evaluated more often than the SB3 sides, and a maximum
    over evaluations favours them. Generated like :func:`report`, from every record in ``path``."""
    latest = load(path)
    lines = ["| env, budget | side | final return: median; the runs (or IQM [95% CI]) | rl-zoo SAC (its budget) "
             "| commits |", "|---|---|---|---|---|"]
    for (env, minutes, label), recs in groups(latest).items():
        final = stats.summarize(rec["scores"].get(f"{minutes:g}", {}).get("return") for rec in recs)
        median, spread = stats.fmt_summary(final)
        budget, zoo = SUITE.get(env, (None, None))
        commits = ", ".join(sorted({rec["commit"] for rec in recs}))
        lines.append(f"| {env}, {minutes:g} min | {label} | {median}; {spread} | "
                     f"{f'{zoo:,.0f} ({budget / 1e6:g}M)' if zoo else '—'} | {commits} |")
    return "\n".join([*lines, "", "Across envs, each run's final score over rl-zoo's SAC score:", "",
                      *aggregate_table(latest)])


def choice_table(path: str, labels: tuple[str, ...] = ("dsac crossq", "dsac sac")) -> str:
    """The guide's "which algorithm" table: per env at the suite's budgets, the final score of
    every configuration named ``label`` or ``label [...]`` (the same typed flags, other
    settings), over all its runs: median, range, runs and the commits they ran."""
    found = groups(load(path))
    lines = ["| env, budget | " + " | ".join(f"{label}: median (range; runs, commits)" for label in labels) + " |",
             "|---|" + "---|" * len(labels)]
    for env in SUITE:
        for minutes in sorted({m for e, m, _ in found if e == env and m in SUITE_MINUTES}):
            cells = [_choice_cell(found, env, minutes, label) for label in labels]
            if any(c != "—" for c in cells):
                lines.append(f"| {env}, {minutes:g} min | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _runs_its_preset(recs: list[dict], env: str, label: str) -> bool:
    """Whether these runs (one configuration) are what dsac's preset for ``env`` and ``label``'s
    algorithm (dsac/settings/presets.yaml) gives: its settings, and no other flag typed."""
    entry = presets().get(env, {}).get(label.split()[-1])
    ran = json.loads(recs[0]["identity"]) if isinstance(recs[0].get("identity"), str) else None
    if not entry or not isinstance(ran, dict):
        return False
    wanted = {**entry["set"], **(entry.get("when") or {})}
    typed = {flag[2:] for rec in recs for flag in rec.get("flags", []) if flag.startswith("--")}
    return typed <= set(wanted) and all(ran.get(flag) == value for flag, value in wanted.items())


def _choice_cell(found: dict, env: str, minutes: float, label: str) -> str:
    """``label``'s configurations (``label`` or ``label [...]``), and the one that ran with the
    env's preset, as ``launch.py --env <env>`` gives it, marked "preset"."""
    parts = []
    for (e, m, name), recs in found.items():
        preset = (e, m) == (env, minutes) and name.startswith(label + " --") and _runs_its_preset(recs, env, label)
        if preset:
            name = label + " [preset]"
        elif (e, m) != (env, minutes) or not (name == label or name.startswith(label + " [")):
            continue
        final = [f for f in (r["scores"].get(f"{minutes:g}", {}).get("return") for r in recs) if f is not None]
        if not final:
            continue
        commits = ", ".join(sorted({r["commit"] for r in recs}))
        which = name[len(label):].strip() + " " if name != label else ""
        mid = stats.summarize(final)["median"]
        parts.append(f"{which}{mid:,.0f} ({min(final):,.0f}–{max(final):,.0f}; {len(final)}, {commits})"
                     if len(final) > 1 else f"{which}{mid:,.0f} (1 run, {commits})")
    return "; ".join(parts) or "—"


def report(path: str, figures: str | None = None) -> str:
    """The tables of every record in ``path``: per run, then per configuration (env, side and
    flags, budget) over all its runs. The time dsac took to reach its peer's final return is given
    only where both ran in one sitting (one snapshot commit, one day). With ``figures`` (a link
    prefix), a link to each env's curves PNG (:func:`plot` writes them)."""
    latest = load(path)
    paces = read_paces(os.path.join(os.path.dirname(os.path.abspath(path)), "pace.jsonl"))
    lines = ["Evaluation return (mean of 10 deterministic episodes) at each mark, minutes from process start; "
             "env steps in brackets. Pace: the machine's learner updates/s in the run's sitting "
             "(`python -m benchmarks learner-update --sizes 17x6 --seconds 10 --threads 1 --repeats 1`, plain).", "",
             best_note(), "", *runs_table(latest, paces), "",
             "Over runs (every run of a configuration counts, a seed's repeats too): the final score (the "
             "budget's mark) and the best evaluation, the median and, from "
             f"{stats.MIN_RUNS_FOR_INTERVAL} runs, the interquartile mean with its 95% percentile-bootstrap "
             "interval (2,000 resamples); with fewer, the runs themselves.", "",
             *groups_table(latest, paces), "",
             "Across envs (a configuration that ran on two or more at one budget): each run's final score "
             "divided by rl-zoo's published SAC score on its env after its full budget (the table above), "
             "pooled; the median and, from 5 runs with 2 on every env, the IQM with its 95% stratified "
             "bootstrap interval (each env's runs resampled among themselves, as rliable does). A row speaks "
             "for the envs it names only: rows over different envs do not compare.", "",
             *aggregate_table(latest)]
    if figures is not None:
        envs = sorted({env for env, *_ in latest}, key=lambda env: order((env,)))
        lines += ["", "Curves, each seed's evaluation return against wall-clock minutes: "
                  + ", ".join(f"[{env}]({figures}{env}.png)" for env in envs)]
    lines += ["", "Commands: " + "; ".join(sorted({f"`{rec['command']}`" for rec in latest.values()}))]
    return "\n".join(lines)


def plot(path: str, out_dir: str) -> list[str]:
    """One PNG per env of the records in ``path``, ``<out_dir>/<env>.png``: each seed's evaluation
    return against wall-clock minutes from process start, a colour per row label (and budget,
    where an env has several); the paths written."""
    plt = harness.pyplot()
    by_env: dict = {}
    for (env, minutes, _, label, _), rec in sorted(load(path).items(), key=lambda kv: order(kv[0])):
        by_env.setdefault(env, []).append((minutes, label, rec))
    written = []
    for env, runs in by_env.items():
        several = len({minutes for minutes, _, _ in runs}) > 1
        names = [f"{label}, {minutes:g} min" if several else label for minutes, label, _ in runs]
        colours = {name: f"C{i % 10}" for i, name in enumerate(dict.fromkeys(names))}
        fig, ax = plt.subplots(figsize=(8, 4.5))
        seen: dict = {}
        for name, (_, _, rec) in zip(names, runs, strict=True):
            seen[name] = seen.get(name, 0) + 1
            minutes = [c[2] / 60 for c in rec["curve"]]
            ax.plot(minutes, [c[1] for c in rec["curve"]], color=colours[name], linewidth=1, alpha=0.8,
                    label=name if seen[name] == 1 else None)
        for line in ax.get_legend_handles_labels()[0]:
            count = seen[line.get_label()]
            line.set_label(f"{line.get_label()} ({count} run{'s' if count > 1 else ''})")
        ax.set_xlabel("wall-clock minutes from process start")
        ax.set_ylabel("evaluation return (10 episodes)")
        ax.set_title(f"{env}: each seed's evaluations")
        ax.legend(fontsize="small")
        fig.tight_layout()
        written.append(os.path.join(out_dir, f"{env}.png"))
        os.makedirs(out_dir, exist_ok=True)
        fig.savefig(written[-1], dpi=90, metadata={"Software": None})
        plt.close(fig)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=[e for e in SUITE if e != "Humanoid-v5"], choices=sorted(SUITE))
    parser.add_argument("--sides", nargs="+", default=["dsac", "sb3"], choices=list(SIDES),
                        help="dsac, SB3's SAC (sb3), sb3-contrib's CrossQ (sb3-crossq), each peer at dsac's "
                        "widths, batch and update ratio (sb3-matched, sb3-crossq-matched)")
    parser.add_argument("--algos", nargs="+", default=["sac"], choices=ALGOS, help="dsac's algorithms to run")
    harness.add_seed_flags(parser, "0")
    parser.add_argument("--flags", default="", help="extra launch.py flags for dsac's side, a candidate change "
                        "(e.g. --flags='--fcnet_hiddens 256 256'); the table shows them")
    harness.add_plot_flag(parser, "each env's curves (<env>.png)")
    harness.add_results_flags(parser, "runs/mujoco.jsonl", "benchmarks/results/mujoco/results.jsonl", minutes=15.0)
    args = parser.parse_args(argv)
    if args.plot:
        return harness.draw(parser, args.out, plot)
    if not args.report:
        harness.check_minutes(parser, args.minutes)
        from benchmarks.learner_update import sitting_pace

        pace = sitting_pace()
        for env in args.envs:
            for seed in harness.seeds_of(args, [0]):
                for side in args.sides:
                    for algo in args.algos if side == "dsac" else [SIDES[side][1]]:
                        rec = run(env, side, seed, args.minutes, shlex.split(args.flags), algo, pace)
                        harness.append_record(args.out, rec)
                        print(f"{env} {label_of(rec)} seed {seed}: {rec['scores']} best {rec['best']} "
                              f"error {rec['error']}", file=sys.stderr, flush=True)
    return harness.print_report(parser, args.out, report)


if __name__ == "__main__":
    sys.exit(main())
