"""DQN behind the :class:`dsac.policy.Policy` interface.

Acting runs the numpy Q-network, ε-greedy with Ape-X's per-worker ε (one worker: a linear
decay); the evaluator acts greedily. ``postprocess_trajectory`` gives each transition its
initial priority — its |TD error| under the worker's own weights — so new data need not be
guessed at the maximum priority (Ape-X). TensorFlow is imported only with
``build_learner=True``.
"""

from __future__ import annotations

import numpy as np

from dsac.algorithms.dqn.numpy_q import (
    apex_epsilon,
    c51_support,
    linear_epsilon,
    q_from_head_outputs,
    q_layer_names,
    q_values,
)
from dsac.policy import Policy


class DQNPolicy(Policy):
    """Double/dueling n-step DQN for flat Box observations and Discrete actions."""

    def __init__(self, observation_space, action_space, config, *, build_learner=False, seed=0,
                 worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, build_learner=build_learner, seed=seed,
                         worker_index=worker_index, num_workers=num_workers)
        self.obs_dim = int(np.prod(observation_space.shape))
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        self.torso, self.heads = q_layer_names(len(config.fcnet_hiddens), config.dueling)
        self.support = c51_support(config)
        self.steps = 0  # exploring actions taken by this policy
        self._weights: dict[str, np.ndarray] | None = None
        self.learner = None
        self.keras_q = None  # custom models act through TensorFlow
        if build_learner:
            from dsac.algorithms.dqn.learner import DQNLearner  # TensorFlow only here

            self.learner = DQNLearner(self.obs_dim, self.num_actions, config, seed=seed)
            self._weights = self.learner.q_weights.get_weights()
        elif config.custom_model:
            from dsac.algorithms.dqn.networks import build_q_network
            from dsac.models.keras_forward import KerasForward

            self.keras_q = KerasForward(self.obs_dim, self.num_actions, config, "q", build=build_q_network)

    @property
    def has_weights(self) -> bool:
        return self._weights is not None or self.learner is not None

    @property
    def epsilon(self) -> float:
        """This worker's exploration rate now."""
        c = self.config
        if self.num_workers > 1:
            return apex_epsilon(self.worker_index or 0, self.num_workers, c.epsilon, c.epsilon_alpha)
        return linear_epsilon(
            c.start_steps + self.steps, c.exploration_fraction * c.total_env_steps, c.final_epsilon
        )

    def q_values(self, obs_batch) -> np.ndarray:
        """Q(s, ·) for a batch of observations (numpy forward pass)."""
        x = np.asarray(obs_batch, np.float32).reshape(-1, self.obs_dim)
        weights = self.get_weights()
        if self.learner is not None:
            return q_from_head_outputs([self.learner.q_online(x).numpy().reshape(len(x), -1)], self.support)
        if self.keras_q is not None:
            return q_from_head_outputs([self.keras_q(x).reshape(len(x), -1)], self.support)
        return q_values(weights, self.torso, self.heads, x, self.support, self.config.fcnet_activation)

    def compute_actions(self, obs_batch, explore=True):
        """Greedy actions; with ``explore``, each is replaced by a uniform one with prob. ε."""
        greedy = np.argmax(self.q_values(obs_batch), axis=1)
        if explore:
            explore_mask = self.rng.random(len(greedy)) < self.epsilon
            greedy = np.where(explore_mask, self.rng.integers(0, self.num_actions, len(greedy)), greedy)
            self.steps += len(greedy)
        return greedy + self.action_start

    def postprocess_trajectory(self, batch):
        """Adds ``priority`` = |y − Q(s, a)| under this policy's weights (online net for both
        terms: workers hold no target network)."""
        if not self.has_weights or len(batch["reward"]) == 0:
            return batch
        q_s = self.q_values(batch["obs"])
        q_sa = q_s[np.arange(len(q_s)), np.asarray(batch["action"], np.int64) - self.action_start]
        q_next = self.q_values(batch["next_obs"]).max(axis=1)
        y = batch["reward"] + batch["discount"] * (1.0 - batch["terminated"]) * q_next
        return {**batch, "priority": np.abs(y - q_sa).astype(np.float32)}

    def learn_on_batch(self, batch):
        if self.learner is None:
            raise RuntimeError("this DQNPolicy was built without a learner (build_learner=True)")
        batch = {**batch, "action": np.asarray(batch["action"], np.int64) - self.action_start}
        stats = self.learner.update(batch)
        self._weights = None  # fetched lazily from the TF network by get_weights
        return stats

    def get_weights(self):
        if self.learner is not None and self._weights is None:
            self._weights = self.learner.q_weights.get_weights()
        if self._weights is None:
            raise RuntimeError("DQNPolicy has no weights yet: call set_weights first")
        return self._weights

    def get_state(self):
        """Networks, targets, optimizer state (and SAC's log α) and the update count."""
        if self.learner is None:
            return self.get_weights()
        return {**self.learner.state.get_weights(), "updates": np.array(self.learner.updates)}

    def set_state(self, state):
        if self.learner is None:
            self.set_weights(state)
            return
        state = dict(state)
        self.learner.updates = int(state.pop("updates", 0))
        self.learner.state.set_weights(state)
        self._weights = None

    def set_weights(self, weights):
        weights = {k: np.asarray(v, np.float32) for k, v in weights.items()}
        if self.learner is not None:
            self.learner.q_weights.set_weights(weights)
        elif self.keras_q is not None:
            self.keras_q.set_weights(weights)
        else:
            expected = {f"{name}/{part}" for name in self.torso + self.heads for part in ("kernel", "bias")}
            if set(weights) != expected:
                raise ValueError(
                    f"DQN weights do not match: missing {sorted(expected - set(weights))}, "
                    f"extra {sorted(set(weights) - expected)}"
                )
        self._weights = weights
