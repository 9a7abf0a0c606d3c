"""CrossQ (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity"): SAC's actor and entropy tuning, critics with batch
renormalization and no target networks, the actor updated every few critic updates."""

from __future__ import annotations

import gymnasium as gym

from dsac.algorithms import LONG_RUN_EVALUATION, Algorithm
from dsac.algorithms.crossq.policy import CrossQPolicy
from dsac.algorithms.sac import check_spaces as check_sac_spaces
from dsac.envs.make import is_flat_box
from dsac.errors import DsacError


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> None:
    """A flat Box observation and a bounded, flat Box action space."""
    if not is_flat_box(observation_space):
        raise DsacError(
            f"--algo crossq needs a flat Box observation, but {env_id} has {observation_space} "
            "(--flatten_obs flattens a Dict or Tuple; for images use --algo sac)"
        )
    check_sac_spaces(env_id, observation_space, action_space, algo="crossq")


ALGORITHM = Algorithm(
    name="crossq",
    policy_class=CrossQPolicy,
    learner="dsac.algorithms.crossq.learner:CrossQLearner",
    # sb3-contrib's and rl-zoo's settings (lr 1e-3, batch 256, one update per env step, the
    # actor every 3rd, Adam's beta_1 0.5) but the networks' widths, which cost updates per second
    # on a CPU: 2x128 critics make ~2x the updates of 2x256 and learned Ant-v5 as well per env
    # step (docs/benchmarks.md#crossq-network-width); XLA, 1.4-2x the updates.
    defaults={
        "learner_xla": True, "batches_per_sample": 16,
        "lr": 1e-3, "batch_size": 256, "buffer_size": 1_000_000, "learning_starts": 200,
        "start_steps": 200, "updates_per_step": 1.0, "n_step": 1, "prioritized": False,
        "total_env_steps": 20_000, "fcnet_hiddens": [128, 128], "critic_hiddens": [128, 128],
        "eval_every": 1_000, "eval_episodes": 10,
    },
    long_run_defaults=LONG_RUN_EVALUATION,
    check_spaces=check_spaces,
    model_keys=(),
)
