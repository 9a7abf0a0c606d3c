"""launch.py as a user runs it: bad input gets one line and exit 2, before Ray starts;
a small run leaves its files."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO_ROOT, SMALL_RUN_STEPS, launch_here, run_in_one_process

from dsac.formats.files import load_weights

# What TensorFlow's C++ side prints (glog/absl format: I0000 00:00:... file.cc:31] ...).
TF_LOG_LINE = re.compile(r"[IWEF]\d{4} [\d:.]+ +\d+ \S+\.cc:\d+\]|absl::InitializeLog|cpu_feature_guard")


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def launch(*args, timeout=120, quiet_tf=True):
    """launch.py in a subprocess; ``quiet_tf=False``: as a user runs it, with no
    TF_CPP_MIN_LOG_LEVEL of their own."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if not quiet_tf:
        env.pop("TF_CPP_MIN_LOG_LEVEL")
    return subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO_ROOT,
    )


BAD_INPUT = [
        (["--env", "Pendulm-v1"], "Pendulum-v1"),
        (["--env", "CartPole-v1"], "Discrete(2)"),
        (["--algo", "dqn", "--env", "Pendulum-v1"], "--algo sac"),
        (["--algo", "dqn", "--num_workers", "2", "--num_replay_shards", "3"], "--num_replay_shards"),
        (["--num_workers", "-1"], "--num_workers must be an integer >= 0"),
        (["--local", "--num_learners", "2"], "needs Ray: the serial runner"),
        (["--total_env_steps", "-5"], "--total_env_steps"),
        (["--batch_size", "0"], "--batch_size"),
        (["--num_learners", "0"], "--num_learners"),
        (["--num_learners", "3"], "--num_learners 3 exceeds --num_workers 2"),
        (["--batch_size", "512", "--buffer_size", "256"], "larger than the replay capacity"),
        (["--buffer_size", "100000000000"], "lower --buffer_size"),
        (["--output_dir", "/dev/null/run"], "not writable"),
        (["--lr", "nan"], "--lr"),
        (["--stop_timeout", "0"], "--stop_timeout must be a positive number"),
        (["--num_workers", "two"], "invalid int value"),
        (["--num_worker", "2", "--gama", "0.9"], "unrecognized arguments: --gama 0.9 (did you mean --gamma"),
        (["--learning_rate", "3e-4"], "(did you mean --lr?)"),
        (["--train_freq", "4"], "SB3's train_freq is env steps between updates"),
        (["--env_kwargs", "{bad json"], "not valid JSON"),
        (["--env_kwargs", '{"no_such_arg": 1}'], "does not take --env_kwargs"),
        (["--resume", "/nonexistent/run"], "no such directory"),
        (["--resume", "/tmp"], "not a dsac run"),
        # Missing optional dependencies (requirements-bench.txt installs mujoco: no missing one to test then).
        pytest.param(["--env", "HalfCheetah-v5"], 'pip install "gymnasium[mujoco]"',
                     marks=pytest.mark.skipif(_installed("mujoco"), reason="mujoco is installed here")),
        pytest.param(["--env", "FetchReach-v4", "--her"], "not installed (pip install 'dsac[robotics]')",
                     marks=pytest.mark.skipif(_installed("gymnasium_robotics"), reason="gymnasium-robotics is here")),
        (["--algo", "dqn", "--env", "ALE/Pongg-v5"], "(did you mean ALE/Pong-v5"),
        (["--algo", "dqn", "--env", "ALE/Pong-v5", "--env_kwargs", '{"frameskip": 4}'], "use --frame_skip"),
        (["--algo", "dqn", "--env", "ALE/Pong-v5", "--framestack", "0"], "--framestack must be an integer in [1, 16]"),
        (["--env", "no_such_module:Reach"], "cannot import module no_such_module"),
        (["--algo", "dqn", "--env", "Blackjack-v1"], "add --flatten_obs"),
        (["--env", "CarRacing-v3", "--conv_filters", "[[32, 8, 4], [64, 4, 2], [64, 11, 1]]"],
         "conv_filters layer 2 (64 channels, kernel 11, stride 1) does not fit its 9x9 input"),
        (["--init_weights", "/nonexistent/weights.pkl"], "does not exist"),
        (["--learner_gpus", "1"], "but the Ray cluster has 0 GPUs: drop --learner_gpus"),
        (["--num_workers", "4", "--num_learners", "2", "--num_replay_shards", "1"], "fewer than --num_learners 2"),
        (["--policy_class", "no_such_module:Policy"], "cannot load policy_class"),
        (["--custom_model", "tanh_net"], "unknown custom_model 'tanh_net'"),
]


