"""Replay storage and the insert/sample rate limiter (numpy only: no Ray, no TensorFlow).

``ReplayStorage`` is a preallocated ring of transitions; ``RateLimiter`` keeps gradient
updates per env step near the configured ratio (as DeepMind's Reverb does), so a
distributed run stays as sample-efficient as single-process SAC however fast either side is.
"""

from __future__ import annotations

import math

import numpy as np

from dsac.errors import DsacError

FIELDS = ("obs", "action", "reward", "next_obs", "terminated")


def field_specs(obs_shape, obs_dtype, action_shape, action_dtype) -> dict[str, tuple[tuple, np.dtype]]:
    """Shape (per transition) and dtype of each stored field."""
    return {
        "obs": (tuple(obs_shape), np.dtype(obs_dtype)),
        "action": (tuple(action_shape), np.dtype(action_dtype)),
        "reward": ((), np.dtype(np.float32)),
        "next_obs": (tuple(obs_shape), np.dtype(obs_dtype)),
        "terminated": ((), np.dtype(np.float32)),
    }


def storage_bytes(capacity: int, specs: dict) -> int:
    """Bytes the ring needs once full."""
    per_item = sum(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for shape, dtype in specs.values())
    return capacity * per_item


def check_fits_in_memory(nbytes: int, available: int, where: str) -> None:
    """Refuse a capacity that cannot fit (keeps 10% of what is available for everything else)."""
    if nbytes > 0.9 * available:
        raise DsacError(
            f"replay buffer needs {nbytes / 2**30:.2f} GiB but {where} has only "
            f"{available / 2**30:.2f} GiB available: lower --buffer_size"
        )


class ReplayStorage:
    """A fixed-capacity ring of transitions with uniform sampling.

    Args:
        specs: field name -> (shape, dtype), from :func:`field_specs`.
        capacity: transitions kept; the oldest are overwritten.
        seed: seed of the sampling generator.
    """

    def __init__(self, specs: dict, capacity: int, seed: int = 0):
        self.capacity = int(capacity)
        self.specs = specs
        # np.zeros maps pages lazily: memory is committed as the ring fills.
        self.data = {k: np.zeros((self.capacity, *shape), dtype=dt) for k, (shape, dt) in specs.items()}
        self.rng = np.random.default_rng(seed)
        self.next_index = 0
        self.size = 0
        self.added = 0
        self.sampled_batches = 0

    @property
    def nbytes(self) -> int:
        return storage_bytes(self.capacity, self.specs)

    def add(self, chunk: dict[str, np.ndarray]) -> int:
        """Write a chunk of transitions (arrays with a leading batch axis); returns its length."""
        n = len(chunk["reward"])
        if n == 0:
            return 0
        if n > self.capacity:  # only the newest transitions would survive anyway
            chunk = {k: v[-self.capacity :] for k, v in chunk.items()}
            self.added += n - self.capacity
            n = self.capacity
        idx = (self.next_index + np.arange(n)) % self.capacity
        for key in FIELDS:
            self.data[key][idx] = chunk[key]
        self.next_index = int((self.next_index + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.added += n
        return n

    def sample(self, batch_size: int, num_batches: int = 1) -> dict[str, np.ndarray]:
        """``num_batches`` uniform batches stacked as arrays of shape (num_batches, batch_size, ...)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay")
        idx = self.rng.integers(0, self.size, size=(num_batches, batch_size))
        self.sampled_batches += num_batches
        return {key: self.data[key][idx] for key in FIELDS}


class RateLimiter:
    """Keeps sampled batches close to ``samples_per_insert * (inserted - min_size_to_sample)``.

    The learner may sample when that keeps it at most one call ahead of the ratio; writers
    get insert *budgets* (credits) so that, all writers together, collection runs at most
    ``max_inserts_ahead`` env steps ahead of it.

    Args:
        samples_per_insert: gradient updates (batches) per env step.
        min_size_to_sample: transitions to insert before the first sample.
        max_inserts_ahead: env steps collection may run ahead of the ratio.
    """

    def __init__(self, samples_per_insert: float, min_size_to_sample: int, max_inserts_ahead: int):
        self.samples_per_insert = float(samples_per_insert)
        self.min_size_to_sample = int(min_size_to_sample)
        self.max_inserts_ahead = int(max_inserts_ahead)

    def can_sample(self, inserted: int, sampled: int, num_batches: int) -> bool:
        """Whether ``num_batches`` more batches keep sampling within one call of the ratio."""
        if inserted < max(self.min_size_to_sample, 1):
            return False
        allowed = self.samples_per_insert * (inserted - self.min_size_to_sample)
        return sampled + num_batches <= allowed + num_batches

    def insert_headroom(self, inserted: int, sampled: int, outstanding: int) -> int:
        """Env steps that may still be granted to writers (never negative)."""
        limit = self.min_size_to_sample + sampled / self.samples_per_insert + self.max_inserts_ahead
        return max(0, math.floor(limit - inserted - outstanding))
