"""SAC behind the :class:`dsac.policy.Policy` interface.

Acting runs the numpy actor on weights by name; learning (TensorFlow) is built only when
``build_learner=True``, so rollout workers and the evaluator never import TensorFlow.
"""

from __future__ import annotations

import numpy as np

from dsac.algorithms.sac.numpy_actor import actor_layer_names, squashed_gaussian, to_env_action
from dsac.models.numpy_ops import dense_shapes, mlp_forward
from dsac.policy import LearnerPolicy
from dsac.tf_setup import import_tensorflow


class SACPolicy(LearnerPolicy):
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
        if build_learner:
            import_tensorflow(getattr(config, "verbose", False))  # quietly, before the learner's module imports it
            from dsac.algorithms.sac.learner import SACLearner  # TensorFlow only here

            self.learner = SACLearner(self.obs_dim, self.act_dim, self.low, self.high, config, seed=seed)
            self._weights = self.learner.acting_weights.get_weights()
        elif config.custom_model:
            from dsac.models.keras_forward import KerasForward

            self.keras_forward = KerasForward(self.obs_dim, 2 * self.act_dim, config, "actor")

    def compute_actions(self, obs_batch, explore=True):
        """Squashed-Gaussian actions scaled to the env's bounds (tanh(mean) when not exploring)."""
        x = np.asarray(obs_batch, np.float32).reshape(-1, self.obs_dim)
        weights = self.get_weights()
        if self.learner is not None:
            out = self.learner.actor(x).numpy()
        elif self.keras_forward is not None:
            out = self.keras_forward(x)
        else:
            out = mlp_forward(weights, self.layers, x, self.config.fcnet_activation)
        mean, log_std = out[:, : self.act_dim], out[:, self.act_dim :]
        return to_env_action(squashed_gaussian(mean, log_std, explore, self.rng), self.low, self.high)

    def numpy_weight_shapes(self):
        return dense_shapes(self.layers, [self.obs_dim, *self.config.fcnet_hiddens, 2 * self.act_dim])
