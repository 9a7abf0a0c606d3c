"""DQN: numpy acting agrees with Keras, the double-Q n-step loss by hand, Ape-X's ε."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from dsac.algorithms.dqn.learner import dqn_loss
from dsac.algorithms.dqn.numpy_q import apex_epsilon, linear_epsilon
from dsac.algorithms.dqn.policy import DQNPolicy
from dsac.config import Config

ENV = gym.make("CartPole-v1")


def make(dueling=True, build_learner=False, **kw):
    config = Config(algo="dqn", env="CartPole-v1", hiddens=[16], dueling=dueling, **kw).validate()
    return DQNPolicy(ENV.observation_space, ENV.action_space, config, build_learner=build_learner, seed=0)


@pytest.mark.parametrize("dueling", [True, False])
def test_numpy_q_values_match_keras(dueling):
    learner = make(dueling, build_learner=True)
    actor = make(dueling)
    actor.set_weights(learner.get_weights())
    obs = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    np.testing.assert_allclose(actor.q_values(obs), learner.learner.q_online(obs).numpy(), atol=1e-5)
    np.testing.assert_array_equal(actor.compute_actions(obs, explore=False), np.argmax(actor.q_values(obs), 1))


def test_double_q_n_step_loss_by_hand():
    policy = make(dueling=False, build_learner=True)
    online, target = policy.learner.q_online, policy.learner.q_target
    target.set_weights([w * 0.5 for w in online.get_weights()])  # make the two nets differ
    rng = np.random.default_rng(2)
    batch = {
        "obs": rng.normal(size=(5, 4)).astype(np.float32),
        "action": np.array([0, 1, 1, 0, 1], np.int32),
        "reward": np.array([1.0, 2.71, 1.9, 0.5, 1.0], np.float32),
        "next_obs": rng.normal(size=(5, 4)).astype(np.float32),
        "terminated": np.array([0, 0, 1, 0, 0], np.float32),
        "discount": np.array([0.99**3, 0.99**3, 0.99**2, 0.99, 0.99**3], np.float32),
        "weights": np.array([1.0, 0.2, 0.5, 1.0, 0.7], np.float32),
    }
    q = online(batch["obs"]).numpy()
    a_star = np.argmax(online(batch["next_obs"]).numpy(), axis=1)  # chosen by the online net
    q_next = target(batch["next_obs"]).numpy()[np.arange(5), a_star]  # valued by the target net
    y = batch["reward"] + batch["discount"] * (1 - batch["terminated"]) * q_next
    td = q[np.arange(5), batch["action"]] - y
    huber = np.where(np.abs(td) <= 1, 0.5 * td**2, np.abs(td) - 0.5)
    loss, td_abs, _ = dqn_loss(online, target, {k: tf.constant(v) for k, v in batch.items()}, double_q=True)
    assert float(loss) == pytest.approx(np.mean(batch["weights"] * huber), rel=1e-5)
    np.testing.assert_allclose(td_abs.numpy(), np.abs(td), rtol=1e-5, atol=1e-6)


def test_update_returns_priorities_and_copies_target():
    policy = make(build_learner=True, target_update_every=2)
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.normal(size=(8, 4)).astype(np.float32), "action": rng.integers(0, 2, 8),
        "reward": np.ones(8, np.float32), "next_obs": rng.normal(size=(8, 4)).astype(np.float32),
        "terminated": np.zeros(8, np.float32), "discount": np.full(8, 0.99, np.float32),
    }
    stats = policy.learn_on_batch(batch)
    assert stats["td_abs"].shape == (8,) and np.isfinite(stats["loss"])
    online, target = policy.learner.q_online.get_weights(), policy.learner.q_target.get_weights()
    assert not all(np.allclose(a, b) for a, b in zip(online, target, strict=True))
    policy.learn_on_batch(batch)  # second update: hard copy
    for a, b in zip(policy.learner.q_online.get_weights(), policy.learner.q_target.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_initial_priorities_are_td_errors_under_the_workers_weights():
    learner, worker = make(build_learner=True), make()
    worker.set_weights(learner.get_weights())
    rng = np.random.default_rng(4)
    chunk = {
        "obs": rng.normal(size=(6, 4)).astype(np.float32), "action": rng.integers(0, 2, 6),
        "reward": rng.normal(size=6).astype(np.float32), "next_obs": rng.normal(size=(6, 4)).astype(np.float32),
        "terminated": np.array([0, 1, 0, 0, 0, 0], np.float32), "discount": np.full(6, 0.97, np.float32),
    }
    out = worker.postprocess_trajectory(chunk)
    q, q_next = worker.q_values(chunk["obs"]), worker.q_values(chunk["next_obs"])
    y = chunk["reward"] + 0.97 * (1 - chunk["terminated"]) * q_next.max(1)
    np.testing.assert_allclose(out["priority"], np.abs(y - q[np.arange(6), chunk["action"]]), rtol=1e-5)
    assert "priority" not in make().postprocess_trajectory(chunk)  # no weights yet: replay's max


def test_apex_epsilon_schedule():
    eps = [apex_epsilon(i, 8, 0.4, 7.0) for i in range(8)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert all(a > b for a, b in zip(eps, eps[1:], strict=False))
    assert apex_epsilon(0, 1, 0.4, 7.0) == 0.4
    assert linear_epsilon(0, 1000, 0.02) == 1.0
    assert linear_epsilon(500, 1000, 0.02) == pytest.approx(0.51)
    assert linear_epsilon(5000, 1000, 0.02) == pytest.approx(0.02)
    # A policy on worker 2 of 4 explores with Ape-X's epsilon; with one worker it decays.
    config = Config(algo="dqn", env="CartPole-v1", num_workers=4).validate()
    worker = DQNPolicy(ENV.observation_space, ENV.action_space, config, worker_index=2, num_workers=4)
    assert worker.epsilon == pytest.approx(0.4 ** (1 + 7 * 2 / 3))
    single = DQNPolicy(ENV.observation_space, ENV.action_space, config, worker_index=0, num_workers=1)
    assert single.epsilon < 1.0 and single.epsilon > 0.02