def _skipped(case) -> bool:
    return any(mark.name == "skipif" and mark.args[0] for mark in getattr(case, "marks", ()))


@pytest.fixture(scope="module")
def bad_input_results(tmp_path_factory):
    """Every BAD_INPUT case as ``python launch.py <args>`` runs it, all in one process (see
    conftest.run_in_one_process): {args: (result, its output dir)}."""
    workdir = tmp_path_factory.mktemp("bad_input")
    cases = [tuple(case.values[0] if hasattr(case, "values") else case[0])
             for case in BAD_INPUT if not _skipped(case)]
    outs = [workdir / f"run{i}" for i in range(len(cases))]
    programs = [{"program": os.path.join(REPO_ROOT, "launch.py"),
                 "args": [*args, *(["--output_dir", str(out)] if "--output_dir" not in args else [])],
                 "env": {"TF_CPP_MIN_LOG_LEVEL": "3"}} for args, out in zip(cases, outs, strict=True)]
    results = run_in_one_process(programs, workdir)
    return {args: (result, out) for args, result, out in zip(cases, results, outs, strict=True)}


@pytest.mark.parametrize("args, fact", BAD_INPUT)
def test_bad_input_is_one_line_and_exit_2(args, fact, bad_input_results):
    result, out = bad_input_results[tuple(args)]
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dsac: error:"), result.stderr
    assert fact in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    assert not out.exists()  # no run directory that looks like a real run


def test_small_run_writes_config_progress_and_loadable_weights(small_launch_run):
    out, result = small_launch_run  # launch.py --num_workers 3 --total_env_steps 1500 --fcnet_hiddens 32 32 ...
    # TensorFlow's C++ start-up notices (CUDA stubs, cuInit, CPU features) reach no console.
    assert not TF_LOG_LINE.search(result.stdout + result.stderr), TF_LOG_LINE.findall(result.stdout + result.stderr)
    # As many TF threads as the CPUs the learner asked for (1 here), not the node's cores.
    assert re.search(r"placed learner .* using CPU, 1 TF threads", result.stdout), result.stdout[-3000:]
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
    assert payload["env_steps"] >= SMALL_RUN_STEPS and payload["version"] >= lines[-1]["weights_version"]
    assert payload["weights"]["actor/hidden_0/kernel"].shape == (3, 32)
    assert all(isinstance(v, np.ndarray) for v in payload["weights"].values())
    assert "placed learner" in result.stdout and "placement plan" in result.stdout
    assert "placed parameter_server" in result.stdout and "placed replay_shard_0" in result.stdout


def test_more_bad_input_before_ray(tmp_path):
    cases = ((["--seed", "-1"], "--seed"), (["--address", "127.0.0.1:1"], "nothing answers"),
             (["--address", "1.2.3.4"], "host:port"))
    results = run_in_one_process([{"program": os.path.join(REPO_ROOT, "launch.py"),
                                   "args": [*args, "--output_dir", str(tmp_path / "run")]} for args, _ in cases],
                                 tmp_path)
    for (_args, fact), result in zip(cases, results, strict=True):
        assert result.returncode == 2, result.stderr
        assert fact in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "run").exists()


SMALL = ["--num_workers", "2", "--fcnet_hiddens", "32", "32", "--eval_every", "500", "--eval_episodes", "2"]


