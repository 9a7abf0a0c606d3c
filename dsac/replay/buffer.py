"""A run's replay, free of Ray and TensorFlow (numpy only).

``ReplayStorage`` is a preallocated ring of transitions; ``RateLimiter`` keeps gradient
updates per env step near the configured ratio (as DeepMind's Reverb does), so a
distributed run stays as sample-efficient as single-process SAC however fast either side is;
``Replay`` puts them together with prioritization and the writers' insert budgets — the one
replay both runners use (the serial runner directly, the ``ReplayBuffer`` actor with waiting).
"""

from __future__ import annotations

import json
import math

import numpy as np

from dsac.errors import DsacError
from dsac.models.normalization import Moments
from dsac.replay.frames import FrameLayout, FrameStore, frame_capacity, frame_layout
from dsac.replay.sum_tree import MinTree, SumTree
from dsac.runtime.messages import Chunk, SampledBatches

# A stored transition. With n-step returns, ``reward`` is the discounted sum of up to n
# rewards, ``next_obs`` the observation n steps later and ``discount`` = gamma^k for the k
# steps actually summed (fewer at an episode's end); the learner bootstraps with
# ``reward + discount * (1 - terminated) * V(next_obs)``.
FIELDS = ("obs", "action", "reward", "next_obs", "terminated", "discount")


def stored_dtype(obs_dtype) -> np.dtype:
    """How observations of ``obs_dtype`` are stored: floats wider than 32 bits (MuJoCo's float64)
    as float32, which is what every network reads (``ObsInput.input_dtype``), so the replay's
    gathers and the sample calls' bytes halve and nothing the learner sees changes; the rest as
    they come."""
    dtype = np.dtype(obs_dtype)
    return np.dtype(np.float32) if dtype.kind == "f" and dtype.itemsize > 4 else dtype


def field_specs(obs_shape, obs_dtype, action_shape, action_dtype,
                frames: FrameLayout | None = None) -> dict[str, tuple[tuple, np.dtype]]:
    """Shape (per transition) and dtype of each stored field. With ``frames`` (image
    observations, see :mod:`dsac.replay.frames`) ``obs`` and ``next_obs`` are stored as the serials of
    their frames."""
    obs = ((frames.stack,), np.dtype(np.int64)) if frames else (tuple(obs_shape), stored_dtype(obs_dtype))
    return {
        "obs": obs,
        "action": (tuple(action_shape), np.dtype(action_dtype)),
        "reward": ((), np.dtype(np.float32)),
        "next_obs": obs,
        "terminated": ((), np.dtype(np.float32)),
        "discount": ((), np.dtype(np.float32)),
    }


def replay_specs(observation_space, action_space) -> tuple[dict, FrameLayout | None]:
    """What a run's replay stores: the fields' specs and, for uint8 image observations, their
    frame layout (stored frame by frame, see :mod:`dsac.replay.frames`)."""
    frames = frame_layout(observation_space.shape, observation_space.dtype)
    specs = field_specs(observation_space.shape, observation_space.dtype, action_space.shape, action_space.dtype,
                        frames)
    return specs, frames


def storage_bytes(capacity: int, specs: dict, frames: FrameLayout | None = None) -> int:
    """Bytes the ring (and its frames) needs once full."""
    per_item = sum(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize for shape, dtype in specs.values())
    frame_bytes = frame_capacity(capacity) * frames.frame_bytes if frames else 0
    return capacity * per_item + frame_bytes


def check_fits_in_memory(nbytes: int, available: int, where: str) -> None:
    """Refuse a capacity that cannot fit (keeps 10% of what is available for everything else)."""
    if nbytes > 0.9 * available:
        raise DsacError(
            f"replay buffer needs {nbytes / 2**30:.2f} GiB but {where} has only "
            f"{available / 2**30:.2f} GiB available: lower --buffer_size"
        )



