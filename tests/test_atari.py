"""Atari preprocessing on real ALE games: DeepMind's wrappers from gymnasium, life loss and
clipped rewards for learning only, the game's real score over whole games for everything
reported."""

import re

import numpy as np
import pytest

from dsac.config import Config
from dsac.envs.atari import EPISODE_CONTINUES, REAL_REWARD, FrameSettings
from dsac.envs.make import make_env
from dsac.envs.rollout import EnvCollector
from dsac.errors import DsacError
from dsac.runtime.evaluation import evaluate


def test_any_ale_id_gets_deepmind_preprocessing_from_gymnasium_wrappers():
    env = make_env("ALE/Breakout-v5")
    assert env.observation_space.shape == (4, 84, 84) and env.observation_space.dtype == np.uint8
    base = env.unwrapped
    assert base._frameskip == 1  # ALE's own skip is off: AtariPreprocessing skips 4 and max-pools
    assert base.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)  # v5's sticky actions kept
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84)
    small = make_env("ALE/Breakout-v5",
                     atari=FrameSettings(framestack=2, dim=42, grayscale=False, sticky_actions=False))
    assert small.observation_space.shape == (2, 42, 42, 3)
    assert small.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    names = {type(w).__name__ for w in _wrappers(make_env("ALE/Breakout-v5", training=True))}
    assert {"AtariPreprocessing", "EpisodicLife", "FireOnLifeStart", "SignReward", "FrameStackObservation"} <= names
    assert "FireOnLifeStart" not in {type(w).__name__ for w in _wrappers(make_env("ALE/Freeway-v5"))}  # no FIRE there


def _wrappers(env):
    while hasattr(env, "env"):
        yield env
        env = env.env


def test_life_loss_ends_learning_episodes_but_the_game_goes_on():
    env = make_env("ALE/Breakout-v5", training=True)
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    life_ends = games = 0
    while games < 2:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        assert reward in (-1.0, 0.0, 1.0) and REAL_REWARD in info
        if terminated and info.get(EPISODE_CONTINUES):
            life_ends += 1
            lives = env.unwrapped.ale.lives()
            env.reset()
            assert env.unwrapped.ale.lives() == lives  # the same game, not a new one
        elif terminated or truncated:
            games += 1
            env.reset()
            assert env.unwrapped.ale.lives() == 5
    assert life_ends == 2 * 4  # Breakout's 5 lives: 4 learning-only ends per game


def test_collector_stores_the_learning_signal_and_reports_whole_games_real_score():
    collector = EnvCollector("ALE/SpaceInvaders-v5", num_envs=2, seed=1, atari=FrameSettings(noop_max=5))
    rng = np.random.default_rng(1)
    chunks, episodes = [], []
    while len(episodes) < 2:
        chunks.append(collector.collect(lambda obs: rng.integers(6, size=len(obs)), 512))
        episodes += collector.drain_episodes()
    rewards = np.concatenate([c["reward"] for c in chunks])
    terminated = np.concatenate([c["terminated"] for c in chunks])
    assert set(np.unique(rewards)) <= {0.0, 1.0}  # clipped (SpaceInvaders scores 5 to 200 a hit)
    assert terminated.sum() >= 3 * len(episodes)  # every life (3 a game) ends a learning episode
    for episode in episodes:  # a whole game's real score: multiples of 5, far above the clipped sum
        assert episode.episode_return > 0 and episode.episode_return % 5 == 0
        assert episode.length > 200
    stored = np.concatenate([c["obs"] for c in chunks])
    assert stored.dtype == np.uint8 and stored.shape[1:] == (4, 84, 84)


def test_evaluation_plays_whole_games_with_real_rewards():
    rng = np.random.default_rng(0)
    returns = evaluate(lambda obs: rng.integers(6, size=len(obs)), "ALE/SpaceInvaders-v5", episodes=2, seed=100_000)
    assert all(r > 0 and r % 5 == 0 for r in returns), returns


