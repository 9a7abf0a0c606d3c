"""SAC's acting role: the numpy actor on weights by name (no TensorFlow), or a custom model's
Keras forward pass. Its learning role is :class:`dsac.algorithms.sac.learner.SACLearner`."""

from __future__ import annotations

import numpy as np

from dsac.algorithms.sac.networks import FEATURE_DIM
from dsac.algorithms.sac.numpy_actor import (
    actor_layer_names,
    encoder_features,
    encoder_weight_shapes,
    squashed_gaussian,
    to_env_action,
)
from dsac.models.numpy_ops import dense_shapes, mlp_forward
from dsac.models.vision import obs_input
from dsac.policy import BuiltinActingPolicy


class SACPolicy(BuiltinActingPolicy):
    """Soft Actor-Critic's actor for flat or image Box observations and bounded Box actions."""

    def __init__(self, observation_space, action_space, config, *, seed=0, worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, seed=seed, worker_index=worker_index,
                         num_workers=num_workers)
        self.obs = obs_input(observation_space)
        self.act_dim = int(np.prod(action_space.shape))
        self.low = np.asarray(action_space.low, np.float32)
        self.high = np.asarray(action_space.high, np.float32)
        self.model = config.model
        self.layers = actor_layer_names(len(self.model.fcnet_hiddens))
        # What the actor reads: the flat observation, or the encoder's features φ(s).
        self.actor_input_dim = FEATURE_DIM if self.obs.is_image else self.obs.flat_dim
        if self.model.custom_model:  # the actor is the user's; an image encoder stays in numpy
            from dsac.models.keras_forward import KerasForward

            self.keras_forward = KerasForward(self.actor_input_dim, 2 * self.act_dim, self.model, "actor",
                                              verbose=config.output.verbose)

    def compute_actions(self, obs_batch, explore=True):
        """Squashed-Gaussian actions scaled to the env's bounds (tanh(mean) when not exploring)."""
        out = self._actor_outputs(self.obs.batch(obs_batch))
        mean, log_std = out[:, : self.act_dim], out[:, self.act_dim :]
        return to_env_action(squashed_gaussian(mean, log_std, explore, self.rng), self.low, self.high)

    def _actor_outputs(self, x: np.ndarray) -> np.ndarray:
        """[mean, log_std] for a batch of observations: the image encoder (numpy), then the
        actor MLP (numpy) or a custom model's Keras forward."""
        weights = self.get_weights()
        if self.obs.is_image:
            x = encoder_features(weights, x, self.obs, self.model)
        if self.keras_forward is not None:
            return self.keras_forward(x)
        return mlp_forward(weights, self.layers, x, self.model.fcnet_activation)

    def _numpy_weight_shapes(self):
        shapes = encoder_weight_shapes(self.obs, self.model) if self.obs.is_image else {}
        shapes.update(dense_shapes(self.layers, [self.actor_input_dim, *self.model.fcnet_hiddens, 2 * self.act_dim]))
        return shapes
