"""Files dsac wrote (tests/data/golden, made by tests/data/golden/make.py) load with today's
readers: a weights file of each algorithm and observation kind, a checkpoint with and without
its replay, and a run's config.json. A reader made stricter must still admit what dsac writes."""

import os

import numpy as np
import pytest
from conftest import REPO_ROOT

from dsac import load_policy
from dsac.config import Config
from dsac.formats.checkpoints import read_checkpoint
from dsac.formats.files import load_weights

GOLDEN = os.path.join(REPO_ROOT, "tests", "data", "golden")
# name -> (algo, env, observation shape, replay shards in its checkpoint)
RUNS = {
    "sac_pendulum": ("sac", "Pendulum-v1", (3,), 1),
    "dqn_c51_cartpole": ("dqn", "CartPole-v1", (4,), 0),
    "dqn_conv_catch": ("dqn", "examples.catch:Catch", (10, 5), 0),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_golden_run_loads_with_every_reader(name):
    algo, env_id, obs_shape, shards = RUNS[name]
    run_dir = os.path.join(GOLDEN, name)
    for path in ("weights.pkl", "checkpoint/weights.pkl"):
        payload = load_weights(os.path.join(run_dir, path))
        assert (payload["algo"], payload["env"]) == (algo, env_id)
        assert payload["weights"] and all(w.dtype == np.float32 for w in payload["weights"].values())
    policy = load_policy(os.path.join(run_dir, "weights.pkl"), trust_code=True)  # Catch is a module:Name
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    assert obs.shape == obs_shape
    assert env.action_space.contains(policy(obs))
    env.close()
    checkpoint = read_checkpoint(run_dir)
    assert checkpoint["meta"]["env_steps"] == 300
    assert int(checkpoint["state"]["updates"]) == checkpoint["meta"]["updates"]
    assert len(checkpoint["replay"]) == shards and set(checkpoint["weights"]) == set(payload["weights"])
    if shards:
        assert checkpoint["replay"][0]["data/obs"].shape[1:] == obs_shape
    # consent to the code it names (Catch) given as the command line gives it
    config = Config.load(os.path.join(run_dir, "config.json"), {"trust_code": True}, trusted=True)
    assert (config.algo, config.env, config.fcnet_hiddens[0]) == (algo, env_id, 8)


def test_golden_run_directories_resume(tmp_path):
    """Run directories written before today's readers (copies of the golden runs: SAC with its
    replay in the checkpoint, C51 DQN without) resume with ``launch.py --resume``: the run
    counts on from the checkpoint's 300 env steps and appends to its progress.jsonl."""
    import json
    import shutil

    from conftest import run_in_one_process

    programs, copies = [], []
    for name in ("sac_pendulum", "dqn_c51_cartpole"):
        copy = tmp_path / name
        shutil.copytree(os.path.join(GOLDEN, name), copy)
        copies.append(copy)
        programs.append({"program": os.path.join(REPO_ROOT, "launch.py"), "env": {"TF_CPP_MIN_LOG_LEVEL": "3"},
                         "args": ["--resume", str(copy), "--local", "--total_env_steps", "500", "--eval_every", "100",
                                  "--eval_episodes", "1", "--progress_bar", "false"]})
    for copy, result in zip(copies, run_in_one_process(programs, tmp_path), strict=True):
        assert result.returncode == 0, (copy.name, result.stdout[-2000:], result.stderr[-2000:])
        meta = read_checkpoint(str(copy))["meta"]
        assert meta["env_steps"] == 500 and meta["updates"] > 0, meta
        rows = [json.loads(line) for line in (copy / "progress.jsonl").read_text().splitlines()]
        assert rows and rows[-1]["env_steps"] > 300, rows[-3:]
