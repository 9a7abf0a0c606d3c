"""launch.py as a user runs it: bad input gets one line and exit 2, before Ray starts;
a small run leaves its files."""

import json
import os
import signal
import subprocess
import sys
import time

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
        (["--num_learners", "3"], "--num_learners 3 exceeds --num_workers 2"),
        (["--batch_size", "512", "--buffer_size", "256"], "larger than the replay capacity"),
        (["--buffer_size", "100000000000"], "lower --buffer_size"),
        (["--output_dir", "/dev/null/run"], "not writable"),
        (["--lr", "nan"], "--lr"),
        (["--num_workers", "two"], "invalid int value"),
        (["--num_worker", "2", "--gama", "0.9"], "unrecognized arguments: --gama 0.9 (did you mean --gamma"),
        (["--learning_rate", "3e-4"], "(did you mean --lr?)"),
        (["--env_kwargs", "{bad json"], "not valid JSON"),
        (["--env_kwargs", '{"no_such_arg": 1}'], "does not take --env_kwargs"),
        (["--resume", "/nonexistent/run"], "no such directory"),
        (["--resume", "/tmp"], "not a dsac run"),
        (["--env", "HalfCheetah-v5"], 'pip install "gymnasium[mujoco]"'),
        (["--env", "ALE/Pong-v5"], "pip install ale-py"),
        (["--env", "no_such_module:Reach"], "cannot import module no_such_module"),
        (["--algo", "dqn", "--env", "Blackjack-v1"], "add --flatten_obs"),
        (["--env", "CarRacing-v3"], "add --flatten_obs"),
        (["--init_weights", "/nonexistent/weights.pkl"], "does not exist"),
        (["--learner_gpus", "1"], "but the Ray cluster has 0 GPUs: drop --learner_gpus"),
        (["--num_workers", "4", "--num_learners", "2", "--num_replay_shards", "1"], "fewer than --num_learners 2"),
        (["--policy_class", "no_such_module:Policy"], "cannot load policy_class"),
        (["--custom_model", "tanh_net"], "unknown custom_model 'tanh_net'"),
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
        "--fcnet_hiddens", "32", "32", "--learning_starts", "300", "--start_steps", "300", "--seed", "1",
        "--output_dir", str(out), timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert config["num_workers"] == 3 and config["fcnet_hiddens"] == [32, 32]
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
    assert "placed parameter_server" in result.stdout and "placed replay_shard_0" in result.stdout


def test_more_bad_input_before_ray(tmp_path):
    for args, fact in (
        (["--seed", "-1"], "--seed"),
        (["--address", "127.0.0.1:1"], "nothing answers"),
        (["--address", "1.2.3.4"], "host:port"),
    ):
        result = launch(*args, "--output_dir", str(tmp_path / "run"), timeout=60)
        assert result.returncode == 2, result.stderr
        assert fact in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "run").exists()


SMALL = ["--num_workers", "2", "--fcnet_hiddens", "32", "32", "--eval_every", "500", "--eval_episodes", "2"]


def test_stop_before_the_first_weights_is_clean(tmp_path):
    # --max_seconds shorter than TensorFlow's start-up: workers stop while still waiting.
    result = launch(*SMALL, "--max_seconds", "2", "--output_dir", str(tmp_path / "run"), timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "max_seconds" and summary["failure"] is None


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_and_terminate_save_weights(sig, code, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), *SMALL, "--output_dir", str(out)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as in a terminal
    )
    deadline = time.monotonic() + 120
    while not (out / "weights.pkl").exists():  # the first evaluation has saved weights
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.5)
    signalled = time.time()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)  # like Ctrl-C in a terminal: the whole process group
    else:
        # Like `kill <pid>` or `ray job stop` (which signals the driver, not the cluster's
        # processes): a SIGTERM to the whole group would also stop the embedded Ray's
        # daemons under the driver (see the session note).
        os.kill(proc.pid, sig)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, output[-3000:]
    assert "Traceback" not in output
    payload = load_weights(str(out / "weights.pkl"))
    summary = json.loads((out / "summary.json").read_text())
    assert payload["version"] == summary["weights_version"] > 0
    # The final weights were written after the signal, and within 10 s of it.
    assert 0 <= (out / "weights.pkl").stat().st_mtime - signalled < 10


def test_config_file_with_cli_override_and_repeat_from_config_json(tmp_path):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(
        "env: Pendulum-v1\nnum_workers: 3\nfcnet_hiddens: [16, 16]\ntotal_env_steps: 600\n"
        "eval_every: 300\neval_episodes: 2\nlearning_starts: 100\nstart_steps: 100\nseed: 4\n"
    )
    first = tmp_path / "first"
    result = launch("--config", str(config_file), "--num_workers", "2", "--output_dir", str(first), timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    saved = json.loads((first / "config.json").read_text())
    assert saved["num_workers"] == 2  # the command line wins over the file
    assert saved["fcnet_hiddens"] == [16, 16] and saved["seed"] == 4 and saved["total_env_steps"] == 600
    # The saved config.json, passed back, repeats the run (in a directory of its own).
    second = tmp_path / "second"
    result = launch("--config", str(first / "config.json"), "--output_dir", str(second), timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    repeated = json.loads((second / "config.json").read_text())
    assert {k: v for k, v in repeated.items() if k != "output_dir"} == {
        k: v for k, v in saved.items() if k != "output_dir"
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("fcnet_hidden: [16]\n")
    result = launch("--config", str(bad))
    assert result.returncode == 2 and "did you mean fcnet_hiddens" in result.stderr