@pytest.mark.slow
def test_stop_before_the_first_weights_is_clean(tmp_path):
    # --max_seconds shorter than TensorFlow's start-up: workers stop while still waiting.
    result = launch(*SMALL, "--max_seconds", "2", "--output_dir", str(tmp_path / "run"), timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stop_reason"] == "max_seconds" and summary["failure"] is None


# SIGTERM to the driver (`kill <pid>`, `ray job stop`): test_faults' two-learner run ends so.
@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130)])
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


def test_config_file_with_cli_override_and_repeat_from_config_json(tmp_path, capfd, caplog):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(
        "env: Pendulum-v1\nnum_workers: 3\nfcnet_hiddens: [16, 16]\ntotal_env_steps: 600\n"
        "eval_every: 300\neval_episodes: 2\nlearning_starts: 100\nstart_steps: 100\nseed: 4\n"
    )
    first = tmp_path / "first"
    # --num_workers 0 (the serial runner: these runs test the config's path, not Ray's) wins over the file's 3.
    result = launch_here(["--config", config_file, "--num_workers", "0", "--output_dir", first], capfd, caplog)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    saved = json.loads((first / "config.json").read_text())
    assert saved["num_workers"] == 0 and saved["local"] is True  # the command line wins over the file
    assert saved["fcnet_hiddens"] == [16, 16] and saved["seed"] == 4 and saved["total_env_steps"] == 600
    # The saved config.json, passed back, repeats the run (in a directory of its own).
    second = tmp_path / "second"
    result = launch_here(["--config", first / "config.json", "--output_dir", second], capfd, caplog)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    repeated = json.loads((second / "config.json").read_text())
    assert {k: v for k, v in repeated.items() if k != "output_dir"} == {
        k: v for k, v in saved.items() if k != "output_dir"
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text("fcnet_hidden: [16]\n")
    result = launch_here(["--config", bad], capfd, caplog)
    assert result.returncode == 2 and "did you mean fcnet_hiddens" in result.stderr


BAD_ENV_MODULE = '''
import gymnasium as gym


class Broken(gym.Env):
    def __init__(self, **kwargs):
        raise ValueError("no simulator license found")


class BadReset(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,))
    action_space = gym.spaces.Box(-1.0, 1.0, (1,))

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("reset exploded")
'''


def _resumable_run(directory, config_changes=None, meta=None, state_bytes=None):
    """A run directory --resume reads; parts replaced to make it bad."""
    from dsac.config import Config

    directory.mkdir(parents=True)
    config = Config(fcnet_hiddens=[16], total_env_steps=5000).to_dict()
    config.pop("custom_models")
    (directory / "config.json").write_text(json.dumps({**config, **(config_changes or {})}))
    checkpoint = directory / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "meta.json").write_text(json.dumps(meta or {"env_steps": 1000, "updates": 900, "version": 90}))
    np.savez(checkpoint / "state.npz", updates=np.array(900), **{"actor/out/bias": np.zeros(2, np.float32)})
    if state_bytes is not None:
        (checkpoint / "state.npz").write_bytes(state_bytes(checkpoint / "state.npz"))
    return str(directory)


def _huge_npz(path):
    """A valid zip whose .npy member declares 10^12 float64s."""
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("updates.npy", b"\x93NUMPY\x01\x00" + header.getvalue()[8:] + b"\x00" * 64)
    return buffer.getvalue()


