"""Sum tree and proportional prioritized replay: sampling frequencies, batched updates,
wrap-around, importance weights."""

import numpy as np
import pytest
from scipy import stats

from dsac.replay.buffer import PrioritizedReplayStorage, field_specs
from dsac.replay.sum_tree import MinTree, SumTree

SPECS = field_specs((2,), np.float32, (), np.int64)


def chunk(start, n):
    i = np.arange(start, start + n)
    return {
        "obs": np.stack([i, i], axis=1).astype(np.float32), "action": i.astype(np.int64),
        "reward": i.astype(np.float32), "next_obs": np.stack([i, i], axis=1).astype(np.float32),
        "terminated": np.zeros(n, np.float32), "discount": np.full(n, 0.99, np.float32),
    }


def test_sum_tree_sampling_frequencies_match_priorities():
    rng = np.random.default_rng(0)
    priorities = np.array([1.0, 0.0, 3.0, 0.5, 2.5, 8.0, 0.0, 5.0, 4.0, 1.0])
    tree = SumTree(len(priorities))
    tree.update(np.arange(len(priorities)), priorities)
    assert tree.root == pytest.approx(priorities.sum())
    draws = np.concatenate([tree.sample_stratified(1000, rng) for _ in range(100)])  # 100k draws
    counts = np.bincount(draws, minlength=len(priorities))
    assert counts[priorities == 0].sum() == 0  # zero priority is never drawn
    nz = priorities > 0
    expected = len(draws) * priorities[nz] / priorities.sum()
    chi2 = stats.chisquare(counts[nz], expected)
    assert chi2.pvalue > 0.001, (counts, expected)


def test_batched_update_with_repeats_and_min_tree():
    tree, mins = SumTree(6), MinTree(6)
    tree.update(np.array([0, 1, 2, 3, 4, 5]), np.ones(6))
    tree.update(np.array([2, 2, 5]), np.array([7.0, 3.0, 0.5]))  # last write wins for slot 2
    np.testing.assert_array_equal(tree.get(np.arange(6)), [1, 1, 3, 1, 1, 0.5])
    assert tree.root == pytest.approx(7.5)
    np.testing.assert_array_equal(tree.find_prefix_sum(np.array([0.0, 1.99, 2.0, 4.99, 7.49])), [0, 1, 2, 2, 5])
    mins.update(np.arange(6), np.array([4.0, 2.0, 9.0, 0.3, 5.0, 1.0]))
    assert mins.root == pytest.approx(0.3)
    mins.update(np.array([3]), np.array([6.0]))
    assert mins.root == pytest.approx(1.0)


def test_prioritized_replay_wraps_around_and_drops_stale_updates():
    storage = PrioritizedReplayStorage(SPECS, capacity=4, seed=0, alpha=1.0, epsilon=0.0)
    storage.add(chunk(0, 3), priorities=np.array([1.0, 2.0, 3.0]))
    sampled = storage.sample(batch_size=2, num_batches=1)
    idx, gen = sampled.indices, sampled.generations
    storage.add(chunk(3, 3))  # wraps: slots 3, 0, 1 rewritten at the max priority (3)
    np.testing.assert_array_equal(storage.data["reward"], [4, 5, 2, 3])
    np.testing.assert_array_equal(storage.sum_tree.get(np.arange(4)), [3, 3, 3, 3])
    # Updates for slots overwritten since sampling (generation moved on) are dropped.
    applied = storage.update_priorities(idx, gen, np.full(idx.shape, 10.0))
    assert applied == int(np.sum(idx == 2))
    storage.update_priorities(np.array([[0, 1]]), storage.generation[[[0, 1]]], np.array([[0.5, 6.0]]))
    np.testing.assert_array_equal(storage.sum_tree.get(np.array([0, 1])), [0.5, 6.0])
    assert storage.max_priority == (10.0 if applied else 6.0)


def test_importance_weights_against_hand_computation():
    storage = PrioritizedReplayStorage(SPECS, capacity=8, seed=0, alpha=0.6, epsilon=0.0)
    p = np.array([1.0, 2.0, 4.0, 0.5])
    storage.add(chunk(0, 4), priorities=p)
    scaled = p**0.6
    probs = scaled / scaled.sum()
    beta = 0.4
    # w_i = (N P(i))^-beta / max_k (N P(k))^-beta, the max being at the smallest priority.
    expected = (4 * probs) ** -beta / ((4 * probs.min()) ** -beta)
    np.testing.assert_allclose(storage.importance_weights(np.arange(4), beta), expected, rtol=1e-6)
    sampled = storage.sample(batch_size=16, num_batches=2, beta=beta)
    batch = sampled.batches
    assert batch["weights"].shape == (2, 16) and batch["weights"].max() <= 1.0
    np.testing.assert_allclose(batch["weights"], expected[sampled.indices], rtol=1e-6)
    assert batch["reward"].shape == (2, 16)
