"""Acting with a saved weights file, anywhere: no Ray, and no TensorFlow for the built-in
networks (a numpy forward pass that matches the TF networks to 1e-5)::

    from dsac import load_policy

    policy = load_policy("runs/x/weights.pkl")
    action = policy(obs)                 # deterministic; policy(obs, explore=True) samples
    actions = policy(batch_of_obs)       # a batch works too

Actions come in the env's action space: scaled to its bounds for SAC, integers for DQN.
"""

from __future__ import annotations

import numpy as np

from dsac.algorithms import get_policy_class
from dsac.artifacts import load_weights
from dsac.config import ALGOS, Config, load_object
from dsac.envs import space_from_description
from dsac.errors import DsacError


class LoadedPolicy:
    """A policy rebuilt from a weights file; call it with one observation or a batch."""

    def __init__(self, payload: dict, path: str, seed: int = 0):
        self.path = path
        self.payload = payload
        self.algo = payload.get("algo")
        if self.algo not in ALGOS:
            raise DsacError(f"weights file {path} is from algorithm {self.algo!r}, which dsac cannot load")
        self.env_id = payload["env"]
        self.env_kwargs = dict(payload.get("env_kwargs") or {})
        self.flatten_obs = bool(payload.get("flatten_obs", False))
        self.observation_space = space_from_description(payload["observation_space"])
        self.action_space = space_from_description(payload["action_space"])
        model = payload.get("model", {})
        keys = ("fcnet_hiddens", "fcnet_activation", "custom_model", "custom_model_config", "dueling",
                "num_atoms", "v_min", "v_max")
        self.config = Config(algo=self.algo, env=self.env_id, **{k: model[k] for k in keys if k in model}).validate()
        policy_class = payload.get("policy_class")
        cls = load_object(policy_class, "policy_class") if policy_class else get_policy_class(self.algo)
        self.policy = cls(self.observation_space, self.action_space, self.config, seed=seed)
        try:
            self.policy.set_weights(payload["weights"])
        except (ValueError, KeyError) as exc:
            raise DsacError(f"weights file {path} does not fit its own network description: {exc}") from None

    def make_env(self, **extra_kwargs):
        """The environment the policy was trained on (flattened as in training)."""
        from dsac.envs import make_env

        return make_env(self.env_id, {**self.env_kwargs, **extra_kwargs}, self.flatten_obs)

    def __call__(self, obs, explore: bool = False):
        obs = np.asarray(obs, dtype=self.observation_space.dtype)
        single = obs.shape == self.observation_space.shape
        actions = self.policy.compute_actions(obs[None] if single else obs, explore=explore)
        return actions[0] if single else actions


def load_policy(path: str, *, algo: str | None = None, seed: int = 0) -> LoadedPolicy:
    """Load ``path`` safely (numpy arrays and builtins only) and rebuild its policy.

    Args:
        algo: if given, refuse a file from another algorithm.
        seed: seed of the exploration noise (``explore=True``).
    """
    payload = load_weights(path)
    if algo is not None and payload.get("algo") != algo:
        raise DsacError(f"weights file {path} is from algorithm {payload.get('algo')!r}, not {algo!r}")
    return LoadedPolicy(payload, path, seed)
