"""Submit a dsac run to a Ray cluster as a Ray job (a wrapper of ``ray job submit``).

    dsac-submit --address http://<head>:8265 -- --num_workers 64 --num_learners 2
    dsac-submit --address http://<head>:8265 --no-wait --install -- --env Hopper-v5 ...
    dsac-submit --dry-run -- --num_workers 8          # print the command only

Everything after ``--`` goes to ``launch.py``. The repository is uploaded as the job's working
directory, without run outputs, virtualenvs, caches, tracker stores, Tune results and
secrets (``.env*``, SSH keys, certificates, credential files and folders such as ``.pypirc``
and ``.aws/``; one line names those it left out). ``--install`` makes the cluster install requirements.txt for the
job (needed when the nodes lack dsac's packages); without it the nodes' own Python
environment is used. Follow a job with ``ray job logs -f <id>``,
stop it with ``ray job stop <id>``: the driver gets SIGTERM, stops the tasks and saves the
final weights (the job's runtime env gives it ``--stop_grace`` seconds before SIGKILL).
"""

import argparse
import fnmatch
import json
import os
import shlex
import shutil
import subprocess
import sys

from dsac.errors import OneLineParser, quiet_when_the_reader_leaves

# The checkout dsac runs from: what the job uploads as its working directory.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Secrets, which must not leave the machine in a job's package: env files, keys and
# certificates, credential stores of package registries, clouds and git. Patterns as
# .gitignore's (Ray applies them so), each matching a name at any depth; a trailing ``/``: a
# folder and all in it.
SECRETS = [".env", ".env.*", ".envrc", "*credentials*", ".git-credentials", ".netrc", "_netrc", ".pypirc", ".npmrc",
           ".yarnrc", ".dockercfg", ".htpasswd", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", "*.pem", "*.key",
           "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx", "*.gpg", "secrets.json", "secrets.yaml", "secrets.yml",
           "secrets.toml", ".aws/", ".ssh/", ".gnupg/", ".docker/", ".kube/", ".azure/", "gcloud/"]

# Not uploaded with the working directory: outputs, environments, caches, VCS data; tracker
# stores (an MLflow SQLite store and its artifacts, W&B's offline runs) and Tune's results
# (dsac-tune's default --storage_path), which can be gigabytes and are no input of a run;
# and the secrets above.
EXCLUDES = ["runs/", "dsac_runs/", ".git/", ".venv/", "venv/", "env/", "__pycache__/", "*.pyc", ".pytest_cache/",
            ".ruff_cache/", "*.pkl", "*.npz", "tb/", "*.png", "*.mp4",
            "mlflow.db", "mlruns/", "mlartifacts/", "wandb/", "tune_results/", *SECRETS]

# Seconds `ray job stop` may wait for the final save: at least one, at most a day.
MAX_STOP_GRACE_S = 86_400


def _matches(name: str, is_dir: bool, patterns: list[str]) -> bool:
    """Whether a file or folder name matches one of ``patterns`` (slash-free .gitignore patterns,
    a trailing ``/`` for folders only), as Ray's gitwildmatch matches them."""
    return any(fnmatch.fnmatchcase(name, p.rstrip("/")) for p in patterns if is_dir or not p.endswith("/"))


def secrets_left_out(root: str) -> list[str]:
    """The secret-looking files and folders under ``root`` that the upload leaves out (relative
    paths, a folder with a trailing ``/``), not looking inside folders left out anyway."""
    found = []
    for folder, dirs, files in os.walk(root):
        where = os.path.relpath(folder, root)
        for name in sorted(dirs):
            if _matches(name, True, SECRETS):
                found.append(os.path.normpath(os.path.join(where, name)) + "/")
        dirs[:] = sorted(d for d in dirs if not _matches(d, True, EXCLUDES))
        found += [os.path.normpath(os.path.join(where, name)) for name in sorted(files)
                  if _matches(name, False, SECRETS)]
    return found


def stop_grace(text: str) -> int:
    """``--stop_grace``: whole seconds (Ray reads them with ``int``), from one to a day."""
    try:
        seconds = int(text)
    except ValueError:
        seconds = None
    if seconds is None or not 1 <= seconds <= MAX_STOP_GRACE_S:
        raise argparse.ArgumentTypeError(f"must be a whole number of seconds in [1, {MAX_STOP_GRACE_S}], got {text!r}")
    return seconds


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
    parser = OneLineParser("submit", prog="dsac-submit", description=__doc__)
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                        help="the cluster's dashboard, e.g. http://<head>:8265 (default: RAY_ADDRESS)")
    parser.add_argument("--no-wait", action="store_true", help="return once submitted (then: ray job logs -f <id>)")
    parser.add_argument("--install", action="store_true", help="install requirements.txt on the cluster for the job")
    parser.add_argument("--submission-id", default=None, help="a job id of your choosing")
    parser.add_argument("--stop_grace", type=stop_grace, default=60,
                        help=f"seconds `ray job stop` waits for the final save before SIGKILL (1 to "
                             f"{MAX_STOP_GRACE_S})")
    parser.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    args = parser.parse_args(argv)
    if not os.path.exists(os.path.join(REPO_ROOT, "launch.py")):
        print(f"submit: error: the job uploads a dsac checkout (launch.py, requirements.txt), but dsac runs from "
              f"{REPO_ROOT}: run dsac-submit from a clone of the repository (pip install -e .)", file=sys.stderr)
        return 2
    command = build_command(args, launch_args)
    left_out = secrets_left_out(REPO_ROOT)
    if left_out:
        more = f" and {len(left_out) - 10} more" if len(left_out) > 10 else ""
        shown = ", ".join(repr(name) for name in left_out[:10]) + more
        print(f"submit: not uploaded, as secrets: {shown}", flush=True)
    from dsac.output.trackers import redact_uri

    print(shlex.join(redact_uri(part) for part in command), flush=True)  # an --mlflow URI's password is not shown
    if args.dry_run:
        return 0
    if shutil.which("ray") is None:
        print("submit: error: the `ray` command is not installed: pip install 'ray[default]'", file=sys.stderr)
        return 2
    return subprocess.call(command, cwd=REPO_ROOT)


if __name__ == "__main__":
    sys.exit(main())
