"""Where runs first reached a return: env steps, updates and wall seconds.

    python -m benchmarks threshold runs/p0 runs/p1 runs/p2 --return -200
"""

import argparse
import os
import statistics
import sys


def first_crossing(run_dir: str, threshold: float) -> dict | None:
    """The first progress line whose eval_return_mean >= threshold, or None."""
    from dsac.output.curves import read_progress

    return next((row for row in read_progress(run_dir) if row["eval_return_mean"] >= threshold), None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", help="run directories (with progress.jsonl)")
    parser.add_argument("--return", dest="threshold", type=float, required=True, help="return to reach")
    args = parser.parse_args(argv)
    for run in args.runs:
        if not os.path.isfile(os.path.join(run, "progress.jsonl")):
            parser.error(f"{run} is not a run directory (no progress.jsonl)")
    print("| run | env steps | updates | wall s | eval return |")
    print("|---|---|---|---|---|")
    walls, steps = [], []
    for run in args.runs:
        hit = first_crossing(run, args.threshold)
        if hit is None:
            print(f"| {run} | not reached | | | |")
            continue
        walls.append(hit["wall_s"])
        steps.append(hit["env_steps"])
        print(f"| {run} | {hit['env_steps']} | {hit['updates']} | {hit['wall_s']:.1f} "
              f"| {hit['eval_return_mean']:.1f} |")
    if walls:
        print(f"| median | {statistics.median(steps):.0f} | | {statistics.median(walls):.1f} | |")
    return 0 if len(walls) == len(args.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
