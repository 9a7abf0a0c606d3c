"""--normalize_obs: statistics merged exactly from what every worker stored, carried in the
weights and the learner's state, used alike by acting, load_policy, the exports and a resumed
run; and a task in raw units that the defaults do not learn, learned with it."""

import json
import os

import gymnasium as gym
import numpy as np
import pytest
from conftest import REPO_ROOT, launch_here

from dsac.config import Config
from dsac.errors import DsacError
from dsac.formats.files import load_weights, save_weights
from dsac.models.normalization import ObsStatistics
from dsac.replay.buffer import Replay, ReplayStorage, replay_specs
from dsac.runtime import build
from dsac.runtime.messages import Chunk

# The env of benchmarks/results/normalization's runs: Pendulum observed x1000 and offset.
SCALED_ENVS = os.path.join(REPO_ROOT, "benchmarks", "results", "normalization")


def chunk_of(obs: np.ndarray) -> Chunk:
    n = len(obs)
    return Chunk({"obs": obs, "action": np.zeros((n, 1), np.float32), "reward": np.zeros(n, np.float32),
                  "next_obs": obs, "terminated": np.zeros(n, np.float32), "discount": np.ones(n, np.float32)})


def test_statistics_merged_across_workers_and_shards_equal_those_of_the_concatenated_data():
    """Two writers' chunks into two replay shards; the learner merges what each shard reports
    with every sample (each shard's moments of all it stored). A restarted shard starts from
    zero and a restored learner restores each shard's last report: nothing is counted twice."""
    rng = np.random.default_rng(0)
    space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    specs, _ = replay_specs(space, gym.spaces.Box(-1, 1, (1,), np.float32))

    def shard():
        return Replay(ReplayStorage(specs, 10_000, 0), 0, learning_starts=0, updates_per_step=1.0,
                      max_steps_ahead=10**6, max_chunk=10**6, track_obs=True)

    shards = [shard(), shard()]
    chunks = [rng.normal([1000, -5, 0, 3e4], [3, 0.01, 1, 100], (n, 4)).astype(np.float32)
              for n in (100, 37, 250, 1, 80, 64)]
    learner = ObsStatistics(4)
    for i, obs in enumerate(chunks):  # writer i % 2 writes to shard i % 2
        shards[i % 2].add(chunk_of(obs))
        sampled = shards[i % 2].sample(8, 1)
        learner.observe(i % 2, sampled.obs_moments)
    everything = np.concatenate(chunks).astype(np.float64)
    total = learner.total()
    assert total.count == len(everything)
    np.testing.assert_allclose(total.mean, everything.mean(axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(total.var, everything.var(axis=0), rtol=1e-6)

    fresh = ObsStatistics(4)  # a state from before any sample (a data-parallel group's first)
    fresh.set_state(ObsStatistics(4).state())
    assert fresh.total().count == 0
    restored = ObsStatistics(4)  # a learner restarted from a checkpoint taken now
    restored.set_state(learner.state())
    shards[1] = shard()  # shard 1's process was lost: it reports from zero again
    more = rng.normal(1000, 3, (50, 4)).astype(np.float32)
    shards[1].add(chunk_of(more))
    restored.observe(1, shards[1].sample(8, 1).obs_moments)
    restored.observe(0, shards[0].sample(8, 1).obs_moments)  # shard 0 kept running: counted once
    everything = np.concatenate([everything, more])
    assert restored.total().count == len(everything)
    np.testing.assert_allclose(restored.total().var, everything.var(axis=0), rtol=1e-6)


def test_a_policy_class_with_normalize_obs_is_one_line():
    with pytest.raises(DsacError, match="a policy_class normalizes"):
        Config(normalize_obs=True, policy_class="dsac.policy:Policy").validate()


def test_image_observations_are_refused_in_one_line():
    config = Config(algo="dqn", env="CartPole-v1", normalize_obs=True).validate()
    frames = gym.spaces.Box(0, 255, (4, 42, 42), np.uint8)
    with pytest.raises(DsacError, match="--normalize_obs takes vector observations"):
        build.acting_policy(config, frames, gym.spaces.Discrete(3), 0)


def test_a_task_in_raw_units_learns_with_normalize_obs_and_every_reader_acts_alike(tmp_path, monkeypatch, capfd,
                                                                                  caplog):
    """Pendulum whose observations arrive x1000 and offset, the serial runner and SAC's defaults
    with --normalize_obs: it learns. The weights carry the statistics (their count is every env
    step); load_policy, and the ONNX export act alike on them; a resumed run
    counts on from the checkpoint's statistics."""
    monkeypatch.syspath_prepend(SCALED_ENVS)
    out = tmp_path / "run"
    common = ["--trust_code", "--eval_episodes", "3", "--seed", "0"]
    result = launch_here(["--local", "--env", "scaled_envs:ScaledPendulum", "--normalize_obs", "--total_env_steps",
                          "3500", "--eval_every", "1000", "--output_dir", out, *common], capfd, caplog)
    assert result.returncode == 0, result.stdout[-3000:]
    returns = [json.loads(line)["eval_return_mean"] for line in (out / "progress.jsonl").read_text().splitlines()]
    assert max(returns) >= -400, returns  # a random policy: about -1,200 to -1,500

    from dsac.formats.inference import load_policy

    policy = load_policy(str(out / "weights.pkl"), trust_code=True)
    weights = policy.policy.get_weights()
    assert weights["obs_norm/count"][0] == 3500
    obs = np.random.default_rng(1).normal([5000, -3000, 200], [700, 700, 4000], (256, 3)).astype(np.float32)
    actions = policy.policy.compute_actions(obs, explore=False)
    assert np.ptp(actions) > 0.1  # the observations reach the network, not clipped to one corner

    import onnxruntime

    from dsac.export import export_onnx

    export_onnx(str(out / "weights.pkl"), str(tmp_path / "p.onnx"), trust_code=True)
    onnx_actions = onnxruntime.InferenceSession(str(tmp_path / "p.onnx")).run(None, {"obs": obs})[0]
    np.testing.assert_allclose(onnx_actions, actions, atol=1e-5)

    payload = load_weights(str(out / "weights.pkl"))  # a hostile file: statistics no run gives
    payload["weights"]["obs_norm/var"] = -payload["weights"]["obs_norm/var"]
    save_weights(str(tmp_path / "hostile.pkl"), payload)
    with pytest.raises(DsacError, match="obs_norm/var or obs_norm/count holds negative values"):
        load_policy(str(tmp_path / "hostile.pkl"), trust_code=True)

    result = launch_here(["--resume", out, "--total_env_steps", "4000", "--trust_code"], capfd, caplog)
    assert result.returncode == 0, result.stdout[-3000:]
    resumed = np.load(out / "checkpoint" / "state.npz")
    assert resumed["obs_norm/count"][0] == 4000  # the checkpoint's 3,500 and the 500 since
    assert load_policy(str(out / "weights.pkl"), trust_code=True).policy.get_weights()["obs_norm/count"][0] == 4000
