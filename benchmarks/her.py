"""Goal-conditioned tasks with hindsight relabeling: dsac's SAC with ``--her`` against
Stable-Baselines3's SAC with ``HerReplayBuffer`` set up as rl-zoo sets it up, one run at a time,
several seeds, success rate against wall-clock time, the machine's pace beside every run.

    python -m benchmarks her --seeds 0 1 2                      # FetchReach-v4, both sides
    python -m benchmarks her --tasks PointMaze_UMaze-v3 --minutes 10
    python -m benchmarks her --report                           # the tables of --out
    python -m benchmarks her --plot                             # a success-rate PNG per task, beside --out

Needs gymnasium-robotics (``pip install -r requirements-robotics.txt``; the Fetch tasks need its
pinned ``mujoco``) and, for the peer, ``stable-baselines3`` and ``torch`` at the pins of
``requirements-bench.txt``.

Both sides get the task's env-step budget and stop at ``--minutes`` from process start,
whichever comes first, and evaluate 10 deterministic episodes on the same start states
(``dsac.runtime.evaluation.evaluation_seed``) every 1,000 env steps on Fetch and every 5,000 on the maze
(its episodes are 300 steps, Fetch's 50); success is what the episode's last info says.
  dsac  ``python launch.py --algo sac --her --gamma G --lr L --learning_starts N`` and the task's
        budget, as a user types it: dsac's defaults otherwise (2 rollout workers, ``--her_k 4``,
        ``--her_strategy future``, SAC's 2x64 networks, batch 256; evaluation in its own process).
  sb3   SAC + ``HerReplayBuffer`` with rl-zoo's FetchReach settings (``hyperparams/sac.yml``:
        ``n_sampled_goal`` 4, ``future``, gamma 0.95, lr 1e-3, batch 256, ``learning_starts``
        1,000, ``net_arch`` [64, 64], ``normalize: True``; its budget, 20,000 env steps).
        rl-zoo has no maze settings: the maze runs use the FetchReach ones with the maze's budget.
        Torch at 1 thread; its evaluations run in its own process, on its clock
        (``benchmarks/sb3_her.py``).

The time to success is the wall-clock time (from process start) of the first evaluation whose
success rate reaches ``--level`` (0.9). One JSON line per run in ``--out``; ``--report`` prints
the per-run table and the per-side table over seeds (the median time to success and how many
reached it, the median final and best success rate).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks import harness, stats

ZOO_HER = {  # rl-zoo hyperparams/sac.yml, FetchReach (normalize: True is VecNormalize in sb3_her.py)
    "buffer_size": 1_000_000, "ent_coef": "auto", "batch_size": 256, "gamma": 0.95, "learning_rate": 1e-3,
    "learning_starts": 1000, "policy_kwargs": {"net_arch": [64, 64]},
    "replay_buffer_kwargs": {"goal_selection_strategy": "future", "n_sampled_goal": 4},
}
# task -> the env id both sides make, its env-step budget, env steps between evaluations (10
# episodes of 50 steps for Fetch, of 300 for the maze), dsac's flags
TASKS = {
    "FetchReach-v4": ("gymnasium_robotics:FetchReach-v4", 20_000, 1000,
                      ["--her", "--gamma", "0.95", "--lr", "1e-3", "--learning_starts", "1000"]),
    "PointMaze_UMaze-v3": ("gymnasium_robotics:PointMaze_UMaze-v3", 100_000, 5000,
                           ["--her", "--gamma", "0.95", "--lr", "1e-3", "--learning_starts", "1000"]),
}
SIDES = ("dsac", "sb3")


def run(task: str, side: str, seed: int, minutes: float, pace: float | None, level: float) -> dict:
    """One run of ``side`` on ``task`` for ``minutes`` at most: its result record."""
    env, budget, every, flags = TASKS[task]
    cap = 60.0 * minutes
    if side == "dsac":
        result = harness.run_dsac(["--algo", "sac", *flags, "--max_seconds", f"{cap:g}"], env, seed, budget,
                                  every, timeout=cap + 1800, as_typed=True)
    else:
        spec = {"env": env, "seed": seed, "kwargs": ZOO_HER, "budget": budget, "eval_every": every,
                "max_seconds": cap}
        result = harness.run_module("benchmarks.sb3_her", ["--curve", json.dumps(spec)], timeout=cap + 1800)
        if result is None:
            result = {"points": [], "error": "stable-baselines3 is not installed (requirements-bench.txt)",
                      "command": ["python", "-m", "benchmarks.sb3_her"]}
    points = result["points"]
    reached = next((p for p in points if (p.get("success") or 0.0) >= level), None)
    successes = [p["success"] for p in points if p.get("success") is not None]
    return {
        "suite": "her", "task": task, "env": env, "side": side, "algo": "sac", "seed": seed, "minutes": minutes,
        "budget": budget, "eval_every": every, **harness.provenance(result["command"]), "pace_updates_per_s": pace,
        "level": level,
        "reached_s": reached["wall_s"] if reached else None,
        "reached_env_steps": reached["env_steps"] if reached else None,
        "final_success": successes[-1] if successes else None, "best_success": max(successes, default=None),
        # [env steps, success rate, return, seconds from process start, updates] of each evaluation
        "curve": [[p["env_steps"], p.get("success"), round(p["return"], 2), p["wall_s"], p.get("updates")]
                  for p in points],
        "error": result["error"],
    }


def load(path: str) -> dict:
    """Every record in ``path``, by (task, side, seed, k): the k-th run of that seed, in the
    file's order (a later run of a seed is another sample, not a replacement)."""
    return harness.every_run(path, lambda rec: ((rec["task"], rec["side"], rec["seed"]), rec))


