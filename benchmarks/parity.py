r"""Per-update parity with Stable-Baselines3: dsac and SB3 at equal settings, on the same
evaluation start states, several seeds; learning curves of the evaluation return against env
steps and against gradient updates, with 95% confidence bands.

    python -m benchmarks parity --quick          # under ~20 minutes on 2 cores: 3 tasks, 2 seeds
    python -m benchmarks parity                  # the full run: 4 tasks, 5 seeds (hours; see --tasks)
    python -m benchmarks parity --tasks sac-pendulum --variants serial sb3 --num_seeds 3
    python -m benchmarks parity --seeds 3 4      # add seeds 3 and 4 to what parity/ holds
    python -m benchmarks parity --report         # the table and plots of what parity/ holds
    python -m benchmarks parity --tasks sac-lunar --variants serial sb3 --num_seeds 2 --budget 50000 \
        --out parity-lunar50k

The full run is long, so it can be made in sittings: runs already in ``<out>/parity.json`` at the
same budget and settings are kept and not repeated, and each run records the commit it ran.

Variants: ``serial`` (``launch.py --local``: one process, no Ray), ``w1``/``w2``/``w8`` (the
distributed system with 1, 2 and 8 rollout workers), ``w8-fresh`` (8 workers kept closer to the
learner: what stale weights and collection running ahead cost; not in --quick) and ``sb3`` (needs ``pip install -r
requirements-bench.txt``). Every variant gets the same settings (``TASKS``: network sizes, lr,
batch, buffer, warm-up, updates per env step, target updates, DQN's exploration), translated by
``benchmarks/harness.py``. What stays different is printed under the table: with several workers
dsac's DQN explores with Ape-X's fixed per-worker ε instead of one decaying ε, and SB3 trains in
bursts of ``train_freq`` env steps where dsac's rate limiter interleaves.

Prints, per task and variant, env steps / updates / seconds to the threshold and the return at
fixed budgets (median and the seeds' range); writes ``<out>/parity.json`` and one
``<out>/<task>.png`` per task (curves against env steps and against updates).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from benchmarks import harness

# task: algo, env, threshold, env-step budget (full, quick), evaluation period, equal settings.
TASKS = {
    "sac-pendulum": {
        "algo": "sac", "env": "Pendulum-v1", "threshold": -200.0, "budget": 15_000, "quick_budget": 6_000,
        "eval_every": 1_000,
        "settings": {"hidden": [64, 64], "lr": 1e-3, "batch_size": 256, "buffer_size": 1_000_000, "warmup": 200,
                     "updates_per_step": 1.0, "gamma": 0.99, "tau": 0.005},
    },
    # The background article's experiment; rl-zoo's settings (its linear lr: --lr lin_7.3e-4 on
    # both sides, dsac's stepped by updates, SB3's by env steps) with 2x256 networks.
    "sac-lunar": {
        "algo": "sac", "env": "LunarLanderContinuous-v3", "threshold": 200.0, "budget": 150_000,
        "quick_budget": None, "eval_every": 5_000,
        "settings": {"hidden": [256, 256], "lr": "lin_7.3e-4", "batch_size": 256, "buffer_size": 1_000_000,
                     "warmup": 10_000, "updates_per_step": 1.0, "gamma": 0.99, "tau": 0.01},
    },
    # SB3's DQN: no dueling, no double Q, uniform replay, 1-step returns; rl-zoo's lr, batch,
    # exploration.
    "dqn-cartpole": {
        "algo": "dqn", "env": "CartPole-v1", "threshold": 475.0, "budget": 50_000, "quick_budget": 20_000,
        "eval_every": 2_000,
        "settings": {"hidden": [256, 256], "lr": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "warmup": 1_000,
                     "updates_per_step": 0.5, "gamma": 0.99, "target_every": 64, "exploration_fraction": 0.16,
                     "final_epsilon": 0.04, "n_step": 1, "dueling": False, "double_q": False,
                     "prioritized": False},
    },
    # rl-zoo's Acrobot settings (one update per env step, target every 250) with 2x64 networks.
    "dqn-acrobot": {
        "algo": "dqn", "env": "Acrobot-v1", "threshold": -100.0, "budget": 50_000, "quick_budget": 20_000,
        "eval_every": 2_000,
        "settings": {"hidden": [64, 64], "lr": 6.3e-4, "batch_size": 128, "buffer_size": 50_000, "warmup": 1_000,
                     "updates_per_step": 1.0, "gamma": 0.99, "target_every": 250, "exploration_fraction": 0.12,
                     "final_epsilon": 0.1, "n_step": 1, "dueling": False, "double_q": False,
                     "prioritized": False},
    },
}
VARIANTS = {"serial": ["--local"], "w1": ["--num_workers", "1"], "w2": ["--num_workers", "2"],
            "w8": ["--num_workers", "8"], "sb3": None,
            # What stale weights and collection running ahead cost 8 workers: the same with
            # collection at most 16 env steps ahead, weights pushed every 2 updates, pulled every 5 steps.
            "w8-fresh": ["--num_workers", "8", "--max_steps_ahead", "16", "--push_every", "2"]}
QUICK_VARIANTS = ["serial", "w1", "w2", "w8", "sb3"]
DIFFERENCES = [
    "dqn with w2/w8: dsac's workers explore with Ape-X's fixed per-worker epsilon (--epsilon 0.4, --epsilon_alpha 7), "
    "not one decaying epsilon",
    "sb3 trains in bursts (train_freq env steps, then gradient_steps updates); dsac's rate limiter lets collection run "
    "up to --max_steps_ahead env steps ahead of the update ratio",
    "initialization: Keras glorot-uniform kernels and zero biases (dsac) vs torch's U(+-1/sqrt(fan_in)) (SB3)",
]


def run_variant(task: dict, variant: str, seed: int, budget: int) -> dict | None:
    """One seed of one variant, to ``budget`` env steps."""
    algo, env, every = task["algo"], task["env"], task["eval_every"]
    timeout = max(600.0, budget * 0.1)
    if variant == "sb3":
        return harness.run_sb3(algo, env, harness.sb3_kwargs(algo, task["settings"]), seed, budget, every,
                               timeout=timeout)
    flags = harness.dsac_flags(algo, task["settings"]) + VARIANTS[variant]
    return harness.run_dsac(flags, env, seed, budget, every, timeout=timeout)


def summarize(task: dict, runs: list[dict], budget: int) -> dict:
    """Steps, updates and seconds to the threshold, and the return at a quarter, half and all
    of the budget, over the seeds."""
    hits = [harness.first_reaching(r["points"], task["threshold"]) for r in runs]
    missing = sum(h is None for h in hits)
    row = {"runs": len(runs), "not_reached": missing, "errors": [r["error"] for r in runs if r["error"]]}
    for key in ("env_steps", "updates", "wall_s"):
        row[key] = harness.spread(h[key] for h in hits if h)
    for frac in (0.25, 0.5, 1.0):
        row[f"return_at_{frac}"] = harness.spread(harness.return_at(r["points"], frac * budget) for r in runs)
    row["auc"] = harness.spread(harness.area_under_curve(r["points"], budget) for r in runs)
    return row


def markdown(results: dict) -> str:
    lines = []
    for name, res in results.items():
        task, budget = TASKS[name], res["budget"]
        lines += [f"\n### {name}: {task['env']} to {task['threshold']:g}, {budget:,} env steps, "
                  f"{len(res['seeds'])} seeds (median, range)", "",
                  f"| variant | env steps to {task['threshold']:g} | updates to it | seconds to it | "
                  f"return at {budget // 4:,} | at {budget // 2:,} | at {budget:,} (final) | mean return (area) |",
                  "|---|---|---|---|---|---|---|---|"]
        for variant, runs in res["variants"].items():
            if not runs:
                continue
            row = summarize(task, runs, budget)
            cells = [harness.fmt_spread(row[k], missing=row["not_reached"]) for k in ("env_steps", "updates", "wall_s")]
            cells += [harness.fmt_spread(row[f"return_at_{frac}"]) for frac in (0.25, 0.5, 1.0)]
            cells.append(harness.fmt_spread(row["auc"]))
            errors = row["errors"]
            label = variant if len(runs) == len(res["seeds"]) else f"{variant} ({len(runs)} seeds)"
            lines.append(f"| {label} | " + " | ".join(cells) + " |" + (f" errors: {errors}" if errors else ""))
    commits = sorted({r.get("commit", "?") for res in results.values() for runs in res["variants"].values()
                      for r in runs})
    if len(commits) > 1:
        lines += ["", f"Runs pooled from several invocations, at commits {', '.join(commits)}."]
    lines += ["", "Settings are equal on every side (parity.py TASKS); what is not:"]
    lines += [f"- {d}" for d in DIFFERENCES]
    return "\n".join(lines)


def plot(name: str, res: dict, path: str) -> None:
    """Return against env steps and against updates, mean and 95% band over seeds, a line per variant."""
    plt = harness.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, axis in zip(axes, ("env_steps", "updates"), strict=True):
        top = max((p[axis] for runs in res["variants"].values() for r in runs for p in r["points"]), default=1)
        grid = np.linspace(0, top, 200)
        for variant, runs in res["variants"].items():
            mean, lo, hi = harness.band(runs, axis, grid)
            ax.plot(grid, mean, label=variant)
            ax.fill_between(grid, lo, hi, alpha=0.2)
        ax.axhline(TASKS[name]["threshold"], color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel(axis.replace("_", " "))
        ax.set_ylabel("evaluation return")
    axes[0].legend()
    fig.suptitle(f"{name}: {TASKS[name]['env']}, {len(res['seeds'])} seeds, equal settings")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def load_results(path: str) -> dict:
    """What an earlier invocation wrote to ``parity.json`` (empty if nothing)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


