"""CrossQ's update (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement
Learning for Greater Sample Efficiency and Simplicity"): SAC without target networks, its
critics batch-renormalized on the joint batch of (s, a) and (s', a').

The math reads top to bottom in :func:`critic_losses` and :func:`actor_losses`, with the
paper's quantities as names; the noise is an argument. Calling a network with ``training=True``
moves its batch renormalization's running statistics (:mod:`dsac.algorithms.crossq.networks`),
so the losses are pure but for those statistics, as in the paper.

One update, from :meth:`dsac.runtime.learning.UpdateLoop.step`: ``CrossQLearner.learn_on_batches`` runs
the base's compiled loop (:mod:`dsac.algorithms.learner`), whose ``_step`` calls
:meth:`CrossQLearner._gradients_of` (the critics' gradients every update; the actor's and the
temperature's every ``policy_delay``-th) and, when every gradient is finite,
:meth:`CrossQLearner._apply_gradients`.
"""

from __future__ import annotations

import math
from functools import partial

import keras
import numpy as np
import tensorflow as tf

from dsac.algorithms.crossq.networks import BatchRenorm, acting_variables, build_actor, build_critic
from dsac.algorithms.learner import ADAM_EPSILON, Learner
from dsac.algorithms.sac.learner import squashed_gaussian_sample
from dsac.models.acting_net import to_unit_action
from dsac.weights import TensorFlowVariables, named_variables, optimizer_state


def critic_losses(actor, q1, q2, alpha, batch, noise_next):
    """The critics' objective on one batch: a dict with ``qf_loss`` and its parts, and
    ``td_abs`` per transition. ``batch["discount"]`` is γ^k of the stored transition and
    ``batch["weights"]`` importance weights. No target network: the critics see (s, a) and
    (s', a') in one batch, so batch renormalization normalizes both with the statistics of
    their mixture, and the bootstrap is the same critics' value at (s', a'), not differentiated."""
    obs, action, reward = batch["obs"], batch["action"], batch["reward"]
    next_obs, terminated, discount = batch["next_obs"], batch["terminated"], batch["discount"]
    # a' ~ π(·|s') from the actor's running statistics (inference mode), as sb3-contrib does
    next_action, next_log_pi = squashed_gaussian_sample(partial(actor, training=False), next_obs, noise_next)
    joint = tf.concat([tf.concat([obs, action], -1), tf.concat([next_obs, tf.stop_gradient(next_action)], -1)], 0)
    n = tf.shape(obs)[0]
    q1_joint, q2_joint = q1(joint, training=True)[:, 0], q2(joint, training=True)[:, 0]
    qf1_a_values, qf2_a_values = q1_joint[:n], q2_joint[:n]

    # J_Q = E[½ w (Q_i(s,a) − y)²],  y = r + γ(1 − d)(min_j Q_j(s',a') − α log π(a'|s'))
    min_qf_next = tf.minimum(q1_joint[n:], q2_joint[n:]) - alpha * next_log_pi
    next_q_value = tf.stop_gradient(reward + discount * (1.0 - terminated) * min_qf_next)
    qf1_loss = 0.5 * tf.reduce_mean(batch["weights"] * tf.square(qf1_a_values - next_q_value))
    qf2_loss = 0.5 * tf.reduce_mean(batch["weights"] * tf.square(qf2_a_values - next_q_value))
    return {
        "qf1_loss": qf1_loss,
        "qf2_loss": qf2_loss,
        "qf_loss": qf1_loss + qf2_loss,
        "q_mean": tf.reduce_mean(qf1_a_values),
        "td_abs": 0.5 * (tf.abs(qf1_a_values - next_q_value) + tf.abs(qf2_a_values - next_q_value)),
    }


