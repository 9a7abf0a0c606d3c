"""launch.py as a user runs it: bad input gets one line and exit 2, before Ray starts;
a small run leaves its files."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO_ROOT

from dsac.artifacts import load_weights


def launch(*args, timeout=120):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO_ROOT,
    )


@pytest.mark.parametrize(
    "args, fact",
    [
        (["--env", "Pendulm-v1"], "Pendulum-v1"),
        (["--env", "CartPole-v1"], "Discrete(2)"),
        (["--algo", "dqn", "--env", "Pendulum-v1"], "--algo sac"),
        (["--algo", "dqn", "--num_workers", "2", "--num_replay_shards", "3"], "--num_replay_shards"),
        (["--num_workers", "0"], "--num_workers"),
        (["--total_env_steps", "-5"], "--total_env_steps"),
        (["--batch_size", "0"], "--batch_size"),
        (["--num_learners", "0"], "--num_learners"),
        (["--num_learners", "2"], "--num_learners 2"),
        (["--batch_size", "512", "--buffer_size", "256"], "larger than the replay capacity"),
        (["--buffer_size", "100000000000"], "lower --buffer_size"),
        (["--output_dir", "/dev/null/run"], "not writable"),
        (["--lr", "nan"], "--lr"),
        (["--num_workers", "two"], "invalid int value"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fact, tmp_path):
    if "--output_dir" not in args:
        args = [*args, "--output_dir", str(tmp_path / "run")]
    result = launch(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsac: error:"), result.stderr
    assert fact in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "run").exists()  # no run directory that looks like a real run


def test_small_run_writes_config_progress_and_loadable_weights(tmp_path):
    out = tmp_path / "run"
    result = launch(
        "--num_workers", "3", "--total_env_steps", "1200", "--eval_every", "500", "--eval_episodes", "2",
        "--hiddens", "32", "32", "--learning_starts", "300", "--start_steps", "300", "--seed", "1",
        "--output_dir", str(out), timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert config["num_workers"] == 3 and config["hiddens"] == [32, 32]
    lines = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert len(lines) >= 2
    for key in ("env_steps", "updates", "wall_s", "eval_return_mean", "eval_return_std", "weights_version"):
        assert all(key in line for line in lines)
    assert [ln["env_steps"] for ln in lines] == sorted(ln["env_steps"] for ln in lines)
    assert lines[-1]["updates"] > 0
    payload = load_weights(str(out / "weights.pkl"))
    assert payload["algo"] == "sac" and payload["env"] == "Pendulum-v1"
    assert payload["env_steps"] >= 1200 and payload["version"] >= lines[-1]["weights_version"]
    assert payload["weights"]["actor/hidden_0/kernel"].shape == (3, 32)
    assert all(isinstance(v, np.ndarray) for v in payload["weights"].values())
    assert "placed learner" in result.stdout and "placement plan" in result.stdout
