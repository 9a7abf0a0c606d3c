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

from dsac.models.acting_net import ActingNet, ConvEncoder, Custom, Dense, Dueling, Greedy, QValues
from dsac.models.sizes import check_num_atoms
from dsac.models.vision import default_conv_filters
from dsac.policy import BuiltinActingPolicy

# Q-value rows remembered from acting before they are dropped unused (a chunk holds far fewer).
MAX_REMEMBERED_Q = 65_536


def acting_net(obs, action_space, config) -> ActingNet:
    """DQN's Q-network (:func:`dsac.algorithms.dqn.networks.build_q_network`): the conv encoder
    for images, the MLP (every layer activated: the heads read it), dueling heads or ``out``
    (or the custom model), Q(s, ·) (C51: the expectation over the support), the greedy action."""
    model, algorithm = config.model, config.algorithm
    num_actions, atoms = int(action_space.n), int(algorithm.num_atoms)
    layers = []
    if model.custom_model:
        layers.append(Custom("q", num_actions * atoms))
    else:
        if obs.is_image:
            filters = tuple(map(tuple, model.conv_filters or default_conv_filters(obs.shape)))
            layers.append(ConvEncoder("q/", obs.shape, filters, model.conv_activation, obs.input_dtype == "uint8"))
        layers += [Dense(f"q/hidden_{i}", int(n), model.fcnet_activation) for i, n in enumerate(model.fcnet_hiddens)]
        layers.append(Dueling("q/", num_actions, atoms) if algorithm.dueling else Dense("q/out", num_actions * atoms))
    layers.append(QValues(num_actions, c51_support(algorithm)))
    return ActingNet(obs, tuple(layers), Greedy(num_actions, int(action_space.start)))


def c51_support(algorithm) -> np.ndarray | None:
    """C51's fixed atoms z_i, evenly spaced over [v_min, v_max] (of ``algorithm``, the algorithm
    section); None for expected Q."""
    if algorithm.num_atoms <= 1:
        return None
    check_num_atoms(algorithm.num_atoms)  # a settings object that skipped its check makes no huge support
    return np.linspace(algorithm.v_min, algorithm.v_max, algorithm.num_atoms, dtype=np.float32)


def apex_epsilon(worker_index: int, num_workers: int, epsilon: float, alpha: float) -> float:
    """Ape-X's fixed exploration of worker i of N: ε^(1 + α·i/(N−1))."""
    if num_workers <= 1:
        return epsilon
    return float(epsilon ** (1.0 + alpha * worker_index / (num_workers - 1)))


def linear_epsilon(step: int, decay_steps: float, final_epsilon: float, initial_epsilon: float = 1.0) -> float:
    """ε decaying linearly from ``initial_epsilon`` to ``final_epsilon`` over ``decay_steps``."""
    fraction = min(1.0, step / max(decay_steps, 1.0))
    return initial_epsilon + fraction * (final_epsilon - initial_epsilon)


def content_key(observation: np.ndarray) -> bytes:
    """A digest of an observation's bytes (128 bits: collisions do not happen in practice)."""
    return hashlib.blake2b(np.ascontiguousarray(observation).data, digest_size=16).digest()


class DQNPolicy(BuiltinActingPolicy):
    """Double/dueling n-step DQN's ε-greedy actor for flat or image Box observations and
    Discrete actions."""

    _describe = staticmethod(acting_net)

    def __init__(self, observation_space, action_space, config, *, seed=0, worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, seed=seed, worker_index=worker_index,
                         num_workers=num_workers)
        self.algorithm = algorithm = config.algorithm
        self.num_actions = int(action_space.n)
        self.action_start = int(action_space.start)
        # ε of one worker decays over the run's env steps (total_env_steps · exploration_fraction).
        self.decay_steps = algorithm.exploration_fraction * config.run.total_env_steps
        # The run's env-step count as the runner last gave it (set_env_steps), plus the
        # exploring actions taken since: one worker's ε decays along it.
        self.env_steps = 0
        # Image observations: Q(s, ·) of the observations acted on since the last chunk, by
        # content (see postprocess_trajectory).
        self.acted_q: dict[bytes, np.ndarray] = {}
        if config.model.custom_model:
            from dsac.algorithms.dqn.networks import build_q_network
            from dsac.models.keras_forward import KerasForward

            build = functools.partial(build_q_network, dueling=algorithm.dueling, num_atoms=algorithm.num_atoms)
            self.keras_forward = KerasForward(self.obs, self.num_actions, config.model, "q", build=build,
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
        """Q(s, ·) for a batch of observations (the numpy forward pass)."""
        return self._forward(self.obs.batch(obs_batch))

    def compute_actions(self, obs_batch, explore=True):
        """Greedy actions; with ``explore``, each is replaced by a uniform one with prob. ε."""
        q = self._q_values(obs_batch)
        if explore and self.obs.is_image:
            if len(self.acted_q) > MAX_REMEMBERED_Q:  # acting without chunks (compute_single_action)
                self.acted_q.clear()
            self.acted_q.update(zip(map(content_key, obs_batch), q, strict=True))
        actions = self.net.head.act(q, False, self.rng)
        if explore:
            explore_mask = self.rng.random(len(actions)) < self._epsilon()
            uniform = self.action_start + self.rng.integers(0, self.num_actions, len(actions))
            actions = np.where(explore_mask, uniform, actions)
            self.env_steps += len(actions)
        return actions

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
