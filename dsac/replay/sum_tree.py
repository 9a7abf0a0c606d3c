"""Vectorized sum and min trees for proportional prioritized replay (Schaul et al. 2016).

Every operation works on a batch of indices at once — one numpy pass per tree level, no
Python loop per item — so updating or sampling 256 priorities costs a handful of array
operations whatever the capacity.
"""

from __future__ import annotations

import numpy as np


class SegmentTree:
    """A complete binary tree over ``capacity`` leaves (rounded up to a power of two) whose
    inner nodes hold ``op`` (``np.add`` or ``np.minimum``) of their children."""

    def __init__(self, capacity: int, op, neutral: float):
        self.capacity = int(capacity)
        self.leaves = 1 << max(0, (self.capacity - 1).bit_length())
        self.op = op
        self.neutral = neutral
        self.tree = np.full(2 * self.leaves, neutral, dtype=np.float64)

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indices`` to ``values`` (the last write wins for repeated indices)."""
        nodes = np.asarray(indices, dtype=np.int64) + self.leaves
        self.tree[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self.tree[nodes] = self.op(self.tree[2 * nodes], self.tree[2 * nodes + 1])
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    def get(self, indices: np.ndarray) -> np.ndarray:
        return self.tree[np.asarray(indices, dtype=np.int64) + self.leaves]

    @property
    def root(self) -> float:
        return float(self.tree[1])


class SumTree(SegmentTree):
    """Sums of priorities, with batched prefix-sum search for sampling."""

    def __init__(self, capacity: int):
        super().__init__(capacity, np.add, 0.0)

    def find_prefix_sum(self, targets: np.ndarray) -> np.ndarray:
        """For each target mass u in [0, total), the leaf i with sum(p[:i]) <= u < sum(p[:i+1])."""
        u = np.array(targets, dtype=np.float64)
        nodes = np.ones(len(u), dtype=np.int64)
        while nodes[0] < self.leaves:
            left = 2 * nodes
            left_sum = self.tree[left]
            # Never step into an empty subtree (round-off could otherwise pick a free slot).
            go_right = (u >= left_sum) & (self.tree[left + 1] > 0)
            u = np.where(go_right, u - left_sum, u)
            nodes = left + go_right
        return nodes - self.leaves

    def sample_stratified(self, batch_size: int, rng: np.random.Generator) -> np.ndarray:
        """One index from each of ``batch_size`` equal slices of the total mass."""
        total = self.root
        bounds = (np.arange(batch_size) + rng.random(batch_size)) * (total / batch_size)
        return self.find_prefix_sum(np.minimum(bounds, np.nextafter(total, 0)))


class MinTree(SegmentTree):
    """Minimum priority, for normalizing importance weights."""

    def __init__(self, capacity: int):
        super().__init__(capacity, np.minimum, np.inf)
