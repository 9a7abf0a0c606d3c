"""Deep Q-learning for discrete actions as in Ape-X (Horgan et al. 2018): double Q-learning,
dueling heads, n-step returns, prioritized replay, and per-worker ε-greedy exploration."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from dsac.algorithms import Algorithm
from dsac.algorithms.dqn.policy import DQNPolicy
from dsac.envs.make import require_box_observation
from dsac.errors import DsacError


def check_spaces(env_id: str, observation_space: gym.Space, action_space: gym.Space) -> None:
    """A flat or image Box observation and a Discrete action space. The refusal names what
    would take the env's actions: --algo sac for a Box, and for a MultiDiscrete or MultiBinary
    (which SAC refuses too) a wrapper making them one Discrete choice."""
    require_box_observation(env_id, observation_space)
    if isinstance(action_space, gym.spaces.Discrete):
        return
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        hint = "use --algo sac"
    elif isinstance(action_space, gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        choices = int(np.prod(action_space.nvec)) if isinstance(action_space, gym.spaces.MultiDiscrete) \
            else 2 ** int(np.prod(action_space.shape))
        hint = (f"no dsac algorithm takes it: wrap the env so that its action is one Discrete({choices}), "
                "an index into every combination")
    else:
        hint = "no dsac algorithm takes it"
    raise DsacError(f"--algo dqn needs a Discrete action space, but {env_id} has {action_space} ({hint})")


ALGORITHM = Algorithm(
    name="dqn",
    policy_class=DQNPolicy,
    learner="dsac.algorithms.dqn.learner:DQNLearner",
    # Ape-X's choices: n-step 3, prioritized replay (dueling and double Q are on by default).
    # One update per env step (with dsac's 2x64 networks) and rl-zoo's CartPole lr 2.3e-3: the
    # fastest to a good policy, in wall-clock time, on CartPole-v1 and Acrobot-v1 of the
    # candidates benchmarks/sweep.py tried (docs/benchmarks.md: the defaults sweep). The lr
    # decays linearly to 0 over the run (rl-zoo's lin_X): at a constant rate a learned CartPole
    # policy kept collapsing and recovering until the end, and decaying it made more seeds end
    # at the top score, sooner (benchmarks/stability.py; docs/benchmarks.md: stability).
    defaults={
        "learner_xla": False, "batches_per_sample": 16,
        "lr": "lin_2.3e-3", "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1_000,
        "start_steps": 1_000, "updates_per_step": 1.0, "n_step": 3, "prioritized": True,
        "total_env_steps": 100_000, "fcnet_hiddens": [64, 64], "eval_every": 1_000, "eval_episodes": 10,
        "target_update_every": 100,
    },
    # Atari (the Nature encoder comes from the frames' size): a 512-wide head (Mnih et al. 2015),
    # rl-zoo's lr, batch and update ratio (one update per 4 env steps), 100k transitions (frames
    # a small machine holds in memory), a 10M-step budget (Ape-X's, SB3's), a target copy every
    # 1,000 updates (4,000 env steps), 5 evaluation games every 25k env steps (several games
    # apart); provisional: to be set by a sweep.
    atari_defaults={
        "fcnet_hiddens": [512], "lr": 1e-4, "batch_size": 32, "buffer_size": 100_000, "learning_starts": 10_000,
        "start_steps": 10_000, "updates_per_step": 0.25, "total_env_steps": 10_000_000,
        "target_update_every": 1_000, "eval_every": 25_000, "eval_episodes": 5,
    },
    # Other envs with large frames (side >= 72, the Nature encoder): the same learner settings,
    # which are about what a conv update costs, not about Atari; a 1M-step budget.
    image_defaults={
        "fcnet_hiddens": [512], "lr": 1e-4, "batch_size": 32, "buffer_size": 100_000, "learning_starts": 10_000,
        "start_steps": 10_000, "updates_per_step": 0.25, "total_env_steps": 1_000_000,
        "target_update_every": 1_000, "eval_every": 25_000, "eval_episodes": 5,
    },
    check_spaces=check_spaces,
    # The Q-network's shape and what its outputs mean: a weights file must match them.
    model_keys=("dueling", "num_atoms", "v_min", "v_max"),
)
