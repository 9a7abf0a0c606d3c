"""SAC's losses, target update and numpy actor, checked against values computed by hand."""

import math

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from dsac.algorithms.sac.learner import sac_losses
from dsac.algorithms.sac.policy import SACPolicy
from dsac.config import Config
from dsac.runtime.build import make_learner
from dsac.weights import TensorFlowVariables


def np_mlp(weights, prefix, x):
    h = np.maximum(x @ weights[f"{prefix}/hidden_0/kernel"] + weights[f"{prefix}/hidden_0/bias"], 0)
    return h @ weights[f"{prefix}/out/kernel"] + weights[f"{prefix}/out/bias"]


def np_sample(weights, obs, noise):
    """a = tanh(mu + sigma * eps); log pi = log N(u) - sum log(1 - tanh(u)^2), directly."""
    out = np_mlp(weights, "actor", obs)
    mean, log_std = out[:, :1], np.clip(out[:, 1:], -20, 2)
    u = mean + np.exp(log_std) * noise
    a = np.tanh(u)
    log_n = np.sum(-0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi), axis=1)
    return a, log_n - np.sum(np.log(1 - np.tanh(u) ** 2), axis=1)


@pytest.fixture
def learner():
    config = Config(fcnet_hiddens=[4], gamma=0.9, tau=0.25, init_alpha=0.5, lr=1e-2).validate()
    return make_learner(config, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                        gym.spaces.Box(-2.0, 2.0, (1,), np.float32), seed=3)


def losses(learner, batch, noise_next, noise_pi):
    """:func:`sac_losses` on ``learner``'s networks (batch actions already in [-1, 1])."""
    return sac_losses(learner.actor, learner.q1, learner.q2, learner.q1_target, learner.q2_target, learner.log_alpha,
                      batch, learner.target_entropy, noise_next, noise_pi, learner.encoder, learner.encoder_target)


def weights_of(learner):
    w = {}
    for model, name in ((learner.actor, "actor"), (learner.q1, "q1"), (learner.q2, "q2"),
                        (learner.q1_target, "q1_target"), (learner.q2_target, "q2_target")):
        w.update({k: v.astype(np.float64) for k, v in TensorFlowVariables(model, name).get_weights().items()})
    return w


BATCH = {
    "obs": np.array([[0.1, -0.2], [0.5, 0.3], [-1.0, 0.8]], np.float32),
    "action": np.array([[0.5], [-0.25], [0.9]], np.float32),  # already in [-1, 1]
    "reward": np.array([1.0, -0.5, 2.0], np.float32),
    "next_obs": np.array([[0.2, 0.0], [0.4, -0.6], [-0.9, 1.0]], np.float32),
    "terminated": np.array([0.0, 1.0, 0.0], np.float32),  # the 2nd does not bootstrap
    "discount": np.array([0.9, 0.9, 0.9**3], np.float32),  # the 3rd: a 3-step transition
    "weights": np.array([1.0, 0.5, 2.0], np.float32),  # importance weights
}
NOISE_NEXT = np.array([[0.3], [-1.2], [0.7]], np.float32)
NOISE_PI = np.array([[-0.4], [0.9], [0.05]], np.float32)