def per_shard(total: int | None, num_shards: int) -> int | None:
    """Each replay shard's share of a run-wide count (capacity, warm-up, insert limit),
    rounded up so that the shards together hold at least ``total``; None stays None."""
    return None if total is None else -(-int(total) // num_shards)

class ReplayStorage:
    """A ring of ``capacity`` transitions (the oldest overwritten) of ``specs``
    (:func:`field_specs`), sampled uniformly with ``seed``. With ``frames``, image observations
    are stored frame by frame (:mod:`dsac.replay.frames`): chunks come from a
    :class:`dsac.replay.frames.FrameEncoder` and batches have their stacks rebuilt."""

    def __init__(self, specs: dict, capacity: int, seed: int = 0, frames: FrameLayout | None = None):
        self.capacity = int(capacity)
        self.specs = specs
        self.frame_store = FrameStore(frames, frame_capacity(capacity)) if frames else None
        # np.zeros maps pages lazily: memory is committed as the ring fills.
        self.data = {k: np.zeros((self.capacity, *shape), dtype=dt) for k, (shape, dt) in specs.items()}
        self.rng = np.random.default_rng(seed)
        self.next_index = 0
        self.size = 0
        self.added = 0
        self.sampled_batches = 0

    @property
    def nbytes(self) -> int:
        return storage_bytes(self.capacity, self.specs, self.frame_store.layout if self.frame_store else None)

    def add(self, chunk: dict[str, np.ndarray], env_steps: int | None = None) -> np.ndarray:
        """Write a chunk of transitions (arrays with a leading batch axis), collected in
        ``env_steps`` env steps (None: one per transition), which ``added`` counts; returns the
        slots written, in the chunk's order."""
        if not self._count(chunk, env_steps):
            return np.zeros(0, dtype=np.int64)
        if self.frame_store is not None:
            chunk, _ = self.frame_store.ingest(chunk)
        return self._write(chunk)

    def _count(self, chunk: dict[str, np.ndarray], env_steps: int | None) -> bool:
        """Count the chunk's env steps in ``added`` (a chunk of env steps whose episodes have not
        ended yet holds none of their transitions); whether it has transitions to write."""
        self.added += len(chunk["reward"]) if env_steps is None else int(env_steps)
        return len(chunk["reward"]) > 0

    def _write(self, chunk: dict[str, np.ndarray]) -> np.ndarray:
        n = len(chunk["reward"])
        if n > self.capacity:  # only the newest transitions would survive anyway
            chunk = {k: v[-self.capacity :] for k, v in chunk.items()}
            n = self.capacity
        idx = (self.next_index + np.arange(n)) % self.capacity
        for key in FIELDS:
            self.data[key][idx] = chunk[key]
        self.next_index = int((self.next_index + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return idx

    def sample(self, batch_size: int, num_batches: int = 1) -> SampledBatches:
        """``num_batches`` uniform batches stacked as arrays of shape (num_batches, batch_size, ...)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay")
        idx = self.rng.integers(0, self.size, size=(num_batches, batch_size))
        for _ in range(100):  # frames: redraw the rare transitions whose oldest frames are gone
            dead = ~self._alive(idx)
            if not dead.any():
                break
            idx[dead] = self.rng.integers(0, self.size, size=int(dead.sum()))
        self.sampled_batches += num_batches
        return SampledBatches(self._gather(idx), self.added)

    def _alive(self, idx: np.ndarray) -> np.ndarray:
        if self.frame_store is None:
            return np.ones(idx.shape, dtype=bool)
        return self.frame_store.alive(self.data["obs"][idx], self.data["next_obs"][idx])

    def _gather(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions in slots ``idx``, observations rebuilt from their frames."""
        # np.take: over twice as fast as fancy indexing on these rows (a replay actor's sample
        # call is mostly this gather)
        batches = {key: np.take(self.data[key], idx, axis=0) for key in FIELDS}
        if self.frame_store is not None:
            for key in ("obs", "next_obs"):
                batches[key] = self.frame_store.observations(batches[key])
        return batches

    def state_dict(self) -> dict[str, np.ndarray]:
        """The stored transitions, counters and sampling RNG as arrays (for ``np.savez``)."""
        out = {f"data/{k}": v[: self.size] for k, v in self.data.items()}
        out["next_index"] = np.array(self.next_index)
        out["added"] = np.array(self.added)
        out["sampled_batches"] = np.array(self.sampled_batches)
        out["rng_state"] = np.array(json.dumps(self.rng.bit_generator.state))
        if self.frame_store is not None:
            out.update(self.frame_store.state_dict())
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Take :meth:`state_dict`'s output (the capacity may differ: the newest are kept)."""
        if self.frame_store is not None:
            self.frame_store.load_state_dict(state)
        n = len(state["data/reward"])
        if n > self.capacity:  # a smaller ring: keep the newest, in order
            order = (int(state["next_index"]) + np.arange(n)) % n
            chunk = {k[5:]: v[order][-self.capacity :] for k, v in state.items() if k.startswith("data/")}
            self._write(chunk)
        else:
            for key in FIELDS:
                self.data[key][:n] = state[f"data/{key}"]
            self.size = n
            self.next_index = int(state["next_index"]) % self.capacity if n == self.capacity else n
        self.added = int(state["added"])
        self.sampled_batches = int(state["sampled_batches"])
        self.rng.bit_generator.state = json.loads(str(state["rng_state"]))


class PrioritizedReplayStorage(ReplayStorage):
    """Proportional prioritized replay (Schaul et al. 2016): transition i is sampled with
    probability P(i) = p_i^α / Σ_k p_k^α and weighted by w_i = (N·P(i))^-β / max_k w_k.

    New transitions take the priorities their writer computed (Ape-X) or, without them, the
    largest priority seen so far. Each slot has a generation counter, so a priority update
    for a transition that has since been overwritten is dropped. ``alpha``: how much
    prioritization is used (0 = uniform); ``epsilon``, added to every priority, keeps every
    transition sampleable."""

    def __init__(self, specs: dict, capacity: int, seed: int = 0, alpha: float = 0.6, epsilon: float = 1e-6,
                 frames: FrameLayout | None = None):
        super().__init__(specs, capacity, seed, frames)
        self.alpha = float(alpha)
        self.epsilon = float(epsilon)
        self.sum_tree = SumTree(self.capacity)
        self.min_tree = MinTree(self.capacity)
        self.max_priority = 1.0
        self.generation = np.zeros(self.capacity, dtype=np.int64)

    def _set_priorities(self, idx: np.ndarray, priorities: np.ndarray) -> None:
        priorities = np.abs(np.asarray(priorities, dtype=np.float64)) + self.epsilon
        self.max_priority = max(self.max_priority, float(priorities.max()))
        scaled = priorities**self.alpha
        self.sum_tree.update(idx, scaled)
        self.min_tree.update(idx, scaled)

    def add(self, chunk: dict[str, np.ndarray], priorities: np.ndarray | None = None,
            env_steps: int | None = None) -> np.ndarray:
        """Write a chunk with its initial priorities (default: the largest seen so far)."""
        if not self._count(chunk, env_steps):
            return np.zeros(0, dtype=np.int64)
        if self.frame_store is not None:
            chunk, kept = self.frame_store.ingest(chunk)
            priorities = None if priorities is None else np.asarray(priorities)[kept]
        if priorities is not None and len(priorities) > self.capacity:
            priorities = priorities[-self.capacity :]
        idx = self._write(chunk)
        if len(idx):
            self.generation[idx] += 1
            self._set_priorities(idx, np.full(len(idx), self.max_priority) if priorities is None else priorities)
        return idx

    def sample(self, batch_size: int, num_batches: int = 1, beta: float = 0.4) -> SampledBatches:
        """Stratified proportional batches, importance ``weights`` alongside the transition
        fields, with the slots' ``indices`` and ``generations`` (for :meth:`update_priorities`)."""
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay")
        idx = np.stack([self.sum_tree.sample_stratified(batch_size, self.rng) for _ in range(num_batches)])
        for _ in range(100):  # frames: transitions whose oldest frames are gone are never drawn again
            dead = ~self._alive(idx)
            if not dead.any():
                break
            self.sum_tree.update(np.unique(idx[dead]), np.zeros(len(np.unique(idx[dead]))))
            idx = np.stack([self.sum_tree.sample_stratified(batch_size, self.rng) for _ in range(num_batches)])
        self.sampled_batches += num_batches
        batches = self._gather(idx)
        batches["weights"] = self.importance_weights(idx, beta)
        return SampledBatches(batches, self.added, idx, self.generation[idx])

    def importance_weights(self, idx: np.ndarray, beta: float) -> np.ndarray:
        """w_i = (N·P(i))^-β normalized by the largest weight in the buffer, (N·P_min)^-β."""
        total = self.sum_tree.root
        probs = self.sum_tree.get(idx) / total
        min_prob = self.min_tree.root / total
        return ((probs / min_prob) ** -beta).astype(np.float32)

    def state_dict(self) -> dict[str, np.ndarray]:
        out = super().state_dict()
        out["priorities"] = self.sum_tree.get(np.arange(self.size))  # already raised to alpha
        out["max_priority"] = np.array(self.max_priority)
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        super().load_state_dict(state)
        self.max_priority = float(state.get("max_priority", 1.0))
        if "priorities" in state and len(state["priorities"]) == self.size:
            scaled = np.asarray(state["priorities"], np.float64)
        else:  # priorities lost (or the ring changed size): start every transition at the max
            scaled = np.full(self.size, self.max_priority**self.alpha)
        if self.size:
            self.sum_tree.update(np.arange(self.size), scaled)
            self.min_tree.update(np.arange(self.size), scaled)

    def update_priorities(self, idx: np.ndarray, generations: np.ndarray, priorities: np.ndarray) -> int:
        """Set new priorities (e.g. |TD error|) of sampled transitions still in the buffer;
        returns how many were applied."""
        idx = np.asarray(idx).ravel()
        live = self.generation[idx] == np.asarray(generations).ravel()
        if live.any():
            self._set_priorities(idx[live], np.asarray(priorities).ravel()[live])
        return int(live.sum())


class RateLimiter:
    """Keeps sampled batches close to ``updates_per_step * (inserted - learning_starts)``.

    The learner may sample when that keeps it at most one call ahead of the ratio; writers
    get insert *budgets* (credits) so that, all writers together, collection runs at most
    ``max_steps_ahead`` env steps, plus one sample call's worth (``batches_per_call`` batches),
    ahead of it. That call's worth is the learner's own slack mirrored: without it, at the end
    of each call's window the writers that delivered their budget wait until the last writers
    deliver theirs. ``learning_starts``: transitions to insert before the first sample.
    """

    def __init__(self, updates_per_step: float, learning_starts: int, max_steps_ahead: int,
                 batches_per_call: int = 0):
        self.updates_per_step = float(updates_per_step)
        self.learning_starts = int(learning_starts)
        self.max_steps_ahead = int(max_steps_ahead)
        self.batches_per_call = int(batches_per_call)

    def can_sample(self, inserted: int, sampled: int, num_batches: int) -> bool:
        """Whether ``num_batches`` more batches keep sampling within one call of the ratio."""
        if inserted < max(self.learning_starts, 1):
            return False
        allowed = self.updates_per_step * (inserted - self.learning_starts)
        return sampled + num_batches <= allowed + num_batches

    def insert_headroom(self, inserted: int, sampled: int, outstanding: int) -> int:
        """Env steps that may still be granted to writers (never negative)."""
        limit = self.learning_starts + (sampled + self.batches_per_call) / self.updates_per_step + self.max_steps_ahead
        return max(0, math.floor(limit - inserted - outstanding))


class Replay:
    """A run's (or a shard's) replay, which the serial runner calls directly and
    :class:`dsac.distributed.actors.ReplayBuffer` makes its callers wait for: the storage
    (prioritized: β annealed to 1 over ``beta_anneal_steps`` inserted transitions), the update
    ratio (a :class:`RateLimiter`, ``warmup`` its ``learning_starts``; a restart warms up by
    ``learning_starts`` again) and the insert budgets of ``num_writers`` writers (at most
    ``max_chunk`` in hand each, none past ``insert_limit``)."""

    def __init__(self, storage: ReplayStorage, warmup: int, *, learning_starts: int, updates_per_step: float,
                 max_steps_ahead: int, max_chunk: int, batches_per_call: int = 0, num_writers: int = 1,
                 priority_beta: float = 0.4, beta_anneal_steps: int = 1, insert_limit: int | None = None,
                 track_obs: bool = False):
        self.storage = storage
        self.prioritized = isinstance(storage, PrioritizedReplayStorage)
        self.limiter = RateLimiter(updates_per_step, warmup, max_steps_ahead, batches_per_call)
        self.learning_starts, self.added_at_start = int(learning_starts), storage.added
        self.priority_beta, self.beta_anneal_steps = float(priority_beta), max(1, int(beta_anneal_steps))
        self.insert_limit = insert_limit
        self.num_writers, self.max_chunk = int(num_writers), int(max_chunk)
        # Smallest budget worth a call: a few dozen steps with few writers, so a throttled
        # run does not degrade into one call per env step.
        self.min_grant = max(1, min(self.max_chunk, int(max_steps_ahead) // (2 * self.num_writers)))
        self.outstanding: dict[int, int] = {}  # writer -> budget granted, not yet delivered
        self.add_calls = 0
        # --normalize_obs: the moments of every observation stored since this replay started,
        # sent with each sample (dsac.models.normalization.ObsStatistics merges the shards').
        self.track_obs = bool(track_obs)
        self.obs_moments: Moments | None = None

    @property
    def added(self) -> int:
        return self.storage.added

    def add(self, chunk: Chunk | None) -> bool:
        """Store a chunk (with its initial priorities) and count its env steps; whether it had any."""
        if chunk is None or not (chunk.size or chunk.steps):
            return False
        if self.prioritized:
            self.storage.add(chunk.transitions, chunk.priorities, env_steps=chunk.steps)
        else:
            self.storage.add(chunk.transitions, env_steps=chunk.steps)
        if self.track_obs and chunk.size:
            moments = Moments.of(chunk.transitions["obs"])
            self.obs_moments = moments if self.obs_moments is None else self.obs_moments.merge(moments)
        if self.storage.size == 0:
            # Nothing stored yet, though env steps were counted: with --her an episode's steps
            # count as they happen and its transitions arrive when it ends, maybe long after
            # learning_starts. The warm-up lasts until the first transitions are stored, so the
            # learner never samples an empty replay and the writers' budget does not wait for it.
            self.limiter.learning_starts = max(self.limiter.learning_starts, self.storage.added)
        self.add_calls += 1
        return True

    def grant(self, writer: int, keep: int) -> int:
        """Budget granted now to ``writer``, which holds ``keep``: a share of the headroom the
        update ratio leaves (at least ``min_grant``), up to ``max_chunk`` in hand, within the
        insert limit; 0 when there is too little."""
        self.outstanding[writer] = keep
        outstanding = sum(self.outstanding.values())
        headroom = self.limiter.insert_headroom(self.storage.added, self.storage.sampled_batches, outstanding)
        room = self.max_chunk - keep
        if headroom < self.min_grant or room < 1:
            return 0
        grant = min(room, max(self.min_grant, headroom // self.num_writers))
        if self.insert_limit is not None:  # the last steps before a limit may be fewer
            grant = min(grant, max(0, self.insert_limit - self.storage.added - outstanding))
        self.outstanding[writer] = keep + grant
        return grant

    def can_sample(self, num_batches: int) -> bool:
        """Whether ``num_batches`` more batches keep the learner within one call of the ratio
        (never while nothing is stored)."""
        storage = self.storage
        return storage.size > 0 and self.limiter.can_sample(storage.added, storage.sampled_batches, num_batches)

    def sample(self, batch_size: int, num_batches: int) -> SampledBatches:
        """``num_batches`` stacked batches (prioritized: with importance weights), with the
        moments of the observations stored so far when it tracks them."""
        if not self.prioritized:
            sampled = self.storage.sample(batch_size, num_batches)
        else:
            # β, the importance-weight exponent: linear from priority_beta to 1 over the annealing.
            annealed = min(1.0, self.storage.added / self.beta_anneal_steps)
            beta = self.priority_beta + annealed * (1.0 - self.priority_beta)
            sampled = self.storage.sample(batch_size, num_batches, beta)
        return sampled._replace(obs_moments=self.obs_moments) if self.track_obs else sampled

    def update_priorities(self, indices, generations, priorities) -> int:
        """New priorities (|TD error|) for sampled transitions still held; how many were applied."""
        return self.storage.update_priorities(indices, generations, priorities) if self.prioritized else 0

    def resume(self, added_before: int, insert_limit: int | None, snapshot: dict | None = None) -> None:
        """After a restart: count on from the ``added_before`` transitions the run had, and warm
        up again before the learner samples — or start from ``snapshot`` (the last replay
        checkpoint) and sample at once. What was added since the restart stays."""
        storage = self.storage
        if snapshot is not None:
            sampled = storage.sampled_batches
            storage.load_state_dict(snapshot)
            storage.sampled_batches = sampled
        inserted = storage.added - self.added_at_start if snapshot is None else 0
        storage.added = int(added_before) + inserted
        self.added_at_start = int(added_before)
        # The update ratio starts afresh: updates_per_step x what is inserted from here on.
        self.limiter.learning_starts = int(added_before) + (0 if snapshot is not None else self.learning_starts)
        self.insert_limit = insert_limit
