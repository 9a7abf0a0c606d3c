"""Making environments and describing their spaces (no Ray, no TensorFlow)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import sys
import time

import gymnasium as gym
import numpy as np

from dsac.envs.atari import FrameSettings, base_env_kwargs, is_atari, register_ale_envs, wrap_atari, wrap_image
from dsac.errors import DsacError, did_you_mean
from dsac.settings.registry import printable

# Env namespaces that come with a package of their own, and the pip install that brings them.
NAMESPACE_PACKAGES = {"ALE": "ale-py", "MiniGrid": "minigrid", "BabyAI": "minigrid", "MetaWorld": "metaworld"}
# The first words of gymnasium-robotics' ids (registered without a namespace), for the install hint.
ROBOTICS_PREFIXES = ("Fetch", "PointMaze", "AntMaze", "HandReach", "HandManipulate", "AdroitHand", "FrankaKitchen")


def make_env(env_id: str, env_kwargs: dict | None = None, flatten_obs: bool = False,
             atari: FrameSettings | None = None, training: bool = False, goal: bool = False) -> gym.Env:
    """Make an environment, turning gymnasium's errors into one-line ones.

    ``env_id`` is a registered gymnasium id, ``module:env-id`` (the module registers it when
    imported), or ``module:ClassName`` (a ``gymnasium.Env`` subclass). ``env_kwargs`` go to
    its constructor (``max_episode_steps`` to gymnasium's time limit); ``flatten_obs`` wraps
    it in ``FlattenObservation`` (Dict, Tuple, Discrete and image observations become a
    flat Box). ``goal``: a goal-conditioned env (``--her``) observed as ``observation ++
    desired_goal`` (:class:`dsac.replay.her.GoalObservation`).

    An ALE (Atari) id gets DeepMind's preprocessing with ``atari``'s settings (default
    :class:`dsac.envs.atari.FrameSettings`); ``training`` adds its training-only parts (life loss
    as an episode end, clipped rewards). See :mod:`dsac.envs.atari`. Another env whose observations
    are large frames (CarRacing-v3's 96x96x3) gets the same resizing, grayscale and frame
    stacking (:func:`dsac.envs.atari.wrap_image`).
    """
    if not isinstance(env_id, str) or not env_id.strip():
        raise DsacError(f"--env must name an environment, got {env_id!r}")
    env_kwargs = dict(env_kwargs or {})
    steps = env_kwargs.get("max_episode_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0):
        raise DsacError(f"--env_kwargs max_episode_steps must be a positive integer, got {steps!r}")
    if ":" not in env_id and env_id not in gym.envs.registry:
        register_ale_envs()  # ALE ids exist once ale_py is imported
        if env_id not in gym.envs.registry:
            register_robotics_envs()  # and gymnasium-robotics' once it is
    target = resolve_env(env_id)
    if is_atari(target):
        register_ale_envs()
        atari = atari or FrameSettings()
        env_kwargs = base_env_kwargs(env_id, env_kwargs, atari)
    env = _gym_make(env_id, target, env_kwargs)
    if is_atari(target):
        env = wrap_atari(env, atari, training)
    else:
        env = wrap_image(env, atari or FrameSettings())
    if goal:
        from dsac.replay.her import GoalObservation

        env = GoalObservation(env, env_id)
    if flatten_obs and not is_flat_box(env.observation_space):
        env = gym.wrappers.FlattenObservation(env)
    return env


def _gym_make(env_id: str, target, env_kwargs: dict) -> gym.Env:
    """``gym.make(target, **env_kwargs)`` with gymnasium's and the env's errors as one line each,
    naming what to install where that is the fix."""
    try:
        env = gym.make(target, **env_kwargs)
    except TypeError as exc:
        raise DsacError(f"environment {env_id!r} does not take --env_kwargs {env_kwargs}: {printable(exc)}") from None
    except gym.error.DependencyNotInstalled as exc:
        raise DsacError(f"environment {env_id!r} needs an extra that is not installed: {printable(exc)}") from None
    except gym.error.NamespaceNotFound as exc:
        namespace = env_id.split("/")[0]
        fix = f": pip install {NAMESPACE_PACKAGES[namespace]}" if namespace in NAMESPACE_PACKAGES else ""
        raise DsacError(f"unknown environment {env_id!r} ({printable(exc)}){fix}") from None
    except gym.error.Error as exc:
        if env_id.startswith(ROBOTICS_PREFIXES) and importlib.util.find_spec("gymnasium_robotics") is None:
            raise DsacError(f"unknown environment {env_id!r}: it is gymnasium-robotics', which is not installed "
                            "(pip install 'dsac[robotics]')") from None
        hint = did_you_mean(env_id, gym.envs.registry.keys())
        raise DsacError(f"unknown environment {env_id!r}{hint}: {printable(exc)}") from None
    except ImportError as exc:
        raise DsacError(f"environment {env_id!r} failed to import: {printable(exc)}") from None
    except Exception as exc:  # the env's own constructor raised: say so in one line
        raise DsacError(f"environment {env_id!r} failed to start: {printable(one_line(exc))}"
                        f"{fetch_mujoco_hint(env_id)}") from None
    return env


def register_robotics_envs() -> None:
    """Register gymnasium-robotics' ids (Fetch, the mazes, the hand) with gymnasium: importing it
    does; a no-op when it is not installed. Its import prints a notice about old Adroit reward
    versions to stderr, which would repeat in every worker's log: it is kept out."""
    if importlib.util.find_spec("gymnasium_robotics") is None:
        return
    with contextlib.redirect_stderr(io.StringIO()):
        importlib.import_module("gymnasium_robotics")


def fetch_mujoco_hint(env_id: str) -> str:
    """Why a gymnasium-robotics Fetch task failed to start, when it is the known cause: its 1.4.2
    release asserts joint types in a way mujoco 3.12 and newer break (requirements-robotics.txt)."""
    if not env_id.split(":")[-1].startswith("Fetch") or "mujoco" not in sys.modules:
        return ""
    version = tuple(int(part) for part in sys.modules["mujoco"].__version__.split(".")[:2] if part.isdigit())
    if version < (3, 12):
        return ""
    return (f" (gymnasium-robotics' Fetch tasks fail with mujoco {sys.modules['mujoco'].__version__}: "
            "pip install 'dsac[robotics]', which pins mujoco 3.11.0)")


class SimulatedCost(gym.Wrapper):
    """Each ``step`` takes at least ``step_ms`` milliseconds of wall time and each ``reset``
    ``reset_ms``, sleeping for whatever the env's own work left: a stand-in for a simulator, a
    robot or a remote service, which a rollout worker waits for without using a core (``launch.py
    --env_step_ms``; ``benchmarks/scale.py``)."""

    def __init__(self, env: gym.Env, step_ms: float = 0.0, reset_ms: float = 0.0):
        super().__init__(env)
        self.step_s, self.reset_s = step_ms / 1000.0, reset_ms / 1000.0

    @staticmethod
    def _wait_until(deadline: float) -> None:
        left = deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def step(self, action):
        started = time.perf_counter()
        out = self.env.step(action)
        self._wait_until(started + self.step_s)
        return out

    def reset(self, **kwargs):
        started = time.perf_counter()
        out = self.env.reset(**kwargs)
        self._wait_until(started + self.reset_s)
        return out


def with_simulated_cost(env: gym.Env, step_ms: float = 0.0, reset_ms: float = 0.0) -> gym.Env:
    """``env`` wrapped in :class:`SimulatedCost` when either time is set, else ``env``."""
    return SimulatedCost(env, step_ms, reset_ms) if step_ms > 0 or reset_ms > 0 else env


def resolve_env(env_id: str):
    """What ``gym.make`` gets for ``env_id``: the id itself, or for ``module:Name`` (after
    importing the module) the registered id ``Name`` or an ``EnvSpec`` of class ``Name``."""
    if ":" not in env_id:
        return env_id
    module_name, name = env_id.split(":", 1)
    if not module_name or not name or not all(part.isidentifier() for part in module_name.split(".")):
        raise DsacError(f"--env {env_id!r}: a custom env is given as module:ClassName or module:env-id")
    module = import_env_module(module_name, env_id)
    obj = getattr(module, name, None)
    if isinstance(obj, type) and issubclass(obj, gym.Env):
        return gym.envs.registration.EnvSpec(id=name, entry_point=obj)
    if name in gym.envs.registry:
        return name
    candidates = [k for k, v in vars(module).items() if isinstance(v, type) and issubclass(v, gym.Env)]
    hint = did_you_mean(name, [*candidates, *gym.envs.registry.keys()])
    raise DsacError(
        f"--env {env_id!r}: module {module_name} has no gymnasium.Env class {name!r} and registers no env id "
        f"{name!r}{hint}"
    )


def import_env_module(module_name: str, env_id: str):
    """Import the module of a ``module:Name`` env id, with a one-line error."""
    if os.getcwd() not in sys.path:  # `python launch.py` does not put the current directory on the path
        sys.path.append(os.getcwd())
    try:
        if module_name == "gymnasium_robotics":
            register_robotics_envs()
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise DsacError(
            f"--env {env_id!r}: cannot import module {module_name} ({printable(exc)}); it must be importable "
            "(on PYTHONPATH or in the current directory)"
        ) from None
    except Exception as exc:  # the module itself raised while being imported
        raise DsacError(f"--env {env_id!r}: importing module {module_name} raised {printable(one_line(exc))}") from None


class EnvCrashed(RuntimeError):
    """An env raised and may not be rebuilt (``--env_restarts`` used up): its message is the
    env's error as :func:`one_line` puts it."""


def env_restart_message(role: str, error: str, number: int, limit: int) -> str:
    """The one log line of an env rebuilt after it raised (``--env_restarts``)."""
    return (f"{role}: its env raised {error}; rebuilt it, the episode dropped "
            f"(env restart {number} of at most {limit} in the run)")


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception raised by user code (an env)."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


# render_mode values that training accepts: a window ("human") would slow collection.
TRAINING_RENDER_MODES = (None, "rgb_array")


def check_training_env_kwargs(env_kwargs: dict) -> None:
    """Refuse env settings that make no sense for training (a window per rollout worker)."""
    mode = env_kwargs.get("render_mode")
    if mode not in TRAINING_RENDER_MODES:
        raise DsacError(
            f"--env_kwargs render_mode {mode!r} is not for training (every rollout worker would draw each step); "
            "train with render_mode null or 'rgb_array', and watch the result with "
            "python -m dsac.infer <weights> --render"
        )


def is_flat_box(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 1


def require_box_observation(env_id: str, observation_space: gym.Space) -> None:
    """Refuse observations that are neither a flat Box nor an image the conv encoder reads
    (see :mod:`dsac.models.vision`), saying what would fit."""
    from dsac.models.vision import image_layout, is_image_shape

    if is_flat_box(observation_space):
        return
    if isinstance(observation_space, gym.spaces.Box) and is_image_shape(observation_space.shape):
        try:
            image_layout(observation_space.shape)
            return
        except DsacError as exc:
            raise DsacError(f"{printable(env_id)}: {exc}") from None
    raise DsacError(
        f"{printable(env_id)} has observation space {observation_space}; dsac needs a Box observation (flat, or an "
        "image): add --flatten_obs to flatten it"
    )


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


BOX_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
              "uint64", "bool")


def _survives_cast(values: np.ndarray, dtype: str) -> bool:
    """Whether float ``values`` keep their value as ``dtype`` (2**63 passes a comparison with
    int64's maximum as a float, then wraps)."""
    with np.errstate(all="ignore"):
        return bool((values.astype(dtype).astype(np.float64) == values).all())


def space_from_description(desc) -> gym.Space:
    """Rebuild a Box or Discrete space from :func:`describe_space`'s output (read from a
    file: every field's type and size is checked first)."""
    if not isinstance(desc, dict) or desc.get("type") not in ("Box", "Discrete"):
        kind = desc.get("type") if isinstance(desc, dict) else type(desc).__name__
        raise DsacError(f"cannot rebuild a space of type {kind!r}")
    if desc["type"] == "Discrete":
        n, start = desc.get("n"), desc.get("start", 0)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (n, start)) or not 0 < n < 2**31 \
                or abs(start) >= 2**31:
            raise DsacError(f"a Discrete space needs 0 < n < 2^31 and an integer start, got n={n!r} start={start!r}")
        return gym.spaces.Discrete(n, start=start)
    shape, dtype, low, high = (desc.get(k) for k in ("shape", "dtype", "low", "high"))
    if not (isinstance(shape, list) and len(shape) <= 32
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise DsacError(f"a Box space needs a shape of sizes >= 0, got {shape!r}")
    if dtype not in BOX_DTYPES:
        raise DsacError(f"a Box space's dtype must be one of {', '.join(BOX_DTYPES)}, got {dtype!r}")
    bounds = []
    for name, value in (("low", low), ("high", high)):
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise DsacError(f"a Box space's {name} must be numbers, got {printable(str(value)[:80])}") from None
        if array.shape != tuple(shape):
            raise DsacError(f"a Box space's {name} has shape {array.shape}, not its shape {tuple(shape)}")
        kind = np.dtype(dtype).kind
        info = np.iinfo(dtype) if kind in "iu" else np.finfo(dtype) if kind == "f" else None
        finite = array[np.isfinite(array)]
        if np.isnan(array).any() or (kind in "iub" and len(finite) < array.size) \
                or (info is not None and len(finite) and (finite.min() < info.min or finite.max() > info.max)) \
                or (kind in "iu" and not _survives_cast(finite, dtype)):
            raise DsacError(f"a Box space's {name} holds NaN or a bound outside its dtype {dtype}")
        bounds.append(array)
    if (bounds[0] > bounds[1]).any():
        raise DsacError("a Box space's low is above its high")
    try:
        return gym.spaces.Box(low=bounds[0].astype(dtype), high=bounds[1].astype(dtype), dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. an integer bound outside its dtype
        raise DsacError(f"a Box space's bounds do not make a gymnasium Box ({printable(str(exc)[:120])})") from None
