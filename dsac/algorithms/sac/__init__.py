"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications")."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from dsac.algorithms import LONG_RUN_EVALUATION, Algorithm
from dsac.algorithms.sac.policy import SACPolicy
from dsac.envs.make import require_box_observation
from dsac.errors import DsacError


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space, algo: str = "sac") -> None:
    """A flat or image Box observation and a bounded, flat Box action space (``algo``: whose
    check, for the message)."""
    require_box_observation(env_id, observation_space)
    if isinstance(action_space, gym.spaces.Discrete):
        raise DsacError(
            f"--algo {algo} needs a continuous Box action space, but {env_id} has {action_space} (use --algo dqn)"
        )
    if not (isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1):
        raise DsacError(f"--algo {algo} needs a flat Box action space, but {env_id} has {action_space}")
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise DsacError(f"--algo {algo} needs a bounded action space, but {env_id} has {action_space}")


ALGORITHM = Algorithm(
    name="sac",
    policy_class=SACPolicy,
    learner="dsac.algorithms.sac.learner:SACLearner",
    # Stable-Baselines3 / rl-zoo's settings (lr 1e-3 is rl-zoo's tuned Pendulum value); the
    # networks are dsac's 2x64 (config.py), not SB3's 2x256 (docs/benchmarks.md: the defaults sweep).
    defaults={
        "learner_xla": False, "batches_per_sample": 16,
        "lr": 1e-3, "batch_size": 256, "buffer_size": 1_000_000, "learning_starts": 200,
        "start_steps": 200, "updates_per_step": 1.0, "n_step": 1, "prioritized": False,
        "total_env_steps": 20_000, "fcnet_hiddens": [64, 64], "eval_every": 1_000, "eval_episodes": 10,
    },
    # Large frames (side >= 72, e.g. CarRacing-v3's 96x96x3; the Nature encoder shared by the
    # critics): a conv update's cost grows with the batch, so a batch of 64 keeps most of the
    # samples/s of larger ones at several times their updates/s (benchmarks/atari.py:
    # sac_image_learner_rate; docs/benchmarks.md). One update per 4 env steps (DrQ's one per
    # agent step at an action repeat of 4); SB3's CnnPolicy head (2x256).
    image_defaults={
        "fcnet_hiddens": [256, 256], "lr": 3e-4, "batch_size": 64, "learning_starts": 1_000, "start_steps": 1_000,
        "updates_per_step": 0.25, "total_env_steps": 500_000, "eval_every": 10_000, "eval_episodes": 5,
        # the long-run defaults were measured on flat observations only
        "learner_xla": False, "batches_per_sample": 16,
    },
    # XLA's compile costs seconds at start and pays them back only over a long run; 32 batches
    # per sample call halve the calls of the replay and of the learner's compiled update loop,
    # whose cost is per call; evaluating at SB3's and rl-zoo's cadence (LONG_RUN_EVALUATION)
    # gives the learner the CPU that frequent evaluations took, and which the evaluator's budget
    # thinned to an uneven cadence anyway (docs/benchmarks.md, "Where a run's CPU goes").
    long_run_defaults={"learner_xla": True, "batches_per_sample": 32, **LONG_RUN_EVALUATION},
    check_spaces=check_spaces,
)
