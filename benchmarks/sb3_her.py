"""Stable-Baselines3's SAC with ``HerReplayBuffer`` on a goal-conditioned task, set up as rl-zoo
sets it up (``hyperparams/sac.yml``, its one HER entry, FetchReach: ``MultiInputPolicy``,
``VecNormalize`` of observations and rewards with the task's gamma, one env), evaluated as dsac
evaluates: deterministic episodes from the start states a dsac run with the same seed uses
(``dsac.runtime.evaluation.evaluation_seed(seed) + j``), success read from the episode's last info
(``dsac.runtime.evaluation.SUCCESS_KEYS``). Prints one JSON line, the points; exits 3 without SB3.

    python -m benchmarks.sb3_her --curve '{"env": "gymnasium_robotics:FetchReach-v4", "seed": 0,
        "kwargs": {...}, "budget": 20000, "eval_every": 1000, "max_seconds": 600}'
"""

from __future__ import annotations

import argparse
import json
import sys
import time

STARTED = time.time()

import numpy as np  # noqa: E402

from dsac.runtime.evaluation import SUCCESS_KEYS, evaluation_seed  # noqa: E402

EVAL_EPISODES = 10  # dsac's default --eval_episodes


def evaluate(model, normalizer, env, seed: int, episodes: int = EVAL_EPISODES) -> tuple[float, float | None]:
    """Mean return and success rate of ``episodes`` deterministic episodes of ``model``, each
    observation normalized by the training ``normalizer``'s running statistics (not updated)."""
    returns, successes = [], []
    for j in range(episodes):
        obs, _ = env.reset(seed=evaluation_seed(seed) + j)
        total, done, info = 0.0, False, {}
        while not done:
            action, _ = model.predict(normalizer.normalize_obs(obs), deterministic=True)
            obs, reward, terminated, truncated, info = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        said = next((info[key] for key in SUCCESS_KEYS if key in info), None)
        if said is not None:
            successes.append(float(bool(np.asarray(said).any())))
    return float(np.mean(returns)), (float(np.mean(successes)) if successes else None)


def learning_curve(spec: dict) -> list[dict]:
    """SAC + HER with constructor arguments ``spec["kwargs"]`` (``replay_buffer_kwargs`` among
    them) for ``spec["budget"]`` env steps or ``spec["max_seconds"]`` from process start,
    evaluating every ``spec["eval_every"]`` env steps: [{env_steps, updates, wall_s, return,
    success}, ...]."""
    import gymnasium as gym
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    env_id, seed, every, cap = spec["env"], spec["seed"], spec["eval_every"], spec.get("max_seconds")
    kwargs = dict(spec["kwargs"])
    # rl-zoo's `normalize: True` with the task's gamma: observations and rewards, one env.
    train_env = VecNormalize(DummyVecEnv([lambda: Monitor(gym.make(env_id))]), gamma=kwargs.get("gamma", 0.99))
    train_env.seed(seed)
    model = SAC("MultiInputPolicy", train_env, replay_buffer_class=HerReplayBuffer, seed=seed, verbose=0, **kwargs)
    eval_env = gym.make(env_id)
    points: list[dict] = []

    def point() -> None:
        ret, success = evaluate(model, train_env, eval_env, seed)
        points.append({"env_steps": int(model.num_timesteps), "updates": int(model._n_updates),
                       "wall_s": round(time.time() - STARTED, 2), "return": ret, "success": success})

    class Evaluate(BaseCallback):
        def _on_step(self):
            if cap is not None and time.time() - STARTED >= cap:
                return False
            if self.num_timesteps % every == 0:
                point()
            return True

    model.learn(spec["budget"], callback=Evaluate())
    if not points or points[-1]["env_steps"] < model.num_timesteps:
        point()  # capped between two evaluations: where it got to is the result
    return points


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curve", metavar="JSON", required=True, help="learning curve of this spec")
    args = parser.parse_args(argv)
    # An SB3 user has no TensorFlow; this environment has dsac's, and torch.utils.tensorboard (which
    # SB3 imports) loads it when it is there: ~3 s of this process's clock. Keep it out.
    sys.modules.setdefault("tensorflow", None)
    try:
        import stable_baselines3  # noqa: F401
        import torch

        torch.set_num_threads(1)  # as the other SB3 sides: two threads were no faster on 2 cores
    except ImportError:
        return 3
    print(json.dumps(learning_curve(json.loads(args.curve))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
