"""Does preprocessing other image envs' frames pay? SAC on CarRacing-v3 (or ``--env``) for
``--minutes`` per run, with the default preprocessing (84x84, gray, 4 stacked) and with the raw
frames (``--preprocess_images false``: one 96x96x3 frame), ``--seeds`` each, one run at a time,
alternating the two so that a slower stretch of the machine falls on both.

    python scripts/image_preprocessing.py                       # 15 minutes x 2 variants x 2 seeds
    python scripts/image_preprocessing.py --report runs/image_preprocessing   # the table again

Prints, per variant and seed: env steps, updates, the evaluations' returns (last and best);
then the medians. Runs go to ``--out`` (one ``launch.py`` output directory each).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {"preprocessed": [], "raw": ["--preprocess_images", "false"]}


def run(env: str, variant: str, seed: int, minutes: float, workers: int, out: str) -> str:
    """One ``launch.py`` run; returns its output directory."""
    directory = os.path.join(out, f"{variant}-seed{seed}")
    if os.path.exists(os.path.join(directory, "progress.jsonl")):
        return directory  # done in an earlier sitting
    command = [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--algo", "sac", "--env", env,
               "--num_workers", str(workers), "--seed", str(seed), "--max_seconds", str(int(minutes * 60)),
               "--output_dir", directory, "--no-progress_bar", *VARIANTS[variant]]
    print(" ".join(command), file=sys.stderr, flush=True)
    with open(f"{directory}.log", "w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False, cwd=REPO_ROOT)
    return directory


def summary(directory: str) -> dict:
    """Env steps, updates and evaluation returns of one run's ``progress.jsonl``."""
    rows = [json.loads(line) for line in open(os.path.join(directory, "progress.jsonl"))]
    returns = [row["eval_return_mean"] for row in rows]
    return {"env_steps": rows[-1]["env_steps"], "updates": rows[-1]["updates"], "evaluations": len(rows),
            "last": returns[-1], "best": max(returns), "curve": [(row["env_steps"], round(row["eval_return_mean"]))
                                                                 for row in rows]}


def report(out: str) -> None:
    for variant in VARIANTS:
        found = sorted(d for d in os.listdir(out) if d.startswith(f"{variant}-seed") and not d.endswith(".log"))
        results = [summary(os.path.join(out, d)) for d in found
                   if os.path.exists(os.path.join(out, d, "progress.jsonl"))]
        for name, r in zip(found, results, strict=False):
            print(f"{name}: {r['env_steps']} env steps, {r['updates']} updates, last {r['last']:.0f}, "
                  f"best {r['best']:.0f}; curve {r['curve']}")
        if results:
            print(f"{variant}: median last {statistics.median(r['last'] for r in results):.0f}, "
                  f"median best {statistics.median(r['best'] for r in results):.0f} over {len(results)} seeds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CarRacing-v3")
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "runs", "image_preprocessing"))
    parser.add_argument("--report", metavar="DIR", help="print the table of an earlier sitting's runs and stop")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    os.makedirs(args.out, exist_ok=True)
    for seed in args.seeds:
        for variant in VARIANTS:
            run(args.env, variant, seed, args.minutes, args.workers, args.out)
    report(args.out)


if __name__ == "__main__":
    main()
