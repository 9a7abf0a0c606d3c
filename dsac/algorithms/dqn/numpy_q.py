"""The Q-network's forward pass and ε-greedy exploration in numpy: what rollout workers and
the evaluator act with (no TensorFlow). Must agree with the Keras network in
:mod:`dsac.algorithms.dqn.networks` (tested to 1e-5)."""

from __future__ import annotations

import numpy as np

from dsac.models.numpy_ops import ACTIVATIONS, mlp_forward
from dsac.models.sizes import check_num_atoms


def q_layer_names(num_hidden: int, dueling: bool, prefix: str = "q/") -> tuple[list[str], list[str]]:
    """(torso layers, head layers) of the Q-network, input to output."""
    torso = [f"{prefix}hidden_{i}" for i in range(num_hidden)]
    heads = [f"{prefix}value", f"{prefix}advantage"] if dueling else [f"{prefix}out"]
    return torso, heads


def q_values(weights: dict[str, np.ndarray], torso: list[str], heads: list[str], x: np.ndarray,
             support: np.ndarray | None = None, activation: str = "relu") -> np.ndarray:
    """Q(s, ·) for a batch of observations; dueling: V(s) + A(s, a) − mean_a A(s, a).
    With a C51 ``support`` (atoms z_i), the heads give logits per action and atom and
    Q(s, a) = Σ_i softmax(logits)_i z_i."""
    if torso:  # the shared MLP, its last layer activated too: the heads read it
        x = ACTIVATIONS[activation](mlp_forward(weights, torso, x, activation))
    return q_from_head_outputs([mlp_forward(weights, [name], x) for name in heads], support)


def q_from_head_outputs(outputs: list[np.ndarray], support: np.ndarray | None) -> np.ndarray:
    """Q-values from the raw head outputs: ``[out]`` or dueling ``[value, advantage]``, each
    with atoms flattened last; C51 logits become expectations over ``support``."""
    n = len(outputs[0])
    atoms = 1 if support is None else len(support)
    if len(outputs) == 1:
        out = outputs[0].reshape(n, -1, atoms)
    else:
        value = outputs[0].reshape(n, 1, atoms)
        advantage = outputs[1].reshape(n, -1, atoms)
        out = value + advantage - advantage.mean(axis=1, keepdims=True)
    if support is None:
        return out[..., 0]
    logits = out - out.max(axis=2, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=2, keepdims=True)
    return probs @ support


def c51_support(algorithm) -> np.ndarray | None:
    """C51's fixed atoms z_i, evenly spaced over [v_min, v_max] (of ``algorithm``, the algorithm
    section); None for expected Q."""
    if algorithm.num_atoms <= 1:
        return None
    check_num_atoms(algorithm.num_atoms)  # a settings object that skipped its check makes no huge support
    return np.linspace(algorithm.v_min, algorithm.v_max, algorithm.num_atoms, dtype=np.float32)


def apex_epsilon(worker_index: int, num_workers: int, epsilon: float, alpha: float) -> float:
    """Ape-X's fixed exploration of worker i of N: ε^(1 + α·i/(N−1))."""
    if num_workers <= 1:
        return epsilon
    return float(epsilon ** (1.0 + alpha * worker_index / (num_workers - 1)))


def linear_epsilon(step: int, decay_steps: float, final_epsilon: float, initial_epsilon: float = 1.0) -> float:
    """ε decaying linearly from ``initial_epsilon`` to ``final_epsilon`` over ``decay_steps``."""
    fraction = min(1.0, step / max(decay_steps, 1.0))
    return initial_epsilon + fraction * (final_epsilon - initial_epsilon)
