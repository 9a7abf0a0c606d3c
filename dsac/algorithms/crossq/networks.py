"""CrossQ's networks: a Gaussian actor and two critics, MLPs with a batch renormalization
layer (Ioffe 2017) before every dense layer and after the last hidden one, as in Bhatt et al.
2024 and sb3-contrib. Layers are ``norm_0, hidden_0, norm_1, hidden_1, ..., norm_<n>, out``.

A :class:`BatchRenorm` layer called with ``training=True`` normalizes with the batch's own
statistics, corrected towards the running ones (r, d) once past its warm-up, and moves the
running statistics; with ``training=False`` (acting, targets, the actor's loss) it uses the
running statistics alone, an affine map that :mod:`dsac.algorithms.crossq.policy` repeats in numpy.
"""

from __future__ import annotations

import keras
import tensorflow as tf

# sb3-contrib's (and the paper's JAX code's): variance epsilon, and the bounds of the
# renormalization's correction r (a scale) and d (a shift).
EPSILON = 1e-3
R_MAX = 3.0
D_MAX = 5.0


class BatchRenorm(keras.layers.Layer):
    """Batch renormalization over the batch axis of (batch, features) inputs.

    Args:
        momentum: the running statistics move this fraction of the way to the batch's, per
            training call.
        warmup_steps: training calls that use the batch's statistics alone (batch norm) before
            r and d correct them.
    """

    def __init__(self, momentum: float = 0.01, warmup_steps: int = 100_000, **kwargs):
        super().__init__(**kwargs)
        self.momentum = float(momentum)
        self.warmup_steps = float(warmup_steps)

    def build(self, input_shape):
        features = (int(input_shape[-1]),)
        self.scale = self.add_weight(shape=features, initializer="ones", name="scale")
        self.bias = self.add_weight(shape=features, initializer="zeros", name="bias")
        self.mean = self.add_weight(shape=features, initializer="zeros", trainable=False, name="mean")
        self.var = self.add_weight(shape=features, initializer="ones", trainable=False, name="var")
        self.steps = self.add_weight(shape=(), initializer="zeros", trainable=False, name="steps")

    def call(self, x, training=False):
        if not training:
            return (x - self.mean) * tf.math.rsqrt(self.var + EPSILON) * self.scale + self.bias
        batch_mean, batch_var = tf.nn.moments(x, axes=[0])
        batch_std = tf.sqrt(batch_var + EPSILON)
        running_std = tf.sqrt(self.var + EPSILON)
        # x̂ = (x − μ_B)/σ_B · r + d, r = σ_B/σ and d = (μ_B − μ)/σ clipped and not differentiated
        # (Ioffe 2017, Algorithm 1); r = 1, d = 0 (plain batch norm) during the warm-up.
        renorm = tf.cast(self.steps >= self.warmup_steps, x.dtype)
        r = tf.stop_gradient(tf.clip_by_value(batch_std / running_std, 1.0 / R_MAX, R_MAX))
        d = tf.stop_gradient(tf.clip_by_value((batch_mean - self.mean) / running_std, -D_MAX, D_MAX))
        r = renorm * r + (1.0 - renorm)
        d = renorm * d
        self.mean.assign_add(self.momentum * (tf.stop_gradient(batch_mean) - self.mean))
        self.var.assign_add(self.momentum * (tf.stop_gradient(batch_var) - self.var))
        self.steps.assign_add(1.0)
        return ((x - batch_mean) / batch_std * r + d) * self.scale + self.bias

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum, "warmup_steps": self.warmup_steps}


def build_mlp(input_dim: int, hiddens: list[int], output_dim: int, name: str, activation: str, algorithm):
    """A batch-renormalized MLP (layers as the module says); ``algorithm`` holds the
    renormalization's settings (:class:`dsac.algorithms.crossq.config.CrossQSettings`)."""

    def norm(i):
        return BatchRenorm(algorithm.batch_norm_momentum, algorithm.renorm_warmup_steps, name=f"norm_{i}")

    inputs = keras.Input(shape=(input_dim,), name="inputs")
    x = norm(0)(inputs)
    for i, size in enumerate(hiddens):
        x = norm(i + 1)(keras.layers.Dense(size, activation=activation, name=f"hidden_{i}")(x))
    return keras.Model(inputs, keras.layers.Dense(output_dim, name="out")(x), name=name)


def acting_variables(actor) -> dict:
    """The actor's variables by name (``actor/...``) that acting reads: its weights and the
    renormalization's running statistics, not the layers' step counters."""
    from dsac.weights import named_variables

    return {name: v for name, v in named_variables(actor, "actor").items() if not name.endswith("/steps")}


def build_actor(obs_dim: int, act_dim: int, model, algorithm):
    """s -> [mean, log_std] of a Gaussian over pre-tanh actions; hidden sizes ``--fcnet_hiddens``."""
    return build_mlp(obs_dim, list(model.fcnet_hiddens), 2 * act_dim, "actor", model.fcnet_activation, algorithm)


def build_critic(obs_dim: int, act_dim: int, model, algorithm, name: str):
    """concat(s, a) -> Q(s, a); hidden sizes ``--critic_hiddens``."""
    return build_mlp(obs_dim + act_dim, list(algorithm.critic_hiddens), 1, name, model.fcnet_activation, algorithm)
