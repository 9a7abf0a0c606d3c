"""DQN: numpy acting agrees with Keras, the double-Q n-step loss by hand, Ape-X's ε."""

import functools
import itertools

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from dsac.algorithms.dqn.learner import dqn_loss
from dsac.algorithms.dqn.policy import DQNPolicy, apex_epsilon, linear_epsilon
from dsac.config import Config
from dsac.runtime import build

ENV = gym.make("CartPole-v1")


def config_of(dueling=True, **kw):
    return Config(algo="dqn", env="CartPole-v1", fcnet_hiddens=[16], dueling=dueling, **kw).validate()


def make(dueling=True, **kw):
    """The acting policy of a small CartPole DQN."""
    return DQNPolicy(ENV.observation_space, ENV.action_space, config_of(dueling, **kw), seed=0)


def make_learner(dueling=True, **kw):
    """The learner of a small CartPole DQN."""
    return build.make_learner(config_of(dueling, **kw), ENV.observation_space, ENV.action_space, seed=0)


def keras_q_values(learner, obs):
    """Q(s, ·) of the learner's online network (TensorFlow), as the acting policy computes them."""
    q = learner.q_online(obs).numpy()
    if learner.support is None:
        return q
    probs = np.exp(q - q.max(axis=2, keepdims=True))  # C51: the expectation over the support
    return probs / probs.sum(axis=2, keepdims=True) @ learner.support.numpy()


@pytest.mark.parametrize("dueling", [True, False])
def test_numpy_q_values_match_keras(dueling):
    learner = make_learner(dueling)
    actor = make(dueling)
    actor.set_weights(learner.get_weights())
    obs = np.random.default_rng(1).normal(size=(32, 4)).astype(np.float32)
    np.testing.assert_allclose(actor._q_values(obs), learner.q_online(obs).numpy(), atol=1e-5)
    np.testing.assert_array_equal(actor.compute_actions(obs, explore=False), np.argmax(actor._q_values(obs), 1))


