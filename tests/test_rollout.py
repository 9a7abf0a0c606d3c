"""Gymnasium 1.x episode ends in the rollout loop: truncation is not termination, and the
reset observation is never stored as a next_obs."""

import numpy as np
import pytest

from dsac.envs.rollout import EnvCollector
from dsac.runtime.evaluation import EvaluationBudget, evaluate


def random_actor(space, seed=0):
    rng = np.random.default_rng(seed)
    if hasattr(space, "n"):
        return lambda obs: rng.integers(0, space.n, size=len(obs))
    return lambda obs: rng.uniform(space.low, space.high, size=(len(obs), *space.shape)).astype(np.float32)


def test_truncation_is_stored_as_not_terminated_with_the_final_observation():
    collector = EnvCollector("ShortPendulum-v0", num_envs=2, seed=0)  # time limit of 5 steps
    chunk = collector.collect(random_actor(collector.action_space), max_transitions=24)
    assert len(chunk["reward"]) == 24
    assert not chunk["terminated"].any()  # time limits are truncations: bootstrap through them
    episodes = collector.drain_episodes()
    assert [length for _, length, _ in episodes] == [5] * 4
    for env in range(2):
        steps = {k: v[env::2] for k, v in chunk.items()}  # envs interleave step by step
        for t in range(11):
            continues = steps["next_obs"][t], steps["obs"][t + 1]
            if t % 5 == 4:  # last step of an episode: the next obs comes from reset, not stored
                assert not np.allclose(*continues)
            else:
                np.testing.assert_array_equal(*continues)
        # The stored final next_obs is the real last state: unit-circle (cos, sin) + velocity.
        assert np.allclose(steps["next_obs"][4, 0] ** 2 + steps["next_obs"][4, 1] ** 2, 1.0, atol=1e-5)


def test_termination_is_stored_with_the_terminal_observation():
    collector = EnvCollector("CartPole-v1", num_envs=3, seed=1)
    chunk = collector.collect(random_actor(collector.action_space), max_transitions=600)
    ended = np.flatnonzero(chunk["terminated"] == 1.0)
    assert len(ended) >= 10  # random CartPole falls within a few dozen steps
    for i in ended:
        x, _, theta, _ = chunk["next_obs"][i]
        assert abs(x) > 2.4 or abs(theta) > 0.2095  # outside the bounds: the terminal state
        if i + 3 < len(chunk["reward"]):  # the same env's next transition starts from a reset
            assert np.all(np.abs(chunk["obs"][i + 3]) <= 0.05)
    assert len(collector.drain_episodes()) == len(ended)


def test_evaluate_is_deterministic_for_the_same_seed():
    act = lambda obs: np.zeros((len(obs), 1), np.float32)  # noqa: E731
    first = evaluate(act, "Pendulum-v1", episodes=3, seed=7)
    again = evaluate(act, "Pendulum-v1", episodes=3, seed=7)
    other = evaluate(act, "Pendulum-v1", episodes=3, seed=8)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other) and np.all(first < 0)


def step_by_step(collector, steps):
    """Take single env steps (1 env), recording what the env returned, and the chunks."""
    act = random_actor(collector.action_space, seed=3)
    chunks = [collector.collect(act, 1) for _ in range(steps)]
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def test_n_step_returns_across_truncation():
    gamma = 0.9
    one = EnvCollector("ShortPendulum-v0", num_envs=1, seed=5, gamma=gamma, n_step=1)
    ref = step_by_step(one, 10)  # two 5-step episodes of 1-step transitions
    three = EnvCollector("ShortPendulum-v0", num_envs=1, seed=5, gamma=gamma, n_step=3)
    got = step_by_step(three, 10)
    assert len(got["reward"]) == 10  # every step becomes one transition
    r = ref["reward"].astype(np.float64)
    for episode in (0, 5):
        # Starts 0, 1, 2 of the episode: full 3-step windows; 3 and 4 meet the time limit.
        for t, k in ((0, 3), (1, 3), (2, 3), (3, 2), (4, 1)):
            i = episode + t
            row = next(j for j in range(len(got["reward"])) if np.array_equal(got["obs"][j], ref["obs"][i]))
            expected = sum(gamma**m * r[i + m] for m in range(k))
            assert got["reward"][row] == pytest.approx(expected, rel=1e-5)
            assert got["discount"][row] == pytest.approx(gamma**k)
            np.testing.assert_array_equal(got["next_obs"][row], ref["next_obs"][i + k - 1])
            assert got["terminated"][row] == 0.0  # truncation: still bootstraps


def test_n_step_returns_at_termination():
    gamma = 0.5
    one = EnvCollector("CartPole-v1", num_envs=1, seed=2, gamma=gamma, n_step=1)
    three = EnvCollector("CartPole-v1", num_envs=1, seed=2, gamma=gamma, n_step=3)
    ref, got = step_by_step(one, 60), step_by_step(three, 60)
    end = int(np.flatnonzero(ref["terminated"])[0])  # last step of the first episode
    assert end >= 3
    by_obs = {got["obs"][j].tobytes(): j for j in range(len(got["reward"]))}
    for start, k in ((end - 3, 3), (end - 2, 3), (end - 1, 2), (end, 1)):
        j = by_obs[ref["obs"][start].tobytes()]
        assert got["reward"][j] == pytest.approx(sum(gamma**m for m in range(k)))  # CartPole pays 1 per step
        assert got["discount"][j] == pytest.approx(gamma**k)
        terminal = start + k - 1 == end
        assert got["terminated"][j] == float(terminal)
        np.testing.assert_array_equal(got["next_obs"][j], ref["next_obs"][start + k - 1])


def test_evaluations_wait_while_they_have_used_more_than_their_share_of_the_cpus():
    now = {"wall": 0.0, "cpu": 0.0}

    def evaluation(cpu_s):
        now["cpu"] += cpu_s
        return "evaluated"

    budget = EvaluationBudget(0.1, 2, wall=lambda: now["wall"], cpu=lambda: now["cpu"])
    assert budget.allows()  # nothing spent: the first one plays at once
    assert budget.timed(lambda: evaluation(1.0)) == "evaluated" and budget.spent == 1.0
    now["wall"] = 4.9  # 0.1 x 2 CPUs x 4.9 s = 0.98 s < 1 s spent
    assert not budget.allows()
    now["wall"] = 5.0
    assert budget.allows()
    unlimited = EvaluationBudget(0.0, 2, wall=lambda: now["wall"], cpu=lambda: now["cpu"])
    unlimited.timed(lambda: evaluation(100.0))
    assert unlimited.allows()  # --eval_cpu_share 0: every --eval_every
