"""Stable-Baselines3's DQN on CartPole-v1 as a user of rl-zoo runs it, with nothing of dsac's:
the check that ``benchmarks/sb3_baseline.py`` (which evaluates through ``dsac.runtime.evaluation``) times
SB3 as SB3 runs by itself. Prints one JSON line in ``sb3_baseline.py --algo dqn``'s shape.

    python -m benchmarks.sb3_plain --seed 0
    python -m benchmarks.sb3_plain --seed 0 --threads 2      # torch's default on 2 cores

Same settings (rl-zoo's ``hyperparams/dqn.yml`` for CartPole-v1, ε over 8,000 env steps as in
rl-zoo's own 50k-step run), the same budget, evaluation period and threshold, the same 10
deterministic episodes on the same start states (reset seeds ``100_000 + seed + j``, dsac's
``evaluation_seed``), played one after another with a plain gymnasium loop; seconds from
process start.
"""

import time

STARTED = time.time()

import argparse  # noqa: E402
import json  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import stable_baselines3 as sb3  # noqa: E402
import torch  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

BUDGET, EVERY, THRESHOLD, EPISODES, EVAL_SEED_OFFSET = 100_000, 2_000, 475.0, 10, 100_000
SETTINGS = {  # rl-zoo hyperparams/dqn.yml, CartPole-v1 (n_timesteps 5e4: ε decays over 8,000 env steps)
    "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1_000, "gamma": 0.99,
    "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128,
    "exploration_fraction": 0.16 * 50_000 / BUDGET, "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}


def evaluate(model, seed: int) -> float:
    env, returns = gym.make("CartPole-v1"), []
    for j in range(EPISODES):
        obs, _ = env.reset(seed=EVAL_SEED_OFFSET + seed + j)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(model.predict(obs, deterministic=True)[0]))
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (sb3_baseline.py uses 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = sb3.DQN("MlpPolicy", gym.make("CartPole-v1"), seed=args.seed, verbose=0, **SETTINGS)
    points = []

    class Evaluate(BaseCallback):
        def _on_step(self):
            if self.num_timesteps % EVERY:
                return True
            points.append({"env_steps": self.num_timesteps, "wall_s": round(time.time() - STARTED, 2),
                           "return": evaluate(self.model, args.seed)})
            return points[-1]["return"] < THRESHOLD

    model.learn(BUDGET, callback=Evaluate())
    hit = next((p for p in points if p["return"] >= THRESHOLD), None)
    print(json.dumps({"seed": args.seed, "solved": hit is not None, "threads": args.threads,
                      **({"wall_s": hit["wall_s"], "env_steps": hit["env_steps"]} if hit else {})}))


if __name__ == "__main__":
    main()
