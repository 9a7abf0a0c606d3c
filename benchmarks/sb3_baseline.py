"""Stable-Baselines3 (and sb3-contrib's CrossQ) on the benchmark's tasks, evaluated exactly as
dsac evaluates: the same ``dsac.runtime.evaluation.evaluate`` on the same start states
(``evaluation_seed(seed) + j``), the same number of deterministic episodes. Prints one JSON line;
exits 3 when SB3 (or, for ``"algo": "crossq"``, sb3-contrib) is not installed
(``pip install -r requirements-bench.txt``).

    python -m benchmarks.sb3_baseline --algo sac --seed 0
    python -m benchmarks.sb3_baseline --algo sac-lunar --seed 0 --max_seconds 3600   # capped at 60 minutes
    python -m benchmarks.sb3_baseline --curve '{"algo": "sac", "env": "Pendulum-v1", "kwargs": {}, "seed": 0,
        "budget": 5000, "eval_every": 1000, "stop_return": null}'   # a learning curve (benchmarks/harness.py)
"""

from __future__ import annotations

import argparse
import json
import sys
import time

STARTED = time.time()

from dsac.runtime.evaluation import evaluate, evaluation_seed  # noqa: E402

# rl-zoo's own budget for DQN on CartPole-v1 (hyperparams/dqn.yml, n_timesteps: 5e4): its
# exploration_fraction 0.16 decays ε over 0.16 x 50,000 = 8,000 env steps.
ZOO_CARTPOLE_STEPS = 50_000
DQN_CARTPOLE_BUDGET = 100_000

# task (algo, or algo-task) -> env, threshold, env-step budget, evaluation period (env steps),
# rl-zoo's settings ("lin_X": rl-zoo's linear schedule from X to 0 over the budget). A fraction
# of the budget is scaled so that it covers the env steps it covers in rl-zoo's own run.
TASKS = {
    "sac": ("Pendulum-v1", -200.0, 20_000, 1_000, {"learning_rate": 1e-3}),  # rl-zoo hyperparams/sac.yml
    "dqn": ("CartPole-v1", 475.0, DQN_CARTPOLE_BUDGET, 2_000, {  # rl-zoo hyperparams/dqn.yml
        "learning_rate": 2.3e-3, "batch_size": 64, "buffer_size": 100_000, "learning_starts": 1_000, "gamma": 0.99,
        "target_update_interval": 10, "train_freq": 256, "gradient_steps": 128,
        "exploration_fraction": 0.16 * ZOO_CARTPOLE_STEPS / DQN_CARTPOLE_BUDGET,  # ε over 8,000 env steps
        "exploration_final_eps": 0.04, "policy_kwargs": {"net_arch": [256, 256]},
    }),
    # rl-zoo hyperparams/sac.yml (LunarLanderContinuous-v2 there; v3 has the same dynamics), whose
    # published score is 260 at 500k steps (rl-zoo benchmark.md).
    "sac-lunar": ("LunarLanderContinuous-v3", 200.0, 500_000, 5_000, {
        "learning_rate": "lin_7.3e-4", "batch_size": 256, "buffer_size": 1_000_000, "ent_coef": "auto", "gamma": 0.99,
        "tau": 0.01, "train_freq": 1, "gradient_steps": 1, "learning_starts": 10_000,
        "policy_kwargs": {"net_arch": [400, 300]},
    }),
}
EVAL_EPISODES = 10  # dsac's default --eval_episodes


def evaluate_model(model, env_id: str, seed: int, episodes: int = EVAL_EPISODES):
    """Returns of ``episodes`` deterministic episodes of an SB3 model (anything with SB3's
    ``predict``), on the start states a dsac run with ``--seed seed`` evaluates on."""
    return evaluate(lambda obs: model.predict(obs, deterministic=True)[0], env_id, episodes, evaluation_seed(seed))


def time_to_solve(task: str, seed: int, max_seconds: float | None = None) -> dict:
    """Train until an evaluation reaches the task's threshold (wall seconds from process start),
    or for ``max_seconds`` at most: then the last evaluation says how far it got."""
    from benchmarks.harness import first_reaching

    env_id, threshold, total, every, settings = TASKS[task]
    points = learning_curve({"algo": task.split("-")[0], "env": env_id, "kwargs": settings, "seed": seed,
                             "budget": total, "eval_every": every, "stop_return": threshold,
                             "max_seconds": max_seconds})
    hit = first_reaching(points, threshold)
    last = points[-1] if points else {}
    reached = {"env_steps": last.get("env_steps"), "updates": last.get("updates"), "wall_s": last.get("wall_s"),
               "last_return": last.get("return"), "best_return": max((p["return"] for p in points), default=None)}
    if hit is None:
        return {"seed": seed, "solved": False, **reached}
    return {"seed": seed, "solved": True, "wall_s": round(hit["wall_s"], 1), "env_steps": hit["env_steps"],
            "updates": hit["updates"]}