def actor_losses(actor, q1, q2, log_alpha, obs, target_entropy, noise_pi):
    """The actor's and the temperature's objectives on one batch of observations: the actor in
    training mode (its statistics move), the critics in inference mode."""
    alpha = tf.exp(log_alpha)
    # J_π = E[α log π(ã|s) − min_j Q_j(s, ã)],  ã ~ π(·|s) reparameterized
    pi, log_pi = squashed_gaussian_sample(partial(actor, training=True), obs, noise_pi)
    obs_pi = tf.concat([obs, pi], axis=-1)
    min_qf_pi = tf.minimum(q1(obs_pi, training=False), q2(obs_pi, training=False))[:, 0]
    actor_loss = tf.reduce_mean(tf.stop_gradient(alpha) * log_pi - min_qf_pi)
    # J(α) = E[−α (log π(ã|s) + H̄)], optimized through log α
    alpha_loss = -tf.reduce_mean(log_alpha * tf.stop_gradient(log_pi + target_entropy))
    return {"actor_loss": actor_loss, "alpha_loss": alpha_loss, "entropy": -tf.reduce_mean(log_pi)}


def per_actor_step(learning_rate, policy_delay: int):
    """The actor's and α's learning rate: a schedule steps by its optimizer's own count, which
    the policy delay slows, so its horizon shrinks by the same factor."""
    if isinstance(learning_rate, keras.optimizers.schedules.PolynomialDecay):
        schedule = learning_rate.get_config()
        schedule["decay_steps"] = max(1, round(schedule["decay_steps"] / policy_delay))
        return type(learning_rate).from_config(schedule)
    return learning_rate


