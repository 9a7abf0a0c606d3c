"""A user-written policy that plugs into dsac's distributed system unchanged.

A linear policy a = W·[obs, 1] for Box action spaces that learns by reward-weighted
regression on the batches the learner hands it: transitions with higher reward pull W
toward the actions taken there. Nothing here knows about Ray.

    python launch.py --policy_class examples.linear_policy:LinearPolicy --env Pendulum-v1
"""

from __future__ import annotations

import numpy as np

from dsac.policy import Policy


class LinearPolicy(Policy):
    """a = clip(W·[obs, 1]) (+ Gaussian noise when exploring)."""

    NOISE = 0.3
    TEMPERATURE = 1.0
    STEP = 0.1

    def __init__(self, observation_space, action_space, config, *, build_learner=False, seed=0,
                 worker_index=None, num_workers=1):
        super().__init__(observation_space, action_space, config, build_learner=build_learner, seed=seed,
                         worker_index=worker_index, num_workers=num_workers)
        self.low, self.high = action_space.low, action_space.high
        self.W = np.zeros((action_space.shape[0], observation_space.shape[0] + 1), np.float32)

    def _features(self, obs):
        obs = np.asarray(obs, np.float32).reshape(len(obs), -1)
        return np.concatenate([obs, np.ones((len(obs), 1), np.float32)], axis=1)

    def compute_actions(self, obs_batch, explore=True):
        actions = self._features(obs_batch) @ self.W.T
        if explore:
            actions = actions + self.NOISE * (self.high - self.low) * self.rng.standard_normal(actions.shape)
        return np.clip(actions, self.low, self.high).astype(np.float32)

    def learn_on_batch(self, batch):
        """One step toward the reward-weighted least-squares fit of actions on features."""
        x = self._features(batch["obs"])
        a = np.asarray(batch["action"], np.float32).reshape(len(x), -1)
        r = np.asarray(batch["reward"], np.float64)
        w = np.exp((r - r.max()) / self.TEMPERATURE)
        xw = x * w[:, None]
        fit = np.linalg.lstsq(xw.T @ x + 1e-3 * np.eye(x.shape[1]), xw.T @ a, rcond=None)[0].T
        self.W += self.STEP * (fit - self.W)
        residual = a - x @ self.W.T
        return {
            "loss": float(np.sum(w * (residual**2).sum(axis=1)) / w.sum()),
            "batch_size": len(x),
            "obs_dim": x.shape[1] - 1,
            "action_dim": a.shape[1],
        }

    def get_weights(self):
        return {"linear/W": self.W.copy()}

    def set_weights(self, weights):
        self.W = np.asarray(weights["linear/W"], np.float32).copy()