class StoredRunsDiffer(ValueError):
    """``<out>/parity.json`` holds runs of a task at another budget or other settings."""


def task_results(previous: dict, name: str, budget: int, out: str) -> dict:
    """The task's stored runs when they were made at the same budget and settings (the full run
    is long: it can be made in several sittings, each adding seeds or variants); a fresh entry
    when there are none. Runs at another budget or other settings are never overwritten: that
    is an error naming ``out`` (choose another --out)."""
    task, old = TASKS[name], previous.get(name)
    if not old:
        return {"budget": budget, "seeds": [], "settings": task["settings"], "variants": {}}
    if old.get("budget") == budget and old.get("settings") == task["settings"]:
        return old
    what = (f"{old.get('budget'):,} env steps, not {budget:,}" if old.get("budget") != budget
            else "other settings than parity.py's TASKS now have")
    raise StoredRunsDiffer(f"{os.path.join(out, 'parity.json')} holds {name} runs at {what}; "
                           "give another --out to keep both")


def finish(name: str, res: dict, out: str) -> None:
    """Seeds, summary and plot of a task's runs so far."""
    res["seeds"] = sorted({r["seed"] for runs in res["variants"].values() for r in runs})
    res["summary"] = {v: summarize(TASKS[name], runs, res["budget"]) for v, runs in res["variants"].items()}
    plot(name, res, os.path.join(out, f"{name}.png"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="tasks with a quick budget, 2 seeds, shorter budgets (under ~20 min)")
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS))
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS),
                        help=f"default: all; with --quick {' '.join(QUICK_VARIANTS)}")
    harness.add_seed_flags(parser, "0..4; with --quick 0 1")
    parser.add_argument("--budget", type=int,
                        help="env steps of every run instead of the task's budget (a shorter LunarLanderContinuous "
                        "run; the table states each task's budget)")
    parser.add_argument("--out", default="parity", help="directory for parity.json and the plots (the docs' table: "
                                                        "benchmarks/results/parity)")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: print the table and draw the plots of what --out holds")
    args = parser.parse_args(argv)
    path = os.path.join(args.out, "parity.json")
    results = load_results(path)
    if args.budget is not None and args.budget < 1:
        parser.error(f"--budget must be a positive number of env steps, not {args.budget}")
    if args.report:
        if not results:
            print(f"nothing to report: {path} does not exist", file=sys.stderr)
            return 2
        for name, res in results.items():
            finish(name, res, args.out)
        print(markdown(results))
        return 0
    tasks = args.tasks or [n for n, t in TASKS.items() if not args.quick or t["quick_budget"]]
    seeds = harness.seeds_of(args, list(range(2 if args.quick else 5)))
    args.variants = args.variants or (QUICK_VARIANTS if args.quick else list(VARIANTS))
    os.makedirs(args.out, exist_ok=True)
    code = harness.commit()
    budgets = {name: args.budget or (TASKS[name]["quick_budget"] if args.quick and TASKS[name]["quick_budget"]
                                     else TASKS[name]["budget"]) for name in tasks}
    try:  # before any run: a sitting that would overwrite earlier runs does not start
        for name in tasks:
            results[name] = task_results(results, name, budgets[name], args.out)
    except StoredRunsDiffer as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name in tasks:
        task, budget, res = TASKS[name], budgets[name], results[name]
        for seed in seeds:  # variants alternate seed by seed: the machine's drift falls on all alike
            for variant in args.variants:
                runs = res["variants"].setdefault(variant, [])
                if any(r["seed"] == seed for r in runs):
                    continue  # made by an earlier invocation
                run = run_variant(task, variant, seed, budget)
                if run is None:
                    print("SB3 is not installed (pip install -r requirements-bench.txt): skipping it", file=sys.stderr)
                    args.variants = [v for v in args.variants if v != "sb3"]
                    continue
                runs.append({**run, "commit": code})
                hit = harness.first_reaching(run["points"], task["threshold"])
                print(f"{name} {variant} seed {seed}: {run['process_s']:.0f} s, final return "
                      f"{run['points'][-1]['return'] if run['points'] else '-'}, threshold at "
                      f"{hit['env_steps'] if hit else '-'} env steps"
                      + (f" ERROR {run['error']}" if run["error"] else ""),
                      file=sys.stderr, flush=True)
                with open(path, "w") as f:
                    json.dump(results, f)
        res["variants"] = {v: sorted(runs, key=lambda r: r["seed"]) for v, runs in res["variants"].items() if runs}
        finish(name, res, args.out)
    with open(path, "w") as f:
        json.dump(results, f)
    print(markdown({name: results[name] for name in tasks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
