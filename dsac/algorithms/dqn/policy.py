"""DQN's acting role (its learning role is :class:`dsac.algorithms.dqn.learner.DQNLearner`).

Acting runs the numpy Q-network, ε-greedy with Ape-X's per-worker ε (one worker: a linear
decay); the evaluator acts greedily. ``postprocess_trajectory`` gives each transition its
initial priority — its |TD error| under the worker's own weights — so new data need not be
guessed at the maximum priority (Ape-X). With image observations the Q-values computed while
acting are remembered by the observation's content and reused for the priorities, which then
cost a forward pass only for observations not acted on yet (a chunk's last next
observations): the conv encoder's forward pass is a worker's largest cost. No TensorFlow
(but for a custom model's Keras forward pass).
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np

from dsac.algorithms.dqn.numpy_q import (
    apex_epsilon,
    c51_support,
    linear_epsilon,
    q_from_head_outputs,
    q_layer_names,
    q_values,
)
from dsac.models.numpy_ops import dense_shapes, encoder_shapes, image_features
from dsac.models.vision import obs_input
from dsac.policy import BuiltinActingPolicy

# Q-value rows remembered from acting before they are dropped unused (a chunk holds far fewer).
MAX_REMEMBERED_Q = 65_536


def content_key(observation: np.ndarray) -> bytes:
    """A digest of an observation's bytes (128 bits: collisions do not happen in practice)."""
    return hashlib.blake2b(np.ascontiguousarray(observation).data, digest_size=16).digest()


class DQNPolicy(BuiltinActingPolicy):
    """Double/dueling n-step DQN's ε-greedy actor for flat or image Box observations and
    Discrete actions."""

    def __init__(self, observation_space, action_space, config, *, seed=0, worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, seed=seed, worker_index=worker_index,
                         num_workers=num_workers)
        self.algorithm, self.model = config.algorithm, config.model
        algorithm = self.algorithm
        self.obs = obs_input(observation_space)
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        self.torso, self.heads = q_layer_names(len(self.model.fcnet_hiddens), algorithm.dueling)
        self.support = c51_support(algorithm)
        # ε of one worker decays over the run's env steps (total_env_steps · exploration_fraction).
        self.decay_steps = algorithm.exploration_fraction * config.run.total_env_steps
        # The run's env-step count as the runner last gave it (set_env_steps), plus the
        # exploring actions taken since: one worker's ε decays along it.
        self.env_steps = 0
        # Image observations: Q(s, ·) of the observations acted on since the last chunk, by
        # content (see postprocess_trajectory).
        self.acted_q: dict[bytes, np.ndarray] = {}
        if self.model.custom_model:
            from dsac.algorithms.dqn.networks import build_q_network
            from dsac.models.keras_forward import KerasForward

            build = functools.partial(build_q_network, dueling=algorithm.dueling, num_atoms=algorithm.num_atoms)
            self.keras_forward = KerasForward(self.obs, self.num_actions, self.model, "q", build=build,
                                              verbose=config.output.verbose)

    def _epsilon(self) -> float:
        """This worker's exploration rate now."""
        a = self.algorithm
        if self.num_workers > 1:
            return apex_epsilon(self.worker_index or 0, self.num_workers, a.epsilon, a.epsilon_alpha)
        return linear_epsilon(self.env_steps, self.decay_steps, a.final_epsilon)

    def set_env_steps(self, env_steps: int) -> None:
        self.env_steps = int(env_steps)

    def _q_values(self, obs_batch) -> np.ndarray:
        """Q(s, ·) for a batch of observations (numpy forward pass, or a custom model's Keras one)."""
        x = self.obs.batch(obs_batch)
        weights = self.get_weights()
        if self.keras_forward is not None:
            return q_from_head_outputs([self.keras_forward(x).reshape(len(x), -1)], self.support)
        if self.obs.is_image:
            x = image_features(weights, "q/", x, self.obs.shape, self.model.conv_filters, self.model.conv_activation)
        return q_values(weights, self.torso, self.heads, x, self.support, self.model.fcnet_activation)

    def compute_actions(self, obs_batch, explore=True):
        """Greedy actions; with ``explore``, each is replaced by a uniform one with prob. ε."""
        q = self._q_values(obs_batch)
        if explore and self.obs.is_image:
            if len(self.acted_q) > MAX_REMEMBERED_Q:  # acting without chunks (compute_single_action)
                self.acted_q.clear()
            self.acted_q.update(zip(map(content_key, obs_batch), q, strict=True))
        greedy = np.argmax(q, axis=1)
        if explore:
            explore_mask = self.rng.random(len(greedy)) < self._epsilon()
            greedy = np.where(explore_mask, self.rng.integers(0, self.num_actions, len(greedy)), greedy)
            self.env_steps += len(greedy)
        return greedy + self.action_start

    def postprocess_trajectory(self, batch):
        """Adds ``priority`` = |y − Q(s, a)| under this policy's weights (online net for both
        terms: workers hold no target network)."""
        if not self.has_weights or len(batch["reward"]) == 0:
            self.acted_q.clear()
            return batch
        n = len(batch["reward"])
        q = self._remembered_q_values(np.concatenate([batch["obs"], batch["next_obs"]]))
        self.acted_q.clear()
        q_sa = q[np.arange(n), np.asarray(batch["action"], np.int64) - self.action_start]
        q_next = q[n:].max(axis=1)
        y = batch["reward"] + batch["discount"] * (1.0 - batch["terminated"]) * q_next
        return {**batch, "priority": np.abs(y - q_sa).astype(np.float32)}

    def _remembered_q_values(self, observations) -> np.ndarray:
        """Q(s, ·) for each observation: for images, the values computed while acting where
        there are some (possibly under the weights of a few pulls ago, as Ape-X's actors'
        priorities are), one forward pass over the distinct others; for vectors, a forward pass."""
        if not self.obs.is_image:
            return self._q_values(observations)
        keys = [content_key(o) for o in observations]
        missing: dict[bytes, int] = {}
        for i, key in enumerate(keys):
            if key not in self.acted_q and key not in missing:
                missing[key] = i
        known = self.acted_q
        if missing:
            known = {**known, **dict(zip(missing, self._q_values(observations[list(missing.values())]), strict=True))}
        return np.stack([known[key] for key in keys])

    def _numpy_weight_shapes(self):
        atoms = int(self.algorithm.num_atoms)
        shapes, features = encoder_shapes(self.obs, self.model, "q/")
        widths = [features, *self.model.fcnet_hiddens]
        shapes.update(dense_shapes(self.torso, widths))
        head_outputs = [atoms, self.num_actions * atoms] if self.algorithm.dueling else [self.num_actions * atoms]
        for head, outputs in zip(self.heads, head_outputs, strict=True):
            shapes.update(dense_shapes([head], [widths[-1], outputs]))
        return shapes
