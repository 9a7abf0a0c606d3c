"""dsac as Ray Tune trials: a real Tune experiment of local DQN trials on a real local Ray,
through the ``python -m dsac.tune`` command; and its one-line errors."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from conftest import REPO_ROOT


def tune_command(args, tmp_path, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "dsac.tune", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(tmp_path))


def test_a_grid_of_local_dqn_trials_reports_and_names_its_best_config_and_weights(tmp_path):
    """Four local trials (2 learning rates x 2 seeds) of DQN on CartPole: every trial reports
    results with the metric in each; the best config is a file launch.py --config takes; the
    best weights load with dsac.load_policy."""
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "env": "CartPole-v1", "algo": "dqn", "local": True, "lr": {"grid": [1e-3, 3e-4]}, "seed": {"grid": [0, 1]},
        "steps_per_iteration": 1000, "eval_every": 1000, "eval_episodes": 2, "learning_starts": 500,
        "fcnet_hiddens": [32, 32],
    }))
    proc = tune_command(["--space", str(space), "--total_env_steps", "3000", "--storage_path", str(tmp_path / "tr")],
                        tmp_path)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    last = proc.stdout.strip().splitlines()[-2:]
    assert last[0].startswith("best config: /") and last[1].startswith("best weights: /"), last
    config_path, weights_path = (line.split(": ", 1)[1] for line in last)
    trials = [d for d in (tmp_path / "tr" / "dsac_tune").iterdir() if d.is_dir() and d.name.startswith("DsacTrainable")]
    assert len(trials) == 4
    seen = set()
    for trial in trials:
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        assert rows and all("eval_return_mean" in r and r["timesteps_total"] == r["env_steps"] for r in rows)
        assert rows[-1]["env_steps"] >= 3000 and rows[-1]["done"] is True
        assert (trial / "dsac" / "weights.pkl").exists()  # the trial's dsac output inside its directory
        seen.add((rows[-1]["config"]["lr"], rows[-1]["config"]["seed"]))
    assert seen == {(1e-3, 0), (1e-3, 1), (3e-4, 0), (3e-4, 1)}
    best = yaml.safe_load(open(config_path))
    assert best["lr"] in (1e-3, 3e-4) and best["env"] == "CartPole-v1"

    from dsac import load_policy
    from dsac.config import Config

    Config.load(config_path, {}, source="--config").validate()  # what launch.py --config reads
    policy = load_policy(weights_path)
    action = policy(policy.make_env().reset(seed=0)[0])
    assert int(action) in (0, 1)


@pytest.mark.parametrize("space, message", [
    ({"env": "CartPole-v1", "lrr": {"grid": [1e-3]}}, "lrr"),
    ({"env": "CartPole-v1", "lr": {"between": [1, 2]}}, "unknown kind 'between'"),
    ({"env": "CartPole-v1", "lr": {"loguniform": [0, 1]}}, "low > 0"),
    ({"env": "NoSuchEnv-v9", "lr": {"grid": [1e-3]}}, "NoSuchEnv-v9"),
])
def test_a_bad_space_is_one_line_and_exit_2_before_ray_starts(tmp_path, space, message):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    proc = tune_command(["--space", str(path), "--storage_path", str(tmp_path / "tr")], tmp_path, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "Started a local Ray" not in proc.stdout + proc.stderr


def test_a_trial_with_a_bad_value_fails_alone_with_one_line(tmp_path):
    """A grid point dsac refuses (a negative learning rate) fails that trial with dsac's
    one-line message; the other trial runs, and the experiment names its best config."""
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "env": "CartPole-v1", "algo": "dqn", "local": True, "lr": {"grid": [1e-3, -1.0]},
        "steps_per_iteration": 1000, "eval_every": 1000, "eval_episodes": 2, "learning_starts": 500,
        "fcnet_hiddens": [32, 32],
    }))
    proc = tune_command(["--space", str(space), "--total_env_steps", "2000", "--storage_path", str(tmp_path / "tr")],
                        tmp_path)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    failed = [line for line in proc.stdout.splitlines() if " failed: " in line]
    assert len(failed) == 1 and failed[0].endswith("failed: --lr must be a positive number, got -1.0"), failed
    assert yaml.safe_load(open(proc.stdout.strip().splitlines()[-2].split(": ", 1)[1]))["lr"] == 1e-3
