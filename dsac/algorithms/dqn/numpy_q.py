"""The Q-network's forward pass and ε-greedy exploration in numpy: what rollout workers and
the evaluator act with (no TensorFlow). Must agree with the Keras network in
:mod:`dsac.algorithms.dqn.networks` (tested to 1e-5)."""

from __future__ import annotations

import numpy as np


def q_layer_names(num_hidden: int, dueling: bool, prefix: str = "q/") -> tuple[list[str], list[str]]:
    """(torso layers, head layers) of the Q-network, input to output."""
    torso = [f"{prefix}hidden_{i}" for i in range(num_hidden)]
    heads = [f"{prefix}value", f"{prefix}advantage"] if dueling else [f"{prefix}out"]
    return torso, heads


def q_values(weights: dict[str, np.ndarray], torso: list[str], heads: list[str], x: np.ndarray) -> np.ndarray:
    """Q(s, ·) for a batch of observations; dueling: V(s) + A(s, a) − mean_a A(s, a)."""
    for name in torso:
        x = np.maximum(x @ weights[f"{name}/kernel"] + weights[f"{name}/bias"], 0.0)
    if len(heads) == 1:
        return x @ weights[f"{heads[0]}/kernel"] + weights[f"{heads[0]}/bias"]
    value = x @ weights[f"{heads[0]}/kernel"] + weights[f"{heads[0]}/bias"]
    advantage = x @ weights[f"{heads[1]}/kernel"] + weights[f"{heads[1]}/bias"]
    return value + advantage - advantage.mean(axis=1, keepdims=True)


def apex_epsilon(worker_index: int, num_workers: int, epsilon: float, alpha: float) -> float:
    """Ape-X's fixed exploration of worker i of N: ε^(1 + α·i/(N−1))."""
    if num_workers <= 1:
        return epsilon
    return float(epsilon ** (1.0 + alpha * worker_index / (num_workers - 1)))


def linear_epsilon(step: int, decay_steps: float, final_epsilon: float, initial_epsilon: float = 1.0) -> float:
    """ε decaying linearly from ``initial_epsilon`` to ``final_epsilon`` over ``decay_steps``."""
    fraction = min(1.0, step / max(decay_steps, 1.0))
    return initial_epsilon + fraction * (final_epsilon - initial_epsilon)