def _bad_input_cases(tmp):
    """(program, args, fact) for every kind of bad input: each must be refused before Ray starts."""
    (tmp / "badenv.py").write_text(BAD_ENV_MODULE)
    (tmp / "bad.yaml").write_text('fcnet_hiddens: "64,64"\n')
    (tmp / "weights.pkl").write_bytes(b"not a pickle")
    (tmp / "local.yaml").write_text("env: Pendulum-v1\nlocal: true\nnum_workers: 4\n")
    golden = os.path.join(REPO_ROOT, "tests", "data", "golden", "sac_pendulum", "weights.pkl")
    launch_py, infer, export = (os.path.join(REPO_ROOT, p) for p in ("launch.py", "scripts/infer.py",
                                                                      "scripts/export.py"))
    return [
        (launch_py, ["--env", "badenv:Broken"], "failed to start: ValueError: no simulator license found"),
        (launch_py, ["--env", "badenv:BadReset"], "failed to reset: RuntimeError: reset exploded"),
        (launch_py, ["--env", ":"], "module:ClassName"),
        (launch_py, ["--env_kwargs", '{"max_episode_steps": 0}'], "max_episode_steps must be a positive integer"),
        (launch_py, ["--env_kwargs", '{"render_mode": "human"}'], "render_mode 'human' is not for training"),
        (launch_py, ["--env_kwargs", b'{"a": "\xff"}'.decode("utf-8", "surrogateescape")], "not valid UTF-8"),
        (launch_py, ["--config", str(tmp / "bad.yaml")], "--fcnet_hiddens must be a list of integers"),
        (launch_py, ["--num_workers", "100000"], "do not fit"),
        (launch_py, ["--worker_cpus", "100"], "do not fit"),
        (launch_py, ["--learner_gpus", "1"], "0 GPUs"),
        (launch_py, ["--num_workers", "1000", "--worker_cpus", "0.0001"], "lower --num_workers"),
        (launch_py, ["--resume", _resumable_run(tmp / "r1", state_bytes=lambda p: p.read_bytes()[:100])],
         "state.npz is truncated or corrupt"),
        (launch_py, ["--resume", _resumable_run(tmp / "r2", state_bytes=_huge_npz)], "declares"),
        (launch_py, ["--resume", _resumable_run(tmp / "r3", meta={"env_steps": "many", "updates": 1, "version": 1})],
         "env_steps is 'many'"),
        (launch_py, ["--resume", _resumable_run(tmp / "r4", {"num_workers": [2]})], "--num_workers must be an integer"),
        (launch_py, ["--resume", _resumable_run(tmp / "r5", {"env": "badenv:Broken"})], "--trust_code"),
        # --local runs one worker's envs: a worker count is refused as --num_learners is, typed or from a file.
        (launch_py, ["--local", "--num_workers", "4"], "--num_workers 4 needs Ray: the serial runner (--local)"),
        (launch_py, ["--config", str(tmp / "local.yaml")], "use --envs_per_worker 4 for 4 envs in this process"),
        # Counts that set what is built or held per step: bounded before anything is allocated.
        (launch_py, ["--envs_per_worker", "1000000000"], "--envs_per_worker must be at most 4,096"),
        (launch_py, ["--n_step", "1000000000"], "--n_step must be at most 1,000"),
        (launch_py, ["--eval_episodes", "1000000000000"], "--eval_episodes must be at most 100,000"),
        (launch_py, ["--batches_per_sample", "1000000000"], "--batches_per_sample must be at most 1,024"),
        (launch_py, ["--prefetch", "1000000000"], "--prefetch must be at most 64"),
        (launch_py, ["--batch_size", "1000000", "--batches_per_sample", "1024"], "one replay sample call of"),
        (launch_py, ["--algo", "dqn", "--env", "CartPole-v1", "--num_atoms", "1000", "--batch_size", "100000"],
         "the distributional update of --batch_size 100,000 with --num_atoms 1,000 needs"),
        (launch_py, ["--resume", _resumable_run(tmp / "r6"), "--config", str(tmp / "bad.yaml")],
         "continues with the config.json it was started with, not --config"),
        (infer, [str(tmp / "weights.pkl"), "--seed", "-1"], "--seed"),
        (infer, [str(tmp / "weights.pkl"), "--episodes", "100000000000"], "--episodes must be an integer in [1, "),
        (infer, [str(tmp / "weights.pkl"), "--episodes", "1e11"], "argument --episodes: invalid int value: '1e11'"),
        # A policy that plays: the path is refused before the first episode, not after the last.
        (infer, [golden, "--episodes", "3", "--video", "/proc/x.mp4"], "--video /proc/x.mp4: a file cannot be written"),
        (infer, [golden, "--video", str(tmp)], "is a folder"),
        (export, [str(tmp / "weights.pkl"), "--savedmodel", "/proc/no/such/dir"], "truncated or corrupt"),
    ]


