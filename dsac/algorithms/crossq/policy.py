"""CrossQ's acting role: its batch-renormalized actor in numpy, on weights by name (no
TensorFlow). Its learning role is :class:`dsac.algorithms.crossq.learner.CrossQLearner`.

Acting uses the running statistics, so every renormalization layer is the affine map
(x − mean) / sqrt(var + ε) · scale + bias (:class:`dsac.algorithms.crossq.networks.BatchRenorm`
with ``training=False``, tested to agree to 1e-5).
"""

from __future__ import annotations

import numpy as np

from dsac.algorithms.sac.numpy_actor import squashed_gaussian, to_env_action
from dsac.errors import DsacError
from dsac.models.numpy_ops import ACTIVATIONS, dense_shapes
from dsac.policy import BuiltinActingPolicy

# BatchRenorm's variance epsilon (networks.EPSILON, repeated: this module imports no TensorFlow).
EPSILON = 1e-3


def actor_forward(weights: dict[str, np.ndarray], x: np.ndarray, num_hidden: int, activation: str) -> np.ndarray:
    """[mean, log_std] of the actor for a batch of flat observations, in inference mode."""
    act = ACTIVATIONS[activation]

    def norm(i, x):
        p = f"actor/norm_{i}/"
        scale = weights[p + "scale"] / np.sqrt(weights[p + "var"] + EPSILON)
        return (x - weights[p + "mean"]) * scale + weights[p + "bias"]

    x = norm(0, x)
    for i in range(num_hidden):
        x = norm(i + 1, act(x @ weights[f"actor/hidden_{i}/kernel"] + weights[f"actor/hidden_{i}/bias"]))
    return x @ weights["actor/out/kernel"] + weights["actor/out/bias"]


def actor_weight_shapes(obs_dim: int, hiddens: list[int], act_dim: int) -> dict[str, tuple[int, ...]]:
    """Name and shape of every acting weight: dense layers and renormalization statistics."""
    layers = [f"actor/hidden_{i}" for i in range(len(hiddens))] + ["actor/out"]
    shapes = dense_shapes(layers, [obs_dim, *hiddens, 2 * act_dim])
    for i, width in enumerate([obs_dim, *hiddens]):
        shapes.update({f"actor/norm_{i}/{name}": (width,) for name in ("scale", "bias", "mean", "var")})
    return shapes


class CrossQPolicy(BuiltinActingPolicy):
    """CrossQ's actor for flat Box observations and bounded Box actions: a squashed Gaussian
    (tanh(mean) when not exploring), as SAC's."""

    def __init__(self, observation_space, action_space, config, *, seed=0, worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, seed=seed, worker_index=worker_index,
                         num_workers=num_workers)
        if config.model.custom_model:
            raise DsacError("--algo crossq builds its own batch-renormalized networks; "
                            "--custom_model is for sac and dqn")
        self.obs_dim = int(np.prod(observation_space.shape))
        self.act_dim = int(np.prod(action_space.shape))
        self.low = np.asarray(action_space.low, np.float32)
        self.high = np.asarray(action_space.high, np.float32)
        self.hiddens = list(config.model.fcnet_hiddens)
        self.activation = config.model.fcnet_activation

    def compute_actions(self, obs_batch, explore=True):
        """Squashed-Gaussian actions scaled to the env's bounds (tanh(mean) when not exploring)."""
        x = np.asarray(obs_batch, np.float32).reshape(len(obs_batch), self.obs_dim)
        out = actor_forward(self.get_weights(), x, len(self.hiddens), self.activation)
        mean, log_std = out[:, : self.act_dim], out[:, self.act_dim :]
        return to_env_action(squashed_gaussian(mean, log_std, explore, self.rng), self.low, self.high)

    def _numpy_weight_shapes(self):
        return actor_weight_shapes(self.obs_dim, self.hiddens, self.act_dim)
