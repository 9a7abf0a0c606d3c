"""Environments beyond the registered ids: a user's own module (imported in every Ray
worker), flattened Dict observations, and warm starts from a weights file."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import REPO_ROOT, run_in_one_process

from dsac.envs.make import make_env
from dsac.errors import DsacError
from dsac.formats.inference import load_policy

REACH_MODULE = textwrap.dedent('''
    """A point moves to a goal on a line; the observation is a Dict."""
    import gymnasium as gym
    import numpy as np


    class Reach(gym.Env):
        def __init__(self, horizon=20):
            self.observation_space = gym.spaces.Dict({
                "position": gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
                "goal": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
            })
            self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
            self.horizon = horizon

        def _obs(self):
            return {"position": self.pos.astype(np.float32), "goal": self.goal.astype(np.float32)}

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.pos, self.goal, self.t = self.np_random.uniform(-1, 1, 1), self.np_random.uniform(-1, 1, 1), 0
            return self._obs(), {}

        def step(self, action):
            self.pos = np.clip(self.pos + 0.2 * np.asarray(action, np.float64), -2, 2)
            self.t += 1
            return self._obs(), -float(abs(self.pos - self.goal)[0]), False, self.t >= self.horizon, {}


    gym.register("Reach-v0", entry_point=Reach, max_episode_steps=20)
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``reach_envs.py`` in a directory of its own, which is the current directory."""
    (tmp_path / "reach_envs.py").write_text(REACH_MODULE)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("reach_envs", None)


def launch(cwd, *args, timeout=300):
    return subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), *args], capture_output=True, text=True,
        timeout=timeout, cwd=cwd, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )


def test_module_class_and_module_id_with_flattening(user_module):
    by_class = make_env("reach_envs:Reach", {"horizon": 3}, flatten_obs=True)
    by_id = make_env("reach_envs:Reach-v0", flatten_obs=True)
    assert by_class.observation_space.shape == by_id.observation_space.shape == (2,)
    obs, _ = by_class.reset(seed=0)
    assert obs.shape == (2,)
    steps = 0
    while True:
        _, _, terminated, truncated, _ = by_class.step(np.zeros(1, np.float32))
        steps += 1
        if terminated or truncated:
            break
    assert steps == 3  # env_kwargs reached the constructor
    with pytest.raises(DsacError, match="did you mean Reach"):
        make_env("reach_envs:Rech")