def test_bad_input_table_one_line_exit_2_and_no_ray(tmp_path):
    cases = _bad_input_cases(tmp_path)
    ray_dir = tmp_path / "ray"
    programs = [{"program": program, "cwd": tmp_path, "env": {"RAY_TMPDIR": str(ray_dir)},
                 "args": [*args, *(["--output_dir", str(tmp_path / "run")]
                                   if program.endswith("launch.py") and "--resume" not in args else [])]}
                for program, args, _ in cases]
    (tmp_path / "batch").mkdir()
    results = run_in_one_process(programs, tmp_path / "batch", purge_root=str(tmp_path))
    for (program, args, fact), result in zip(cases, results, strict=True):
        where = f"{os.path.basename(program)} {args}: exit {result.returncode}, stderr {result.stderr[-1500:]!r}"
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, where
        assert len(lines) == 1 and ": error: " in lines[0] and fact in lines[0], where
        assert "episode 0" not in result.stdout, where
        assert "Traceback" not in result.stdout + result.stderr, where
        assert not ray_dir.exists(), f"Ray was started: {where}"
        assert not (tmp_path / "run").exists(), where


def test_export_into_an_unwritable_place_is_one_line(tmp_path):
    import gymnasium as gym

    from dsac.algorithms.sac.policy import SACPolicy
    from dsac.config import Config
    from dsac.envs.make import describe_space
    from dsac.formats.files import save_weights

    env = gym.make("Pendulum-v1")
    policy = SACPolicy(env.observation_space, env.action_space, Config(fcnet_hiddens=[8]).validate())
    weights = {name: np.zeros(shape, np.float32) for name, shape in policy.weight_shapes().items()}
    save_weights(str(tmp_path / "w.pkl"), {
        "algo": "sac", "env": "Pendulum-v1", "observation_space": describe_space(env.observation_space),
        "action_space": describe_space(env.action_space), "model": {"fcnet_hiddens": [8]}, "weights": weights,
    })
    result = subprocess.run([sys.executable, "-m", "dsac.export", str(tmp_path / "w.pkl"), "--savedmodel",
                             "/proc/no/such/dir"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and "not writable" in result.stderr


def test_numbers_given_as_strings_are_numbers_and_other_strings_are_refused():
    from dsac.config import Config
    from dsac.errors import DsacError

    config = Config.from_dict({"gamma": "0.99", "lr": "1e-3", "batch_size": "64", "buffer_size": "1e5",
                               "fcnet_hiddens": ["32", 32], "prioritized": "true"}).validate()
    assert (config.gamma, config.lr, config.batch_size, config.buffer_size) == (0.99, 1e-3, 64, 100_000)
    assert config.fcnet_hiddens == [32, 32] and config.prioritized is True
    for values, fact in (({"fcnet_hiddens": "64,64"}, "list of integers"), ({"gamma": "high"}, "must be a number"),
                         ({"batch_size": "64.5"}, "must be an integer"), ({"num_workers": True}, "integer"),
                         ({"env": 3}, "must be a string"), ({"env_kwargs": [1]}, "mapping")):
        with pytest.raises(DsacError, match=fact):
            Config.from_dict(values).validate()


def test_max_seconds_with_the_default_budget_says_which_ends_the_run(tmp_path, caplog):
    from dsac.config import Config
    from dsac.runtime.preparation import prepare, say_budget

    with caplog.at_level(logging.WARNING, logger="dsac"):
        prepare(Config(algo="sac", env="Pendulum-v1", max_seconds=600, output_dir=str(tmp_path / "a")), local=True)
    assert "--max_seconds 600 with sac's default budget of 20,000 env steps" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dsac"):
        prepare(Config(algo="sac", env="Pendulum-v1", max_seconds=600, total_env_steps=10**6,
                       output_dir=str(tmp_path / "b")), local=True)
        say_budget(Config(algo="dqn", env="ALE/Pong-v5", max_seconds=3600).validate())  # Atari's 10M steps
    assert "default budget" not in caplog.text


@pytest.mark.parametrize("module, name", [("dsac.export", "export"), ("dsac.plot", "plot"),
                                          ("dsac.convert_weights", "convert"), ("dsac.tune.cli", "dsac-tune"),
                                          ("dsac.infer", "infer"), ("dsac.doctor", "dsac-doctor"),
                                          ("dsac.submit", "submit")])
def test_every_commands_unknown_flag_is_one_line_and_exit_2(module, name, capsys, monkeypatch):
    import importlib

    from dsac.runtime import tf_setup

    monkeypatch.setattr(tf_setup, "_OWN_PROCESS", False)  # dsac-export marks its process as its own
    with pytest.raises(SystemExit) as stopped:
        importlib.import_module(module).main(["--no_such_flag"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.startswith(f"{name}: error: ") and len(err.strip().splitlines()) == 1, err


QUICK_COMMANDS = [
    ["launch.py", "--help"],
    ["-m", "benchmarks", "mujoco", "--report", "--out", "benchmarks/results/mujoco/results.jsonl"],
    ["-m", "dsac.infer", "--help"],
]
TRAINING = ["launch.py", "--local", "--total_env_steps", "300", "--learning_starts", "100", "--start_steps", "100",
            "--fcnet_hiddens", "8", "--eval_every", "300", "--log_every", "0.1", "--output_dir", "{tmp}/run"]


# A training run's log lines are flushed one by one, buffered or not: one mode is enough there.
@pytest.mark.parametrize("command, buffered", [(c, b) for c in QUICK_COMMANDS for b in (True, False)]
                         + [(TRAINING, True)])
def test_a_reader_that_stops_reading_ends_the_command_quietly(command, buffered, tmp_path):
    """``... | head``: the pipe's reader is gone before the first line (a read end already closed),
    so every write fails, at once (unbuffered) or when stdout is flushed; the command ends
    quietly, with nothing on stderr. A training run goes on to its end and saves its weights."""
    command = [arg.replace("{tmp}", str(tmp_path)) for arg in command]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "TF_CPP_MIN_LOG_LEVEL")}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, *command], stdout=write_end, stderr=subprocess.PIPE, text=True,
                                timeout=300, cwd=REPO_ROOT, env=env)
    finally:
        os.close(write_end)
    # A table ends as coreutils do; argparse drops what --help cannot write and exits 0, and a
    # training run whose log lines were dropped as they went ends with its own status.
    quiet = (128 + signal.SIGPIPE,) if "--report" in command else (0, 128 + signal.SIGPIPE)
    assert result.returncode in quiet and result.stderr == "", (result.returncode, result.stderr[-2000:])
    if "--local" in command:
        assert load_weights(str(tmp_path / "run" / "weights.pkl"))["env_steps"] >= 300


