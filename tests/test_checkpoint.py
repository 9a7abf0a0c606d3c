"""Checkpoints of the full training state, and resuming a run from one."""

import json

import gymnasium as gym
import numpy as np
import pytest

from dsac.build import make_learner
from dsac.config import Config
from dsac.envs import describe_space
from dsac.files import read_checkpoint, write_checkpoint
from dsac.learning import UpdateLoop
from dsac.preparation import resume_config
from dsac.replay import PrioritizedReplayStorage, ReplayStorage, field_specs
from dsac.runner import run

RNG = np.random.default_rng(0)


def batch_for(env, n=16):
    obs = RNG.normal(size=(n, *env.observation_space.shape)).astype(np.float32)
    actions = np.stack([env.action_space.sample() for _ in range(n)])
    return {"obs": obs, "action": actions, "reward": RNG.normal(size=n).astype(np.float32),
            "next_obs": obs[::-1].copy(), "terminated": np.zeros(n, np.float32),
            "discount": np.full(n, 0.99, np.float32)}


@pytest.mark.parametrize("algo, env_id", [("sac", "Pendulum-v1"), ("dqn", "CartPole-v1"), ("crossq", "Pendulum-v1")])
def test_full_state_round_trip_continues_training_identically(algo, env_id, tmp_path):
    env = gym.make(env_id)
    config = Config(algo=algo, env=env_id, fcnet_hiddens=[16]).validate()
    a = make_learner(config, env.observation_space, env.action_space, 0)
    loop = UpdateLoop(a, config.push_every, config.max_nonfinite_updates)
    for _ in range(3):
        loop.step({key: value[None] for key, value in batch_for(env).items()})
    state = loop.state()
    assert int(state["updates"]) == 3 and any("optimizer" in k for k in state)
    payload = {"algo": algo, "env": env_id, "observation_space": describe_space(env.observation_space),
               "action_space": describe_space(env.action_space), "weights": a.get_weights()}
    write_checkpoint(str(tmp_path), state, {"env_steps": 10, "updates": 3, "version": 1}, payload)
    checkpoint = read_checkpoint(str(tmp_path))
    loaded = checkpoint["state"]
    assert set(checkpoint["weights"]) == set(a.get_weights())  # the acting weights, checked like any weights file
    b = make_learner(config, env.observation_space, env.action_space, 9)
    resumed = UpdateLoop(b, config.push_every, config.max_nonfinite_updates)
    resumed.set_state(loaded)
    for name, value in a.get_state().items():
        np.testing.assert_array_equal(b.get_state()[name], value)  # targets and optimizer included
    assert resumed.updates == 3


@pytest.mark.parametrize("storage_cls", [ReplayStorage, PrioritizedReplayStorage])
def test_replay_state_round_trip(storage_cls):
    specs = field_specs((3,), np.float32, (1,), np.float32)
    src = storage_cls(specs, capacity=8, seed=1)
    for start in (0, 5):  # 10 transitions into 8 slots: wrapped
        n = 5
        i = np.arange(start, start + n, dtype=np.float32)
        src.add({"obs": np.repeat(i[:, None], 3, 1), "action": i[:, None], "reward": i,
                 "next_obs": np.repeat(i[:, None], 3, 1), "terminated": np.zeros(n, np.float32),
                 "discount": np.ones(n, np.float32)})
    src.sample(4, 2)
    dst = storage_cls(specs, capacity=8, seed=2)
    dst.load_state_dict(src.state_dict())
    assert (dst.size, dst.added, dst.next_index, dst.sampled_batches) == (8, 10, 2, 2)
    np.testing.assert_array_equal(dst.data["reward"], src.data["reward"])
    # Same RNG state, so the same batch.
    np.testing.assert_array_equal(dst.sample(4, 3).batches["reward"], src.sample(4, 3).batches["reward"])


def test_resume_carries_counters_and_learning_on(ray_local, tmp_path):
    run_dir = str(tmp_path / "run")
    common = {"env": "Pendulum-v1", "num_workers": 2, "seed": 1, "eval_every": 1_000, "eval_episodes": 10,
              "log_every": 60.0, "fcnet_hiddens": [64, 64]}
    first = run(Config.from_dict({**common, "total_env_steps": 4_000, "output_dir": run_dir,
                                  "checkpoint_replay": True}).validate())
    before = [json.loads(x) for x in open(f"{run_dir}/progress.jsonl")]
    meta = read_checkpoint(run_dir)["meta"]
    assert meta["env_steps"] == first["env_steps"] == 4_000 and meta["updates"] == first["updates"]
    second = run(resume_config(run_dir, {"total_env_steps": 6_000}).validate())
    after = [json.loads(x) for x in open(f"{run_dir}/progress.jsonl")]
    assert after[: len(before)] == before  # appended, not rewritten
    resumed = after[len(before):]
    assert resumed[0]["env_steps"] >= 4_000 and resumed[0]["updates"] >= first["updates"]
    assert resumed[0]["weights_version"] > before[-1]["weights_version"]
    assert resumed[0]["wall_s"] > before[-1]["wall_s"]
    # Nothing learned is lost: the evaluations after resuming are no worse than the last one
    # before, up to noise (one of ten episodes that fails to swing up costs ~100; a learner
    # starting over scores about -1200 to -1500 at both). Better is fine: training went on.
    after_resume = [row["eval_return_mean"] for row in resumed]
    assert (len(after_resume) >= 2
            and max(after_resume) >= before[-1]["eval_return_mean"] - 150), (before[-1], after_resume)
    assert second["env_steps"] == 6_000 and second["updates"] > first["updates"] + 1_500
