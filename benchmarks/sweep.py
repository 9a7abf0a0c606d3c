"""The sweep that chose dsac's defaults for vector observations, run as Ray Tune trials
(:mod:`dsac.tune`): a few candidate settings per algorithm, each a distributed trial as users
run ``launch.py`` (2 rollout workers for SAC, 4 for DQN), several seeds per candidate, one trial
at a time, on every task for a short wall-clock budget; judged by the wall-clock seconds to a
fixed fraction of the best return any candidate reached on that task.

    python -m benchmarks sweep                                   # both algorithms, 2 seeds: ~2 hours on 2 cores
    python -m benchmarks sweep --algos dqn --seeds 0 1 2 --json sweep.json

Score of a candidate on a task: seconds from its trainer's start to the first evaluation at or
above ``lo + FRACTION * (best - lo)``, where ``best`` is the best evaluation any candidate
reached on the task and ``lo`` the first evaluation's return (the untrained policy), median
over seeds. A seed that never gets there is charged twice the task's budget. A candidate's
overall score is the geometric mean over tasks of its time divided by the fastest candidate's
time on that task (1.00: fastest everywhere). Hopper-v5 needs ``gymnasium[mujoco]``
(``requirements-bench.txt``); a task whose env is missing is skipped with a line saying so.
Each trial's Tune results and dsac output stay under ``--storage_path``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from benchmarks import harness

FRACTION = 0.9
# algo -> [(env, wall-clock budget s, env-step cap, evaluation period)]
TASKS = {
    "sac": [("Pendulum-v1", 90, 30_000, 1_000), ("LunarLanderContinuous-v3", 240, 300_000, 5_000),
            ("Hopper-v5", 240, 300_000, 5_000)],
    "dqn": [("CartPole-v1", 75, 100_000, 2_000), ("Acrobot-v1", 75, 100_000, 2_000)],
}
# Candidates: launch.py flags (anything not named keeps dsac's default).
CANDIDATES = {
    "sac": {
        "2x256": {"fcnet_hiddens": [256, 256]},
        "2x128": {"fcnet_hiddens": [128, 128]},
        "2x64": {"fcnet_hiddens": [64, 64]},
    },
    "dqn": {
        "2x256 u0.5": {"fcnet_hiddens": [256, 256], "updates_per_step": 0.5},
        "2x256 u1": {"fcnet_hiddens": [256, 256], "updates_per_step": 1.0},
        "2x64 u0.5": {"fcnet_hiddens": [64, 64], "updates_per_step": 0.5},
        "2x64 u1": {"fcnet_hiddens": [64, 64], "updates_per_step": 1.0},
        "2x64 u1 lr2.3e-3": {"fcnet_hiddens": [64, 64], "updates_per_step": 1.0, "lr": 2.3e-3},
    },
}


def env_available(env_id: str) -> bool:
    import gymnasium as gym

    try:
        gym.make(env_id).close()
        return True
    except Exception as e:  # any failure to build means: not here
        print(f"skipping {env_id}: {str(e).splitlines()[0]}", file=sys.stderr)
        return False


def trial_space(algo: str, env: str, budget: float, cap: int, every: int, flags: dict, seeds: list[int]) -> dict:
    """The dsac-tune space of one candidate on one task: a distributed trial per seed."""
    from dsac.tune.space import parse_space

    return parse_space({"algo": algo, "env": env, "num_workers": harness.WORKERS[algo], **flags,
                        "seed": {"grid": list(seeds)}, "max_seconds": budget, "total_env_steps": cap,
                        "eval_every": every, "checkpoint_every": 3600, "log_every": 600})


def run_candidate(space: dict, storage_path: str, name: str) -> list[dict]:
    """One Tune experiment (one trial at a time); each seed's evaluations as
    {seed, points: [{env_steps, updates, wall_s, return}], error}."""
    from dsac.tune.cli import search

    runs = []
    for result in search(space, storage_path=storage_path, name=name, max_concurrent=1, verbose=0):
        output = (result.metrics or {}).get("dsac_output_dir") or os.path.join(result.path, "dsac")
        runs.append({"seed": result.config.get("seed"),
                     "points": harness.read_points(output),
                     "error": None if result.error is None else str(result.error).strip().splitlines()[-1]})
    return sorted(runs, key=lambda r: r["seed"])


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
        median, low, high = harness.spread(times)
        out[name] = {"target": target, "seconds": median, "low": low, "high": high, "best": best}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    harness.add_seed_flags(parser, "0 1")
    parser.add_argument("--candidates", nargs="+", help="run only these candidates (names as in CANDIDATES)")
    parser.add_argument("--envs", nargs="+", help="run only these tasks' envs")
    parser.add_argument("--json", default="sweep.json")
    parser.add_argument("--storage_path", default=os.path.abspath("sweep_results"))
    parser.add_argument("--report", action="store_true", help="print the table of --json and exit")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.load(open(args.json))))
        return 0
    import ray

    from dsac.tune.trainable import resource_bundles

    seeds = harness.seeds_of(args, [0, 1])
    # A local Ray just large enough for one trial of the largest: trials run one after another.
    trial_cpus = max(sum(b.get("CPU", 0) for b in resource_bundles({"algo": a, "num_workers": harness.WORKERS[a]}))
                     for a in args.algos)
    ray.init(address="local", num_cpus=math.ceil(trial_cpus), include_dashboard=False, log_to_driver=False)
    results: dict = json.load(open(args.json)) if os.path.exists(args.json) else {}
    for algo in args.algos:
        for env, budget, cap, every in TASKS[algo]:
            if (args.envs and env not in args.envs) or not env_available(env):
                continue
            runs = results.setdefault(algo, {}).setdefault(env, {"budget": budget, "runs": {}})["runs"]
            for name, flags in CANDIDATES[algo].items():
                if args.candidates and name not in args.candidates:
                    continue
                space = trial_space(algo, env, budget, cap, every, flags, seeds)
                slug = f"{algo}-{env}-{name}".replace(" ", "_").replace("/", "_")
                runs[name] = run_candidate(space, args.storage_path, slug)
                for r in runs[name]:
                    last = r["points"][-1] if r["points"] else {}
                    print(f"{algo} {env} {name} seed {r['seed']}: {len(r['points'])} evaluations, last "
                          f"{last.get('return', '-')} at {last.get('env_steps', '-')} env steps"
                          + (f" ERROR {r['error']}" if r["error"] else ""), file=sys.stderr, flush=True)
                with open(args.json, "w") as f:
                    json.dump(results, f)
    print(report(results))
    return 0


def report(results: dict) -> str:
    lines = []
    for algo, tasks in results.items():
        scores = {env: score(t["runs"], t["budget"]) for env, t in tasks.items()}
        names = [n for n in CANDIDATES[algo] if any(n in t["runs"] for t in tasks.values())]
        seeds = max((len(rs) for t in tasks.values() for rs in t["runs"].values()), default=0)
        lines += [f"\n### {algo}: seconds to {FRACTION:.0%} of the best return in the sweep (from the first "
                  f"evaluation's), median (range) of {seeds} seeds", "", "| candidate | " + " | ".join(
                      f"{env} (→ {next(iter(s.values()))['target']:.0f})" if s else env for env, s in scores.items())
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
                cells.append(f"{s[name]['seconds']:.0f} s ({s[name]['low']:.0f}–{s[name]['high']:.0f})" if reached
                             else "not reached")
            gm = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {gm:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