def test_a_run_starts_its_own_local_ray_where_another_cluster_left_its_address():
    """``ray start`` (and Ray's test clusters) leave the cluster's address in Ray's temp dir, and a
    plain ``ray.init()`` joins it: a run without ``--address`` must start a Ray of its own instead
    of connecting to one the user did not name (here the address answers nothing at all)."""
    import shutil
    import tempfile

    temp_dir = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    try:
        os.mkdir(os.path.join(temp_dir, "ray"))  # Ray's temp dir under RAY_TMPDIR
        with open(os.path.join(temp_dir, "ray", "ray_current_cluster"), "w") as f:
            f.write("127.0.0.1:9")
        code = ("import ray; from dsac.distributed.cluster import connect_ray; "
                "started = connect_ray(None, 'CartPole-v1'); "
                "print('started', started, ray.get_runtime_context().gcs_address); ray.shutdown()")
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_TMPDIR=temp_dir, PYTHONPATH=os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p))
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("started"))
    assert line.startswith("started True") and "127.0.0.1:9" not in line, line


class _Port:
    """A real TCP server on 127.0.0.1 in a thread: ``"http"`` answers as an HTTP server does
    (a Ray dashboard's port), ``"silent"`` accepts, reads and never answers (``accepted`` is set
    at its first connection)."""

    def __init__(self, kind: str):
        import http.server
        import socket
        import threading

        self.accepted = threading.Event()
        self.kind = kind
        if kind == "http":
            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
            self.port = self.server.server_address[1]
            self.serve = self.server.serve_forever
        else:
            self.server = socket.create_server(("127.0.0.1", 0))
            self.port = self.server.getsockname()[1]
            self.serve = self._accept
        self.connections = []
        threading.Thread(target=self.serve, daemon=True).start()

    def _accept(self):
        while True:
            try:
                connection, _ = self.server.accept()  # never read: the kernel's buffer takes what comes
            except OSError:  # closed at the test's end
                return
            self.connections.append(connection)
            self.accepted.set()

    def close(self):
        if self.kind == "http":
            self.server.shutdown()
            self.server.server_close()
        else:
            self.server.close()
        for connection in self.connections:
            connection.close()


