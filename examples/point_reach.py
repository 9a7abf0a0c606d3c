"""Point reach: a continuous goal-conditioned task in the shape of gymnasium-robotics' FetchReach,
small enough to learn in a minute on a CPU. A point in the square [-1, 1]^2 moves by up to 0.1
per step along each axis (a ``Box(-1, 1, (2,))`` action); the goal is another point; the reward
is -1 on every step that ends farther than 0.05 from the goal and 0 on those that end within it
(the sparse reward of the Fetch tasks). An episode lasts 50 steps and does not end at the goal::

    python launch.py --algo sac --env examples.point_reach:PointReach --her --local --total_env_steps 8000

``compute_reward`` / ``compute_terminated`` are vectorized, ``info["is_success"]`` says whether
the last step ended within reach.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np

REACH = 0.05


class PointReach(gym.Env):
    """A point to move within ``REACH`` of a goal in the square, ``max_steps`` (50) steps an episode."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, max_steps: int = 50):
        self.max_steps = int(max_steps)
        square = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = gym.spaces.Dict({"observation": square, "achieved_goal": square,
                                                  "desired_goal": square})
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.position = np.zeros(2, np.float32)
        self.goal = np.zeros(2, np.float32)
        self.steps = 0

    def _obs(self) -> dict:
        return {"observation": self.position.copy(), "achieved_goal": self.position.copy(),
                "desired_goal": self.goal.copy()}

    def compute_reward(self, achieved_goal, desired_goal, info):
        """0 within reach of the goal, else -1 (any leading batch axes)."""
        distance = np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)
        return -(distance > REACH).astype(np.float32)

    def compute_terminated(self, achieved_goal, desired_goal, info):
        """Never: the episode runs its 50 steps, as FetchReach's does."""
        return np.zeros(np.shape(achieved_goal)[:-1], dtype=bool)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self.goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        move = 0.1 * np.clip(np.asarray(action, np.float32), -1.0, 1.0)
        self.position = np.clip(self.position + move, -1.0, 1.0).astype(np.float32)
        self.steps += 1
        reward = float(self.compute_reward(self.position, self.goal, None))
        return self._obs(), reward, False, self.steps >= self.max_steps, {"is_success": reward == 0.0}
