"""Soft Actor-Critic (Haarnoja et al. 2018, "SAC: Algorithms and Applications")."""
