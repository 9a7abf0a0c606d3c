"""Environments: making them, Atari's wrappers and the rollout loop over a batch of envs."""