def _order(key: tuple) -> tuple:
    return (list(TASKS).index(key[0]) if key[0] in TASKS else 99, SIDES.index(key[1]) if key[1] in SIDES else 9,
            *key[2:])


def _rate(value) -> str:
    return f"{value:.2f}" if value is not None else "—"


def report(path: str, figures: str | None = None) -> str:
    """The tables of the records in ``path``: per run, then per task and side over seeds; with
    ``figures`` (a link prefix), a link to each task's curves PNG (:func:`plot` writes them)."""
    latest = load(path)
    rows = sorted(latest.items(), key=lambda kv: _order(kv[0]))
    level = next(iter(latest.values()))["level"] if latest else 0.9
    lines = ["Success rate of 10 deterministic episodes, evaluated every `eval` env steps; time from "
             f"process start to the first evaluation at {level:g} or above. Pace: the machine's learner updates/s "
             "in the run's sitting (`python -m benchmarks learner-update --sizes 17x6 --seconds 10 --threads 1 "
             "--repeats 1`, plain).", "",
             "| task | side | seed | eval | reached | env steps then | final success | best | env steps done "
             "| pace (updates/s) | sitting |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (task, side, seed, _), rec in rows:
        reached = f"{rec['reached_s']:,.0f} s" if rec["reached_s"] is not None else "not reached"
        steps = f"{rec['reached_env_steps']:,}" if rec["reached_env_steps"] is not None else "—"
        done = f"{rec['curve'][-1][0]:,}" if rec["curve"] else "—"
        error = f" ({rec['error']})" if rec.get("error") else ""
        pace = f"{rec['pace_updates_per_s']:,.0f}" if rec.get("pace_updates_per_s") else "—"
        lines.append(f"| {task} | {side}{error} | {seed} | {rec['eval_every']:,} | {reached} | {steps} "
                     f"| {_rate(rec['final_success'])} "
                     f"| {_rate(rec['best_success'])} | {done} | {pace} | {rec['commit']} {rec['date'][:10]} |")
    lines += ["", "Over seeds: the median time to success (of the runs that reached it) and the median final and "
              "best success rate.", "",
              "| task | side | seeds | reached | seconds to success: median (min–max) | env steps then: median "
              "| final success: median | best: median | pace (updates/s) |", "|---|---|---|---|---|---|---|---|---|"]
    by_side: dict = {}
    for (task, side, *_), rec in rows:
        by_side.setdefault((task, side), []).append(rec)
    for (task, side), recs in by_side.items():
        times = [r["reached_s"] for r in recs if r["reached_s"] is not None]
        steps = [r["reached_env_steps"] for r in recs if r["reached_env_steps"] is not None]
        final = stats.summarize(r["final_success"] for r in recs)
        best = stats.summarize(r["best_success"] for r in recs)
        lines.append(f"| {task} | {side} | {len(recs)} | {len(times)} of {len(recs)} "
                     f"| {harness.fmt_spread(harness.spread(times), ',.0f')} "
                     f"| {harness.fmt_spread(harness.spread(steps), ',.0f')} | {_rate(final['median'])} "
                     f"| {_rate(best['median'])} "
                     f"| {harness.fmt_spread(harness.spread([r.get('pace_updates_per_s') for r in recs]))} |")
    if figures is not None:
        tasks = sorted({task for task, *_ in latest}, key=lambda t: _order((t, "")))
        lines += ["", "Curves, each seed's success rate against wall-clock minutes: "
                  + ", ".join(f"[{task}]({figures}{task}.png)" for task in tasks)]
    lines += ["", "Commands: " + "; ".join(sorted({f"`{rec['command']}`" for rec in latest.values()}))]
    return "\n".join(lines)


def plot(path: str, out_dir: str) -> list[str]:
    """One PNG per task, ``<out_dir>/<task>.png``: each seed's success rate against wall-clock
    minutes from process start, a colour per side; the paths written."""
    plt = harness.pyplot()
    by_task: dict = {}
    for (task, side, *_), rec in sorted(load(path).items(), key=lambda kv: _order(kv[0])):
        by_task.setdefault(task, []).append((side, rec))
    written = []
    for task, runs in by_task.items():
        fig, ax = plt.subplots(figsize=(8, 4.5))
        seen: dict = {}
        for side, rec in runs:
            seen[side] = seen.get(side, 0) + 1
            curve = [c for c in rec["curve"] if c[1] is not None]
            ax.plot([c[3] / 60 for c in curve], [c[1] for c in curve], color=f"C{SIDES.index(side) % 10}",
                    linewidth=1, alpha=0.8, label=side if seen[side] == 1 else None)
        for line in ax.get_legend_handles_labels()[0]:
            count = seen[line.get_label()]
            line.set_label(f"{line.get_label()} ({count} seed{'s' if count > 1 else ''})")
        ax.set_xlabel("wall-clock minutes from process start")
        ax.set_ylabel("success rate (10 episodes)")
        ax.set_ylim(-0.05, 1.05)
        ax.set_title(f"{task}: SAC with hindsight relabeling, each seed")
        ax.legend(fontsize="small")
        fig.tight_layout()
        os.makedirs(out_dir, exist_ok=True)
        written.append(os.path.join(out_dir, f"{task}.png"))
        fig.savefig(written[-1], dpi=90, metadata={"Software": None})
        plt.close(fig)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["FetchReach-v4"], choices=list(TASKS))
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--level", type=float, default=0.9, help="the success rate a run's time to success counts to")
    harness.add_seed_flags(parser, "0")
    harness.add_plot_flag(parser, "each task's curves (<task>.png)")
    harness.add_results_flags(parser, "runs/her.jsonl", "benchmarks/results/her/results.jsonl", minutes=10.0)
    args = parser.parse_args(argv)
    if args.plot:
        return harness.draw(parser, args.out, plot)
    if not args.report:
        harness.check_minutes(parser, args.minutes)
        if not 0.0 < args.level <= 1.0:
            parser.error(f"--level must be in (0, 1], got {args.level:g}")
        from benchmarks.learner_update import sitting_pace

        pace = sitting_pace()
        for task in args.tasks:
            for seed in harness.seeds_of(args, [0]):
                for side in args.sides:
                    rec = run(task, side, seed, args.minutes, pace, args.level)
                    harness.append_record(args.out, rec)
                    print(f"{task} {side} seed {seed}: success {rec['final_success']} reached {rec['reached_s']} s "
                          f"error {rec['error']}", file=sys.stderr, flush=True)
    return harness.print_report(parser, args.out, report)


if __name__ == "__main__":
    sys.exit(main())
