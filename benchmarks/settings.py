"""The effective settings of a dsac run, so that result tables group runs by what ran, not by
what was typed: ``launch.py --learner_xla`` at a commit where XLA is the default is the same
configuration as no flag, and no flag at two commits whose defaults differ is two.

A run's settings are its validated config (the ``config.json`` it wrote), less where it ran,
what it reported to and its budget (:data:`LEFT_OUT`). A record made before runs recorded them
takes them from ``settings.jsonl`` beside the results: one line per commit and command, the
config that the record's command (``launch.py`` and its flags) built at that commit, made by

    python -m benchmarks.settings benchmarks/results/mujoco/results.jsonl

which checks each commit out in a temporary git worktree and parses the flags there, as
``dsac.cli.main`` does. A setting a commit did not have yet (a flag added later) counts as what
the present code gives it when nothing is typed for a short run: a feature that did not exist
was off. Runs of one configuration at several commits are pooled, and a table names their
commits: what a commit changed in the code without a setting (a fix in a loss) is not seen here.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
import tempfile

from dsac.output.curves import NOT_THE_EXPERIMENT
from dsac.settings.records import RECORD_EXCLUDED_KEYS

# Where a run went, what it reported to and how long it ran: not what it ran. dsac-plot's keys
# that do not make two runs different experiments, and a record's keys that only the user sets;
# besides them the env (a table's row) and the budget (a table's column: every side of a table
# gets the same env-step budget).
# The preset is where settings came from, not a setting: the hyperparameters it set are compared
# (and a commit before an env had one would otherwise get today's).
LEFT_OUT = NOT_THE_EXPERIMENT.union(RECORD_EXCLUDED_KEYS, {
    "env", "max_seconds", "total_env_steps", "stop_timeout", "checkpoint_every", "video_every", "verbose", "preset"})


def trim(config: dict) -> dict:
    """A config's settings: every key but :data:`LEFT_OUT`."""
    return {k: v for k, v in config.items() if k not in LEFT_OUT}


def of_run(run_dir: str) -> dict:
    """The settings of the run in ``run_dir`` (its ``config.json``, read as data)."""
    from dsac.formats.files import read_json

    path = os.path.join(run_dir, "config.json")
    config = read_json(path, path)
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a run's config")
    return trim(config)


@functools.cache
def _baseline(algo: str, env: str) -> str:
    from dsac.config import Config

    return json.dumps(trim(Config.from_dict({"algo": algo, "env": env}).validate().to_dict()))


def baseline(algo: str, env: str) -> dict:
    """What the present code runs for ``algo`` on ``env`` with nothing typed, a short run's
    defaults: the settings a record compares on, and the values of those its commit lacked."""
    return json.loads(_baseline(algo, env))


def identity(settings: dict, algo: str, env: str) -> str:
    """Two runs of ``algo`` on ``env`` with equal identities ran the same configuration: their
    settings on the present code's keys, a key they lack at its baseline value. A key the present
    code no longer has (another algorithm's, or a retired flag) is not compared."""
    base = baseline(algo, env)
    return json.dumps({k: settings.get(k, v) for k, v in base.items()}, sort_keys=True)


def differences(identities: list[str]) -> list[dict]:
    """For each identity, its values of the keys where the identities differ."""
    parsed = [json.loads(i) for i in identities]
    keys = sorted({k for p in parsed for k in p if any(p.get(k) != q.get(k) for q in parsed)})
    return [{k: p.get(k) for k in keys} for p in parsed]


def backfill_key(commit: str, command: str) -> str:
    return json.dumps([commit, command])


def read_backfill(path: str) -> dict:
    """{backfill_key: settings} of ``settings.jsonl``; {} without the file."""
    from benchmarks.harness import read_records

    if not os.path.exists(path):
        return {}
    return {backfill_key(row["commit"], row["command"]): row["settings"] for row in read_records(path)}


# Run inside a checkout of the commit: launch.py's flags parsed as dsac.cli.main parses them.
RESOLVE = """
import json, sys
from dsac.cli import build_parser
from dsac.config import Config
values = vars(build_parser().parse_args(sys.argv[1:]))
values.pop("config", None)
print(json.dumps(Config.from_dict(values).validate().to_dict()))
"""


def settings_at(commit: str, flags: list[str], repo: str) -> dict:
    """The settings ``launch.py *flags`` built at ``commit`` (a temporary worktree of ``repo``)."""
    with tempfile.TemporaryDirectory(prefix="dsac-settings-") as tmp:
        tree = os.path.join(tmp, "tree")
        subprocess.run(["git", "worktree", "add", "-q", "--detach", tree, commit], cwd=repo, check=True)
        try:
            out = subprocess.run([sys.executable, "-c", RESOLVE, *flags], cwd=tree, capture_output=True, text=True,
                                 check=True, env={**os.environ, "PYTHONPATH": tree, "CUDA_VISIBLE_DEVICES": ""})
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=repo, check=False)
    return trim(json.loads(out.stdout.strip().splitlines()[-1]))


def backfill(results: str) -> int:
    """Append to ``settings.jsonl`` beside ``results`` the settings of every dsac record there
    that has none and no line yet."""
    from benchmarks.harness import REPO_ROOT, append_record, read_records

    path = os.path.join(os.path.dirname(os.path.abspath(results)), "settings.jsonl")
    known = read_backfill(path)
    for rec in read_records(results):
        if rec["side"] != "dsac" or rec.get("settings") is not None:
            continue
        key = backfill_key(rec["commit"], rec["command"])
        if key in known:
            continue
        if rec["commit"].endswith("+"):  # made from uncommitted code: no commit builds what it ran
            print(f"{rec['commit']} {rec['command']}: uncommitted code, left out", file=sys.stderr)
            continue
        argv = shlex.split(rec["command"])
        settings = settings_at(rec["commit"], argv[argv.index("launch.py") + 1:], REPO_ROOT)
        known[key] = settings
        append_record(path, {"commit": rec["commit"], "command": rec["command"], "settings": settings,
                             "how": f"python -m benchmarks.settings {results}"})
        print(f"{rec['commit']} {rec['command']}: {len(settings)} settings", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(backfill(sys.argv[1]))
