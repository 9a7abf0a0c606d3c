"""Bit flipping (Andrychowicz et al. 2017, section 3.1): the goal-conditioned task that shows why
hindsight relabeling matters. The state is ``n`` bits, the goal another ``n`` bits; each action
flips one bit; the reward is -1 on every step whose resulting state is not the goal and 0 on the
one that reaches it, which ends the episode. An episode lasts at most ``n`` steps. A random
policy almost never meets a goal for ``n`` beyond ~10, so without relabeling every reward is -1
and nothing is learned; with it, every episode teaches the goals it happened to reach::

    python launch.py --algo dqn --env examples.bit_flipping:BitFlipping --env_kwargs '{"n": 15}' --her --local

The observation is gymnasium-robotics' goal ``Dict`` (``observation``, ``achieved_goal``,
``desired_goal``) and ``compute_reward`` / ``compute_terminated`` are vectorized, as theirs are.
``info["is_success"]`` says whether the goal was reached.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np


class BitFlipping(gym.Env):
    """``n`` bits to flip to a goal, one per step, within ``n`` steps (``max_steps`` to change it)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, n: int = 10, max_steps: int | None = None):
        self.n = int(n)
        self.max_steps = int(max_steps or n)
        bits = gym.spaces.Box(0.0, 1.0, (self.n,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": bits, "achieved_goal": bits, "desired_goal": bits})
        self.action_space = gym.spaces.Discrete(self.n)
        self.state = np.zeros(self.n, np.float32)
        self.goal = np.zeros(self.n, np.float32)
        self.steps = 0

    def _obs(self) -> dict:
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(), "desired_goal": self.goal.copy()}

    def compute_reward(self, achieved_goal, desired_goal, info):
        """0 where the achieved goal is the desired one, else -1 (any leading batch axes)."""
        return -np.any(np.asarray(achieved_goal) != np.asarray(desired_goal), axis=-1).astype(np.float32)

    def compute_terminated(self, achieved_goal, desired_goal, info):
        """An episode ends when its goal is reached."""
        return np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.n).astype(np.float32)
        self.goal = self.np_random.integers(0, 2, self.n).astype(np.float32)
        while np.array_equal(self.state, self.goal):  # an episode has something to do
            self.goal = self.np_random.integers(0, 2, self.n).astype(np.float32)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.state[int(action)] = 1.0 - self.state[int(action)]
        self.steps += 1
        reward = float(self.compute_reward(self.state, self.goal, None))
        terminated = bool(self.compute_terminated(self.state, self.goal, None))
        truncated = self.steps >= self.max_steps and not terminated
        return self._obs(), reward, terminated, truncated, {"is_success": terminated}