@pytest.mark.slow
def test_custom_env_module_trains_in_every_worker(user_module):
    """The module is only in the driver's current directory: rollout workers and the
    evaluator must import it too. A policy that stays put scores about -13; learning must do
    better than -6."""
    out = user_module / "run"
    result = launch(
        user_module, "--env", "reach_envs:Reach", "--env_kwargs", '{"max_episode_steps": 20}', "--flatten_obs",
        "--num_workers", "2", "--total_env_steps", "2000", "--eval_every", "500", "--eval_episodes", "5",
        "--fcnet_hiddens", "32", "32", "--seed", "0", "--output_dir", str(out),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert lines[-1]["eval_return_mean"] > -6.0, lines
    with pytest.raises(DsacError, match="module 'reach_envs'"):  # the file names code: imported only with consent
        load_policy(str(out / "weights.pkl"))
    policy = load_policy(str(out / "weights.pkl"), trust_code=True)
    assert policy.flatten_obs and policy.observation_space.shape == (2,)
    env = policy.make_env()
    obs, _ = env.reset(seed=1)
    assert policy.action_space.contains(policy(obs))

    # Refused before Ray starts: an unflattened dict space; a corrupt or unfitting warm start.
    corrupt = user_module / "corrupt.pkl"
    corrupt.write_bytes((out / "weights.pkl").read_bytes()[:100])
    warm = ["--env", "reach_envs:Reach", "--flatten_obs", "--fcnet_hiddens", "32", "32"]
    cases = [
        (["--env", "reach_envs:Reach", "--output_dir", str(user_module / "refused")], "add --flatten_obs"),
        ([*warm, "--init_weights", str(corrupt)], "truncated or corrupt"),
        ([*warm, "--init_weights", str(out / "weights.pkl"), "--fcnet_hiddens", "64"], "fcnet_hiddens"),
        # the file names reach_envs, which this command does not type: consent first, then the spaces differ
        ([*warm, "--init_weights", str(out / "weights.pkl"), "--env", "Pendulum-v1"], "--trust_code"),
        ([*warm, "--init_weights", str(out / "weights.pkl"), "--env", "Pendulum-v1", "--trust_code"], "space differs"),
    ]
    (user_module / "batch").mkdir()
    results = run_in_one_process(
        [{"program": os.path.join(REPO_ROOT, "launch.py"), "cwd": user_module, "env": {"TF_CPP_MIN_LOG_LEVEL": "3"},
          "args": args if "--output_dir" in args else [*args, "--output_dir", str(user_module / "warm")]}
         for args, _ in cases], user_module / "batch", purge_root=str(user_module))
    for (args, fact), result in zip(cases, results, strict=True):
        assert result.returncode == 2, (args, result.stderr)
        assert fact in result.stderr and len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert not (user_module / "warm").exists()


def test_simulated_cost_makes_steps_take_their_time_and_changes_nothing_else():
    """--env_step_ms / --env_reset_ms (a stand-in for an expensive simulator): the wrapped env
    returns exactly what the env does, and its steps and resets take at least the set time."""
    import time

    import numpy as np

    from dsac.config import Config
    from dsac.envs.make import SimulatedCost, make_env, with_simulated_cost
    from dsac.errors import DsacError

    plain = make_env("CartPole-v1")
    assert with_simulated_cost(plain) is plain
    slow = with_simulated_cost(make_env("CartPole-v1"), step_ms=5, reset_ms=20)
    assert isinstance(slow, SimulatedCost)
    started = time.perf_counter()
    obs, _ = slow.reset(seed=3)
    assert time.perf_counter() - started >= 0.020
    np.testing.assert_array_equal(obs, plain.reset(seed=3)[0])
    started = time.perf_counter()
    for _ in range(5):  # pushing left from seed 3 ends the episode at step 9: stay inside it
        got, want = slow.step(0), plain.step(0)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1:3] == want[1:3]
    assert time.perf_counter() - started >= 5 * 0.005
    for bad in (-1, float("nan"), 1e9, True):
        with pytest.raises(DsacError, match="--env_step_ms must be a number"):
            Config(env_step_ms=bad).validate()


def test_a_fetch_task_that_fails_to_start_names_mujoco_when_it_is_the_known_cause(monkeypatch):
    import types

    from dsac.envs.make import fetch_mujoco_hint

    for version, hinted in (("3.11.0", False), ("3.12.0", True), ("4.0.0", True)):
        monkeypatch.setitem(sys.modules, "mujoco", types.SimpleNamespace(__version__=version))
        assert bool(fetch_mujoco_hint("FetchReach-v4")) == hinted
        assert bool(fetch_mujoco_hint("gymnasium_robotics:FetchPush-v4")) == hinted
        assert fetch_mujoco_hint("PointMaze_UMaze-v3") == ""  # the mazes run on either
    assert "pins mujoco 3.11.0" in fetch_mujoco_hint("FetchReach-v4")


@pytest.mark.parametrize("low, high, dtype, fact", [
    ([-4.8, -1.0], [4.8, float("nan")], "float32", "high holds NaN or a bound outside its dtype float32"),
    ([-2.0], [float("-inf")], "float32", "low is above its high"),
    ([-5], [300], "uint8", "low holds NaN or a bound outside its dtype uint8"),
    ([0], [1e30], "int8", "high holds NaN or a bound outside its dtype int8"),
    ([-1e300], [1e300], "float32", "low holds NaN or a bound outside its dtype float32"),
    ([2**63], [2**63], "int64", "low holds NaN or a bound outside its dtype int64"),
])
def test_a_box_described_in_a_file_is_checked_before_gymnasium_sees_it(low, high, dtype, fact):
    """Bounds a weights file describes (found by ``python -m benchmarks fuzz``: NaN, low above
    high) are refused in dsac's one line, never gymnasium's ValueError or numpy's cast warning."""
    import warnings

    from dsac.envs.make import space_from_description

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(DsacError, match=fact):
            space_from_description({"type": "Box", "shape": [len(low)], "dtype": dtype, "low": low, "high": high})
