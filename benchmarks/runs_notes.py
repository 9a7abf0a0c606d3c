"""The runs the prose of docs/benchmarks.md names, each described from its record, so that the
prose around them holds no figure of its own (``python -m benchmarks docs`` writes them):

    <!-- generated: mujoco-runs -->        the MuJoCo runs the narrative after the choice table names
    <!-- generated: mujoco-10min -->       the 10-minute HalfCheetah-v5 runs
    <!-- generated: crossq-widths -->      CrossQ's two 15-minute Ant-v5 runs at two widths
    <!-- generated: pong-2026-11-24 -->    the Pong hour kept only as its run's progress file
    <!-- generated: evaluator-duty -->     the A/B of ``--eval_every`` (``mujoco/evaluator-duty.jsonl``)
    <!-- generated: xla-ab-5min -->        the 5-minute A/B of ``--learner_xla`` (``mujoco/xla-ab.jsonl``)
    <!-- generated: xla-ab-10min -->       its 10-minute pair, in the same file
    <!-- generated: normalization -->      ``--normalize_obs`` against raw observations (docs/guide.md)
    <!-- generated: parity-lunar-seconds --> each LunarLander parity run's seconds (docs/parity.md)
    <!-- generated: scale-board-roles -->   the CPU per role of the board runs' 32- and 64-worker rows (docs/scaling.md)

A run is named by what identifies its record in ``benchmarks/results/mujoco/results.jsonl``: env,
budget, side, algorithm, seed, commit and the flags typed. A name that matches no record, or
several, stops the generator: the prose would otherwise point at a run the file does not hold.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics

from benchmarks import harness, mujoco


# A run: (env, minutes, side, algo, seed, commit, flags typed). ``levels``: returns whose first
# evaluation at or above them a line gives; ``("final of", run)``: that run's final return.
def _run(env, minutes, side, algo, seed, commit, flags=(), levels=()):
    return {"key": (env, float(minutes), side, algo, seed, commit, tuple(flags)), "levels": levels}


_SB3_HUMANOID = ("Humanoid-v5", 60.0, "sb3", "sac", 0, "f546d88", ())
_SB3C_WALKER = ("Walker2d-v5", 15.0, "sb3-crossq", "crossq", 0, "50edf9d", ())
_SB3C_ANT = ("Ant-v5", 15.0, "sb3-crossq", "crossq", 0, "50edf9d", ())
NAMED = {
    "mujoco-runs": [
        _run("Hopper-v5", 15, "dsac", "crossq", 0, "50edf9d"),
        _run("Hopper-v5", 15, "dsac", "sac", 0, "9c2b837"),
        _run(*_SB3C_WALKER[:6]),
        _run(*_SB3C_ANT[:6]),
        _run("Walker2d-v5", 15, "dsac", "crossq", 0, "13afca7", levels=(("final of", _SB3C_WALKER),)),
        _run("Ant-v5", 15, "dsac", "crossq", 0, "dc2ca01", levels=(("final of", _SB3C_ANT),)),
        _run("Humanoid-v5", 60, "dsac", "sac", 0, "36c9695", levels=(2000, ("final of", _SB3_HUMANOID))),
        _run(*_SB3_HUMANOID[:6]),
        _run("Humanoid-v5", 60, "dsac", "crossq", 0, "50edf9d", levels=(2000,)),
    ],
    "mujoco-10min": [
        _run("HalfCheetah-v5", 10, "dsac", "sac", 0, "5513562", levels=(8000,)),
        _run("HalfCheetah-v5", 10, "dsac", "sac", 0, "6e4ad7f", levels=(8000,)),
    ],
}
WIDTHS = [("2×256, 2×256", ("Ant-v5", 15.0, "dsac", "crossq", 0, "2e9c0dc", ("--learner_xla",))),
          ("2×128, 2×128", ("Ant-v5", 15.0, "dsac", "crossq", 0, "2e9c0dc",
                            ("--learner_xla", "--critic_hiddens", "128", "128", "--fcnet_hiddens", "128", "128")))]
WINDOW = 10_000  # env steps: the widths table compares the returns over this stretch
TAIL_S = 300  # "the last minutes": the evaluations of a run's last 5 minutes


def _key_of(rec: dict) -> tuple:
    return (rec["env"], float(rec["minutes"]), rec["side"], mujoco.algo_of(rec), rec["seed"], rec["commit"],
            tuple(rec.get("flags") or ()))


def find(records: list[dict], key: tuple) -> dict:
    """The one record ``key`` names (see the module's docstring)."""
    found = [rec for rec in records if _key_of(rec) == key]
    if len(found) != 1:
        raise SystemExit(f"error: {len(found)} records in {mujoco.__name__}'s results match {key}")
    rec = dict(found[0])
    if isinstance(rec["curve"], str):
        rec["curve"] = json.loads(rec["curve"])
    return rec


def final(rec: dict) -> dict:
    return rec["scores"][f"{rec['minutes']:g}"]


def _level_text(rec: dict, level, records: list[dict]) -> str:
    if isinstance(level, tuple):
        peer = find(records, level[1])
        value, what = final(peer)["return"], f"{mujoco.label_of(peer)}'s final {final(peer)['return']:,.0f}"
    else:
        value, what = level, f"{level:,.0f}"
    hit = next((p for p in rec["curve"] if p[1] >= value), None)
    if hit is None:
        return f"never at or above {what}"
    when = f"{hit[2]:,.0f} s" + (f" ({hit[2] / 60:.0f} min" if hit[2] >= 120 else " (")
    return f"first at or above {what} after {when}{', ' if hit[2] >= 120 else ''}{hit[0] / 1e3:,.0f}k env steps)"


def describe(rec: dict, levels=(), records: list[dict] = (), paces: dict | None = None) -> str:
    """One run's line: its marks, its env steps and updates, updates/s over the run, its best
    evaluation and when, the spread of its last minutes' evaluations, and the first evaluation
    at each of ``levels``."""
    marks = sorted(rec["scores"], key=float)
    steps, _, wall_s, updates = rec["curve"][-1]
    parts = [" / ".join(f"{rec['scores'][m]['return']:,.0f}" for m in marks) + " at " + " / ".join(marks) + " min",
             f"{steps / 1e3:,.1f}k env steps and {(updates or 0) / 1e3:,.1f}k updates "
             f"({(updates or 0) / wall_s:,.0f} updates/s over the run), "
             f"{len(rec['curve'])} evaluation{'s' if len(rec['curve']) > 1 else ''}"]
    if rec["side"] == "dsac":  # the peers evaluate a tenth as often: their best is not comparable
        best = max(rec["curve"], key=lambda p: p[1])
        parts.append(f"best {rec['best']:,.0f} at {best[0] / 1e3:,.0f}k env steps ({best[2] / 60:.0f} min)")
        tail = [p[1] for p in rec["curve"] if p[2] >= 60 * rec["minutes"] - TAIL_S]
        if len(tail) >= 3:
            parts.append(f"its last {TAIL_S // 60} minutes' {len(tail)} evaluations {min(tail):,.0f}–{max(tail):,.0f} "
                         f"(median {statistics.median(tail):,.0f})")
    parts += [_level_text(rec, level, records) for level in levels]
    pace = mujoco.fmt_pace(mujoco.pace_of(rec, paces or {}))
    return (f"- {rec['env']}, {rec['minutes']:g} min, {mujoco.label_of(rec)}, seed {rec['seed']}, {rec['commit']} "
            f"(ended {rec['date'][:10]} {rec['date'][11:16]} UTC), pace {pace}: " + "; ".join(parts) + ".")


def notes(path: str, name: str) -> str:
    """The lines of ``NAMED[name]``'s runs, in that order, from the records of ``path``."""
    records, paces = harness.read_records(path), _paces(path)
    return "\n".join(describe(find(records, run["key"]), run["levels"], records, paces) for run in NAMED[name])


def _paces(path: str) -> dict:
    return mujoco.read_paces(os.path.join(os.path.dirname(os.path.abspath(path)), "pace.jsonl"))


def widths_table(path: str) -> str:
    """CrossQ's Ant-v5 runs at two widths: updates, the final and best return, and the median of
    each run's evaluations over the same env steps (the last ``WINDOW`` before the env steps the
    fewer-updates run ended at): what each learned per env step."""
    records, paces = harness.read_records(path), _paces(path)
    runs = [(widths, find(records, key)) for widths, key in WIDTHS]
    end = min(rec["curve"][-1][0] for _, rec in runs)
    lines = [f"| widths (actor, critics) | run | updates in 15 min | return at 15 min | best | median return "
             f"{(end - WINDOW) / 1e3:,.0f}k–{end / 1e3:,.0f}k env steps |", "|---|---|---|---|---|---|"]
    for widths, rec in runs:
        window = [p[1] for p in rec["curve"] if end - WINDOW <= p[0] <= end * 1.02]
        lines.append(f"| {widths} | {mujoco.label_of(rec)}, seed {rec['seed']}, {rec['commit']}, pace "
                     f"{mujoco.fmt_pace(mujoco.pace_of(rec, paces))} | {rec['curve'][-1][3] / 1e3:,.0f}k "
                     f"| {final(rec)['return']:,.0f} | {rec['best']:,.0f} | {statistics.median(window):,.0f} |")
    return "\n".join(lines)


def pong_table(path: str) -> str:
    """The Pong hour of 2026-11-24 from its run's progress file: the evaluation that stands at each
    mark (:func:`harness.scores_at_marks`: at the budget's, the last of all), and the best."""
    points = [{**p, "return": p["eval_return_mean"]} for p in harness.read_records(path)]
    lines = ["| minutes | score | env steps | updates | at |", "|---|---|---|---|---|"]
    for mark, p in harness.scores_at_marks(points, [15, 30, 60], 60).items():
        lines.append(f"| {mark} | {p['return']:+.1f} | {p['env_steps'] / 1e3:,.0f}k | {p['updates'] / 1e3:,.1f}k "
                     f"| {p['wall_s']:,.0f} s |")
    best = max(points, key=lambda p: p["return"])
    lines.append(f"| best | {best['return']:+.1f} | {best['env_steps'] / 1e3:,.0f}k | {best['updates'] / 1e3:,.1f}k "
                 f"| {best['wall_s']:,.0f} s |")
    last = points[-1]
    lines += ["", f"Over the run, to its last evaluation: {last['updates'] / last['wall_s']:,.0f} updates/s and "
              f"{last['env_steps'] / last['wall_s']:,.0f} env steps/s."]
    return "\n".join(lines)


# An A/B of one sitting, in a file of its own: the budget its runs share, the sides as (row label,
# flags typed), the first column's head, and the env steps at which to compare returns (None: none).
AB = {
    "evaluator-duty": {"minutes": 5.0, "head": "evaluation every", "at_steps": 60_000,
                       "sides": [("1,000 env steps (default)", ()), ("5,000 env steps", ("--eval_every", "5000"))]},
    "xla-ab-5min": {"minutes": 5.0, "head": "learner", "at_steps": None,
                    "sides": [("plain (default)", ()), ("`--learner_xla`", ("--learner_xla",))]},
    "xla-ab-10min": {"minutes": 10.0, "head": "learner", "at_steps": None,
                     "sides": [("plain (default)", ()), ("`--learner_xla`", ("--learner_xla",))]},
}


def _return_at(rec: dict, steps: int) -> str:
    """The first evaluation at or after ``steps`` env steps; "—" if the run ended before."""
    curve = json.loads(rec["curve"]) if isinstance(rec["curve"], str) else rec["curve"]
    return next((f"{p[1]:,.0f}" for p in curve if p[0] >= steps), "—")


def _sitting(runs: list[dict], sides: list) -> str:
    """The runs' commits, their span (the first's end less its budget to the last's end, UTC) and
    their order by side (A the first side, B the second)."""
    dates = [rec["date"] for rec in runs]
    start = datetime.datetime.fromisoformat(dates[0]) - datetime.timedelta(minutes=runs[0]["minutes"])
    order = " ".join("AB"[[flags for _, flags in sides].index(tuple(rec["flags"]))] for rec in runs)
    return (f"{', '.join(sorted({rec['commit'] for rec in runs}))}, {dates[0][:10]} {start:%H:%M}–{dates[-1][11:16]} "
            f"UTC, in the order {order}")


def ab_table(path: str, name: str) -> str:
    """The A/B ``AB[name]`` from its records in ``path``: each side's runs in the order run, their
    updates and return at each mark (and at ``at_steps`` env steps), and B's updates over A's."""
    ab = AB[name]
    runs = sorted((rec for rec in harness.read_records(path) if float(rec["minutes"]) == ab["minutes"]),
                  key=lambda rec: rec["date"])
    marks = sorted(runs[0]["scores"], key=float)
    by_side = [[rec for rec in runs if tuple(rec["flags"]) == flags] for _, flags in ab["sides"]]
    heads = [f"updates at {m} min" for m in marks] + [f"return at {m} min" for m in marks]
    heads += [f"return at {ab['at_steps'] / 1e3:,.0f}k env steps"] if ab["at_steps"] else []
    lines = [f"{_sitting(runs, ab['sides'])}; each cell gives the side's runs in the order run.", "",
             f"| {ab['head']} | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    for (label, _), recs in zip(ab["sides"], by_side, strict=True):
        cells = [" / ".join(f"{rec['scores'][m]['updates'] / 1e3:,.1f}k" for rec in recs) for m in marks]
        cells += [" / ".join(f"{rec['scores'][m]['return']:,.0f}" for rec in recs) for m in marks]
        cells += [" / ".join(_return_at(rec, ab["at_steps"]) for rec in recs)] if ab["at_steps"] else []
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    gains = [sum(r["scores"][m]["updates"] for r in by_side[1]) / sum(r["scores"][m]["updates"] for r in by_side[0])
             for m in marks]
    lines += ["", "B's updates over A's, summed over each side's runs: "
              + ", ".join(f"{g - 1:+.0%} at {m} min" for g, m in zip(gains, marks, strict=True)) + "."]
    return "\n".join(lines)


def _reached(rec: dict) -> tuple[str, str]:
    """A run's env steps and seconds to its threshold, or where it ended without it."""
    if rec["reached_env_steps"] is not None:
        return f"{rec['reached_env_steps']:,}", f"{rec['reached_s']:.1f}"
    curve = json.loads(rec["curve"]) if isinstance(rec["curve"], str) else rec["curve"]
    return f"not reached (best {rec['best']:,.0f}, ended at {curve[-1][0]:,})", f"{curve[-1][2]:.1f} (the end)"


def normalization_table(path: str) -> str:
    """``--normalize_obs`` against raw observations (``normalization/results.jsonl``): per
    configuration, each seed's env steps and seconds to the threshold, in seed order."""
    groups: dict = {}
    for rec in harness.read_records(path):
        key = (rec["env"].split(":")[-1], rec["algo"], rec["threshold"], rec["runner"], rec["normalize_obs"],
               rec["commit"])
        groups.setdefault(key, []).append(rec)
    lines = ["| env (threshold) | algo | runner | `--normalize_obs` | commit | seeds | env steps to it "
             "| seconds to it |", "|---|---|---|---|---|---|---|---|"]
    for (env, algo, threshold, runner, norm, commit), recs in groups.items():
        recs.sort(key=lambda rec: rec["seed"])
        reached = [_reached(rec) for rec in recs]
        lines.append(f"| {env} ({threshold:g}) | {algo} | {runner} | {'on' if norm else 'off'} | {commit} "
                     f"| {', '.join(str(rec['seed']) for rec in recs)} | {' / '.join(r[0] for r in reached)} "
                     f"| {' / '.join(r[1] for r in reached)} |")
    return "\n".join(lines)


def parity_seconds(path: str, task: str) -> str:
    """How long each run of ``task`` in ``parity.json`` took, process start to end, per variant in
    seed order: what a seed costs on each side."""
    variants = {name: sorted(runs, key=lambda run: run["seed"])
                for name, runs in json.load(open(path))[task]["variants"].items()}
    parts = [name + " " + " / ".join(f"{run['process_s']:,.0f}" for run in runs) + " s"
             for name, runs in variants.items()]
    seeds = ", ".join(str(run["seed"]) for run in next(iter(variants.values())))
    return f"Each {task} run's seconds from process start to its end, seeds {seeds}: " + "; ".join(parts) + "."


def board_roles(path: str, runs: tuple[str, ...]) -> str:
    """The CPU (% of one core) of each role in ``runs`` of ``scale/board.json``, and the bare
    loop's before and after dsac's windows: where the two cores went."""
    board = json.load(open(path))
    lines = []
    for name in runs:
        for r in board[name]["collection"]:
            bare = " and ".join(f"{cpu:.0f}%" for _, cpu in r["bare_before_after"])
            lines.append(f"- {name}, {r['workers']} workers on {r['nodes']} node(s): bare loop {bare} (before, after); "
                         + ", ".join(f"{role} ×{u['processes']} {u['cpu_percent']:.0f}%"
                                     for role, u in r["roles"].items()) + ".")
    return "\n".join(lines)
