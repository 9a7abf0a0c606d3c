"""SAC behind the :class:`dsac.policy.Policy` interface.

Acting runs the numpy actor on weights by name; learning (TensorFlow) is built only when
``build_learner=True``, so rollout workers and the evaluator never import TensorFlow.
"""

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
from dsac.policy import BuiltinPolicy
from dsac.tf_setup import import_tensorflow


class SACPolicy(BuiltinPolicy):
    """Soft Actor-Critic for flat or image Box observations and bounded Box actions."""

    def __init__(self, observation_space, action_space, config, *, build_learner=False, seed=0,
                 worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, build_learner=build_learner, seed=seed,
                         worker_index=worker_index, num_workers=num_workers)
        self.obs = obs_input(observation_space)
        self.act_dim = int(np.prod(action_space.shape))
        self.low = np.asarray(action_space.low, np.float32)
        self.high = np.asarray(action_space.high, np.float32)
        self.layers = actor_layer_names(len(config.fcnet_hiddens))
        if build_learner:
            import_tensorflow(getattr(config, "verbose", False))  # quietly, before the learner's module imports it
            from dsac.algorithms.sac.learner import SACLearner  # TensorFlow only here
            from dsac.schedules import keras_learning_rate

            self.learner = SACLearner(self.obs, self.act_dim, self.low, self.high, config.algorithm, config.model,
                                      keras_learning_rate(config), seed=seed)
            if config.learner_xla:
                self.learner.compile_with_xla()
            self._weights = self.learner.acting_weights.get_weights()
        elif config.custom_model:  # the actor is the user's; an image encoder stays in numpy
            from dsac.models.keras_forward import KerasForward

            self.keras_forward = KerasForward(self.actor_input_dim, 2 * self.act_dim, config.model, "actor",
                                              verbose=config.verbose)

    @property
    def actor_input_dim(self) -> int:
        """What the actor reads: the flat observation, or the encoder's features φ(s)."""
        return FEATURE_DIM if self.obs.is_image else self.obs.flat_dim

    def compute_actions(self, obs_batch, explore=True):
        """Squashed-Gaussian actions scaled to the env's bounds (tanh(mean) when not exploring)."""
        out = self.actor_outputs(self.obs.batch(obs_batch))
        mean, log_std = out[:, : self.act_dim], out[:, self.act_dim :]
        return to_env_action(squashed_gaussian(mean, log_std, explore, self.rng), self.low, self.high)

    def actor_outputs(self, x: np.ndarray) -> np.ndarray:
        """[mean, log_std] for a batch of observations: TensorFlow in the learner, else numpy
        (the image encoder, then the actor MLP or a custom model's Keras forward)."""
        if self.learner is not None:
            return self.learner.acting(x).numpy()
        weights = self.get_weights()
        if self.obs.is_image:
            x = encoder_features(weights, x, self.obs, self.config.model)
        if self.keras_forward is not None:
            return self.keras_forward(x)
        return mlp_forward(weights, self.layers, x, self.config.fcnet_activation)

    def numpy_weight_shapes(self):
        shapes = encoder_weight_shapes(self.obs, self.config.model) if self.obs.is_image else {}
        shapes.update(dense_shapes(self.layers, [self.actor_input_dim, *self.config.fcnet_hiddens, 2 * self.act_dim]))
        return shapes