class CrossQLearner(Learner):
    """CrossQ's learning role: networks, optimizers and the compiled update (:class:`Learner`).

    Args:
        observation_space: the env's flat Box.
        action_space: the env's bounded Box (replay stores env-space actions).
        algorithm: the algorithm section (:class:`dsac.algorithms.crossq.config.CrossQSettings`:
            gamma, init_alpha, target_entropy, critic_hiddens, policy_delay, batch_norm_momentum,
            renorm_warmup_steps, adam_beta1).
        model: the model section (:class:`dsac.settings.sections.ModelSettings`: the actor's layers).
        learning_rate: every optimizer's, a number or a Keras schedule
            (:func:`dsac.settings.schedules.keras_learning_rate`).
        seed: seeds network initialization and the update's noise.
        xla: compile the update loop with XLA (``--learner_xla``).
    """

    STATS = ("qf1_loss", "qf2_loss", "qf_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean")

    def __init__(self, observation_space, action_space, algorithm, model, learning_rate, *, seed: int = 0,
                 xla: bool = False):
        keras.utils.set_random_seed(seed)
        self.observation_space, self.action_space = observation_space, action_space
        obs_dim = int(np.prod(observation_space.shape))
        act_dim = int(np.prod(action_space.shape))
        self.actor = build_actor(obs_dim, act_dim, model, algorithm)
        self.q1 = build_critic(obs_dim, act_dim, model, algorithm, "q1")
        self.q2 = build_critic(obs_dim, act_dim, model, algorithm, "q2")
        self.log_alpha = keras.Variable(math.log(algorithm.init_alpha), dtype="float32", name="log_alpha")
        self.gamma = float(algorithm.gamma)
        self.policy_delay = int(algorithm.policy_delay)
        self.target_entropy = float(-act_dim if algorithm.target_entropy is None else algorithm.target_entropy)
        self.action_low = np.asarray(action_space.low, np.float32)
        self.action_high = np.asarray(action_space.high, np.float32)
        # Updates applied: which of them also step the actor and α (every policy_delay-th).
        self.critic_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="critic_updates")
        # The actor's losses of its last step: a critic-only update reports them again.
        self.last_actor_stats = {name: tf.Variable(0.0, trainable=False, name=name)
                                 for name in ("actor_loss", "alpha_loss", "entropy")}

        self.critic_variables = self.q1.trainable_variables + self.q2.trainable_variables
        beta_1, actor_rate = float(algorithm.adam_beta1), per_actor_step(learning_rate, self.policy_delay)
        self.actor_optimizer = keras.optimizers.Adam(actor_rate, beta_1=beta_1, epsilon=ADAM_EPSILON)
        self.critic_optimizer = keras.optimizers.Adam(learning_rate, beta_1=beta_1, epsilon=ADAM_EPSILON)
        self.alpha_optimizer = keras.optimizers.Adam(actor_rate, epsilon=ADAM_EPSILON)
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.critic_optimizer.build(self.critic_variables)
        self.alpha_optimizer.build([self.log_alpha])
        # What acting reads: the actor's weights and running statistics, not its step counters.
        self.acting_weights = TensorFlowVariables(acting_variables(self.actor))
        self.state = TensorFlowVariables({
            **named_variables(self.actor, "actor"), **named_variables(self.q1, "q1"), **named_variables(self.q2, "q2"),
            "log_alpha": self.log_alpha, "critic_updates": self.critic_updates,
            **optimizer_state(self.actor_optimizer, "actor_optimizer"),
            **optimizer_state(self.critic_optimizer, "critic_optimizer"),
            **optimizer_state(self.alpha_optimizer, "alpha_optimizer"),
        })
        if xla:
            self._compile_with_xla()

    def _replica_variables(self) -> list:
        """Every renormalization's running mean and variance, which a replica moves from its own
        batch, and its step counter (alike on every replica, but a dropped update moves none)."""
        return [variable for network in (self.actor, self.q1, self.q2) for layer in network.layers
                if isinstance(layer, BatchRenorm) for variable in (layer.mean, layer.var, layer.steps)]

    def _actor_step(self):
        """Whether this update steps the actor and α: the policy_delay-th, 2·policy_delay-th, ...
        (sb3-contrib's ``n_updates % policy_delay == 0``, counting from 1)."""
        return tf.equal((self.critic_updates + 1) % self.policy_delay, 0)

    # One update, as Learner._step runs it: _gradients_of, then (all gradients finite) _apply_gradients.

    def _gradients_of(self, batch):
        """``(stats, critic grads + actor grads + [α grad])``, all at the current parameters;
        on a critic-only update the actor's and α's gradients are zeros, never applied."""
        shape = tf.shape(batch["action"])
        noise_next, noise_pi = tf.random.normal(shape), tf.random.normal(shape)
        alpha = tf.exp(self.log_alpha)
        with tf.GradientTape() as tape:
            stats = critic_losses(self.actor, self.q1, self.q2, alpha, batch, noise_next)
        critic_grads = tape.gradient(stats["qf_loss"], self.critic_variables)
        actor_variables = [*self.actor.trainable_variables, self.log_alpha]

        def actor_grads():
            with tf.GradientTape(persistent=True) as actor_tape:
                losses = actor_losses(self.actor, self.q1, self.q2, self.log_alpha, batch["obs"],
                                      self.target_entropy, noise_pi)
            grads = actor_tape.gradient(losses["actor_loss"], self.actor.trainable_variables)
            grads.append(actor_tape.gradient(losses["alpha_loss"], self.log_alpha))
            for name, variable in self.last_actor_stats.items():
                variable.assign(losses[name])
            return grads

        grads = tf.cond(self._actor_step(), actor_grads, lambda: [tf.zeros_like(v) for v in actor_variables])
        stats.update({name: tf.identity(v) for name, v in self.last_actor_stats.items()}, alpha=alpha)
        return stats, [*critic_grads, *grads]

    def _apply_gradients(self, grads):
        """One optimizer step of the critics; of the actor and α on an actor update."""
        critic, actor = len(self.critic_variables), len(self.actor.trainable_variables)
        self.critic_optimizer.apply_gradients(zip(grads[:critic], self.critic_variables, strict=True))

        def step_actor():
            self.actor_optimizer.apply_gradients(
                zip(grads[critic:critic + actor], self.actor.trainable_variables, strict=True)
            )
            self.alpha_optimizer.apply_gradients(zip(grads[critic + actor:], [self.log_alpha], strict=True))
            return tf.constant(True)

        tf.cond(self._actor_step(), step_actor, lambda: tf.constant(False))
        self.critic_updates.assign_add(1)

    def _to_tensors(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float32 arrays with actions mapped from the env's bounds into [-1, 1]; unit
        importance weights where the batch has none (uniform replay)."""
        n = len(batch["reward"])
        return {
            "obs": np.asarray(batch["obs"], np.float32).reshape(n, -1),
            "action": to_unit_action(np.asarray(batch["action"], np.float32), self.action_low, self.action_high),
            "reward": np.asarray(batch["reward"], np.float32),
            "next_obs": np.asarray(batch["next_obs"], np.float32).reshape(n, -1),
            "terminated": np.asarray(batch["terminated"], np.float32),
            "discount": np.asarray(batch["discount"], np.float32),
            "weights": np.asarray(batch["weights"], np.float32) if "weights" in batch else np.ones(n, np.float32),
        }
