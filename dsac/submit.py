"""Submit a dsac run to a Ray cluster as a Ray job (a wrapper of ``ray job submit``).

    dsac-submit --address http://<head>:8265 -- --num_workers 64 --num_learners 2
    dsac-submit --address http://<head>:8265 --no-wait --install -- --env Hopper-v5 ...
    dsac-submit --dry-run -- --num_workers 8          # print the command only

Everything after ``--`` goes to ``launch.py``. The repository is uploaded as the job's working
directory, without run outputs, virtualenvs, caches, tracker stores, Tune results and
secrets (``.env``, keys). ``--install`` makes the cluster install requirements.txt for the
job (needed when the nodes lack dsac's packages); without it the nodes' own Python
environment is used. Follow a job with ``ray job logs -f <id>``,
stop it with ``ray job stop <id>``: the driver gets SIGTERM, stops the tasks and saves the
final weights (the job's runtime env gives it ``--stop_grace`` seconds before SIGKILL).
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys

from dsac.errors import quiet_when_the_reader_leaves

# The checkout dsac runs from: what the job uploads as its working directory.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Not uploaded with the working directory: outputs, environments, caches, VCS data; tracker
# stores (an MLflow SQLite store and its artifacts, W&B's offline runs) and Tune's results
# (dsac-tune's default --storage_path), which can be gigabytes and are no input of a run;
# and secrets (.env files, keys), which must not leave the machine in a job's package.
EXCLUDES = ["runs/", "dsac_runs/", ".git/", ".venv/", "venv/", "env/", "__pycache__/", "*.pyc", ".pytest_cache/",
            ".ruff_cache/", "*.pkl", "*.npz", "tb/", "*.png", "*.mp4",
            "mlflow.db", "mlruns/", "mlartifacts/", "wandb/", "tune_results/",
            ".env", ".env.*", "*.pem", "*.key", ".netrc"]


def requirements(path: str) -> list[str]:
    """The pinned packages of a requirements file (comments and includes dropped)."""
    with open(path) as f:
        lines = [line.split("#", 1)[0].strip() for line in f]
    return [line for line in lines if line and not line.startswith("-")]


def runtime_env(install: bool, stop_grace_s: int) -> dict:
    """The job's runtime env: what to leave out of the upload, and what to install."""
    env = {
        "excludes": EXCLUDES,
        # Read by Ray's job supervisor: how long `ray job stop` waits after SIGTERM before SIGKILL.
        "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": str(stop_grace_s), "TF_CPP_MIN_LOG_LEVEL": "2"},
    }
    if install:
        env["pip"] = requirements(os.path.join(REPO_ROOT, "requirements.txt"))
    return env


def build_command(args, launch_args: list[str]) -> list[str]:
    """The ``ray job submit`` command line."""
    command = ["ray", "job", "submit", "--working-dir", REPO_ROOT,
               "--runtime-env-json", json.dumps(runtime_env(args.install, args.stop_grace))]
    if args.address:
        command += ["--address", args.address]
    if args.submission_id:
        command += ["--submission-id", args.submission_id]
    if args.no_wait:
        command.append("--no-wait")
    return [*command, "--", "python", "launch.py", *launch_args]


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    launch_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, launch_args = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="dsac-submit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                        help="the cluster's dashboard, e.g. http://<head>:8265 (default: RAY_ADDRESS)")
    parser.add_argument("--no-wait", action="store_true", help="return once submitted (then: ray job logs -f <id>)")
    parser.add_argument("--install", action="store_true", help="install requirements.txt on the cluster for the job")
    parser.add_argument("--submission-id", default=None, help="a job id of your choosing")
    parser.add_argument("--stop_grace", type=int, default=60,
                        help="seconds `ray job stop` waits for the final save before SIGKILL")
    parser.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    args = parser.parse_args(argv)
    if not os.path.exists(os.path.join(REPO_ROOT, "launch.py")):
        print(f"submit: error: the job uploads a dsac checkout (launch.py, requirements.txt), but dsac runs from "
              f"{REPO_ROOT}: run dsac-submit from a clone of the repository (pip install -e .)", file=sys.stderr)
        return 2
    command = build_command(args, launch_args)
    from dsac.trackers import redact_uri

    print(shlex.join(redact_uri(part) for part in command), flush=True)  # an --mlflow URI's password is not shown
    if args.dry_run:
        return 0
    if shutil.which("ray") is None:
        print("submit: error: the `ray` command is not installed: pip install 'ray[default]'", file=sys.stderr)
        return 2
    return subprocess.call(command, cwd=REPO_ROOT)


if __name__ == "__main__":
    sys.exit(main())
