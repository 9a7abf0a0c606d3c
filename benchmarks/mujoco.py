"""The MuJoCo v5 table: dsac's SAC defaults against Stable-Baselines3's SAC with rl-zoo's
settings, each for a wall-clock budget on this machine, one run at a time.

    python -m benchmarks mujoco --envs HalfCheetah-v5 --sides dsac sb3     # 15 minutes each
    python -m benchmarks mujoco --envs Humanoid-v5 --minutes 60
    python -m benchmarks mujoco --report                                  # the table of --out

Both sides get rl-zoo's env-step budget (1M; Humanoid 2M) and stop at ``--minutes`` from their
process start, whichever comes first, and both evaluate 10 deterministic episodes on the same
start states (``dsac.evaluation.evaluation_seed``):
  dsac  ``python launch.py --algo sac --env E --seed S --total_env_steps N --max_seconds M``, as a
        user types it (its defaults: 2 rollout workers, evaluation every 1,000 env steps in its
        own process; ``--max_seconds`` counts from the driver's start, a few seconds after the
        process's).
  sb3   ``benchmarks/sb3_baseline.py`` with rl-zoo's ``hyperparams/sac.yml`` for the MuJoCo envs
        (``learning_starts`` 10,000, SB3's defaults otherwise: 2x256 networks, lr 3e-4, batch
        256, one update per env step), torch at 1 thread, evaluating every 10,000 env steps in
        its own process (the evaluations' time is on its clock).
The score at a mark is the last evaluation made by then; at the budget's mark, the evaluation of
the weights the run stopped with. One JSON line per run in ``--out`` (command, commit, date,
machine, scores at the marks, the curve); ``--report`` prints the table, with rl-zoo's published
score after its full budget (``benchmark.md``, the v3 envs) beside it. SB3 needs
``requirements-bench.txt`` (a run of a missing side is recorded as an error).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from benchmarks import harness

# env -> rl-zoo's SAC budget (env steps) and its published score after it (benchmark.md, v3).
SUITE = {
    "HalfCheetah-v5": (1_000_000, 9535.5),
    "Hopper-v5": (1_000_000, 2325.5),
    "Walker2d-v5": (1_000_000, 3863.2),
    "Ant-v5": (1_000_000, 4615.8),
    "Humanoid-v5": (2_000_000, 6232.3),
}
ZOO_SAC_MUJOCO = {"learning_starts": 10_000}  # rl-zoo hyperparams/sac.yml: mujoco-defaults
SB3_EVAL_EVERY = 10_000
MARKS_MIN = (5, 15, 30, 60)


def run(env: str, side: str, seed: int, minutes: float, extra: list[str] | None = None) -> dict:
    """One run of ``side`` on ``env`` for ``minutes`` (dsac with ``extra`` launch.py flags: a
    candidate change): its result record."""
    budget, _ = SUITE[env]
    cap = 60.0 * minutes
    if side == "dsac":
        flags = ["--algo", "sac", "--max_seconds", f"{cap:g}", *(extra or [])]
        result = harness.run_dsac(flags, env, seed, budget, None, timeout=cap + 1800, as_typed=True)
        command = result["command"]
    else:
        result = harness.run_sb3("sac", env, ZOO_SAC_MUJOCO, seed, budget, SB3_EVAL_EVERY, timeout=cap + 1800,
                                 max_seconds=cap)
        if result is None:
            result = {"points": [], "error": "stable_baselines3 is not installed (requirements-bench.txt)"}
        command = result.get("command") or ["python", "-m", "benchmarks.sb3_baseline"]
    points = result["points"]
    return {
        "suite": "mujoco", "env": env, "side": side, "seed": seed, "minutes": minutes,
        "flags": list(extra or []) if side == "dsac" else [], **harness.provenance(command),
        "scores": harness.scores_at_marks(points, sorted({*(m for m in MARKS_MIN if m < minutes), minutes}), minutes),
        "best": max((p["return"] for p in points), default=None),
        # [env steps, return, seconds from process start, updates] of each evaluation
        "curve": [[p["env_steps"], round(p["return"], 1), p["wall_s"], p.get("updates")] for p in points],
        "error": result["error"],
    }


def first_at(curve: list, level: float) -> float | None:
    """Seconds from process start to the first evaluation at or above ``level``."""
    return next((wall_s for _, ret, wall_s, _ in curve if ret >= level), None)


def sitting_of(rec: dict) -> tuple[str, str]:
    """The sitting that made ``rec``: its snapshot commit and its day (UTC). Run a sitting from a
    snapshot of one commit (a ``git worktree``), so that commits made meanwhile do not split it."""
    return rec["commit"], rec["date"][:10]


def report(path: str) -> str:
    """The table of the records in ``path`` (the latest run of each env, side and budget). The time
    dsac took to reach SB3's final return is given only where both ran in one sitting (one
    snapshot commit, one day)."""
    latest: dict = {}
    for line in open(path):
        if line.strip():
            rec = json.loads(line)
            label = " ".join([rec["side"], *rec.get("flags", [])])
            latest[(rec["env"], rec["minutes"], rec["seed"], label)] = rec
    marks = sorted({float(m) for rec in latest.values() for m in rec["scores"]})
    lines = ["Evaluation return (mean of 10 deterministic episodes) at each mark, minutes from process start; "
             "env steps in brackets.", "",
             "| env | budget | side | " + " | ".join(f"{m:g} min" for m in marks)
             + " | best | dsac reached the SB3 run's final return after | rl-zoo SAC (its budget) | commit |",
             "|---|---|---|" + "---|" * len(marks) + "---|---|---|---|"]
    for (env, minutes, seed, side), rec in sorted(latest.items(), key=lambda kv: (list(SUITE).index(kv[0][0])
                                                                                  if kv[0][0] in SUITE else 99, kv[0])):
        cells = []
        for m in marks:
            s = rec["scores"].get(f"{m:g}")
            cells.append(f"{s['return']:,.0f} ({s['env_steps'] / 1000:,.0f}k)" if s else "—")
        other = latest.get((env, minutes, seed, "sb3"))
        catch = "—"
        if side.startswith("dsac") and other and sitting_of(other) != sitting_of(rec):
            catch = "— (SB3 ran in another sitting)"  # a ratio counts only from one sitting
        elif side.startswith("dsac") and other and other["curve"]:
            level = other["curve"][-1][1]
            at = first_at(rec["curve"], level)
            catch = f"{at:,.0f} s (SB3: {level:,.0f} at {other['curve'][-1][2]:,.0f} s)" if at is not None else \
                f"not reached (SB3: {level:,.0f})"
        budget, zoo = SUITE.get(env, (None, None))
        best = f"{rec['best']:,.0f}" if rec["best"] is not None else "—"
        error = f" ({rec['error']})" if rec.get("error") else ""
        lines.append(f"| {env} | {minutes:g} min, seed {seed} | {side}{error} | " + " | ".join(cells)
                     + f" | {best} | {catch} | {f'{zoo:,.0f} ({budget / 1e6:g}M)' if zoo else '—'} | {rec['commit']} |")
    lines += ["", "Commands: " + "; ".join(sorted({f"`{rec['command']}`" for rec in latest.values()}))]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=[e for e in SUITE if e != "Humanoid-v5"], choices=sorted(SUITE))
    parser.add_argument("--sides", nargs="+", default=["dsac", "sb3"], choices=["dsac", "sb3"])
    harness.add_seed_flags(parser, "0")
    parser.add_argument("--flags", default="", help="extra launch.py flags for dsac's side, a candidate change "
                        "(e.g. --flags='--fcnet_hiddens 256 256'); the table shows them")
    harness.add_results_flags(parser, "runs/mujoco.jsonl", "benchmarks/results/mujoco/results.jsonl", minutes=15.0)
    args = parser.parse_args(argv)
    if not args.report:
        harness.check_minutes(parser, args.minutes)
        for env in args.envs:
            for seed in harness.seeds_of(args, [0]):
                for side in args.sides:
                    rec = run(env, side, seed, args.minutes, shlex.split(args.flags))
                    harness.append_record(args.out, rec)
                    print(f"{env} {side} seed {seed}: {rec['scores']} best {rec['best']} error {rec['error']}",
                          file=sys.stderr, flush=True)
    return harness.print_report(parser, args.out, report)


if __name__ == "__main__":
    sys.exit(main())