def test_losses_match_hand_computation(learner):
    w = weights_of(learner)
    b = {k: v.astype(np.float64) for k, v in BATCH.items()}
    alpha, target_entropy = 0.5, -1.0
    # y = r + gamma (1 - d) (min Q_targ(s', a') - alpha log pi(a'|s'))
    next_a, next_logp = np_sample(w, b["next_obs"], NOISE_NEXT)
    next_sa = np.concatenate([b["next_obs"], next_a], axis=1)
    min_q_targ = np.minimum(np_mlp(w, "q1_target", next_sa), np_mlp(w, "q2_target", next_sa))[:, 0]
    y = b["reward"] + b["discount"] * (1 - b["terminated"]) * (min_q_targ - alpha * next_logp)
    assert y[1] == pytest.approx(-0.5)  # terminated: reward only
    sa = np.concatenate([b["obs"], b["action"]], axis=1)
    qf1_loss = 0.5 * np.mean(b["weights"] * (np_mlp(w, "q1", sa)[:, 0] - y) ** 2)
    qf2_loss = 0.5 * np.mean(b["weights"] * (np_mlp(w, "q2", sa)[:, 0] - y) ** 2)
    pi, logp = np_sample(w, b["obs"], NOISE_PI)
    spi = np.concatenate([b["obs"], pi], axis=1)
    actor_loss = np.mean(alpha * logp - np.minimum(np_mlp(w, "q1", spi), np_mlp(w, "q2", spi))[:, 0])
    alpha_loss = -np.mean(math.log(alpha) * (logp + target_entropy))

    got = losses(learner, {k: tf.constant(v) for k, v in BATCH.items()}, NOISE_NEXT, NOISE_PI)
    assert float(got["qf1_loss"]) == pytest.approx(qf1_loss, rel=1e-4, abs=1e-5)
    assert float(got["qf2_loss"]) == pytest.approx(qf2_loss, rel=1e-4, abs=1e-5)
    assert float(got["actor_loss"]) == pytest.approx(actor_loss, rel=1e-4, abs=1e-5)
    assert float(got["alpha_loss"]) == pytest.approx(alpha_loss, rel=1e-4, abs=1e-5)
    assert float(got["entropy"]) == pytest.approx(-np.mean(logp), rel=1e-4, abs=1e-5)


def test_update_applies_polyak_to_the_targets(learner):
    before = weights_of(learner)
    env_batch = {**BATCH, "action": BATCH["action"] * 2.0}  # env bounds are [-2, 2]
    stats = learner.learn_on_batch(env_batch)
    after = weights_of(learner)
    assert stats.pop("td_abs").shape == (3,)
    assert all(math.isfinite(v) for v in stats.values())
    for name in ("q1", "q2"):
        for part in ("hidden_0/kernel", "out/bias"):
            new, old_t = after[f"{name}/{part}"], before[f"{name}_target/{part}"]
            assert not np.allclose(new, before[f"{name}/{part}"])  # the critic learned
            np.testing.assert_allclose(after[f"{name}_target/{part}"], 0.75 * old_t + 0.25 * new, atol=1e-6)
    assert stats["alpha"] == pytest.approx(0.5)  # alpha reported is the one the losses used
    assert float(tf.exp(learner.log_alpha)) != pytest.approx(0.5)


def test_updates_in_one_compiled_call_report_each_update(learner):
    """learn_on_batches runs its batches in order in one graph loop and reports every update
    with the stats learn_on_batch reports (STATS lists them all)."""
    env_batch = {**BATCH, "action": BATCH["action"] * 2.0}
    single = learner.learn_on_batch(env_batch)
    fused = learner.learn_on_batches([env_batch, env_batch])
    assert int(learner.critic_optimizer.iterations) == 3 and len(fused) == 2  # three steps, in order
    for stats in fused:
        assert set(stats) == set(single) and stats["td_abs"].shape == (3,)
    # Each update sees the temperature the previous one left: the steps ran one after another.
    assert single["alpha"] != pytest.approx(fused[0]["alpha"], abs=1e-6)
    assert fused[0]["alpha"] != pytest.approx(fused[1]["alpha"], abs=1e-6)
    assert fused[1]["alpha"] != pytest.approx(float(tf.exp(learner.log_alpha)), abs=1e-6)


def test_numpy_actor_matches_keras_actor():
    env = gym.make("Pendulum-v1")
    config = Config(fcnet_hiddens=[32, 32]).validate()
    trainer = make_learner(config, env.observation_space, env.action_space, seed=0)
    actor = SACPolicy(env.observation_space, env.action_space, config, seed=0)
    assert not actor.has_weights
    actor.set_weights(trainer.get_weights())
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
    mean = trainer.actor(obs).numpy()[:, :1]
    np.testing.assert_allclose(actor.compute_actions(obs, explore=False), 2.0 * np.tanh(mean), atol=1e-5)
    explored = actor.compute_actions(obs, explore=True)
    assert explored.shape == (64, 1) and np.all(np.abs(explored) <= 2.0)
    with pytest.raises(ValueError, match="missing"):
        actor.set_weights({"actor/out/kernel": np.zeros((32, 2))})


