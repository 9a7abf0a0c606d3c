"""Hindsight experience replay (Andrychowicz et al. 2017), done where whole episodes are: in
the rollout worker, when an episode ends (Ape-X style: the worker does the per-episode work and
sends ready transitions; the replay keeps no episode bookkeeping).

A goal-conditioned env (gymnasium-robotics' API) observes a ``Dict`` with ``observation``,
``achieved_goal`` and ``desired_goal`` and computes rewards for any goals with a vectorized
``compute_reward(achieved_goal, desired_goal, info)``. :class:`GoalObservation` gives the
networks ``observation ++ desired_goal`` as one flat vector and hands the achieved goal over in
``info``; :class:`HindsightRelabeler` stores each finished episode with its real goal and ``k``
copies whose goal is one the episode achieved (``future``: at this step or later; ``final``: at
its end; ``episode``: anywhere in it), rewards recomputed in one call per episode and terminal
flags as the env defines them (``compute_terminated`` where it has one, row by row where it is
not vectorized; else the stored flag).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from dsac.errors import DsacError
from dsac.settings.sections import HER_STRATEGIES as STRATEGIES

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
# Where GoalObservation puts the goal the step achieved.
ACHIEVED_GOAL = "achieved_goal"


def goal_function(env: gym.Env, name: str) -> Callable | None:
    """The env's ``compute_reward`` / ``compute_terminated`` through gymnasium's wrappers, or None."""
    try:
        function = env.get_wrapper_attr(name)
    except AttributeError:
        function = getattr(env.unwrapped, name, None)
    return function if callable(function) else None


def check_goal_env(env_id: str, env: gym.Env) -> None:
    """One line when ``env`` is not goal-conditioned as ``--her`` needs it."""
    space = env.observation_space
    if not isinstance(space, gym.spaces.Dict) or any(key not in space.spaces for key in GOAL_KEYS):
        keys = sorted(space.spaces) if isinstance(space, gym.spaces.Dict) else None
        raise DsacError(f"--her needs a Dict observation with keys {', '.join(GOAL_KEYS)}, but {env_id} has "
                        f"{'keys ' + ', '.join(keys) if keys is not None else space}")
    for key in GOAL_KEYS:
        if not isinstance(space[key], gym.spaces.Box):
            raise DsacError(f"--her needs Box {key} observations, but {env_id} has {space[key]}")
    if space["achieved_goal"].shape != space["desired_goal"].shape:
        raise DsacError(f"--her: {env_id}'s achieved_goal {space['achieved_goal'].shape} and desired_goal "
                        f"{space['desired_goal'].shape} differ in shape")
    if goal_function(env, "compute_reward") is None:
        raise DsacError(f"--her needs the env's compute_reward(achieved_goal, desired_goal, info), which {env_id} "
                        "does not have")


class GoalObservation(gym.Wrapper):
    """A goal-conditioned env as the networks see it: ``observation ++ desired_goal``, flat.
    ``info["achieved_goal"]`` is the goal the step (or reset) reached, flat, which relabeling
    reads; ``compute_reward`` and ``compute_terminated`` stay reachable through the wrapper.
    An env that does not fit is refused in one line naming ``env_id`` (default: its spec's id)."""

    def __init__(self, env: gym.Env, env_id: str | None = None):
        super().__init__(env)
        check_goal_env(env_id or str(env.spec.id if env.spec else env), env)
        obs, goal = env.observation_space["observation"], env.observation_space["desired_goal"]
        dtype = np.result_type(obs.dtype, goal.dtype)
        self.goal_shape = tuple(goal.shape)  # as compute_reward takes a goal (HindsightRelabeler)
        self.observation_space = gym.spaces.Box(
            np.concatenate([obs.low.ravel(), goal.low.ravel()]).astype(dtype),
            np.concatenate([obs.high.ravel(), goal.high.ravel()]).astype(dtype), dtype=dtype)

    def flat(self, obs: dict) -> np.ndarray:
        return np.concatenate([np.ravel(obs["observation"]), np.ravel(obs["desired_goal"])]).astype(
            self.observation_space.dtype)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.flat(obs), {**info, ACHIEVED_GOAL: np.ravel(obs["achieved_goal"])}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.flat(obs), reward, terminated, truncated, {**info, ACHIEVED_GOAL: np.ravel(obs["achieved_goal"])}


class HindsightRelabeler:
    """Turns a finished episode into its transitions plus ``k`` relabeled copies of each.

    Args:
        k: relabeled copies per transition (``--her_k``).
        strategy: where the copies' goals come from (``--her_strategy``): ``future``, ``final``
            or ``episode``.
        goal_shape: the goal's shape as ``compute_reward`` takes it (a batch axis in front); an
            observation's last ``prod(goal_shape)`` entries are its goal.
        seed: seed of the goals' draws.
    """

    def __init__(self, k: int, strategy: str, goal_shape: tuple, seed: int = 0):
        if strategy not in STRATEGIES:
            raise DsacError(f"--her_strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.k, self.strategy = int(k), strategy
        self.goal_shape = tuple(goal_shape)
        self.goal_size = int(np.prod(self.goal_shape))
        self.rng = np.random.default_rng(seed)

    def goal_steps(self, length: int) -> np.ndarray:
        """For each copy (k rows) of each step t (columns): the step whose achieved goal it takes."""
        t = np.arange(length)
        if self.strategy == "final":
            return np.full((self.k, length), length - 1)
        if self.strategy == "episode":
            return self.rng.integers(0, length, size=(self.k, length))
        return t + (self.rng.random((self.k, length)) * (length - t)).astype(np.int64)  # future: t..length-1

    def relabel(self, episode: dict[str, np.ndarray], achieved: np.ndarray, infos: list[dict], env: gym.Env
                ) -> dict[str, np.ndarray]:
        """``episode`` (one-step transitions, flat observations) followed by its ``k`` copies.

        Args:
            achieved: the goal reached after each step, flat, one row per transition.
            infos: each step's ``info`` (``compute_reward`` may read it).
            env: the env the episode ran in, whose ``compute_reward`` (and
                ``compute_terminated``) score the new goals.
        """
        length = len(episode["reward"])
        if self.k == 0 or length == 0:
            return episode
        steps = self.goal_steps(length).reshape(-1)
        source = np.tile(np.arange(length), self.k)
        goals = achieved[steps]
        copies = {key: value[source] for key, value in episode.items()}
        for key in ("obs", "next_obs"):
            copies[key] = copies[key].copy()
            copies[key][:, -self.goal_size:] = goals
        batch = (-1, *self.goal_shape)
        reached, wanted = achieved[source].reshape(batch), goals.reshape(batch)
        info = np.array([infos[i] for i in source], dtype=object)
        rewards = np.asarray(goal_function(env, "compute_reward")(reached, wanted, info), dtype=np.float32)
        if rewards.shape != (len(source),):
            raise DsacError(f"--her: the env's compute_reward gave shape {rewards.shape} for {len(source)} goals: it "
                            "must be vectorized (one reward per row)")
        copies["reward"] = rewards
        compute_terminated = goal_function(env, "compute_terminated")
        if compute_terminated is not None:
            copies["terminated"] = terminated_per_goal(compute_terminated, reached, wanted, info)
        return {key: np.concatenate([episode[key], copies[key]]) for key in episode}


def terminated_per_goal(compute_terminated: Callable, reached: np.ndarray, wanted: np.ndarray,
                        info: np.ndarray) -> np.ndarray:
    """One terminal flag per row of goals. Some envs' ``compute_terminated`` is not vectorized
    (gymnasium-robotics' non-continuing mazes answer a batch with one flag, the distance taken
    over the whole batch): where a batched call does not give one flag per row, each row is
    asked on its own, as the env asks at a step; anything else is refused in one line."""
    n = len(reached)
    terminated = np.asarray(compute_terminated(reached, wanted, info))
    if terminated.shape == (n,):
        return terminated.astype(np.float32)
    rows = [np.asarray(compute_terminated(reached[i], wanted[i], info[i])) for i in range(n)]
    if any(row.size != 1 for row in rows):
        raise DsacError(f"--her: the env's compute_terminated gave shape {terminated.shape} for {n} goals and "
                        f"{rows[0].shape} for one goal: it must give one flag per goal")
    return np.array([row.item() for row in rows], dtype=np.float32)
