"""The interface every algorithm gives the distributed system.

Rollout workers and the evaluator call ``compute_actions`` and ``set_weights``; the learner
calls ``learn_on_batch`` and ``get_weights``. Nothing here knows about Ray, so a policy can be
trained, tested and debugged in one process.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Policy:
    """Base class of an algorithm's policy.

    Args:
        observation_space: the env's observation space.
        action_space: the env's action space.
        config: the run's :class:`dsac.config.Config`.
        build_learner: build the training side (networks, optimizers) too. Rollout workers
            and the evaluator leave it off, so they never import TensorFlow.
        seed: seed of the policy's own randomness (exploration noise).
        worker_index: which rollout worker acts with this policy (None: learner/evaluator).
        num_workers: how many rollout workers there are (e.g. for Ape-X's ε per worker).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config, *,
                 build_learner: bool = False, seed: int = 0, worker_index: int | None = None,
                 num_workers: int = 1):
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.rng = np.random.default_rng(seed)
        self.worker_index = worker_index
        self.num_workers = num_workers

    def compute_actions(self, obs_batch: np.ndarray, explore: bool = True) -> np.ndarray:
        """Actions, in the env's action space, for a batch of observations."""
        raise NotImplementedError

    def random_actions(self, n: int) -> np.ndarray:
        """``n`` actions drawn uniformly from the action space (warm-up exploration)."""
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            return self.rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(space.dtype)
        if isinstance(space, gym.spaces.Discrete):
            return space.start + self.rng.integers(0, space.n, size=n)
        raise NotImplementedError(f"no random actions for {space}")

    def postprocess_trajectory(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs on the rollout worker on each chunk before it is sent: add fields such as an
        initial ``priority`` per transition. The default returns the batch unchanged."""
        return batch

    def learn_on_batch(self, batch: dict[str, np.ndarray]) -> dict:
        """One gradient update on a batch of transitions; returns statistics (floats, and
        optionally ``td_abs``: per-transition |TD error| used as new priorities)."""
        raise NotImplementedError

    def get_weights(self) -> dict[str, np.ndarray]:
        """The weights acting needs, by name (what travels to rollout workers)."""
        raise NotImplementedError

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Take weights produced by :meth:`get_weights`."""
        raise NotImplementedError

    def get_state(self) -> dict[str, np.ndarray]:
        """Everything training needs to continue exactly (networks, targets, optimizer state,
        ...), by name, for checkpoints. Defaults to :meth:`get_weights`."""
        return self.get_weights()

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Take a state produced by :meth:`get_state`."""
        self.set_weights(state)

    @property
    def has_weights(self) -> bool:
        """Whether the policy can act (rollout policies wait for their first weights)."""
        return True