def test_double_q_n_step_loss_by_hand():
    policy = make_learner(dueling=False)
    online, target = policy.q_online, policy.q_target
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
    policy = make_learner(target_update_every=2)
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.normal(size=(8, 4)).astype(np.float32), "action": rng.integers(0, 2, 8),
        "reward": np.ones(8, np.float32), "next_obs": rng.normal(size=(8, 4)).astype(np.float32),
        "terminated": np.zeros(8, np.float32), "discount": np.full(8, 0.99, np.float32),
    }
    stats = policy.learn_on_batch(batch)
    assert stats["td_abs"].shape == (8,) and np.isfinite(stats["loss"])
    online, target = policy.q_online.get_weights(), policy.q_target.get_weights()
    assert not all(np.allclose(a, b) for a, b in zip(online, target, strict=True))
    policy.learn_on_batch(batch)  # second update: hard copy
    for a, b in zip(policy.q_online.get_weights(), policy.q_target.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_updates_in_one_compiled_call_equal_the_same_updates_one_by_one():
    """learn_on_batches (a graph loop) gives the stats, weights and target copies of
    learn_on_batch called once per batch."""
    rng = np.random.default_rng(1)
    batches = [{
        "obs": rng.normal(size=(8, 4)).astype(np.float32), "action": rng.integers(0, 2, 8),
        "reward": rng.normal(size=8).astype(np.float32), "next_obs": rng.normal(size=(8, 4)).astype(np.float32),
        "terminated": np.zeros(8, np.float32), "discount": np.full(8, 0.99, np.float32),
    } for _ in range(5)]
    one_by_one, fused = make_learner(target_update_every=2), make_learner(target_update_every=2)
    expected = [one_by_one.learn_on_batch(batch) for batch in batches]
    got = fused.learn_on_batches(batches)
    assert len(got) == 5 and int(fused.optimizer.iterations) == 5
    for want, have in zip(expected, got, strict=True):
        assert set(want) == set(have)
        for key in want:
            np.testing.assert_allclose(have[key], want[key], rtol=1e-4, atol=1e-6)
    for net in ("q_online", "q_target"):
        for a, b in zip(getattr(one_by_one, net).get_weights(), getattr(fused, net).get_weights(),
                        strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # 5 updates with a copy every 2: the target holds the online weights of update 4, not 5.
    assert not all(np.allclose(a, b) for a, b in zip(
        fused.q_online.get_weights(), fused.q_target.get_weights(), strict=True))


def cartpole_batch(rng, reward) -> dict:
    """8 random CartPole-shaped transitions, every reward ``reward`` (NaN: non-finite gradients)."""
    return {
        "obs": rng.normal(size=(8, 4)).astype(np.float32), "action": rng.integers(0, 2, 8),
        "reward": np.full(8, reward, np.float32), "next_obs": rng.normal(size=(8, 4)).astype(np.float32),
        "terminated": np.zeros(8, np.float32), "discount": np.full(8, 0.99, np.float32),
    }


def test_an_update_with_non_finite_gradients_is_skipped():
    """A NaN reward makes the loss and gradients NaN: that step changes no weight and reports
    skipped = 1; the good steps around it apply as usual."""
    batch = functools.partial(cartpole_batch, np.random.default_rng(2))
    policy = make_learner()
    good, bad = batch(1.0), batch(np.nan)
    before = policy.state.get_weights()
    results = policy.learn_on_batches([bad])
    assert results[0]["skipped"] == 1.0 and not np.isfinite(results[0]["loss"])
    after = policy.state.get_weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)  # nothing moved, not even Adam's count
    assert [r["skipped"] for r in policy.learn_on_batches([good, bad, good])] == [0.0, 1.0, 0.0]
    assert policy.learn_on_batch(bad)["skipped"] == 1.0
    assert all(np.all(np.isfinite(w)) for w in policy.get_weights().values())


def test_initial_priorities_are_td_errors_under_the_workers_weights():
    learner, worker = make_learner(), make()
    worker.set_weights(learner.get_weights())
    rng = np.random.default_rng(4)
    chunk = {
        "obs": rng.normal(size=(6, 4)).astype(np.float32), "action": rng.integers(0, 2, 6),
        "reward": rng.normal(size=6).astype(np.float32), "next_obs": rng.normal(size=(6, 4)).astype(np.float32),
        "terminated": np.array([0, 1, 0, 0, 0, 0], np.float32), "discount": np.full(6, 0.97, np.float32),
    }
    out = worker.postprocess_trajectory(chunk)
    q, q_next = worker._q_values(chunk["obs"]), worker._q_values(chunk["next_obs"])
    y = chunk["reward"] + 0.97 * (1 - chunk["terminated"]) * q_next.max(1)
    np.testing.assert_allclose(out["priority"], np.abs(y - q[np.arange(6), chunk["action"]]), rtol=1e-5)
    assert "priority" not in make().postprocess_trajectory(chunk)  # no weights yet: replay's max


def test_apex_epsilon_schedule():
    eps = [apex_epsilon(i, 8, 0.4, 7.0) for i in range(8)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert all(a > b for a, b in itertools.pairwise(eps))
    assert apex_epsilon(0, 1, 0.4, 7.0) == 0.4
    assert linear_epsilon(0, 1000, 0.02) == 1.0
    assert linear_epsilon(500, 1000, 0.02) == pytest.approx(0.51)
    assert linear_epsilon(5000, 1000, 0.02) == pytest.approx(0.02)
    # A policy on worker 2 of 4 explores with Ape-X's epsilon; with one worker it decays.
    config = Config(algo="dqn", env="CartPole-v1", num_workers=4).validate()
    worker = DQNPolicy(ENV.observation_space, ENV.action_space, config, worker_index=2, num_workers=4)
    assert worker._epsilon() == pytest.approx(0.4 ** (1 + 7 * 2 / 3))
    single = DQNPolicy(ENV.observation_space, ENV.action_space, config, worker_index=0, num_workers=1)
    assert single._epsilon() == 1.0
    single.set_env_steps(config.start_steps)  # the run's count: the warm-up's random steps included
    assert 0.02 < single._epsilon() < 1.0
    single.set_env_steps(config.total_env_steps)
    assert single._epsilon() == pytest.approx(config.final_epsilon)


@pytest.mark.parametrize("dueling", [True, False])
def test_c51_numpy_q_values_match_keras_expectation(dueling):
    learner = make_learner(dueling, num_atoms=11, v_min=-5.0, v_max=5.0)
    actor = make(dueling, num_atoms=11, v_min=-5.0, v_max=5.0)
    actor.set_weights(learner.get_weights())
    obs = np.random.default_rng(1).normal(size=(16, 4)).astype(np.float32)
    logits = learner.q_online(obs).numpy()
    assert logits.shape == (16, 2, 11)
    probs = np.exp(logits) / np.exp(logits).sum(axis=2, keepdims=True)
    np.testing.assert_allclose(actor._q_values(obs), probs @ np.linspace(-5, 5, 11), atol=1e-5)


def test_categorical_projection_by_hand():
    from dsac.algorithms.dqn.learner import categorical_projection

    support = np.linspace(-2.0, 2.0, 5).astype(np.float32)  # atoms -2, -1, 0, 1, 2
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(5), size=3).astype(np.float32)
    reward = np.array([0.3, 1.5, -0.25], np.float32)
    discount = np.array([0.9, 0.5, 0.81], np.float32)
    terminated = np.array([0.0, 0.0, 1.0], np.float32)
    expected = np.zeros((3, 5))
    for b in range(3):
        for j in range(5):  # the textbook l/u split of each atom's probability
            tz = np.clip(reward[b] + discount[b] * (1 - terminated[b]) * support[j], -2.0, 2.0)
            pos = (tz + 2.0) / 1.0
            lo, hi = int(np.floor(pos)), int(np.ceil(pos))
            if lo == hi:
                expected[b, lo] += p[b, j]
            else:
                expected[b, lo] += p[b, j] * (hi - pos)
                expected[b, hi] += p[b, j] * (pos - lo)
    got = categorical_projection(tf.constant(p), tf.constant(reward), tf.constant(discount),
                                 tf.constant(terminated), tf.constant(support)).numpy()
    np.testing.assert_allclose(got, expected, atol=1e-6)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-6)