def test_actions_scale_to_asymmetric_bounds_in_several_dimensions():
    space = gym.spaces.Box(low=np.array([0.0, -1.0], np.float32), high=np.array([4.0, 3.0], np.float32))
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    config = Config(fcnet_hiddens=[8]).validate()
    trainer = make_learner(config, obs_space, space, seed=1)
    actor = SACPolicy(obs_space, space, config, seed=1)
    actor.set_weights(trainer.get_weights())
    obs = np.random.default_rng(2).uniform(-1, 1, size=(16, 3)).astype(np.float32)
    mean = trainer.actor(obs).numpy()[:, :2]  # [mean (2), log_std (2)]
    env_actions = actor.compute_actions(obs, explore=False)
    np.testing.assert_allclose(env_actions, [0.0, -1.0] + (np.tanh(mean) + 1) * [2.0, 2.0], atol=1e-5)
    # The learner maps the stored env actions back to the actor's [-1, 1] space.
    unit = trainer._to_tensors({
        "obs": obs, "action": env_actions, "reward": np.zeros(16), "next_obs": obs, "terminated": np.zeros(16),
        "discount": np.full(16, 0.99),
    })["action"]
    np.testing.assert_allclose(unit, np.tanh(mean), atol=1e-5)
    assert trainer.target_entropy == -2.0


def test_gradients_reach_only_what_each_loss_should_train(learner):
    batch = {k: tf.constant(v) for k, v in BATCH.items()}
    with tf.GradientTape(persistent=True) as tape:
        out = losses(learner, batch, NOISE_NEXT, NOISE_PI)
    # The critic target is a constant: no critic-loss gradient reaches the actor or the targets.
    assert all(g is None for g in tape.gradient(out["qf_loss"], learner.actor.trainable_variables))
    assert all(g is None for g in tape.gradient(out["qf_loss"], learner.q1_target.trainable_variables))
    # The temperature loss does not train the actor; its gradient is -E[log pi + target entropy].
    assert all(g is None for g in tape.gradient(out["alpha_loss"], learner.actor.trainable_variables))
    grad_log_alpha = float(tape.gradient(out["alpha_loss"], learner.log_alpha))
    entropy, target = float(out["entropy"]), learner.target_entropy
    assert grad_log_alpha == pytest.approx(entropy - target, rel=1e-4)
    # Entropy above the target -> positive gradient -> gradient descent lowers alpha.
    assert (grad_log_alpha > 0) == (entropy > target)


def test_the_xla_compiled_update_loop_learns_like_the_plain_one():
    """``--learner_xla`` on SAC (whose update draws its noise inside the compiled loop): on a
    fixed batch, the critic's loss falls over 32 updates as the plain loop's does, and the two
    end close (their noise streams differ, so they are not equal)."""
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(64, 3)).astype(np.float32)
    batch = {"obs": obs, "action": rng.uniform(-2, 2, (64, 1)).astype(np.float32),
             "reward": -np.abs(obs[:, 0]).astype(np.float32), "next_obs": obs, "terminated": np.zeros(64, np.float32),
             "discount": np.full(64, 0.9, np.float32)}
    losses = {}
    for xla in (False, True):
        config = Config(fcnet_hiddens=[16, 16], learner_xla=xla, lr=3e-3).validate()
        learner = make_learner(config, env.observation_space, env.action_space, seed=0)
        stats = [s for _ in range(4) for s in learner.learn_on_batches([batch] * 8)]
        assert all(math.isfinite(s["qf_loss"]) and math.isfinite(s["actor_loss"]) for s in stats)
        losses[xla] = [s["qf_loss"] for s in stats]
    for curve in losses.values():
        assert np.mean(curve[-8:]) < 0.5 * np.mean(curve[:8]), curve
    assert np.mean(losses[True][-8:]) == pytest.approx(np.mean(losses[False][-8:]), rel=0.5)
