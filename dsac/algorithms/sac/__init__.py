"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications")."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from dsac.algorithms import Algorithm
from dsac.algorithms.sac.policy import SACPolicy
from dsac.envs import require_box_observation
from dsac.errors import DsacError


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> None:
    """A flat or image Box observation and a bounded, flat Box action space."""
    require_box_observation(env_id, observation_space)
    if isinstance(action_space, gym.spaces.Discrete):
        raise DsacError(
            f"--algo sac needs a continuous Box action space, but {env_id} has {action_space} (use --algo dqn)"
        )
    if not (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1):
        raise DsacError(f"--algo sac needs a flat Box action space, but {env_id} has {action_space}")
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise DsacError(f"--algo sac needs a bounded action space, but {env_id} has {action_space}")


ALGORITHM = Algorithm(
    name="sac",
    policy_class=SACPolicy,
    # Stable-Baselines3 / rl-zoo's settings (lr 1e-3 is rl-zoo's tuned Pendulum value); the
    # networks are dsac's 2x64 (config.py), not SB3's 2x256 (README: the defaults sweep).
    defaults={
        "lr": 1e-3, "batch_size": 256, "buffer_size": 1_000_000, "learning_starts": 200,
        "start_steps": 200, "updates_per_step": 1.0, "n_step": 1, "prioritized": False,
        "total_env_steps": 20_000, "fcnet_hiddens": [64, 64], "eval_every": 1_000, "eval_episodes": 10,
        "target_update_every": 100,  # unused: SAC's targets are polyak averages (--tau)
    },
    check_spaces=check_spaces,
    serving="dsac.algorithms.sac.serving:serving",
)