def test_c51_update_lowers_its_loss_on_a_fixed_batch():
    policy = make_learner(num_atoms=21, v_min=0.0, v_max=20.0, lr=1e-2)
    rng = np.random.default_rng(0)
    batch = {
        "obs": rng.normal(size=(32, 4)).astype(np.float32), "action": rng.integers(0, 2, 32),
        "reward": np.ones(32, np.float32), "next_obs": rng.normal(size=(32, 4)).astype(np.float32),
        "terminated": np.ones(32, np.float32), "discount": np.full(32, 0.99, np.float32),
    }
    first = policy.learn_on_batch(batch)
    for _ in range(30):
        last = policy.learn_on_batch(batch)
    assert first["td_abs"].shape == (32,)
    assert last["loss"] < 0.5 * first["loss"]
    # Terminal transitions with reward 1: Q(s, a) moves toward 1.
    q = keras_q_values(policy, batch["obs"])[np.arange(32), batch["action"]]
    assert np.abs(q - 1.0).mean() < np.abs(first["q_mean"] - 1.0)


def test_custom_model_q_network_acts_like_the_learner():
    import keras

    import dsac

    def small(input_dim, output_dim, model_config, name):
        inputs = keras.Input((input_dim,))
        x = keras.layers.Dense(8, activation="swish", name="h")(inputs)
        return keras.Model(inputs, keras.layers.Dense(output_dim, name="o")(x), name=name)

    dsac.register_custom_model("small_q", small)
    learner = make_learner(custom_model="small_q", num_atoms=3, v_min=-1.0, v_max=1.0)
    worker = make(custom_model="small_q", num_atoms=3, v_min=-1.0, v_max=1.0)
    worker.set_weights(learner.get_weights())
    obs = np.random.default_rng(5).normal(size=(9, 4)).astype(np.float32)
    np.testing.assert_allclose(worker._q_values(obs), keras_q_values(learner, obs), atol=1e-5)
    assert learner.q_online(obs).shape == (9, 2, 3)


