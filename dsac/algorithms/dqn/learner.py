"""DQN's update, with the names of Mnih et al. 2015 / van Hasselt et al. 2016:

    a* = argmax_a Q_online(s', a)                (double Q; max over Q_target without it)
    y  = R^(n) + γ^k (1 − d) Q_target(s', a*)    (n-step return, k ≤ n steps summed)
    L  = mean_i w_i · Huber(Q_online(s_i, a_i) − y_i)   (w: importance weights of PER)

With ``num_atoms > 1`` the network predicts the return's distribution over a fixed support
z_1..z_N in [v_min, v_max] (C51, Bellemare et al. 2017); the target distribution of
R^(n) + γ^k (1 − d) Z(s', a*) is projected back onto the support and the loss is the
cross-entropy to it.

The gradient is clipped by global norm; the target network is a hard copy every
``target_update_every`` updates. Per-transition losses (|TD error|, or the cross-entropy for
C51) come back as new priorities.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from dsac.algorithms.dqn.networks import build_q_network
from dsac.algorithms.dqn.policy import c51_support
from dsac.algorithms.learner import ADAM_EPSILON, Learner
from dsac.models.vision import obs_input
from dsac.weights import TensorFlowVariables, named_variables, optimizer_state


def huber(x, delta: float = 1.0):
    """Quadratic within ±delta, linear outside."""
    abs_x = tf.abs(x)
    return tf.where(abs_x <= delta, 0.5 * tf.square(x), delta * (abs_x - 0.5 * delta))


def dqn_loss(q_online, q_target, batch, double_q: bool):
    """The TD loss on one batch; returns (loss, |td|, mean Q)."""
    obs, action, reward = batch["obs"], batch["action"], batch["reward"]
    next_obs, terminated, discount = batch["next_obs"], batch["terminated"], batch["discount"]
    q_s = q_online(obs)
    q_sa = tf.gather(q_s, action, axis=1, batch_dims=1)
    q_next_target = q_target(next_obs)
    if double_q:
        next_action = tf.argmax(q_online(next_obs), axis=1, output_type=tf.int32)
    else:
        next_action = tf.argmax(q_next_target, axis=1, output_type=tf.int32)
    q_next = tf.gather(q_next_target, next_action, axis=1, batch_dims=1)
    y = tf.stop_gradient(reward + discount * (1.0 - terminated) * q_next)
    td_error = q_sa - y
    loss = tf.reduce_mean(batch["weights"] * huber(td_error))
    return loss, tf.abs(td_error), tf.reduce_mean(q_sa)


def categorical_projection(next_probs, reward, discount, terminated, support):
    """Project the distribution of r + γ^k (1 − d) z (atoms z_j with probabilities p_j) onto
    the support: m_i = Σ_j clip(1 − |clip(Tz_j) − z_i| / Δz, 0, 1) · p_j, which splits each
    p_j between the two atoms around Tz_j in proportion to their distance."""
    delta_z = support[1] - support[0]
    tz = reward[:, None] + (discount * (1.0 - terminated))[:, None] * support[None, :]
    tz = tf.clip_by_value(tz, support[0], support[-1])
    weights = tf.clip_by_value(1.0 - tf.abs(tz[:, None, :] - support[None, :, None]) / delta_z, 0.0, 1.0)
    return tf.reduce_sum(weights * next_probs[:, None, :], axis=2)


def c51_loss(q_online, q_target, batch, double_q: bool, support):
    """Distributional loss on one batch; returns (loss, per-transition cross-entropy, mean Q)."""
    logits = q_online(batch["obs"])  # (B, A, N)
    logits_sa = tf.gather(logits, batch["action"], axis=1, batch_dims=1)  # (B, N)
    next_probs_target = tf.nn.softmax(q_target(batch["next_obs"]), axis=-1)
    q_next_target = tf.reduce_sum(next_probs_target * support, axis=-1)
    if double_q:
        q_next_online = tf.reduce_sum(tf.nn.softmax(q_online(batch["next_obs"]), axis=-1) * support, axis=-1)
        next_action = tf.argmax(q_next_online, axis=1, output_type=tf.int32)
    else:
        next_action = tf.argmax(q_next_target, axis=1, output_type=tf.int32)
    next_probs = tf.gather(next_probs_target, next_action, axis=1, batch_dims=1)
    target = tf.stop_gradient(
        categorical_projection(next_probs, batch["reward"], batch["discount"], batch["terminated"], support)
    )
    cross_entropy = -tf.reduce_sum(target * tf.nn.log_softmax(logits_sa, axis=-1), axis=-1)
    loss = tf.reduce_mean(batch["weights"] * cross_entropy)
    q_sa = tf.reduce_sum(tf.nn.softmax(logits_sa, axis=-1) * support, axis=-1)
    return loss, cross_entropy, tf.reduce_mean(q_sa)


class DQNLearner(Learner):
    """DQN's learning role: Q-network, target network, optimizer and the compiled update
    (:class:`Learner`).

    Args:
        observation_space: the env's (flat or image Box).
        action_space: the env's Discrete space (replay stores its actions, from ``start``).
        algorithm: the algorithm section (:class:`dsac.algorithms.dqn.config.DQNSettings`:
            dueling, double_q, grad_clip, target_update_every, the C51 atoms).
        model: the model section (:class:`dsac.settings.sections.ModelSettings`).
        learning_rate: the optimizer's, a number or a Keras schedule
            (:func:`dsac.settings.schedules.keras_learning_rate`).
        seed: seeds network initialization.
        xla: compile the update loop with XLA (``--learner_xla``).
    """

    def __init__(self, observation_space, action_space, algorithm, model, learning_rate, *, seed: int = 0,
                 xla: bool = False):
        keras.utils.set_random_seed(seed)
        self.observation_space, self.action_space = observation_space, action_space
        self.num_atoms = int(algorithm.num_atoms)
        support = c51_support(algorithm)
        self.support = None if support is None else tf.constant(support)
        self.obs = obs = obs_input(observation_space)
        self.action_start = int(action_space.start)
        num_actions = int(action_space.n)
        heads = {"dueling": algorithm.dueling, "num_atoms": self.num_atoms}
        self.q_online = build_q_network(obs, num_actions, model, "q", **heads)
        self.q_target = build_q_network(obs, num_actions, model, "q_target", **heads)
        self.q_target.set_weights(self.q_online.get_weights())
        self.double_q = bool(algorithm.double_q)
        self.grad_clip = float(algorithm.grad_clip)
        self.target_update_every = int(algorithm.target_update_every)
        self.optimizer = keras.optimizers.Adam(learning_rate, epsilon=ADAM_EPSILON)
        self.optimizer.build(self.q_online.trainable_variables)
        self.acting_weights = TensorFlowVariables(self.q_online, prefix="q")
        self.state = TensorFlowVariables({
            **dict(zip(self.acting_weights.names, self.acting_weights.variables, strict=True)),
            **named_variables(self.q_target, "q_target"),
            **optimizer_state(self.optimizer, "optimizer"),
        })
        if xla:
            self._compile_with_xla()

    STATS = ("loss", "q_mean", "grad_norm")

    def _gradients_of(self, batch):
        with tf.GradientTape() as tape:
            if self.support is None:
                loss, td_abs, q_mean = dqn_loss(self.q_online, self.q_target, batch, self.double_q)
            else:
                loss, td_abs, q_mean = c51_loss(self.q_online, self.q_target, batch, self.double_q, self.support)
        grads = tape.gradient(loss, self.q_online.trainable_variables)
        return {"loss": loss, "q_mean": q_mean, "grad_norm": tf.linalg.global_norm(grads), "td_abs": td_abs}, grads

    def _apply_gradients(self, grads):
        grads, _ = tf.clip_by_global_norm(grads, self.grad_clip)
        self.optimizer.apply_gradients(zip(grads, self.q_online.trainable_variables, strict=True))
        # Hard target copy every target_update_every updates, counted by the optimizer (its
        # step count is part of the checkpointed state) so that it happens inside the graph.
        tf.cond(
            tf.equal(self.optimizer.iterations % self.target_update_every, 0),
            self._copy_target,
            lambda: None,
        )

    def _reset_targets(self) -> None:
        """Q_target ← Q_online (the acting weights are the online network)."""
        self._copy_target()

    def _copy_target(self):
        for target, online in zip(self.q_target.weights, self.q_online.weights, strict=True):
            target.assign(online)
        return None

    def _to_tensors(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The batch as the compiled update takes it: actions counted from 0 (replay stores
        them from the space's ``start``); image frames stay uint8 (the network scales them)."""
        n = len(batch["reward"])
        return {
            "obs": self.obs.batch(batch["obs"]),
            "action": (np.asarray(batch["action"], np.int64) - self.action_start).astype(np.int32).reshape(n),
            "reward": np.asarray(batch["reward"], np.float32),
            "next_obs": self.obs.batch(batch["next_obs"]),
            "terminated": np.asarray(batch["terminated"], np.float32),
            "discount": np.asarray(batch["discount"], np.float32),
            "weights": np.asarray(batch["weights"], np.float32) if "weights" in batch else np.ones(n, np.float32),
        }
