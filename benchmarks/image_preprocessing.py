"""Does preprocessing other image envs' frames pay? SAC on CarRacing-v3 (or ``--env``) for
``--minutes`` per run, with the default preprocessing (84x84, gray, 4 stacked) and with the raw
frames (``--preprocess_images false``: one 96x96x3 frame), ``--seeds`` each, one run at a time,
alternating the two so that a slower stretch of the machine falls on both.

    python -m benchmarks image-preprocessing                       # 15 minutes x 2 variants x 2 seeds
    python -m benchmarks image-preprocessing --report runs/image_preprocessing   # the table again

Prints, per variant and seed: env steps, updates, the evaluations' returns (last and best),
and the final weights (``weights.pkl``) evaluated afterwards on the run's own evaluation
episodes (a run's last in-run evaluation may fall before its end); then the medians. Runs go to
``--out`` (one ``launch.py`` output directory each).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from benchmarks import harness

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


def final_return(directory: str) -> float:
    """The mean return of the run's final weights on its own evaluation episodes."""
    from dsac.formats.files import load_weights
    from dsac.formats.inference import load_policy
    from dsac.runtime.evaluation import evaluate

    path = os.path.join(directory, "weights.pkl")
    payload = load_weights(path)
    policy = load_policy(path)
    returns = evaluate(lambda obs: policy(obs), policy.env_id, payload["eval_episodes"], payload["eval_seed"],
                       policy.env_kwargs, policy.flatten_obs, policy.atari)
    return float(returns.mean())


def summary(directory: str) -> dict:
    """Env steps, updates and evaluation returns of one run (``progress.jsonl``, ``summary.json``)."""
    from dsac.output.curves import read_progress

    rows = read_progress(directory)
    done = json.load(open(os.path.join(directory, "summary.json")))
    returns = [row["eval_return_mean"] for row in rows]
    return {"env_steps": done["env_steps"], "updates": done["updates"], "evaluations": len(rows),
            "last": returns[-1], "best": max(returns), "final": final_return(directory),
            "curve": [(row["env_steps"], round(row["eval_return_mean"])) for row in rows]}


def report(out: str) -> None:
    for variant in VARIANTS:
        found = sorted(d for d in os.listdir(out) if d.startswith(f"{variant}-seed") and not d.endswith(".log"))
        results = [summary(os.path.join(out, d)) for d in found
                   if os.path.exists(os.path.join(out, d, "progress.jsonl"))]
        for name, r in zip(found, results, strict=False):
            print(f"{name}: {r['env_steps']} env steps, {r['updates']} updates; evaluations {r['curve']}; "
                  f"final weights {r['final']:.1f}")
        if results:
            print(f"{variant}: median final {statistics.median(r['final'] for r in results):.1f}, "
                  f"median best evaluation {statistics.median(r['best'] for r in results):.1f} "
                  f"over {len(results)} seeds")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="CarRacing-v3")
    parser.add_argument("--minutes", type=float, default=15.0)
    harness.add_seed_flags(parser, "0 1")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "runs", "image_preprocessing"))
    parser.add_argument("--report", metavar="DIR", help="print the table of an earlier sitting's runs and stop")
    args = parser.parse_args(argv)
    if args.report:
        report(args.report)
        return 0
    os.makedirs(args.out, exist_ok=True)
    for seed in harness.seeds_of(args, [0, 1]):
        for variant in VARIANTS:
            run(args.env, variant, seed, args.minutes, args.workers, args.out)
    report(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
