"""The Atari part of ``scripts/benchmark.py --atari``: what pixels cost on this machine.

    python scripts/benchmark.py --atari                  # all of it, with the 60-minute Pong run
    python scripts/benchmark.py --atari --pong_minutes 0 # the measurements only (~3 minutes)

Measures, for ALE/Pong-v5 with dsac's Atari preprocessing (84x84 grayscale, 4 stacked frames,
frame skip 4):
  collection    frames/s (env steps x 4) landing in a ReplayBuffer from W rollout workers, learner
                idle, acting with the numpy Nature encoder
  acting        the numpy Q-network's cost per batch of 1, 4 and 16 observations
  learner       DQN updates/s with the Nature encoder on CPU, batch 32 (and 64), on batches held
                in the process (the learner's own TensorFlow threads)
  replay        bytes per transition as stored (frame by frame) and as stacks; sampled batches/s
                of 32 and 256 with stacks rebuilt
  pong          a learning run with the product's Atari defaults (launch.py --algo dqn --env
                ALE/Pong-v5 --num_workers W --max_seconds 60*minutes --seed 0): the evaluation score
                at 15, 30 and 60 minutes and the learning-curve PNG (scripts/plot.py)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import harness
import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = "ALE/Pong-v5"


def _policy(build_learner: bool, batch_size: int = 32):
    from dsac.algorithms.dqn.policy import DQNPolicy
    from dsac.config import Config
    from dsac.envs import make_env

    config = Config(algo="dqn", env=ENV, batch_size=batch_size).validate()
    env = make_env(ENV)
    return DQNPolicy(env.observation_space, env.action_space, config, build_learner=build_learner), config


def acting_ms(repeats: int = 20) -> dict:
    """Milliseconds per numpy forward pass of the Q-network on batches of 1, 4, 16 frames stacks."""
    learner, _ = _policy(True)
    actor, _ = _policy(False)
    actor.set_weights(learner.get_weights())
    rng = np.random.default_rng(0)
    out = {}
    for n in (1, 4, 16):
        obs = rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)
        actor.compute_actions(obs)
        started = time.perf_counter()
        for _ in range(repeats):
            actor.compute_actions(obs)
        out[n] = 1000 * (time.perf_counter() - started) / repeats
    return out


def learner_rate(seconds: float, batch_size: int) -> float:
    """DQN updates/s (Nature encoder, 512 head) on uint8 batches already in this process."""
    from dsac.tf_setup import configure_tensorflow

    configure_tensorflow(0, 2)  # a learner's threads on this machine (at most its cores)
    policy, config = _policy(True, batch_size)
    rng = np.random.default_rng(0)
    n = batch_size
    batches = [{
        "obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8), "action": rng.integers(0, 6, n),
        "reward": rng.normal(size=n).astype(np.float32), "next_obs": rng.integers(0, 256, (n, 4, 84, 84), dtype=np.uint8),
        "terminated": np.zeros(n, np.float32), "discount": np.full(n, 0.99 ** 3, np.float32),
        "weights": np.ones(n, np.float32),
    } for _ in range(config.batches_per_sample)]
    return harness.updates_per_second(policy, batches, seconds)


def sac_image_learner_rate(seconds: float, batch_size: int, env_id: str = "CarRacing-v3") -> float:
    """SAC updates/s from pixels (the critics' shared encoder, the actor on its features) with
    the encoder the frames get by default, on uint8 batches already in this process."""
    from dsac.algorithms.sac.policy import SACPolicy
    from dsac.config import Config
    from dsac.envs import make_env
    from dsac.tf_setup import configure_tensorflow

    configure_tensorflow(0, 2)
    config = Config(algo="sac", env=env_id, batch_size=batch_size).validate()
    env = make_env(env_id)
    policy = SACPolicy(env.observation_space, env.action_space, config, build_learner=True)
    rng = np.random.default_rng(0)
    shape, n, act = env.observation_space.shape, batch_size, env.action_space.shape
    batches = [{
        "obs": rng.integers(0, 256, (n, *shape), dtype=np.uint8), "action": rng.uniform(-1, 1, (n, *act)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32), "next_obs": rng.integers(0, 256, (n, *shape), dtype=np.uint8),
        "terminated": np.zeros(n, np.float32), "discount": np.full(n, 0.99, np.float32),
        "weights": np.ones(n, np.float32),
    } for _ in range(config.batches_per_sample)]
    return harness.updates_per_second(policy, batches, seconds)


def replay_figures(transitions: int = 4000, seconds: float = 3.0) -> dict:
    """Bytes per transition (at 1M) and sampling rate of a frame-stored replay of real Pong frames."""
    from dsac.frames import FrameEncoder
    from dsac.replay import PrioritizedReplayStorage, replay_specs, storage_bytes
    from dsac.rollout import EnvCollector

    collector = EnvCollector(ENV, num_envs=4, seed=0, n_step=3)
    specs, frames = replay_specs(collector.observation_space, collector.action_space)
    naive_specs, _ = replay_specs(type(collector.observation_space)(0, 1, (1,)), collector.action_space)
    encoder = FrameEncoder(frames, num_envs=4, n_step=3)
    storage = PrioritizedReplayStorage(specs, 100_000, frames=frames)
    rng = np.random.default_rng(0)
    while storage.size < transitions:
        storage.add(encoder.encode(collector.collect(lambda obs: rng.integers(6, size=len(obs)), 256)))
    stack_bytes = 2 * int(np.prod(collector.observation_space.shape))
    out = {
        "bytes_per_transition": storage_bytes(10**6, specs, frames) / 10**6,
        "bytes_per_transition_as_stacks": storage_bytes(10**6, naive_specs) / 10**6 + stack_bytes - 8,
        "frames_per_transition": storage.frame_store.added / storage.added,
    }
    for batch in (32, 256):
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            storage.sample(batch, 1)
            count += 1
        out[f"sample_{batch}_batches_per_s"] = count / (time.perf_counter() - started)
    return out


def pong_run(minutes: float, workers: int, out_dir: str) -> dict:
    """launch.py with the Atari defaults for ``minutes``; eval scores at 15/30/60 minutes (the
    last evaluation before each) and the curve's PNG."""
    started = time.time()
    subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--algo", "dqn", "--env", ENV, "--num_workers",
         str(workers), "--max_seconds", str(60 * minutes), "--seed", "0", "--output_dir", out_dir,
         "--no-progress_bar"],
        cwd=REPO_ROOT, check=False,
        # as a user runs it: dsac quiets TensorFlow itself (a TF_CPP_MIN_LOG_LEVEL given to it is the user's choice)
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
    )
    evals = []
    path = os.path.join(out_dir, "progress.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            evals = [e for e in map(json.loads, f) if "eval_return_mean" in e]
    scores = {}
    for mark in (15, 30, 60):
        before = [e for e in evals if e["wall_s"] <= 60 * mark]
        if before and mark <= minutes:
            last = before[-1]
            scores[f"{mark}min"] = {"eval_return_mean": last["eval_return_mean"], "env_steps": last["env_steps"],
                                    "updates": last["updates"]}
    png = os.path.join(out_dir, "curve.png")
    subprocess.run([sys.executable, os.path.join(REPO_ROOT, "scripts", "plot.py"), out_dir, "--out", png],
                   cwd=REPO_ROOT, check=False, capture_output=True)
    best = max((e["eval_return_mean"] for e in evals), default=None)
    return {"workers": workers, "minutes": minutes, "wall_s": round(time.time() - started, 1), "scores": scores,
            "best_eval_return": best, "curve_png": png if os.path.exists(png) else None, "run_dir": out_dir}


def run(report: dict, workers: list[int], window: float, pong_minutes: float, pong_workers: int,
        collection_rate) -> None:
    """Fill ``report["atari"]``; ``collection_rate`` is benchmark.py's (a local Ray is up)."""
    atari = report.setdefault("atari", {})
    atari["collection_frames_per_s"] = {w: 4 * collection_rate("dqn", ENV, w, window) for w in workers}
    print(f"atari collection: {atari['collection_frames_per_s']}", file=sys.stderr)
    atari["acting_ms_per_batch"] = acting_ms()
    atari["learner_updates_per_s"] = {b: learner_rate(window, b) for b in (32, 64)}
    atari["replay"] = replay_figures()
    print(f"atari: {atari}", file=sys.stderr)
    if pong_minutes > 0:
        import ray

        ray.shutdown()  # the run starts its own
        out_dir = os.path.join(REPO_ROOT, "runs", f"pong-benchmark-{time.strftime('%Y%m%d-%H%M%S')}")
        atari["pong"] = pong_run(pong_minutes, pong_workers, out_dir)


def markdown(atari: dict) -> list[str]:
    """Rows for benchmark.py's table."""
    rows = []
    for w, fps in atari.get("collection_frames_per_s", {}).items():
        rows.append(f"| Atari collection, {w} worker(s): frames/s (env steps x 4) | {fps:,.0f} | Ape-X: ~140 per actor core |")
    for n, ms in atari.get("acting_ms_per_batch", {}).items():
        rows.append(f"| Atari acting (numpy Nature encoder), batch {n}: ms | {ms:.1f} | |")
    for b, rate in atari.get("learner_updates_per_s", {}).items():
        rows.append(f"| Atari learner (Nature encoder, CPU), batch {b}: updates/s | {rate:,.1f} | |")
    replay = atari.get("replay")
    if replay:
        rows.append(f"| Atari replay: bytes per transition (as stacks) | {replay['bytes_per_transition']:,.0f} "
                    f"({replay['bytes_per_transition_as_stacks']:,.0f}) | <= 8,000 |")
        rows.append(f"| Atari replay: sampled batches/s of 32 / 256 | {replay['sample_32_batches_per_s']:,.0f} / "
                    f"{replay['sample_256_batches_per_s']:,.0f} | |")
    pong = atari.get("pong")
    if pong:
        marks = ", ".join(f"{k}: {v['eval_return_mean']:.1f} ({v['env_steps']:,} steps)" for k, v in pong["scores"].items())
        rows.append(f"| Pong-v5, {pong['workers']} workers, defaults: eval score at {marks} | best "
                    f"{pong['best_eval_return']} | >= 0 within 60 min |")
    return rows
