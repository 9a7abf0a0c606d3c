import gymnasium as gym
import numpy as np


class ScaledPendulum(gym.ObservationWrapper):
    """Pendulum as raw sensor readings: observations x1000, offset."""

    def __init__(self, scale=1000.0, offset=(5000.0, -3000.0, 200.0)):
        super().__init__(gym.make("Pendulum-v1"))
        self.scale, self.offset = float(scale), np.asarray(offset, np.float32)
        low, high = self.env.observation_space.low, self.env.observation_space.high
        self.observation_space = gym.spaces.Box(low * self.scale + self.offset, high * self.scale + self.offset,
                                                dtype=np.float32)

    def observation(self, obs):
        return (obs * self.scale + self.offset).astype(np.float32)
