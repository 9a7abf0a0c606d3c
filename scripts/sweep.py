"""The sweep that chose dsac's defaults for vector observations: a few candidate settings per
algorithm, each run as a user runs it (``launch.py``, the distributed system, the rollout
workers of the benchmark's command) on every task for a short wall-clock budget, judged by the
wall-clock seconds to a fixed fraction of the best return any candidate reached on that task.

    python scripts/sweep.py                       # ~40 minutes on 2 cores, 1 seed
    python scripts/sweep.py --algos dqn --seeds 2 --json sweep.json

Score of a candidate on a task: seconds from process start to the first evaluation at or above
``lo + FRACTION * (best - lo)``, where ``best`` is the best evaluation any candidate reached on
the task and ``lo`` the first evaluation's return (the untrained policy). A candidate that never
gets there is charged twice the task's budget. A candidate's overall score is the geometric
mean over tasks of its time divided by the fastest candidate's time on that task (1.0: fastest
everywhere). Hopper-v5 needs ``gymnasium[mujoco]`` (``requirements-bench.txt``); a task whose env
is missing is skipped with a line saying so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

FRACTION = 0.9
# algo -> [(env, wall-clock budget s, env-step cap, evaluation period)]
TASKS = {
    "sac": [("Pendulum-v1", 90, 30_000, 1_000), ("LunarLanderContinuous-v3", 240, 300_000, 5_000),
            ("Hopper-v5", 240, 300_000, 5_000)],
    "dqn": [("CartPole-v1", 75, 100_000, 2_000), ("Acrobot-v1", 75, 100_000, 2_000)],
}
# Candidates: settings in harness.SETTING_KEYS (anything not named keeps dsac's default).
CANDIDATES = {
    "sac": {
        "2x256 (before)": {"hidden": [256, 256]},
        "2x128": {"hidden": [128, 128]},
        "2x64": {"hidden": [64, 64]},
    },
    "dqn": {
        "2x256 u0.5 (before)": {"hidden": [256, 256], "updates_per_step": 0.5},
        "2x256 u1": {"hidden": [256, 256], "updates_per_step": 1.0},
        "2x64 u0.5": {"hidden": [64, 64], "updates_per_step": 0.5},
        "2x64 u1": {"hidden": [64, 64], "updates_per_step": 1.0},
        "2x64 u1 lr2.3e-3": {"hidden": [64, 64], "updates_per_step": 1.0, "lr": 2.3e-3},
    },
}


def env_available(env_id: str) -> bool:
    import gymnasium as gym

    try:
        gym.make(env_id).close()
        return True
    except Exception as e:  # noqa: BLE001 - any failure to build means: not here
        print(f"skipping {env_id}: {str(e).splitlines()[0]}", file=sys.stderr)
        return False


def score(runs: dict, budget: float) -> dict:
    """{candidate: seconds to FRACTION of the best return on this task} (median over seeds)."""
    best = max((p["return"] for rs in runs.values() for r in rs for p in r["points"]), default=None)
    firsts = [r["points"][0]["return"] for rs in runs.values() for r in rs if r["points"]]
    if best is None or not firsts:
        return {}
    lo = min(firsts)
    target = lo + FRACTION * (best - lo)
    out = {}
    for name, rs in runs.items():
        times = []
        for r in rs:
            hit = harness.first_reaching(r["points"], target)
            times.append(hit["wall_s"] if hit else 2 * budget)
        out[name] = {"target": target, "seconds": harness.spread(times)[0], "best": best}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--candidates", nargs="+", help="run only these candidates (names as in CANDIDATES)")
    parser.add_argument("--json", default="sweep.json")
    args = parser.parse_args(argv)
    results: dict = {}
    for algo in args.algos:
        for env, budget, cap, every in TASKS[algo]:
            if not env_available(env):
                continue
            runs = results.setdefault(algo, {}).setdefault(env, {"budget": budget, "runs": {}})["runs"]
            for seed in range(args.seeds):
                for name, settings in CANDIDATES[algo].items():
                    if args.candidates and name not in args.candidates:
                        continue
                    flags = harness.dsac_flags(algo, settings) + ["--num_workers", str(harness.WORKERS[algo]),
                                                                   "--max_seconds", str(budget)]
                    run = harness.run_dsac(flags, env, seed, cap, every, timeout=budget + 180)
                    runs.setdefault(name, []).append(run)
                    last = run["points"][-1] if run["points"] else {}
                    print(f"{algo} {env} {name} seed {seed}: {len(run['points'])} evaluations, last "
                          f"{last.get('return', '-')} at {last.get('env_steps', '-')} env steps"
                          + (f" ERROR {run['error']}" if run["error"] else ""), file=sys.stderr, flush=True)
                    with open(args.json, "w") as f:
                        json.dump(results, f)
    print(report(results))
    return 0


def report(results: dict) -> str:
    lines = []
    for algo, tasks in results.items():
        scores = {env: score(t["runs"], t["budget"]) for env, t in tasks.items()}
        names = [n for n in CANDIDATES[algo] if any(n in t["runs"] for t in tasks.values())]
        lines += [f"\n### {algo}: seconds to {FRACTION:.0%} of the best return in the sweep (from the first "
                  "evaluation's)", "", "| candidate | " + " | ".join(
                      f"{env} (→ {s[names[0]]['target']:.0f})" if s else env for env, s in scores.items())
                  + " | geometric mean vs fastest |", "|---|" + "---|" * (len(scores) + 1)]
        for name in names:
            cells, ratios = [], []
            for env, s in scores.items():
                if name not in s:
                    cells.append("-")
                    continue
                fastest = min(v["seconds"] for v in s.values())
                ratios.append(s[name]["seconds"] / fastest)
                reached = s[name]["seconds"] < 2 * tasks[env]["budget"]
                cells.append(f"{s[name]['seconds']:.0f} s" if reached else "not reached")
            gm = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {gm:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
