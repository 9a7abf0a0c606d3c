"""SAC behind the :class:`dsac.policy.Policy` interface.

Acting runs the numpy actor on weights by name; learning (TensorFlow) is built only when
``build_learner=True``, so rollout workers and the evaluator never import TensorFlow.
"""

from __future__ import annotations

import numpy as np

from dsac.algorithms.sac.numpy_actor import actor_layer_names, squashed_gaussian
from dsac.models.numpy_ops import mlp_forward
from dsac.policy import Policy


class SACPolicy(Policy):
    """Soft Actor-Critic for flat Box observations and bounded Box actions."""

    def __init__(self, observation_space, action_space, config, *, build_learner=False, seed=0,
                 worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, build_learner=build_learner, seed=seed,
                         worker_index=worker_index, num_workers=num_workers)
        self.obs_dim = int(np.prod(observation_space.shape))
        self.act_dim = int(np.prod(action_space.shape))
        self.low = np.asarray(action_space.low, np.float32)
        self.high = np.asarray(action_space.high, np.float32)
        self.layers = actor_layer_names(len(config.fcnet_hiddens))
        self._weights: dict[str, np.ndarray] | None = None
        self.learner = None
        self.keras_actor = None  # custom models act through TensorFlow
        if build_learner:
            from dsac.algorithms.sac.learner import SACLearner  # TensorFlow only here

            self.learner = SACLearner(self.obs_dim, self.act_dim, self.low, self.high, config, seed=seed)
            self._weights = self.learner.actor_weights.get_weights()
        elif config.custom_model:
            from dsac.models.keras_forward import KerasForward

            self.keras_actor = KerasForward(self.obs_dim, 2 * self.act_dim, config, "actor")

    @property
    def has_weights(self) -> bool:
        return self._weights is not None

    def compute_actions(self, obs_batch, explore=True):
        """Squashed-Gaussian actions scaled to the env's bounds (tanh(mean) when not exploring)."""
        x = np.asarray(obs_batch, np.float32).reshape(-1, self.obs_dim)
        weights = self.get_weights()
        if self.learner is not None:
            out = self.learner.actor(x).numpy()
        elif self.keras_actor is not None:
            out = self.keras_actor(x)
        else:
            out = mlp_forward(weights, self.layers, x, self.config.fcnet_activation)
        mean, log_std = out[:, : self.act_dim], out[:, self.act_dim :]
        unit = squashed_gaussian(mean, log_std, explore, self.rng)
        return self.low + (unit + 1.0) * 0.5 * (self.high - self.low)

    def learn_on_batch(self, batch):
        """One SAC update; the acting weights follow the learner's actor."""
        if self.learner is None:
            raise RuntimeError("this SACPolicy was built without a learner (build_learner=False)")
        stats = self.learner.update(batch)
        self._weights = None  # fetched lazily from the TF actor by get_weights
        return stats

    def get_weights(self):
        if self.learner is not None and self._weights is None:
            self._weights = self.learner.actor_weights.get_weights()
        if self._weights is None:
            raise RuntimeError("SACPolicy has no weights yet: call set_weights first")
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
            self.learner.actor_weights.set_weights(weights)
        elif self.keras_actor is not None:
            self.keras_actor.set_weights(weights)
        else:
            expected = {f"{name}/{part}" for name in self.layers for part in ("kernel", "bias")}
            if set(weights) != expected:
                missing = sorted(expected - set(weights))
                extra = sorted(set(weights) - expected)
                raise ValueError(f"SAC actor weights do not match: missing {missing}, extra {extra}")
        self._weights = weights
