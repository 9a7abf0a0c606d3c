"""Deep Q-learning for discrete actions as in Ape-X (Horgan et al. 2018): double Q-learning,
dueling heads, n-step returns, prioritized replay, and per-worker ε-greedy exploration."""
