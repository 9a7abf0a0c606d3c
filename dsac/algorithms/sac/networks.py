"""SAC's networks: a Gaussian actor and twin Q critics, built by the model catalog."""

from __future__ import annotations

from dsac.models.catalog import build_model


def build_actor(obs_dim: int, act_dim: int, config):
    """obs -> [mean, log_std] of a Gaussian over pre-tanh actions (2 * act_dim outputs)."""
    return build_model(obs_dim, 2 * act_dim, config, name="actor")


def build_critic(obs_dim: int, act_dim: int, config, name: str):
    """concat(obs, action) -> Q(s, a)."""
    return build_model(obs_dim + act_dim, 1, config, name=name)
