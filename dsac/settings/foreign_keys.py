"""What other libraries (RLlib, Stable-Baselines3, Tune) call dsac's flags: the "did you mean"
of a key or flag dsac does not know."""

from __future__ import annotations

from dsac.errors import did_you_mean

# What RLlib and Stable-Baselines3 call some of dsac's keys, for "did you mean" — only where the
# foreign key means the same thing.
ALIASES = {
    "learning_rate": "lr", "train_batch_size": "batch_size", "num_env_runners": "num_workers",
    "num_rollout_workers": "num_workers", "num_envs_per_env_runner": "envs_per_worker",
    "num_envs_per_worker": "envs_per_worker", "replay_buffer_capacity": "buffer_size",
    "num_steps_sampled_before_learning_starts": "learning_starts", "total_timesteps": "total_env_steps",
    "timesteps_total": "total_env_steps", "initial_alpha": "init_alpha", "n_step_return": "n_step",
    "evaluation_duration": "eval_episodes", "env_config": "env_kwargs",
    "max_failures": "max_restarts",
}
# Foreign keys that mean something close but different: what to write instead.
FOREIGN_MEANINGS = {
    "train_freq": "--updates_per_step: SB3's train_freq is env steps between updates; train_freq k with "
                  "gradient_steps g is --updates_per_step g/k",
    "gradient_steps": "--updates_per_step: SB3's gradient_steps g per train_freq k env steps is --updates_per_step g/k",
    "training_intensity": "--updates_per_step: RLlib's training_intensity counts replayed transitions per sampled "
                          "one, which is --updates_per_step times --batch_size",
    "ent_coef": "--init_alpha: dsac always tunes the entropy coefficient; SB3's ent_coef 'auto_0.1' is "
                "--init_alpha 0.1",
    "evaluation_interval": "--eval_every: RLlib counts training iterations, --eval_every env steps",
    "checkpoint_freq": "--checkpoint_every: Tune counts training iterations, --checkpoint_every seconds",
}


def suggest_key(key: str, names) -> str:
    """`` (did you mean x?)`` for a misspelt or foreign config key / flag."""
    bare = key.lstrip("-").split("=")[0]
    dashes = key[: len(key) - len(key.lstrip("-"))]
    if bare in ALIASES:
        return f" (did you mean {dashes}{ALIASES[bare]}?)"
    if bare in FOREIGN_MEANINGS:
        return f" (did you mean {FOREIGN_MEANINGS[bare]})"
    return did_you_mean(key, names)
