"""The Python API through real Ray workers: Trainer, custom models, user policies, callbacks."""

import json

import keras
import numpy as np
import pytest

import dsac
from dsac import Callbacks, Trainer
from dsac.errors import DsacError

SMALL = {
    "env": "Pendulum-v1", "num_workers": 2, "eval_every": 500, "eval_episodes": 2, "seed": 3,
    "learning_starts": 300, "start_steps": 300, "steps_per_iteration": 500, "log_every": 60.0,
    "model": {"fcnet_hiddens": [32, 32]},
}


def tanh_mlp(input_dim, output_dim, model_config, name):
    """A user's Keras model: one tanh layer whose width comes from custom_model_config."""
    inputs = keras.Input((input_dim,))
    x = keras.layers.Dense(model_config["width"], activation="tanh", name="my_hidden")(inputs)
    return keras.Model(inputs, keras.layers.Dense(output_dim, name="my_out")(x), name=name)


class CountingCallbacks(Callbacks):
    """Marks every episode its end hook saw and records a custom metric."""

    def on_episode_start(self, *, episode, obs):
        episode.user_data["max_abs_velocity"] = 0.0

    def on_episode_step(self, *, episode, obs, action, reward, info):
        episode.user_data["max_abs_velocity"] = max(episode.user_data["max_abs_velocity"], abs(float(obs[2])))

    def on_episode_end(self, *, episode, terminated, truncated):
        episode.custom_metrics["ended_by_callback"] = 1.0
        episode.custom_metrics["max_abs_velocity"] = episode.user_data["max_abs_velocity"]

    def on_learn_on_batch(self, *, policy, batch, result):
        result["callback_batch_size"] = len(batch["reward"])

    def on_train_result(self, *, trainer, result):
        result["seen_by_on_train_result"] = True


def test_misspelled_model_key_suggests_the_right_one():
    with pytest.raises(DsacError, match="did you mean fcnet_hiddens"):
        Trainer({"env": "Pendulum-v1", "model": {"fcnet_hidden": [64]}})
    with pytest.raises(DsacError, match="did you mean num_workers"):
        Trainer({"num_worker": 2})
    with pytest.raises(DsacError, match="--batch_size"):
        Trainer({"batch_size": -1})