def _schedule(value):
    """rl-zoo's ``lin_X``: a learning rate going linearly from X to 0 over training."""
    if isinstance(value, str) and value.startswith("lin_"):
        start = float(value[4:])
        return lambda progress_remaining: progress_remaining * start
    return value


def model_class(algo: str):
    """The SB3 class of ``algo``: ``sac`` and ``dqn`` from SB3, ``crossq`` from sb3-contrib."""
    if algo == "crossq":
        from sb3_contrib import CrossQ

        return CrossQ
    import stable_baselines3 as sb3

    return {"sac": sb3.SAC, "dqn": sb3.DQN}[algo]


def learning_curve(spec: dict) -> list[dict]:
    """SB3 with constructor arguments ``spec["kwargs"]`` for ``spec["budget"]`` env steps (or
    until an evaluation reaches ``spec["stop_return"]``, or until ``spec["max_seconds"]`` from
    process start), evaluating every ``spec["eval_every"]`` env steps on dsac's start states:
    [{env_steps, updates, wall_s, return}, ...]."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback

    env_id, seed, every, stop = spec["env"], spec["seed"], spec["eval_every"], spec.get("stop_return")
    cap = spec.get("max_seconds")
    kwargs = dict(spec["kwargs"])
    if "learning_rate" in kwargs:
        kwargs["learning_rate"] = _schedule(kwargs["learning_rate"])
    model = model_class(spec["algo"])("MlpPolicy", gym.make(env_id), seed=seed, verbose=0, **kwargs)
    points = []

    class Evaluate(BaseCallback):
        def _on_step(self):
            if cap is not None and time.time() - STARTED >= cap:
                return False  # capped: the evaluations so far are the result
            if self.num_timesteps % every:
                return True
            mean = float(evaluate_model(self.model, env_id, seed).mean())
            points.append({"env_steps": self.num_timesteps, "updates": int(self.model._n_updates),
                           "wall_s": round(time.time() - STARTED, 2), "return": mean})
            return stop is None or mean < stop

    model.learn(spec["budget"], callback=Evaluate())
    if (cap is not None and time.time() - STARTED >= cap
            and (not points or points[-1]["env_steps"] < model.num_timesteps)):
        # Capped between two evaluations: where it got to is the result (dsac's --max_seconds
        # also evaluates once more when it stops).
        points.append({"env_steps": model.num_timesteps, "updates": int(model._n_updates),
                       "wall_s": round(time.time() - STARTED, 2),
                       "return": float(evaluate_model(model, env_id, seed).mean())})
    return points


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=sorted(TASKS), help="the task: sac (Pendulum), dqn (CartPole), sac-lunar")
    parser.add_argument("--curve", metavar="JSON", help="learning curve of this spec (see learning_curve)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max_seconds", type=float, help="stop training this many seconds after process start")
    args = parser.parse_args(argv)
    # An SB3 user has no TensorFlow; this environment has dsac's, and torch.utils.tensorboard (which
    # SB3 imports) loads it when it is there: ~3 s of this process's clock. Keep it out.
    sys.modules.setdefault("tensorflow", None)
    try:
        import stable_baselines3  # noqa: F401
        import torch

        if args.curve and json.loads(args.curve)["algo"] == "crossq":
            import sb3_contrib  # noqa: F401

            # rl-zoo's 2x2048 critics are bound by matmuls, which torch's default threads (one per
            # core) run twice as fast on 2 cores: left at the default a user gets. dsac's 2x128
            # critics (the matched side) gain less from the second thread, but still gain.
        else:
            torch.set_num_threads(1)  # SAC's 2x256 networks: two threads were no faster on 2 cores
    except ImportError:
        return 3
    if args.curve:
        print(json.dumps(learning_curve(json.loads(args.curve))))
    elif args.algo:
        print(json.dumps(time_to_solve(args.algo, args.seed, args.max_seconds)))
    else:
        parser.error("give --algo or --curve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
