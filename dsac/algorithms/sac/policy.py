"""SAC's acting role: its acting network, described once (:func:`acting_net`), run in numpy on
weights by name (no TensorFlow), a custom model's part through Keras. Its learning role is
:class:`dsac.algorithms.sac.learner.SACLearner`."""

from __future__ import annotations

import numpy as np

from dsac.algorithms.sac.networks import FEATURE_DIM
from dsac.models.acting_net import ActingNet, Activation, ConvEncoder, Custom, Dense, LayerNorm, SquashedGaussian, mlp
from dsac.models.vision import default_conv_filters
from dsac.policy import BuiltinActingPolicy


def acting_net(obs, action_space, config) -> ActingNet:
    """SAC's actor (:func:`dsac.algorithms.sac.networks.build_acting_network`): for images the
    encoder φ(s) (conv, ``head`` Dense(50), LayerNorm, tanh; SAC-AE's), then the actor MLP (or
    the custom model) to [mean, log_std], a squashed Gaussian in the env's bounds."""
    model = config.model
    act_dim = int(np.prod(action_space.shape))
    layers = []
    if obs.is_image:
        filters = tuple(map(tuple, model.conv_filters or default_conv_filters(obs.shape)))
        layers = [ConvEncoder("encoder/", obs.shape, filters, model.conv_activation, obs.input_dtype == "uint8"),
                  Dense("encoder/head", FEATURE_DIM), LayerNorm("encoder/norm"), Activation("tanh")]
    if model.custom_model:
        layers.append(Custom("actor", 2 * act_dim))
    else:
        layers += mlp("actor/", model.fcnet_hiddens, 2 * act_dim, model.fcnet_activation)
    bounds = (np.asarray(action_space.low, np.float32), np.asarray(action_space.high, np.float32))
    return ActingNet(obs, tuple(layers), SquashedGaussian(*bounds))


class SACPolicy(BuiltinActingPolicy):
    """Soft Actor-Critic's actor for flat or image Box observations and bounded Box actions."""

    _describe = staticmethod(acting_net)

    def __init__(self, observation_space, action_space, config, *, seed=0, worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, seed=seed, worker_index=worker_index,
                         num_workers=num_workers)
        if config.model.custom_model:  # the actor is the user's; an image encoder stays in numpy
            from dsac.models.keras_forward import KerasForward

            features = FEATURE_DIM if self.obs.is_image else self.obs.flat_dim
            self.keras_forward = KerasForward(features, 2 * int(np.prod(action_space.shape)), config.model, "actor",
                                              verbose=config.output.verbose)

    def compute_actions(self, obs_batch, explore=True):
        """Squashed-Gaussian actions scaled to the env's bounds (tanh(mean) when not exploring)."""
        return self.net.head.act(self._forward(self.obs.batch(obs_batch)), explore, self.rng)