def test_train_keeps_actors_and_save_restore_gives_the_same_actions(ray_local, tmp_path):
    """Trainer.train keeps its actors; save() holds the full state (counters, optimizers) and a
    restored trainer acts the same and carries on training from it."""
    from dsac.formats.checkpoints import read_checkpoint

    with Trainer({**SMALL, "output_dir": str(tmp_path / "run"), "callbacks": CountingCallbacks}) as trainer:
        handles = trainer.actor_handles
        results = [trainer.train() for _ in range(3)]
        assert trainer.actor_handles == handles  # same actors: nothing restarted
        steps = [r["env_steps"] for r in results]
        assert steps[0] >= 500 and steps[1] >= steps[0] + 400 and steps[2] >= steps[1] + 400
        assert all(r["updates"] > 0 and r["updates_per_s"] > 0 for r in results[1:])
        assert results[-1]["seen_by_on_train_result"] is True
        assert results[-1]["callback_batch_size"] == 256  # on_learn_on_batch ran in the learner
        # Every episode that finished went through on_episode_end in a rollout worker.
        assert sum(r["episodes_this_iter"] for r in results) >= 5
        assert all(r["custom_metrics/ended_by_callback_mean"] == 1.0 for r in results if r["episodes_this_iter"])
        obs = np.array([0.5, -0.5, 1.0], np.float32)
        action = trainer.compute_single_action(obs)
        assert action.shape == (1,) and -2.0 <= action[0] <= 2.0
        checkpoint = trainer.save(str(tmp_path / "ckpt"))
    lines = [json.loads(x) for x in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    state = read_checkpoint(checkpoint)["state"]
    updates, steps = int(state["updates"]), int(state["actor_optimizer/000_iteration"])
    # The learner may run a block past the last train() before it hands its state over: the
    # sample calls in flight and a push period, --push_every updates or --push_interval seconds
    # of them (from the defaults and the run's own rate, not fixed numbers).
    c, last = trainer.config, results[-1]
    push_period = max(c.push_every, max(r["updates_per_s"] for r in results) * c.push_interval)
    assert last["updates"] <= updates <= last["updates"] + c.batches_per_sample * (c.prefetch + 1) * 2 + push_period
    assert steps == updates  # Adam's step count is saved with the networks (no update was skipped)
    assert any("custom_metrics/max_abs_velocity_mean" in line for line in lines)

    # The saved config names the callbacks' module: restoring imports it only with consent.
    with pytest.raises(DsacError, match="names code to import: callbacks 'test_api:CountingCallbacks'"):
        Trainer.restore(checkpoint, {"output_dir": str(tmp_path / "refused")})
    restored = Trainer.restore(checkpoint, {"output_dir": str(tmp_path / "restored")}, trust_code=True)
    try:  # save() holds what the Trainer acted with, though the learner may have run on after train()
        saved = dsac.load_policy(str(tmp_path / "ckpt" / "weights.pkl"), trust_code=True)(obs)
        np.testing.assert_allclose(saved, action, atol=1e-5)
        np.testing.assert_allclose(restored.compute_single_action(obs), action, atol=1e-5)
        result = restored.train()
        assert result["env_steps"] >= last["env_steps"] + 400  # env steps carry on too
        assert result["updates"] > updates  # the update counter carries on, not from 0
        again = read_checkpoint(restored.save(str(tmp_path / "again")))["state"]
        assert int(again["updates"]) > updates
        assert int(again["actor_optimizer/000_iteration"]) == int(again["updates"])  # the optimizer's count too
    finally:
        restored.stop()


@pytest.mark.parametrize("algo", ["sac", "crossq"])
def test_serial_trainer_saves_the_policy_it_acts_with(tmp_path, algo):
    """Between train() calls a Trainer acts with what save() writes, and a restored one acts
    the same (the serial runner; the distributed one is checked above)."""
    # Pushes rarer than the updates of an iteration: the learner's networks run ahead of the
    # weights the run last published.
    config = {**SMALL, "algo": algo, "output_dir": str(tmp_path / "run"), "steps_per_iteration": 700,
              "push_every": 5000, "learner_xla": False}  # what is saved and acted with, not CrossQ's compile
    obs = np.array([0.3, 0.9, -2.0], np.float32)
    with Trainer(config, local=True) as trainer:
        trainer.train()
        trainer.train()
        action = trainer.compute_single_action(obs)
        checkpoint = trainer.save(str(tmp_path / "ckpt"))
        assert np.allclose(trainer.compute_single_action(obs), action)  # save() moved nothing
    restored = Trainer.restore(checkpoint, {"output_dir": str(tmp_path / "restored")})
    try:
        np.testing.assert_allclose(restored.compute_single_action(obs), action, atol=1e-5)
    finally:
        restored.stop()


def test_custom_keras_model_trains_sac_in_remote_workers(ray_local, tmp_path):
    dsac.register_custom_model("tanh_mlp", tanh_mlp)
    # One rollout worker: a custom Keras model acts through TensorFlow, imported in each worker.
    config = {**SMALL, "output_dir": str(tmp_path / "run"), "num_workers": 1,
              "model": {"custom_model": "tanh_mlp", "custom_model_config": {"width": 24}}}
    with Trainer(config) as trainer:
        before = trainer.get_policy().get_weights()
        assert set(before) == {"actor/my_hidden/kernel", "actor/my_hidden/bias",
                               "actor/my_out/kernel", "actor/my_out/bias"}
        assert before["actor/my_hidden/kernel"].shape == (3, 24)
        first, second = trainer.train(), trainer.train()
        after = trainer.get_policy().get_weights()
        assert not np.allclose(before["actor/my_out/kernel"], after["actor/my_out/kernel"])
        assert second["updates"] > first["updates"] > 0
        assert np.isfinite(second["qf_loss"])
    summary = trainer.stop()
    assert summary["failure"] is None and summary["env_steps"] >= 1000  # workers acted with it


def test_user_policy_class_runs_in_the_distributed_system(ray_local, tmp_path):
    config = {**SMALL, "output_dir": str(tmp_path / "run"),
              "policy_class": "examples.linear_policy:LinearPolicy", "batch_size": 64}
    with Trainer(config) as trainer:
        trainer.train()
        result = trainer.train()
        assert result["updates"] > 0
        assert (result["batch_size"], result["obs_dim"], result["action_dim"]) == (64, 3, 1)
        weights = trainer.get_policy().get_weights()
        assert weights["linear/W"].shape == (1, 4) and np.any(weights["linear/W"] != 0)