def test_atari_flags_and_rllib_model_keys():
    config = Config.from_dict({"algo": "dqn", "env": "ALE/Pong-v5", "model": {"framestack": True, "dim": 42}})
    assert (config.validate().framestack, config.dim) == (4, 42)
    assert Config(framestack="false").validate().framestack == 1
    for values, fact in (({"framestack": 0}, r"--framestack must be an integer in \[1, 16\]"),
                         ({"dim": 4}, r"--dim must be an integer in \[8, 512\]"),
                         ({"model": {"framestak": 4}}, "did you mean framestack")):
        with pytest.raises(DsacError, match=fact):
            Config.from_dict(values).validate()
    with pytest.raises(DsacError, match="use --frame_skip"):
        make_env("ALE/Pong-v5", {"frameskip": 4})
    with pytest.raises(DsacError, match="setting framestack must be int"):
        FrameSettings.from_dict({"framestack": "4"})


@pytest.mark.slow
def test_a_short_breakout_run_records_game_lengths_and_a_policy_that_never_fires_ends_its_games(tmp_path):
    """launch.py as a user runs it on an ALE id with Atari defaults, shortened; then its weights
    made to prefer NOOP everywhere (the greedy policy never presses FIRE) play whole Breakout
    games through ``load_policy(...).make_env()``: each ends well before the 27,000-step cap."""
    import json
    import os
    import subprocess
    import sys

    from conftest import REPO_ROOT, act_without_tensorflow

    from dsac.formats.files import load_weights, save_weights

    out = tmp_path / "breakout"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--algo", "dqn", "--env", "ALE/Breakout-v5",
         "--num_workers", "2", "--total_env_steps", "1000", "--learning_starts", "400", "--start_steps", "400",
         "--buffer_size", "5000", "--eval_every", "100000", "--eval_episodes", "1", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=600, env=env, cwd=REPO_ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "stored frame by frame: 4 frames of (84, 84)" in run.stderr + run.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_steps"] >= 1000 and summary["updates"] > 0
    final = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()][-1]
    assert final["eval_truncated"] == 0 and 50 < final["eval_length_mean"] < 10_000, final

    payload = load_weights(str(out / "weights.pkl"))
    weights = payload["weights"]
    head = [k for k in weights if weights[k].ndim == 1 and weights[k].shape == (4,)]  # the Q head's bias
    assert len(head) == 1, sorted((k, v.shape) for k, v in weights.items())
    kernel = head[0][: -len("bias")] + "kernel"
    weights[kernel] = np.zeros_like(weights[kernel])
    weights[head[0]] = np.array([1.0, 0.0, 0.0, 0.0], weights[head[0]].dtype)  # NOOP, whatever it sees
    save_weights(str(tmp_path / "noop.pkl"), payload)
    printed = act_without_tensorflow(tmp_path / "noop.pkl", """
        assert policy.action_space.n == 4 and env.unwrapped.get_action_meanings()[1] == "FIRE"
        for game in range(3):
            obs, _ = env.reset(seed=game)
            steps, done = 0, False
            while not done:
                action = policy(obs)
                assert action == 0
                obs, reward, terminated, truncated, _ = env.step(action)
                steps, done = steps + 1, terminated or truncated
            assert terminated and not truncated and env.unwrapped.ale.lives() == 0
            print("game", game, "steps", steps)
    """)
    lengths = [int(line.split()[-1]) for line in printed.splitlines() if line.startswith("game")]
    assert len(lengths) == 3 and max(lengths) < 10_000, lengths
    infer = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "scripts", "infer.py"), str(tmp_path / "noop.pkl"),
                            "--episodes", "2"], capture_output=True, text=True, timeout=300, env=env, cwd=REPO_ROOT)
    assert infer.returncode == 0, infer.stderr[-2000:]
    played = re.findall(r"episode \d: return [\d.]+ in (\d+) steps(.*)", infer.stdout)
    assert len(played) == 2 and all(int(n) < 10_000 and not rest for n, rest in played), infer.stdout
