"""SAC's update (Haarnoja et al. 2018, v2): twin Q with polyak targets, a tanh-squashed
Gaussian actor with the log-prob correction, and automatic entropy tuning.

The math reads top to bottom in :func:`sac_losses`, with the paper's quantities as names.
The noise is an argument, so the losses are a pure function that tests check by hand.
Actions inside the learner live in [-1, 1]; replay stores them in the env's bounds.

Image observations go through a conv encoder φ(s) that only the critics' loss trains; the
actor reads φ(s) without sending gradients back, and the target critics read a polyak copy
of it (SAC-AE, Yarats et al. 2019; DrQ, Kostrikov et al. 2020).

One update, from :meth:`dsac.runtime.learning.UpdateLoop.step`: ``SACLearner.learn_on_batches`` runs
the base's compiled loop (:mod:`dsac.algorithms.learner`), whose ``_step`` calls
:meth:`SACLearner._gradients_of` (noise, :func:`sac_losses`, gradients) and, when every gradient
is finite, :meth:`SACLearner._apply_gradients` (optimizer steps, Polyak averaging) — both below.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from dsac.algorithms.learner import ADAM_EPSILON, Learner
from dsac.algorithms.sac.networks import FEATURE_DIM, build_acting_network, build_critic, build_encoder
from dsac.models.acting_net import LOG_STD_MAX, LOG_STD_MIN, to_unit_action
from dsac.models.vision import obs_input
from dsac.weights import TensorFlowVariables, named_variables, optimizer_state

LOG_2 = math.log(2.0)
LOG_2PI = math.log(2.0 * math.pi)


def squashed_gaussian_sample(actor, obs, noise):
    """Reparameterized ã = tanh(μ + σ·ε) and log π(ã|s), with the tanh change of variables
    log π(ã|s) = log N(u; μ, σ) − Σ log(1 − tanh(u)²), written stably as
    log(1 − tanh(u)²) = 2·(log 2 − u − softplus(−2u))."""
    mean, log_std = tf.split(actor(obs), 2, axis=-1)
    log_std = tf.clip_by_value(log_std, LOG_STD_MIN, LOG_STD_MAX)
    u = mean + tf.exp(log_std) * noise
    action = tf.tanh(u)
    gaussian_log_prob = tf.reduce_sum(-0.5 * tf.square(noise) - log_std - 0.5 * LOG_2PI, axis=-1)
    log_det_jacobian = tf.reduce_sum(2.0 * (LOG_2 - u - tf.nn.softplus(-2.0 * u)), axis=-1)
    return action, gaussian_log_prob - log_det_jacobian


def sac_losses(actor, q1, q2, q1_target, q2_target, log_alpha, batch, target_entropy, noise_next, noise_pi,
               encoder=None, encoder_target=None):
    """The three SAC objectives on one batch; returns a dict of tensors (scalars, and
    ``td_abs`` per transition). ``batch["discount"]`` is γ^k of the stored (n-step)
    transition; ``batch["weights"]`` are importance weights (ones without prioritized replay).
    With ``encoder`` (images) the networks read φ(s) = encoder(s) instead of s, the targets
    φ_targ(s') = encoder_target(s'), and only the critics' loss reaches the encoder."""
    obs, action, reward = batch["obs"], batch["action"], batch["reward"]
    next_obs, terminated, discount = batch["next_obs"], batch["terminated"], batch["discount"]
    alpha = tf.exp(log_alpha)
    phi = encoder(obs) if encoder is not None else obs
    phi_next = tf.stop_gradient(encoder(next_obs)) if encoder is not None else next_obs
    phi_next_target = encoder_target(next_obs) if encoder is not None else next_obs

    # Critics: J_Q = E[½ w (Q_i(s,a) − y)²],  y = r + γ(1 − d)(min_j Q_targ_j(s',a') − α log π(a'|s'))
    next_action, next_log_pi = squashed_gaussian_sample(actor, phi_next, noise_next)
    next_obs_action = tf.concat([phi_next_target, next_action], axis=-1)
    min_qf_next_target = (
        tf.minimum(q1_target(next_obs_action), q2_target(next_obs_action))[:, 0] - alpha * next_log_pi
    )
    next_q_value = tf.stop_gradient(reward + discount * (1.0 - terminated) * min_qf_next_target)
    obs_action = tf.concat([phi, action], axis=-1)
    qf1_a_values = q1(obs_action)[:, 0]
    qf2_a_values = q2(obs_action)[:, 0]
    qf1_loss = 0.5 * tf.reduce_mean(batch["weights"] * tf.square(qf1_a_values - next_q_value))
    qf2_loss = 0.5 * tf.reduce_mean(batch["weights"] * tf.square(qf2_a_values - next_q_value))

    # Actor: J_π = E[α log π(ã|s) − min_j Q_j(s, ã)],  ã ~ π(·|s) reparameterized
    phi_actor = tf.stop_gradient(phi)  # the actor's loss does not train the encoder
    pi, log_pi = squashed_gaussian_sample(actor, phi_actor, noise_pi)
    obs_pi = tf.concat([phi_actor, pi], axis=-1)
    min_qf_pi = tf.minimum(q1(obs_pi), q2(obs_pi))[:, 0]
    actor_loss = tf.reduce_mean(tf.stop_gradient(alpha) * log_pi - min_qf_pi)

    # Temperature: J(α) = E[−α (log π(ã|s) + H̄)], optimized through log α
    alpha_loss = -tf.reduce_mean(log_alpha * tf.stop_gradient(log_pi + target_entropy))

    return {
        "qf1_loss": qf1_loss,
        "qf2_loss": qf2_loss,
        "qf_loss": qf1_loss + qf2_loss,
        "actor_loss": actor_loss,
        "alpha_loss": alpha_loss,
        "alpha": alpha,
        "entropy": -tf.reduce_mean(log_pi),
        "q_mean": tf.reduce_mean(qf1_a_values),
        "td_abs": 0.5 * (tf.abs(qf1_a_values - next_q_value) + tf.abs(qf2_a_values - next_q_value)),
    }


