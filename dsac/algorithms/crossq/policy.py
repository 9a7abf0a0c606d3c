"""CrossQ's acting role: its batch-renormalized actor, described once (:func:`acting_net`), run
in numpy on weights by name (no TensorFlow). Its learning role is
:class:`dsac.algorithms.crossq.learner.CrossQLearner`.

Acting uses the running statistics, so every renormalization layer is the affine map
(x − mean) / sqrt(var + ε) · scale + bias (:class:`dsac.algorithms.crossq.networks.BatchRenorm`
with ``training=False``, tested to agree to 1e-5).
"""

from __future__ import annotations

import numpy as np

from dsac.algorithms.sac.policy import SACPolicy
from dsac.errors import DsacError
from dsac.models.acting_net import ActingNet, Dense, Renorm, SquashedGaussian

# BatchRenorm's variance epsilon (networks.EPSILON, repeated: this module imports no TensorFlow).
EPSILON = 1e-3


def acting_net(obs, action_space, config) -> ActingNet:
    """CrossQ's actor (:func:`dsac.algorithms.crossq.networks.build_mlp`): renormalization
    ``norm_0``, then each hidden layer followed by its own, then ``out`` to [mean, log_std], a
    squashed Gaussian in the env's bounds (as SAC's)."""
    model = config.model
    layers = [Renorm("actor/norm_0", EPSILON)]
    for i, width in enumerate(model.fcnet_hiddens):
        layers += [Dense(f"actor/hidden_{i}", int(width), model.fcnet_activation),
                   Renorm(f"actor/norm_{i + 1}", EPSILON)]
    layers.append(Dense("actor/out", 2 * int(np.prod(action_space.shape))))
    bounds = (np.asarray(action_space.low, np.float32), np.asarray(action_space.high, np.float32))
    return ActingNet(obs, tuple(layers), SquashedGaussian(*bounds))


class CrossQPolicy(SACPolicy):
    """CrossQ's actor for flat Box observations and bounded Box actions: a squashed Gaussian
    (tanh(mean) when not exploring), as SAC's."""

    _describe = staticmethod(acting_net)

    def __init__(self, observation_space, action_space, config, **kwargs):
        if config.model.custom_model:
            raise DsacError("--algo crossq builds its own batch-renormalized networks; "
                            "--custom_model is for sac and dqn")
        super().__init__(observation_space, action_space, config, **kwargs)
