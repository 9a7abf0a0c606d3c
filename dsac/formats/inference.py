"""Acting with a saved weights file, anywhere: no Ray, and no TensorFlow for the built-in
networks (a numpy forward pass that matches the TF networks to 1e-5)::

    from dsac import load_policy

    policy = load_policy("runs/x/weights.pkl")
    action = policy(obs)                 # deterministic; policy(obs, explore=True) samples
    actions = policy(batch_of_obs)       # a batch works too

Actions come in the env's action space: scaled to its bounds for SAC, integers for DQN.
"""

from __future__ import annotations

import math

import numpy as np

from dsac.config import MODEL_KEYS, Config
from dsac.envs.atari import FrameSettings
from dsac.envs.make import space_from_description
from dsac.errors import DsacError
from dsac.formats.files import code_names, load_weights
from dsac.models.sizes import check_network_size
from dsac.policy import Policy, check_policy_weights
from dsac.runtime import build
from dsac.settings.registry import ALGOS, algorithm, load_subclass, refuse_untrusted_code


class LoadedPolicy:
    """A policy rebuilt from a weights file; call it with one observation or a batch.

    Args:
        payload: what :func:`dsac.formats.files.load_weights` read from ``path``.
        trust_code: import the modules the file names (its env, policy class, custom model);
            without it a file that names any is refused.
    """

    def __init__(self, payload: dict, path: str, seed: int = 0, trust_code: bool = False):
        self.path = path
        self.payload = payload
        self.algo = payload.get("algo")
        if self.algo not in ALGOS:
            raise DsacError(f"weights file {path} is from algorithm {self.algo!r}, which dsac cannot load")
        model = payload.get("model") or {}
        named = code_names(payload)
        if not trust_code:
            refuse_untrusted_code(named, f"weights file {path}")
        self.env_id = payload["env"]
        self.env_kwargs = dict(payload.get("env_kwargs") or {})
        self.flatten_obs = bool(payload.get("flatten_obs", False))
        # --her: the env observes a goal Dict; the networks, observation ++ desired_goal
        self.goal = bool(payload.get("her", False))
        try:
            self.atari = FrameSettings.from_dict(payload.get("atari") or {})
            self.observation_space = space_from_description(payload["observation_space"])
            self.action_space = space_from_description(payload["action_space"])
            spec = algorithm(self.algo)
            keys = (*MODEL_KEYS, *spec.model_keys)
            settings = {k: model[k] for k in keys if k in model}
            self.config = Config(algo=self.algo, env=self.env_id, **settings).validate()
            if named["policy_class"]:
                cls = load_subclass(named["policy_class"], Policy, "policy_class")
            else:
                spec.check_spaces(repr(self.env_id), self.observation_space, self.action_space)  # a name from the file
                cls = spec.policy_class
            # the sizes the file names, checked before a network of them is built
            check_network_size(self.config.model, self.config.algorithm, self.observation_space, self.action_space)
        except DsacError as exc:
            raise DsacError(f"weights file {path}: {exc}") from None
        try:
            self.policy = build.acting_policy(self.config, self.observation_space, self.action_space, seed, cls=cls)
            check_policy_weights(self.policy, payload["weights"])
            self.policy.set_weights(payload["weights"])
        except (ValueError, KeyError, TypeError) as exc:
            raise DsacError(f"weights file {path} does not fit its own network description: {exc}") from None

    def make_env(self, **extra_kwargs):
        """The environment the policy was trained on, preprocessed as in training (flattened,
        Atari frames), without training-only parts: its rewards are the env's own."""
        from dsac.envs.make import make_env

        return make_env(self.env_id, {**self.env_kwargs, **extra_kwargs}, self.flatten_obs, self.atari,
                        goal=self.goal)

    def goal_spaces(self) -> dict | None:
        """A ``--her`` policy's goal ``Dict`` as its env observes it (the env is made once to
        read it: its key -> Box), or None for any other policy."""
        if not self.goal:
            return None
        from dsac.envs.make import make_env
        from dsac.replay.her import check_goal_env

        env = make_env(self.env_id, self.env_kwargs, False, self.atari)
        try:
            try:  # the file says her: true, which its env must bear out
                check_goal_env(repr(self.env_id), env)
            except DsacError as exc:
                raise DsacError(f"weights file {self.path} has her: true, which its env does not bear out: "
                                f"{exc}") from None
            spaces = dict(env.observation_space.spaces)
        finally:
            env.close()
        values = sum(math.prod(spaces[key].shape) for key in ("observation", "desired_goal"))
        if values != math.prod(self.observation_space.shape):
            raise DsacError(f"weights file {self.path} has her: true, but {self.env_id!r}'s observation and "
                            f"desired_goal hold {values} values, not the {math.prod(self.observation_space.shape)} "
                            "its network reads")
        return spaces

    def __call__(self, obs, explore: bool = False):
        if self.goal and isinstance(obs, dict):  # a goal Dict as the env gives it (one or a batch)
            obs = goal_vector(obs)
        obs = np.asarray(obs, dtype=self.observation_space.dtype)
        single = obs.shape == self.observation_space.shape
        actions = self.policy.compute_actions(obs[None] if single else obs, explore=explore)
        return actions[0] if single else actions


def goal_vector(obs: dict) -> np.ndarray:
    """``observation ++ desired_goal`` of a goal Dict observation, or of a batch of them (each
    key's array with a leading batch axis), as :class:`dsac.replay.her.GoalObservation` gives it."""
    observation, goal = np.asarray(obs["observation"]), np.asarray(obs["desired_goal"])
    if observation.ndim > 1 and goal.ndim > 1 and len(observation) == len(goal):
        return np.concatenate([observation.reshape(len(observation), -1), goal.reshape(len(goal), -1)], axis=1)
    return np.concatenate([observation.ravel(), goal.ravel()])


def load_policy(path: str, *, algo: str | None = None, seed: int = 0, trust_code: bool = False) -> LoadedPolicy:
    """Load ``path`` safely (no globals: plain values and checked arrays only), check every
    array against the network the file describes, and rebuild its policy.

    Args:
        algo: if given, refuse a file from another algorithm.
        seed: seed of the exploration noise (``explore=True``).
        trust_code: allow importing the modules the file names (an env given as
            ``module:Name``, a ``policy_class``, a ``module:builder`` custom model). Without
            it such a file is refused with a :class:`DsacError` naming the module.

    Raises:
        DsacError: one line naming the file and the problem.
    """
    payload = load_weights(path)
    if algo is not None and payload.get("algo") != algo:
        raise DsacError(f"weights file {path} is from algorithm {payload.get('algo')!r}, not {algo!r}")
    return LoadedPolicy(payload, path, seed, trust_code)
