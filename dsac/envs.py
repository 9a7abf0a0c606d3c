"""Making environments and describing their spaces (no Ray, no TensorFlow)."""

from __future__ import annotations

import importlib
import os
import sys

import gymnasium as gym
import numpy as np

from dsac.errors import DsacError, did_you_mean

# Env namespaces that come with a package of their own, and the pip install that brings them.
NAMESPACE_PACKAGES = {"ALE": "ale-py", "MiniGrid": "minigrid", "BabyAI": "minigrid", "MetaWorld": "metaworld"}


def make_env(env_id: str, env_kwargs: dict | None = None, flatten_obs: bool = False) -> gym.Env:
    """Make an environment, turning gymnasium's errors into one-line ones.

    ``env_id`` is a registered gymnasium id, ``module:env-id`` (the module registers it when
    imported), or ``module:ClassName`` (a ``gymnasium.Env`` subclass). ``env_kwargs`` go to
    its constructor (``max_episode_steps`` to gymnasium's time limit); ``flatten_obs`` wraps
    it in ``FlattenObservation`` (Dict, Tuple, Discrete and image observations become a
    flat Box).
    """
    target = resolve_env(env_id)
    try:
        env = gym.make(target, **(env_kwargs or {}))
    except TypeError as exc:
        raise DsacError(f"environment '{env_id}' does not take --env_kwargs {env_kwargs}: {exc}") from None
    except gym.error.DependencyNotInstalled as exc:
        raise DsacError(f"environment '{env_id}' needs an extra that is not installed: {exc}") from None
    except gym.error.NamespaceNotFound as exc:
        namespace = env_id.split("/")[0]
        fix = f": pip install {NAMESPACE_PACKAGES[namespace]}" if namespace in NAMESPACE_PACKAGES else ""
        raise DsacError(f"unknown environment '{env_id}' ({exc}){fix}") from None
    except gym.error.Error as exc:
        hint = did_you_mean(env_id, gym.envs.registry.keys())
        raise DsacError(f"unknown environment '{env_id}'{hint}: {exc}") from None
    except ImportError as exc:
        raise DsacError(f"environment '{env_id}' failed to import: {exc}") from None
    if flatten_obs and not is_flat_box(env.observation_space):
        env = gym.wrappers.FlattenObservation(env)
    return env


def resolve_env(env_id: str):
    """What ``gym.make`` gets for ``env_id``: the id itself, or for ``module:Name`` (after
    importing the module) the registered id ``Name`` or an ``EnvSpec`` of class ``Name``."""
    if ":" not in env_id:
        return env_id
    module_name, name = env_id.split(":", 1)
    module = import_env_module(module_name, env_id)
    obj = getattr(module, name, None)
    if isinstance(obj, type) and issubclass(obj, gym.Env):
        return gym.envs.registration.EnvSpec(id=name, entry_point=obj)
    if name in gym.envs.registry:
        return name
    candidates = [k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, gym.Env)]
    hint = did_you_mean(name, [*candidates, *gym.envs.registry.keys()])
    raise DsacError(
        f"--env {env_id}: module {module_name} has no gymnasium.Env class {name} and registers no env id "
        f"{name}{hint}"
    )


def import_env_module(module_name: str, env_id: str):
    """Import the module of a ``module:Name`` env id, with a one-line error."""
    if os.getcwd() not in sys.path:  # `python launch.py` does not put the current directory on the path
        sys.path.append(os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise DsacError(
            f"--env {env_id}: cannot import module {module_name} ({exc}); it must be importable "
            "(on PYTHONPATH or in the current directory)"
        ) from None


def is_flat_box(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 1


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space, algo: str) -> None:
    """Refuse spaces the algorithm cannot handle, naming the space and what would fit."""
    if not is_flat_box(observation_space):
        raise DsacError(
            f"{env_id} has observation space {observation_space}; dsac needs a flat Box observation: "
            "add --flatten_obs to flatten it"
        )
    if algo == "dqn" and not isinstance(action_space, gym.spaces.Discrete):
        raise DsacError(
            f"--algo dqn needs a Discrete action space, but {env_id} has {action_space} (use --algo sac)"
        )
    if algo == "sac":
        if isinstance(action_space, gym.spaces.Discrete):
            raise DsacError(
                f"--algo sac needs a continuous Box action space, but {env_id} has {action_space} "
                "(use --algo dqn)"
            )
        if not (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1):
            raise DsacError(f"--algo sac needs a flat Box action space, but {env_id} has {action_space}")
        if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
            raise DsacError(f"--algo sac needs a bounded action space, but {env_id} has {action_space}")


def describe_space(space: gym.Space) -> dict:
    """A plain-dict description of a Box or Discrete space (pickle-safe, JSON-safe)."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": space.low.tolist(),
            "high": space.high.tolist(),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    return {"type": type(space).__name__, "repr": repr(space)}


def space_from_description(desc: dict) -> gym.Space:
    """Rebuild a Box or Discrete space from :func:`describe_space`'s output."""
    if desc["type"] == "Box":
        return gym.spaces.Box(
            low=np.asarray(desc["low"], dtype=desc["dtype"]),
            high=np.asarray(desc["high"], dtype=desc["dtype"]),
            dtype=desc["dtype"],
        )
    if desc["type"] == "Discrete":
        return gym.spaces.Discrete(desc["n"], start=desc.get("start", 0))
    raise DsacError(f"cannot rebuild a space of type {desc['type']}")
