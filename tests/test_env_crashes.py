"""Env crashes (``--env_restarts``): an env that raises is rebuilt while the run's budget
lasts — its broken episode dropped, no transition across the crash — and past it the run ends
with one line on stderr, exit 1, the weights saved; in the serial and the distributed runner."""

import json
import os
import re
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from conftest import REPO_ROOT

from dsac.envs.make import EnvCrashed
from dsac.envs.rollout import EnvCollector
from dsac.runtime.evaluation import evaluate

# Pendulum that raises every `every` steps, counted per process (so every worker and the
# evaluator meet crashes), as a simulator that is unstable once in a while does.
FLAKY_MODULE = '''
import gymnasium as gym


class Flaky(gym.Wrapper):
    count = 0

    def __init__(self, every=400):
        super().__init__(gym.make("Pendulum-v1"))
        self.every = every

    def step(self, action):
        Flaky.count += 1
        if Flaky.count % self.every == 0:
            raise RuntimeError(f"simulator exploded at step {Flaky.count}")
        return self.env.step(action)
'''


class Counting(gym.Env):
    """Observations (episode id, t); raises at steps 7 and 19 of the process (an episode is 10 steps)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    steps = 0
    episodes = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        Counting.episodes += 1
        self.episode, self.t = Counting.episodes, 0
        return np.array([self.episode, 0], np.float32), {}

    def step(self, action):
        Counting.steps += 1
        if Counting.steps in (7, 19):
            raise RuntimeError(f"crash at {Counting.steps}")
        self.t += 1
        return np.array([self.episode, self.t], np.float32), 1.0, False, self.t == 10, {}


if "CountingCrash-v0" not in gym.envs.registry:
    gym.register("CountingCrash-v0", entry_point=Counting)


def test_a_rebuilt_env_drops_its_broken_episode_and_no_transition_crosses_the_crash():
    Counting.steps = Counting.episodes = 0
    crashes = []
    collector = EnvCollector("CountingCrash-v0", 1, seed=0, n_step=3,
                             on_env_crash=lambda exc: crashes.append(str(exc)) or True)
    batch = collector.collect(lambda obs: np.zeros((len(obs), 1), np.float32), 40)
    assert crashes == ["crash at 7", "crash at 19"] and collector.env_rebuilds == 2
    obs, next_obs = batch["obs"], batch["next_obs"]
    assert np.all(obs[:, 0] == next_obs[:, 0]), "a transition crossed from one episode into another"
    # Every transition is a whole n-step window of its episode, or one cut short by the episode's
    # real end: the windows a crash left open were dropped, not cut short there.
    span = next_obs[:, 1] - obs[:, 1]
    assert np.all((span == 3) | (next_obs[:, 1] == 10)) and np.all(span >= 1)
    # Episode 1 crashed after 6 steps (its windows from t = 0..3 were complete), episode 3 after 1
    # step (none was); episode 2 ran its 10 steps on the rebuilt env. Broken episodes are not reported.
    assert sorted(obs[obs[:, 0] == 1, 1]) == [0, 1, 2, 3] and not np.any(obs[:, 0] == 3)
    assert len(obs[obs[:, 0] == 2]) == 10
    assert [e.length for e in collector.drain_episodes()] == [10, 10, 10]  # episodes 2, 4 and 5


def test_without_restarts_a_crash_is_env_crashed_naming_the_envs_error():
    collector = EnvCollector("CountingCrash-v0", 1, seed=0)
    Counting.steps = 0
    with pytest.raises(EnvCrashed, match=r"^RuntimeError: crash at 7$"):
        collector.collect(lambda obs: np.zeros((len(obs), 1), np.float32), 40)
    Counting.steps = 0
    allowed = iter([True, False])
    with pytest.raises(EnvCrashed, match="crash at 19"):
        evaluate(lambda obs: np.zeros((len(obs), 1), np.float32), "CountingCrash-v0", 2, 0,
                 on_env_crash=lambda exc: next(allowed))


def launch(tmp_path, *args, tf_log_level: str | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "flaky_envs.py").write_text(FLAKY_MODULE)
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--env", "flaky_envs:Flaky", "--fcnet_hiddens", "32",
         "32", "--eval_every", "1000", "--eval_episodes", "1", "--no-tensorboard", "--output_dir", str(out), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        # As a user runs it: dsac quiets TensorFlow itself unless the user set its log level.
        env={**{k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
             **({"TF_CPP_MIN_LOG_LEVEL": tf_log_level} if tf_log_level is not None else {})},
    )
    return result, json.loads((out / "summary.json").read_text())


# A user's TF_CPP_MIN_LOG_LEVEL=3, the usual way to silence TensorFlow, is at least as quiet
# as dsac's own default: TensorFlow's start-up notices it cannot hide are hidden all the same.
# The distributed run is given a budget of 2: its roles' rebuilds are counted run-wide (the run
# monitor), said and summed before the third crash ends the run.
@pytest.mark.parametrize("runner, tf_log_level, budget", [(["--local"], None, 0), (["--local"], "3", 0),
                                                          (["--num_workers", "2"], None, 2)],
                         ids=["serial", "serial-TF_CPP_MIN_LOG_LEVEL=3", "distributed"])
@pytest.mark.slow
def test_a_crash_past_the_budget_ends_the_run_with_one_line_and_the_weights_saved(runner, tf_log_level, budget,
                                                                                   tmp_path):
    result, summary = launch(tmp_path, *runner, "--total_env_steps", "5000", "--env_restarts", str(budget),
                             tf_log_level=tf_log_level)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(("dsac: run failed: rollout_worker_", "dsac: run failed: evaluator"))
    # Without a budget the first crash, each process's step 400, ends the run; with one, a later multiple of 400 may.
    step = "400" if budget == 0 else r"\d+00"
    ended = rf": RuntimeError: simulator exploded at step {step} \(weights so far are saved\)"
    assert re.search(ended, lines[0]), lines
    assert summary["stop_reason"] == "failed" and os.path.exists(summary["weights_path"])
    env_restarts = {role: n for role, n in summary["restarts"].items() if role.endswith("/env")}
    assert sum(env_restarts.values()) == budget, summary["restarts"]
    assert result.stdout.count("its env raised RuntimeError: simulator exploded") == budget, result.stdout[-3000:]


def test_a_run_with_enough_env_restarts_finishes(tmp_path):
    result, summary = launch(tmp_path, "--local", "--total_env_steps", "2000", "--env_restarts", "50")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert summary["stop_reason"] == "total_env_steps" and summary["env_steps"] >= 2000
    env_restarts = {role: n for role, n in summary["restarts"].items() if role.endswith("/env")}
    assert sum(env_restarts.values()) >= 4, summary["restarts"]  # every 400 steps of each process
    assert any(role.startswith("rollout_worker_") for role in env_restarts), env_restarts  # the serial one's name
    assert "its env raised RuntimeError: simulator exploded" in result.stdout
