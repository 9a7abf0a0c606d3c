"""Does a run hold what it learned? DQN on CartPole-v1 to a fixed budget, several seeds, per
variant: env steps and seconds to the threshold, the final return and the mean return over the
budget (the area under the curve), which marks a run that reaches the threshold and then
falls away. One JSON line per run (command, commit, date, machine, curve) in ``--out``.

    python -m benchmarks stability --settings defaults --variants serial w2 --num_seeds 5
    python -m benchmarks stability --settings parity --variants serial w1 --seeds 0 1 2
    python -m benchmarks stability --variants w2 --num_seeds 3 --flags=--target_update_every=500   # a candidate
    python -m benchmarks stability --report                     # the table of what --out holds

``--settings defaults``: ``launch.py --algo dqn`` as a user types it (``serial`` adds
``--local``, ``wN`` ``--num_workers N``); ``parity``: parity.py's dqn-cartpole settings (SB3's
DQN: no double Q, dueling, prioritized replay or n-step) with its variant flags. ``--flags``
adds launch.py flags (a candidate change; the table shows them with the settings). Every run
evaluates 10 episodes every 2,000 env steps to 50,000.
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks import harness
from benchmarks.parity import TASKS, VARIANTS

TASK = TASKS["dqn-cartpole"]


def flags_for(settings: str, variant: str) -> list[str]:
    if settings == "parity":
        return harness.dsac_flags("dqn", TASK["settings"]) + VARIANTS[variant]
    return ["--algo", "dqn"] + (["--local"] if variant == "serial" else ["--num_workers", variant[1:]])


def record(settings: str, variant: str, seed: int, budget: int, extra: list[str] | None = None) -> dict:
    """One run of ``variant`` at ``seed`` to ``budget`` env steps, with ``extra`` launch.py flags."""
    flags = flags_for(settings, variant) + list(extra or [])
    run = harness.run_dsac(flags, TASK["env"], seed, budget, TASK["eval_every"], timeout=max(900.0, budget * 0.05))
    points = run["points"]
    hit = harness.first_reaching(points, TASK["threshold"])
    return {
        "settings": " ".join([settings, *(extra or [])]), "variant": variant, "seed": seed, "budget": budget,
        **harness.provenance(run["command"]),
        "final": points[-1]["return"] if points else None,
        "auc": harness.area_under_curve(points, budget),
        "hit_steps": hit and hit["env_steps"], "hit_s": hit and hit["wall_s"],
        # [env steps, return, seconds from process start] of each evaluation
        "curve": [[p["env_steps"], round(p["return"], 1), p["wall_s"]] for p in points], "error": run["error"],
    }


def report(path: str) -> str:
    runs = [json.loads(line) for line in open(path) if line.strip()]
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        groups.setdefault((run["settings"], run["variant"], run["budget"]), []).append(run)
    lines = [f"DQN on {TASK['env']}, threshold {TASK['threshold']:g}: median (range) over seeds", "",
             "| settings | variant | seeds | env steps to it | seconds to it | final return | mean return (area) "
             "| final ≥ threshold | commits |", "|---|---|---|---|---|---|---|---|---|"]
    for (settings, variant, _budget), group in sorted(groups.items()):
        missing = sum(r["hit_steps"] is None for r in group)
        held = sum((r["final"] or 0) >= TASK["threshold"] for r in group)
        cells = [harness.fmt_spread(harness.spread(r["hit_steps"] for r in group), missing=missing),
                 harness.fmt_spread(harness.spread(r["hit_s"] for r in group), missing=missing),
                 harness.fmt_spread(harness.spread(r["final"] for r in group)),
                 harness.fmt_spread(harness.spread(r["auc"] for r in group)), f"{held} of {len(group)}",
                 ", ".join(sorted({r["commit"] for r in group}))]
        lines.append(f"| {settings} | {variant} | {len(group)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", choices=["defaults", "parity"], default="defaults")
    parser.add_argument("--variants", nargs="+", default=["serial", "w2"],
                        help="serial, or wN (N rollout workers); parity: its variants (w1, w2, w8, w8-fresh)")
    harness.add_seed_flags(parser, "0..4")
    parser.add_argument("--budget", type=int, default=TASK["budget"])
    parser.add_argument("--flags", default="", help="extra launch.py flags, e.g. --flags=--lr=lin_2.3e-3")
    harness.add_results_flags(parser, "runs/stability.jsonl", "benchmarks/results/stability/dqn-cartpole.jsonl")
    args = parser.parse_args(argv)
    if not args.report:
        for variant in args.variants:
            if not (variant == "serial" or (variant[:1] == "w" and variant[1:].isdigit()) or variant in VARIANTS):
                parser.error(f"unknown variant {variant!r}")
            for seed in harness.seeds_of(args, [0, 1, 2, 3, 4]):
                rec = record(args.settings, variant, seed, args.budget, args.flags.split())
                harness.append_record(args.out, rec)
                print(f"{args.settings} {variant} seed {seed}: final {rec['final']}, area {rec['auc']}, "
                      f"to {TASK['threshold']:g} in {rec['hit_steps']} steps / {rec['hit_s']} s", file=sys.stderr)
    return harness.print_report(parser, args.out, report)


if __name__ == "__main__":
    sys.exit(main())