def test_the_xla_compiled_update_loop_makes_the_same_updates():
    """``--learner_xla``: the update loop compiled with XLA applies the same updates as the plain
    graph loop (DQN's update draws no noise, so the two compare weight by weight)."""
    rng = np.random.default_rng(0)
    batches = [{
        "obs": rng.normal(size=(32, 4)).astype(np.float32), "action": rng.integers(0, 2, 32),
        "reward": rng.normal(size=32).astype(np.float32), "next_obs": rng.normal(size=(32, 4)).astype(np.float32),
        "terminated": (rng.random(32) < 0.2).astype(np.float32), "discount": np.full(32, 0.99, np.float32),
    } for _ in range(4)]
    runs = []
    for xla in (False, True):
        policy = make_learner(learner_xla=xla, target_update_every=3)
        start = policy.acting_weights.get_weights()
        stats = policy.learn_on_batches(batches) + policy.learn_on_batches(batches)  # compiled once, run twice
        runs.append((start, policy.acting_weights.get_weights(), stats))
    (start, plain, plain_stats), (xla_start, xla, xla_stats) = runs
    assert all(np.array_equal(start[k], xla_start[k]) for k in start)
    assert any(not np.allclose(start[k], plain[k]) for k in start)  # the updates changed something
    for name, value in plain.items():
        np.testing.assert_allclose(xla[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_allclose([s["loss"] for s in xla_stats], [s["loss"] for s in plain_stats], rtol=1e-4)


@pytest.mark.parametrize("space, hint", [
    (gym.spaces.Box(-1.0, 1.0, (2,)), "(use --algo sac)"),
    (gym.spaces.MultiDiscrete([3, 4]), "(no dsac algorithm takes it: wrap the env so that its action is one "
                                       "Discrete(12), an index into every combination)"),
    (gym.spaces.MultiBinary(3), "one Discrete(8)"),
    (gym.spaces.Tuple([gym.spaces.Discrete(2)] * 2), "(no dsac algorithm takes it)"),
], ids=["Box", "MultiDiscrete", "MultiBinary", "Tuple"])
def test_an_action_space_dqn_refuses_names_what_would_take_it(space, hint):
    """SAC refuses a MultiDiscrete too: the refusal must not send the user there."""
    from dsac.algorithms.dqn import check_spaces
    from dsac.algorithms.sac import check_spaces as sac_check_spaces
    from dsac.errors import DsacError

    obs = gym.spaces.Box(-1.0, 1.0, (3,))
    with pytest.raises(DsacError) as refused:
        check_spaces("Multi-v0", obs, space)
    assert str(refused.value).startswith("--algo dqn needs a Discrete action space, but Multi-v0 has ")
    assert hint in str(refused.value)
    if "--algo sac" in str(refused.value):
        sac_check_spaces("Multi-v0", obs, space)  # what it suggests takes it


def test_a_user_policys_list_of_gradients_is_joined_for_the_averager_and_cut_back():
    """A policy_class that gives its gradients as a list (Policy's documented form) travels as
    one float32 array and gets the mean back in its own shapes."""
    from dsac.distributed.learner_transport import apply_mean, flat_gradients
    from dsac.policy import Policy

    class ListGradients(Policy):
        applied = None

        def compute_gradients(self, batch):
            return [np.ones((2, 3)), np.full(4, 2.0)], {"loss": 1.0}

        def apply_gradients(self, gradients):
            self.applied = gradients
            return True

    env = gym.make("CartPole-v1")
    policy = ListGradients(env.observation_space, env.action_space, None)
    flat, shapes, stats = flat_gradients(policy, {})
    assert flat.dtype == np.float32 and flat.shape == (10,) and shapes == [(2, 3), (4,)]
    assert apply_mean(policy, flat / 2, shapes, stats) == {"loss": 1.0, "skipped": 0.0}
    assert [g.shape for g in policy.applied] == [(2, 3), (4,)]
    assert policy.applied[0][0, 0] == 0.5 and policy.applied[1][3] == 1.0


def test_two_learners_each_count_an_update_their_mean_gradient_dropped():
    """Data-parallel learners apply the mean of their gradients, and only when it is finite:
    one learner's NaN drops the update for both, so both count it, though the other's own
    gradients were finite (the run's ``skipped_updates`` is the lead learner's count)."""
    from dsac.distributed.learner_transport import apply_mean
    from dsac.runtime.learning import UpdateLoop

    batch = functools.partial(cartpole_batch, np.random.default_rng(3))

    policies = [make_learner(), make_learner()]
    policies[1].set_state(policies[0].get_state())
    loops = [UpdateLoop(p, push_every=1, max_nonfinite_updates=10) for p in policies]
    for rewards, dropped in (([1.0, np.nan], True), ([1.0, 0.5], False)):
        batches = [batch(r) for r in rewards]
        computed = [p.compute_flat_gradients(b) for p, b in zip(policies, batches, strict=True)]
        assert [stats["skipped"] for _, stats in computed] == [0.0, float(dropped)]  # each one's local verdict
        shapes = None  # dsac's learners take the mean as one array
        mean = np.mean([flat for flat, _ in computed], axis=0)
        before = [p.get_weights() for p in policies]
        for loop, policy, b, (_, stats) in zip(loops, policies, batches, computed, strict=True):
            learn = functools.partial(lambda p, s, m, shapes, _: [apply_mean(p, m, shapes, s)], policy, stats, mean,
                                      shapes)
            loop.step({k: v[None] for k, v in b.items()}, learn)
        moved = [any(not np.array_equal(w[k], p.get_weights()[k]) for k in w) for w, p in zip(before, policies,
                                                                                              strict=True)]
        assert moved == [not dropped] * 2
    assert [loop.report(0).skipped_updates for loop in loops] == [1, 1]
    assert all(np.array_equal(a, b) for a, b in zip(policies[0].get_weights().values(),
                                                      policies[1].get_weights().values(), strict=True))