# A sitecustomize: the first Ray dashboard agent started with it on its path sleeps past the
# 15 s its raylet waits for the agent's port (ray-project/ray#65983), as an agent starved of CPU
# on a busy machine does; the raylet exits and ray.init() fails about 30 s after it began.
SLOW_FIRST_DASHBOARD_AGENT = """
import os, sys, time
if sys.argv and sys.argv[0].endswith(os.path.join("dashboard", "agent.py")):
    marker = os.environ["DSAC_TEST_SLOW_AGENT_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(20)
"""


@pytest.mark.slow
def test_a_local_ray_that_does_not_come_up_in_time_is_started_again(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_FIRST_DASHBOARD_AGENT)
    marker, out = tmp_path / "slow-agent-started", tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), REPO_ROOT]), "TF_CPP_MIN_LOG_LEVEL": "3",
           "DSAC_TEST_SLOW_AGENT_MARKER": str(marker)}
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--num_workers", "1", "--total_env_steps", "300",
         "--learning_starts", "100", "--start_steps", "100", "--eval_every", "300", "--eval_episodes", "1",
         "--fcnet_hiddens", "16", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=300, env=env, cwd=REPO_ROOT)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-3000:]
    assert marker.exists() and "Traceback" not in log, log[-3000:]  # the first start was the slow one
    assert "the local Ray did not start in time" in log and "starting it again" in log, log[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failure"] is None and summary["env_steps"] >= 300


def test_doctor_address_where_no_ray_head_answers_is_one_line_and_exit_2(tmp_path):
    """A dashboard's HTTP port, a port that accepts and says nothing, a closed port and no port:
    each refused in one line before any other check, the four in well under the 40 s that
    ``ray.init`` alone would wait on either open port."""
    http_port, silent = _Port("http"), _Port("silent")
    cases = [(f"127.0.0.1:{http_port.port}", "an HTTP server answers there (a Ray dashboard's port?)"),
             (f"http://127.0.0.1:{http_port.port}", "an HTTP server answers there"),
             (f"127.0.0.1:{silent.port}", "it accepts connections but sent no reply in 5 s"),
             ("127.0.0.1:9", "nothing answers at Ray address 127.0.0.1:9"),
             ("127.0.0.1", "is not of the form host:port")]
    started = time.monotonic()
    try:
        results = run_in_one_process([{"program": "-m dsac.doctor", "args": ["--address", address]}
                                      for address, _ in cases], tmp_path, timeout=300)
    finally:
        http_port.close()
        silent.close()
    seconds = time.monotonic() - started
    for (address, fact), result in zip(cases, results, strict=True):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and result.stdout == "", (address, result.returncode, result.stdout[-500:])
        assert len(lines) == 1 and lines[0].startswith("dsac-doctor: error: ") and fact in lines[0], result.stderr
        if "no reply" in fact or "HTTP" in fact:
            assert "give the head's GCS address" in lines[0]
    assert seconds < 30, seconds


def test_doctor_ends_at_sigterm_while_it_asks_a_port(tmp_path):
    """SIGTERM while dsac-doctor waits on a port that accepted it and says nothing ends it at
    once, as a terminal's user and ``timeout`` expect (``ray.init`` there would catch the signal
    and sit in its C++ client, deaf to it)."""
    silent = _Port("silent")
    proc = subprocess.Popen([sys.executable, "-m", "dsac.doctor", "--address", f"127.0.0.1:{silent.port}"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert silent.accepted.wait(60), "dsac-doctor never connected"
        time.sleep(1.5)  # well inside the time it waits for a reply (check_reachable's reply_s)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
        silent.close()
    assert proc.returncode == -signal.SIGTERM


def test_submit_stop_grace_out_of_range_is_one_line(tmp_path):
    values = ["-5", "nan", "inf", "0", "86401", "1e3"]
    programs = [{"program": "-m dsac.submit", "args": ["--stop_grace", value, "--dry-run", "--", "--seed", "1"]}
                for value in [*values, "90"]]
    *refused, accepted = run_in_one_process(programs, tmp_path)
    for value, result in zip(values, refused, strict=True):
        assert result.returncode == 2 and result.stdout == "", (value, result.stdout[-500:])
        assert result.stderr.strip() == (f"submit: error: argument --stop_grace: must be a whole number of seconds "
                                          f"in [1, 86400], got {value!r}")
    assert accepted.returncode == 0 and '"RAY_JOB_STOP_WAIT_TIME_S": "90"' in accepted.stdout, accepted.stderr


SECRET_FILES = [".envrc", ".env", ".env.local", "credentials.json", "gcp-credentials.json", ".git-credentials",
                "id_rsa", "id_ed25519", "id_rsa.pub", "client.p12", "cert.pfx", "server.pem", "tls.key", ".pypirc",
                ".netrc", ".npmrc", "sub/deeper/.env.production", "sub/id_ecdsa", ".aws/credentials", ".aws/config",
                ".ssh/config", ".ssh/known_hosts", ".docker/config.json"]
KEPT_FILES = ["launch.py", "my_envs.py", "sub/deeper/reach.py", "configs/run.yaml", "requirements.txt", "keys.py",
              "environment.yaml", "docs/credits.md"]


def test_submit_leaves_secret_files_out_of_the_upload_and_names_them(tmp_path, monkeypatch, capsys):
    """What Ray's own packaging of the working directory (what ``ray job submit --working-dir``
    zips, with dsac-submit's excludes) holds: the checkout's code, none of its secrets; and the
    one line dsac-submit prints names what it left out."""
    from ray._private.runtime_env.packaging import _zip_files

    import dsac.submit as submit

    root = tmp_path / "checkout"
    for name in SECRET_FILES + KEPT_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")
    package = tmp_path / "package.zip"
    _zip_files(str(root), submit.runtime_env(False, 60)["excludes"], str(package), include_gitignore=True)
    import zipfile

    uploaded = {name.rstrip("/") for name in zipfile.ZipFile(package).namelist()}
    assert sorted(uploaded & set(SECRET_FILES)) == []
    assert set(KEPT_FILES) <= uploaded, sorted(set(KEPT_FILES) - uploaded)
    monkeypatch.setattr(submit, "REPO_ROOT", str(root))
    assert submit.main(["--dry-run", "--", "--seed", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("submit: not uploaded")]
    left_out = submit.secrets_left_out(str(root))
    expected = {name for name in SECRET_FILES if name.split("/")[0] not in (".aws", ".ssh", ".docker")}
    assert set(left_out) == expected | {".aws/", ".ssh/", ".docker/"}, left_out
    shown = ", ".join(repr(name) for name in left_out[:10])
    assert lines == [f"submit: not uploaded, as secrets: {shown} and {len(left_out) - 10} more"]