class SACLearner(Learner):
    """SAC's learning role: networks, optimizers and the compiled update (:class:`Learner`).

    Args:
        observation_space: the env's (flat or image Box; images get an encoder).
        action_space: the env's bounded Box (replay stores env-space actions).
        algorithm: the algorithm section (:class:`dsac.algorithms.sac.config.SACSettings`: gamma,
            tau, init_alpha, target_entropy).
        model: the model section (:class:`dsac.settings.sections.ModelSettings`).
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
        self.obs = obs = obs_input(observation_space)
        act_dim = int(np.prod(action_space.shape))
        self.acting, self.actor, self.encoder = build_acting_network(obs, act_dim, model)
        features = FEATURE_DIM if obs.is_image else obs.flat_dim
        self.q1 = build_critic(features, act_dim, model, "q1")
        self.q2 = build_critic(features, act_dim, model, "q2")
        self.q1_target = build_critic(features, act_dim, model, "q1_target")
        self.q2_target = build_critic(features, act_dim, model, "q2_target")
        self.q1_target.set_weights(self.q1.get_weights())
        self.q2_target.set_weights(self.q2.get_weights())
        self.targets = [(self.q1_target, self.q1), (self.q2_target, self.q2)]
        self.encoder_target = None
        if self.encoder is not None:
            self.encoder_target = build_encoder(obs, model, "encoder_target")
            self.encoder_target.set_weights(self.encoder.get_weights())
            self.targets.append((self.encoder_target, self.encoder))
        self.log_alpha = keras.Variable(math.log(algorithm.init_alpha), dtype="float32", name="log_alpha")

        self.gamma = float(algorithm.gamma)
        self.tau = float(algorithm.tau)
        self.target_entropy = float(
            -act_dim if algorithm.target_entropy is None else algorithm.target_entropy
        )
        self.action_low = np.asarray(action_space.low, np.float32)
        self.action_high = np.asarray(action_space.high, np.float32)

        self.critic_variables = self.q1.trainable_variables + self.q2.trainable_variables
        if self.encoder is not None:  # trained by the critics' loss only
            self.critic_variables = self.critic_variables + self.encoder.trainable_variables
        rate = learning_rate  # a number, or a schedule each optimizer steps by its own count
        self.actor_optimizer = keras.optimizers.Adam(rate, epsilon=ADAM_EPSILON)
        self.critic_optimizer = keras.optimizers.Adam(rate, epsilon=ADAM_EPSILON)
        self.alpha_optimizer = keras.optimizers.Adam(rate, epsilon=ADAM_EPSILON)
        self.actor_optimizer.build(self.actor.trainable_variables)
        self.critic_optimizer.build(self.critic_variables)
        self.alpha_optimizer.build([self.log_alpha])
        self._name_variables()
        if xla:
            self._compile_with_xla()

    def _name_variables(self) -> None:
        """The acting weights (encoder, actor) and the full state, by name."""
        encoders = {}
        if self.encoder is not None:
            encoders = {**named_variables(self.encoder, "encoder"),
                        **named_variables(self.encoder_target, "encoder_target")}
        self.acting_weights = TensorFlowVariables({
            **(named_variables(self.encoder, "encoder") if self.encoder is not None else {}),
            **named_variables(self.actor, "actor"),
        })
        self.state = TensorFlowVariables({
            **{n: v for n, v in zip(self.acting_weights.names, self.acting_weights.variables, strict=True)},
            **named_variables(self.q1, "q1"), **named_variables(self.q2, "q2"),
            **named_variables(self.q1_target, "q1_target"), **named_variables(self.q2_target, "q2_target"),
            **encoders,
            "log_alpha": self.log_alpha,
            **optimizer_state(self.actor_optimizer, "actor_optimizer"),
            **optimizer_state(self.critic_optimizer, "critic_optimizer"),
            **optimizer_state(self.alpha_optimizer, "alpha_optimizer"),
        })

    # One update, as Learner._step runs it: _gradients_of, then (all gradients finite) _apply_gradients.

    def _gradients_of(self, batch):
        """The three objectives' gradients, all at the current parameters (as RLlib's SAC):
        ``(stats, critic grads + actor grads + [α grad])``."""
        shape = tf.shape(batch["action"])
        noise_next = tf.random.normal(shape)
        noise_pi = tf.random.normal(shape)
        with tf.GradientTape(persistent=True) as tape:
            stats = sac_losses(
                self.actor, self.q1, self.q2, self.q1_target, self.q2_target, self.log_alpha,
                batch, self.target_entropy, noise_next, noise_pi, self.encoder, self.encoder_target,
            )
        critic_grads = tape.gradient(stats["qf_loss"], self.critic_variables)
        actor_grads = tape.gradient(stats["actor_loss"], self.actor.trainable_variables)
        alpha_grads = tape.gradient(stats["alpha_loss"], [self.log_alpha])
        del tape
        return stats, [*critic_grads, *actor_grads, *alpha_grads]

    def _apply_gradients(self, grads):
        """One optimizer step of critics, actor and α, then the target update."""
        critic, actor = len(self.critic_variables), len(self.actor.trainable_variables)
        self.critic_optimizer.apply_gradients(zip(grads[:critic], self.critic_variables, strict=True))
        self.actor_optimizer.apply_gradients(
            zip(grads[critic:critic + actor], self.actor.trainable_variables, strict=True)
        )
        self.alpha_optimizer.apply_gradients(zip(grads[critic + actor:], [self.log_alpha], strict=True))
        # Polyak averaging: θ_targ ← (1 − τ) θ_targ + τ θ (critics, and the encoder for images)
        for target, source in self.targets:
            for t, s in zip(target.weights, source.weights, strict=True):
                t.assign((1.0 - self.tau) * t + self.tau * s)

    def _reset_targets(self) -> None:
        """φ_targ ← φ for images (the acting weights hold the encoder); the critics are not
        acting weights, and their targets already equal them until the first update."""
        if self.encoder_target is not None:
            self.encoder_target.set_weights(self.encoder.get_weights())

    def _to_tensors(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float32 arrays with actions mapped from the env's bounds into [-1, 1]; unit
        importance weights where the batch has none (uniform replay). Every transition carries
        its ``discount`` (:data:`dsac.replay.buffer.FIELDS`), as DQN's ``_to_tensors`` expects too."""
        n = len(batch["reward"])
        return {
            "obs": self.obs.batch(batch["obs"]),
            "action": to_unit_action(np.asarray(batch["action"], np.float32), self.action_low, self.action_high),
            "reward": np.asarray(batch["reward"], np.float32),
            "next_obs": self.obs.batch(batch["next_obs"]),
            "terminated": np.asarray(batch["terminated"], np.float32),
            "discount": np.asarray(batch["discount"], np.float32),
            "weights": np.asarray(batch["weights"], np.float32) if "weights" in batch else np.ones(n, np.float32),
        }
