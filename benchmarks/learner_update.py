"""What one learner update costs: an algorithm's compiled update loop (``learn_on_batches``, 8 batches
of 256 a call; SAC's defaults unless told) on random batches of a given observation and action size,
plain and compiled with XLA (``--learner_xla``), each in its own process, A B A B.

    python -m benchmarks learner-update --sizes 17x6 348x17 --seconds 20 --threads 1
    python -m benchmarks learner-update --algo crossq --sizes 105x8 --settings '{"critic_hiddens": [512, 512]}'

The first line is the machine-pace figure the MuJoCo table records beside its runs (``--sizes 17x6
--seconds 10 --repeats 1``, plain).

Prints updates per second and the first call's seconds (tracing, and XLA's compile) per variant.
Sizes: 17x6 is HalfCheetah-v5's observation and action, 348x17 Humanoid-v5's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from benchmarks import harness
from benchmarks.harness import REPO_ROOT

# The machine's pace, as a table records it beside its runs: the plain update's rate on
# HalfCheetah's sizes, one thread, one round (the xla row it also prints is not read).
PACE_ARGS = ["--sizes", "17x6", "--seconds", "10", "--threads", "1", "--repeats", "1"]


def machine_pace(timeout: float = 600.0) -> tuple[float | None, str]:
    """This machine's pace now: the plain row's updates/s of ``python -m benchmarks learner-update``
    with :data:`PACE_ARGS`, and that command; None (with a warning on stderr) when it fails."""
    command = ["python", "-m", "benchmarks", "learner-update", *PACE_ARGS]
    try:
        run = subprocess.run([sys.executable, *command[1:]], capture_output=True, text=True, cwd=REPO_ROOT,
                             timeout=timeout, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        output, failed = run.stdout, run.returncode != 0 and (run.stderr.strip().splitlines() or ["?"])[-1]
    except subprocess.TimeoutExpired:
        output, failed = "", f"timed out after {timeout:.0f} s"
    pace = plain_rate(output)
    if failed or pace is None:
        print(f"benchmarks: warning: no machine pace ({failed or 'no plain row'}): records carry none",
              file=sys.stderr)
    return pace, " ".join(command)


def sitting_pace() -> float | None:
    """:func:`machine_pace` at the start of a sitting, said on stderr: the figure its records carry."""
    pace, command = machine_pace()
    print(f"machine pace: {f'{pace:,.0f}' if pace is not None else '—'} updates/s ({command})", file=sys.stderr,
          flush=True)
    return pace


def plain_rate(table: str) -> float | None:
    """The first plain row's updates/s in the table :func:`main` prints (the first round's)."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1] == "plain":
            return float(cells[2].split("/")[0])
    return None


def measure(obs_dim: int, act_dim: int, xla: bool, seconds: float, threads: int, algo: str = "sac",
            settings: dict | None = None) -> dict:
    """One variant in this process, built as a learner task builds it (``--learner_xla``) with
    ``--algo algo`` and the config ``settings``: updates/s over ``seconds`` after the first call,
    and that call's seconds."""
    import time

    import gymnasium as gym
    import numpy as np

    from dsac.runtime.tf_setup import configure_tensorflow

    configure_tensorflow(0, threads, threads)
    from dsac.config import Config
    from dsac.runtime.build import make_learner

    # The algorithm's defaults (SAC's: 2x64, lr 1e-3, batch 256) and what ``settings`` change.
    config = Config(algo=algo, env="Pendulum-v1", learner_xla=xla, **(settings or {})).validate()
    policy = make_learner(config, gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                          gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32))
    batches = harness.random_sac_batches(8, config.batch_size, obs_dim, act_dim, 1.0)
    started = time.perf_counter()
    policy.learn_on_batches(batches)
    first_s = time.perf_counter() - started
    return {"updates_per_s": harness.updates_per_second(policy, batches, seconds), "first_call_s": first_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks learner-update", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["17x6", "348x17"], help="observation x action sizes")
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per variant, after its first call")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow threads")
    parser.add_argument("--repeats", type=int, default=2, help="A B rounds")
    parser.add_argument("--algo", default="sac", choices=["sac", "crossq"], help="whose update")
    parser.add_argument("--settings", default="{}", help="config settings as JSON, e.g. "
                        "'{\"fcnet_hiddens\": [256, 256]}'")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one variant, in a fresh process
    args = parser.parse_args(argv)
    if args.one:
        spec = json.loads(args.one)
        print(json.dumps(measure(spec["obs"], spec["act"], spec["xla"], args.seconds, args.threads, args.algo,
                                 json.loads(args.settings))))
        return 0
    try:
        sizes = [tuple(int(x) for x in size.split("x")) for size in args.sizes]
    except ValueError:
        parser.error(f"--sizes are OBSxACT, e.g. 17x6; got {args.sizes}")
    print("| obs x act | variant | updates/s (each round) | first call s |")
    print("|---|---|---|---|")
    for obs_dim, act_dim in sizes:
        rows: dict[str, list[dict]] = {"plain": [], "xla": []}
        for _ in range(args.repeats):
            for name in rows:
                spec = json.dumps({"obs": obs_dim, "act": act_dim, "xla": name == "xla"})
                run = subprocess.run([sys.executable, "-m", "benchmarks.learner_update", "--one", spec,
                                      "--seconds", str(args.seconds), "--threads", str(args.threads),
                                      "--algo", args.algo, "--settings", args.settings],
                                     capture_output=True, text=True, cwd=REPO_ROOT,
                                     env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
                if run.returncode != 0:
                    print(f"benchmarks: error: {name} {obs_dim}x{act_dim}: "
                          f"{(run.stderr.strip().splitlines() or ['?'])[-1]}", file=sys.stderr)
                    return 1
                rows[name].append(json.loads(run.stdout.strip().splitlines()[-1]))
        for name, results in rows.items():
            rates = " / ".join(f"{r['updates_per_s']:.0f}" for r in results)
            firsts = " / ".join(f"{r['first_call_s']:.1f}" for r in results)
            print(f"| {obs_dim} x {act_dim} | {name} | {rates} | {firsts} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
