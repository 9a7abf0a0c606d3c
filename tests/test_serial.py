"""The serial runner (``launch.py --local`` / ``--num_workers 0``): the same classes as the
distributed run in one process, without Ray — it learns, and leaves the same files."""

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

from dsac import load_policy
from dsac.config import Config
from dsac.errors import DsacError


def test_local_run_learns_pendulum_without_starting_ray(tmp_path):
    out, ray_dir = tmp_path / "run", tmp_path / "ray"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--local", "--env", "Pendulum-v1",
         "--fcnet_hiddens", "64", "64", "--total_env_steps", "4000", "--eval_every", "1000", "--eval_episodes", "5",
         "--seed", "0", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "RAY_TMPDIR": str(ray_dir), "PYTHONPATH": REPO_ROOT},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not ray_dir.exists(), "the serial runner started Ray"
    lines = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    returns = [line["eval_return_mean"] for line in lines]
    # From a random policy's ~ -1200 (and worse while it starts learning) to a swinging pendulum.
    assert returns[0] < -900 and max(returns) >= -600, returns
    assert [line["env_steps"] for line in lines] == sorted(line["env_steps"] for line in lines)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "serial" and summary["stop_reason"] == "total_env_steps" and summary["env_steps"] == 4000
    # Updates per env step held at --updates_per_step 1 by the same rate limiter as the replay actor's.
    assert summary["updates"] >= 4000 - 200 - 4 * 2
    for name in ("config.json", "weights.pkl", "best_weights.pkl", "checkpoint/state.npz", "checkpoint/meta.json"):
        assert (out / name).exists(), name
    policy = load_policy(str(out / "weights.pkl"))
    assert policy.payload["version"] == summary["weights_version"] and policy.payload["env_steps"] == 4000


def test_num_workers_0_is_the_serial_runner_and_ray_only_flags_are_refused():
    assert Config(num_workers=0).validate().local is True
    assert Config(local=True).validate().num_workers == 2  # --local alone: the worker count is not used
    with pytest.raises(DsacError, match="--num_workers 4 needs Ray"):  # Trainer and Tune too, not only the CLI
        Config(local=True, num_workers=4).validate()
    for values, flag in (({"num_learners": 2}, "--num_learners"), ({"address": "127.0.0.1:6379"}, "--address"),
                         ({"learner_gpus": 1.0}, "--learner_gpus"), ({"num_replay_shards": 2}, "--num_replay_shards")):
        with pytest.raises(DsacError, match=f"{flag} .* needs Ray"):
            Config(local=True, num_workers=4, **values).validate()


def test_local_trainer_trains_saves_and_restores_without_ray(tmp_path):
    from dsac import Trainer
    from dsac.formats.checkpoints import read_checkpoint

    config = {"env": "Pendulum-v1", "eval_every": 500, "eval_episodes": 1, "seed": 3, "learning_starts": 300,
              "start_steps": 300, "steps_per_iteration": 500, "model": {"fcnet_hiddens": [32, 32]},
              "output_dir": str(tmp_path / "run"), "tensorboard": False}
    with Trainer(config, local=True) as trainer:
        first, second = trainer.train(), trainer.train()
        assert trainer.actor_handles == {}  # no actors: everything runs in this process
        assert second["env_steps"] >= first["env_steps"] + 500 and second["updates"] >= 650
        assert "eval_return_mean" in first or "eval_return_mean" in second
        saved = trainer.save(str(tmp_path / "saved"))
    state = read_checkpoint(saved)["state"]
    assert int(state["updates"]) == second["updates"]  # one process: the state is exactly the counters
    assert int(state["actor_optimizer/000_iteration"]) == second["updates"]
    with Trainer.restore(saved, {"output_dir": str(tmp_path / "restored")}) as restored:
        result = restored.train()
        assert result["env_steps"] >= second["env_steps"] + 500 and result["updates"] > second["updates"]
        again = restored.save(str(tmp_path / "again"))
        assert restored.stop()["mode"] == "serial"
    assert int(read_checkpoint(again)["state"]["actor_optimizer/000_iteration"]) == result["updates"]
