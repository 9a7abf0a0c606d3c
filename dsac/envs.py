"""Making environments and describing their spaces (no Ray, no TensorFlow)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from dsac.errors import DsacError, did_you_mean


def make_env(env_id: str, env_kwargs: dict | None = None) -> gym.Env:
    """Make a registered gymnasium env (with ``env_kwargs`` for its constructor), turning
    gymnasium's errors into one-line ones."""
    try:
        return gym.make(env_id, **(env_kwargs or {}))
    except TypeError as exc:
        raise DsacError(f"environment '{env_id}' does not take --env_kwargs {env_kwargs}: {exc}") from None
    except gym.error.DependencyNotInstalled as exc:
        raise DsacError(f"environment '{env_id}' needs an extra that is not installed: {exc}") from None
    except gym.error.Error as exc:
        hint = did_you_mean(env_id, gym.envs.registry.keys())
        raise DsacError(f"unknown environment '{env_id}'{hint}: {exc}") from None
    except ImportError as exc:
        raise DsacError(f"environment '{env_id}' failed to import: {exc}") from None


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space, algo: str) -> None:
    """Refuse spaces the algorithm cannot handle, naming the space and what would fit."""
    if not (isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1):
        raise DsacError(
            f"{env_id} has observation space {observation_space}; dsac needs a flat Box observation"
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
