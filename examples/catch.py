"""Catch (as in DeepMind's bsuite): a small image environment that learns in a minute on a CPU.

A ball falls from a random column of the top row, one row per step; the agent moves a paddle
along the bottom row (0 = left, 1 = stay, 2 = right). When the ball reaches the bottom the
episode ends with reward +1 if the paddle is under it, else -1. Observations are the board as
a ``uint8`` image (255 where the ball and paddle are), so dsac reads them through its conv
encoder and stores them frame by frame::

    python launch.py --algo dqn --env examples.catch:Catch --local --total_env_steps 6000

A random policy scores about -0.6; a learned one +1.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np


class Catch(gym.Env):
    """Catch on a ``rows`` x ``columns`` board (default 10 x 5, the bsuite size)."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, rows: int = 10, columns: int = 5):
        self.rows, self.columns = int(rows), int(columns)
        self.observation_space = gym.spaces.Box(0, 255, (self.rows, self.columns), np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.ball = (0, 0)
        self.paddle = 0

    def _board(self) -> np.ndarray:
        board = np.zeros((self.rows, self.columns), np.uint8)
        board[self.ball] = 255
        board[self.rows - 1, self.paddle] = 255
        return board

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.ball = (0, int(self.np_random.integers(self.columns)))
        self.paddle = self.columns // 2
        return self._board(), {}

    def step(self, action):
        self.paddle = int(np.clip(self.paddle + int(action) - 1, 0, self.columns - 1))
        self.ball = (self.ball[0] + 1, self.ball[1])
        terminated = self.ball[0] == self.rows - 1
        reward = (1.0 if self.paddle == self.ball[1] else -1.0) if terminated else 0.0
        return self._board(), reward, terminated, False, {}
