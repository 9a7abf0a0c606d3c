"""dsac's speed on this machine, in one run: a Markdown table on stdout and a JSON file.

    python -m benchmarks speed --quick            # ~10 minutes on 2 cores
    python -m benchmarks speed --num_seeds 3 --out bench.json
    python -m benchmarks speed --only lunar       # LunarLanderContinuous-v3 alone (up to ~2 h)
    python -m benchmarks speed --only atari       # pixels: collection, acting, learner, replay, 60-min Pong

Measures:
  raw env       env steps/s of one env in one process (the floor to compare against)
  collection    env steps/s landing in the ReplayBuffer with W rollout workers, learner idle
                (one env per worker, and 2 workers with 16 envs each)
  naive         the original Distributed-DRL design as a baseline (a remote call per env step,
                eager TF at batch 1), same W, same envs -> dsac / naive
  learner       SAC updates/s on batches held locally vs in the running system (workers
                collecting, batches from the ReplayBuffer actor) -> feed efficiency
  weight sync   time from a push to every rollout worker holding that version (p50, p95), with
                pushes every 70 ms (a learner's pace) and workers collecting
  time to solve SAC Pendulum-v1 to -200 and DQN CartPole-v1 to 475: wall seconds from process
                start (Ray start included) and env steps, median over seeds (launch.py as users run it,
                with the product's defaults, or --settings tuned: benchmarks/configs/)
  SB3           optional, when stable-baselines3 is installed (requirements-bench.txt): the same
                thresholds with rl-zoo settings (benchmarks/sb3_baseline.py), alternating with dsac seed by
                seed, evaluated on the same start states through dsac.runtime.evaluation -> dsac / SB3; for DQN
                also SB3 by a plain script with nothing of dsac's (benchmarks/sb3_plain.py): it must agree
  equal         the same two thresholds with equal settings on both sides (parity.py's TASKS: network
                sizes, lr, batch, buffer, warm-up, updates per env step, target updates, exploration)
  lunar         not by default (--lunar or --only lunar; up to two hours a seed): SAC on
                LunarLanderContinuous-v3 to 200, dsac's defaults against SB3 with rl-zoo's settings,
                each capped at --lunar_cap minutes (60), beside rl-zoo's published 260 at 500k steps
  atari         not by default (--atari or --only atari): ALE/Pong-v5 frames/s collected, numpy acting
                cost, DQN learner updates/s with the Nature encoder, replay bytes and sampling rate,
                and a --pong_minutes (60) learning run with the Atari defaults (benchmarks/atari.py)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np

from benchmarks import harness

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# algo: (env, threshold, env-step budget, dsac's tuned settings: rl-zoo's role for SB3)
BATCHED_ENVS = 16  # --envs_per_worker of the extra collection row
CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
SOLVE = {
    "sac": ("Pendulum-v1", -200.0, 20_000, os.path.join(CONFIGS, "sac_pendulum.yaml")),
    "dqn": ("CartPole-v1", 475.0, 100_000, os.path.join(CONFIGS, "dqn_cartpole.yaml")),
}
# What a user types with the product's defaults (--settings defaults), besides --env, --seed
# and --stop_return: everything else default.
DEFAULTS = {algo: ["--algo", algo, "--num_workers", str(harness.WORKERS[algo])] for algo in SOLVE}
LUNAR = ("LunarLanderContinuous-v3", 200.0, 500_000)  # env, threshold, env-step budget (rl-zoo's)
RL_ZOO_LUNAR = "rl-zoo's published SAC score: 260 at 500k env steps"
PARTS = ["collection", "naive", "learner", "sync", "solve", "sb3", "equal", "lunar", "atari"]


# --- raw env --------------------------------------------------------------------------------
def raw_env_rate(env_id: str, seconds: float) -> float:
    """Env steps/s of one env with random actions, in this process."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.reset(seed=0)
    actions = [env.action_space.sample() for _ in range(1000)]
    steps, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for action in actions:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        steps += len(actions)
    return steps / (time.perf_counter() - started)


# --- collection -----------------------------------------------------------------------------
def _initial_weights(config, env_id):
    """Acting weights of a freshly built policy (what the learner would push first)."""
    from dsac.envs.make import make_env
    from dsac.runtime.build import make_learner

    env = make_env(env_id, atari=config.frames)
    learner = make_learner(config, env.observation_space, env.action_space)
    return env.observation_space, env.action_space, learner.get_weights()


def _unthrottled_buffer(specs, num_writers: int, frames=None, capacity: int = 200_000):
    from dsac.distributed.actors import ReplayBuffer

    # No learner: the rate limiter must never hold collection back.
    return ReplayBuffer.options(num_cpus=0).remote(
        specs, capacity, updates_per_step=1e-9, learning_starts=10**12, max_steps_ahead=10**12,
        num_writers=num_writers, max_chunk=256, frames=frames,
    )


def collection_rate(algo: str, env_id: str, workers: int, seconds: float, naive: bool = False,
                    push_every_s: float | None = None, envs_per_worker: int = 1) -> float | tuple[float, list[float]]:
    """Env steps/s reaching one ReplayBuffer from ``workers`` rollout workers, learner idle.
    With ``push_every_s``, new weights are pushed that often meanwhile (as a learner would)
    and the push-to-every-worker times come back too."""
    import ray

    from dsac.config import Config
    from dsac.distributed.actors import ParameterServer
    from dsac.distributed.monitor import RunMonitor
    from dsac.distributed.tasks import rollout_worker
    from dsac.replay.buffer import replay_specs

    config = Config(algo=algo, env=env_id, num_workers=workers, envs_per_worker=envs_per_worker, start_steps=0,
                    learning_starts=0).validate()
    obs_space, act_space, weights = _initial_weights(config, env_id)
    specs, frames = replay_specs(obs_space, act_space)
    replay = _unthrottled_buffer(specs, workers, frames, 50_000 if frames else 200_000)
    ps = ParameterServer.options(num_cpus=0).remote()
    ray.get(ps.push.remote(weights))
    cpus = min(1.0, (ray.cluster_resources()["CPU"] - 0.01) / workers)
    if naive:
        refs = [naive_worker.options(num_cpus=cpus).remote(i, config, replay, ps, i) for i in range(workers)]
    else:
        monitor = RunMonitor.options(num_cpus=0).remote()
        refs = [rollout_worker.options(num_cpus=cpus).remote(i, config, replay, ps, monitor, 1000 + i)
                for i in range(workers)]
    # Start counting once every worker is up (TF import for the naive ones, env creation for ours).
    deadline = time.monotonic() + 120
    while ray.get(replay.stats.remote()).add_calls < 3 * workers and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    first = ray.get(replay.stats.remote()).added
    started = time.monotonic()
    if push_every_s is None:
        time.sleep(seconds)
    else:
        weights_ref = ray.put(weights)
        ray.get(ps.status.remote(drain_synced=True))  # from here on
        while time.monotonic() - started < seconds:
            ps.push.remote(weights_ref)
            time.sleep(push_every_s)
    added = ray.get(replay.stats.remote()).added - first
    elapsed = time.monotonic() - started
    sync = ray.get(ps.status.remote(drain_synced=True))["synced"] if push_every_s is not None else None
    ray.get([ps.stop.remote("benchmark"), replay.stop.remote()])
    ray.get(refs)
    for actor in (ps, replay):
        ray.kill(actor)
    return (added / elapsed, sync) if push_every_s is not None else added / elapsed


def _naive_worker(index, config, replay, ps, seed):
    """The original Distributed-DRL worker: eager TF actor at batch 1, one env, and one
    remote call per env step (bounded to 64 in flight so the queue cannot grow without end)."""
    import gymnasium as gym
    import ray
    import tensorflow as tf

    from dsac.distributed.weights_client import pulled_weights
    from dsac.runtime.build import make_learner
    from dsac.runtime.messages import Chunk

    env = gym.make(config.env)
    learner = make_learner(config, env.observation_space, env.action_space, seed)
    learner.set_weights(pulled_weights(ray.get(ps.pull.remote(0)).weights))
    obs, _ = env.reset(seed=seed)
    in_flight = []
    while True:
        for _ in range(200):
            x = tf.constant(obs[None], tf.float32)
            if hasattr(learner, "actor"):  # SAC: deterministic mean through the Keras actor
                mean, _ = tf.split(learner.actor(x), 2, axis=-1)
                action = (np.tanh(mean.numpy()[0]) + 1.0) / 2.0 * (env.action_space.high - env.action_space.low)
                action = (env.action_space.low + action).astype(np.float32)
            else:
                action = int(np.argmax(learner.q_online(x).numpy()[0]))
            next_obs, reward, terminated, truncated, _ = env.step(action)
            chunk = {
                "obs": obs[None].astype(np.float32), "action": np.asarray(action, np.float32).reshape(1, -1)
                if hasattr(learner, "actor") else np.asarray([action]),
                "reward": np.asarray([reward], np.float32), "next_obs": next_obs[None].astype(np.float32),
                "terminated": np.asarray([terminated], np.float32), "discount": np.asarray([0.99], np.float32),
            }
            in_flight.append(replay.add.remote(index, Chunk(chunk)))
            if len(in_flight) >= 64:
                _, in_flight = ray.wait(in_flight, num_returns=len(in_flight) - 32)
            obs = next_obs
            if terminated or truncated:
                obs, _ = env.reset()
        if ray.get(ps.pull.remote()).stop:
            break
    ray.get(in_flight)
    env.close()


naive_worker = None  # made a Ray task once Ray is imported


# --- learner --------------------------------------------------------------------------------
def local_learner_rate(seconds: float) -> float:
    """SAC updates/s (batch 256, 2x256) on batches already in this process, with the TF
    threads a learner uses and its blocks of ``batches_per_sample`` updates per call."""
    import gymnasium as gym

    from dsac.config import Config
    from dsac.runtime.tf_setup import configure_tensorflow

    configure_tensorflow(0, 1)  # the threads a learner uses
    from dsac.runtime.build import make_learner

    env = gym.make("Pendulum-v1")
    config = Config().validate()
    policy = make_learner(config, env.observation_space, env.action_space)
    batches = harness.random_sac_batches(config.batches_per_sample, config.batch_size, 3, 1, 2.0)
    return harness.updates_per_second(policy, batches, seconds)


def in_system(seconds: float, workers: int = 4) -> dict:
    """A real SAC Pendulum run (updates_per_step 4: the learner, not collection, is the limit)
    for ``seconds`` after the first 200 updates: learner updates/s and its share of time spent
    waiting for batches."""
    from dsac.config import Config
    from dsac.distributed.driver import DistributedRun
    from dsac.runtime.preparation import prepare

    out = tempfile.mkdtemp(prefix="dsac-bench-")
    config = Config(env="Pendulum-v1", num_workers=workers, updates_per_step=4.0, total_env_steps=10**7,
                    eval_every=10**7, output_dir=os.path.join(out, "run"), tensorboard=False).validate()
    system = DistributedRun(prepare(config), time.time())
    try:
        deadline = time.monotonic() + 120
        while system.counters["updates"] < 200 and time.monotonic() < deadline:
            system.step()
        start_updates, start_wait = system.counters["updates"], system.counters.get("learner_wait_s", 0.0)
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            system.step()
        elapsed = time.monotonic() - started
        result = {
            "updates_per_s": (system.counters["updates"] - start_updates) / elapsed,
            "wait_fraction": (system.counters.get("learner_wait_s", 0.0) - start_wait) / elapsed,
        }
    finally:
        system.stop("benchmark")
    return result


# --- time to solve --------------------------------------------------------------------------
def time_to_solve(algo: str, seed: int, settings: str = "defaults") -> dict:
    """launch.py as a user runs it — with the product's defaults, or the tuned config in
    ``benchmarks/configs/`` — to the threshold: wall seconds from process start (as SB3's side
    counts them), env steps."""
    env_id, threshold, total, config_file = SOLVE[algo]
    chosen = DEFAULTS[algo] if settings == "defaults" else ["--config", config_file]
    run = harness.run_dsac(chosen, env_id, seed, total, None, threshold, as_typed=True)
    hit = harness.first_reaching(run["points"], threshold)
    return {"seed": seed, "solved": hit is not None, "wall_s": hit["wall_s"] if hit else None,
            "env_steps": hit["env_steps"] if hit else None, "process_s": run["process_s"],
            **({"error": run["error"]} if run["error"] else {})}


def sb3_time_to_solve(task: str, seed: int, max_seconds: float | None = None) -> dict | None:
    """Stable-Baselines3 with rl-zoo settings to the same threshold (``task``: sb3_baseline.py's
    --algo), evaluated on dsac's evaluation start states, stopped after ``max_seconds`` if given;
    None when SB3 is not installed."""
    cap = ["--max_seconds", str(max_seconds)] if max_seconds is not None else []
    result = subprocess.run([sys.executable, "-m", "benchmarks.sb3_baseline", "--algo", task, "--seed", str(seed),
                             *cap],
                            capture_output=True, text=True, cwd=REPO_ROOT,
                            timeout=max_seconds + 900 if max_seconds is not None else None)
    if result.returncode == 3:
        return None
    if result.returncode != 0:
        return {"seed": seed, "solved": False, "error": result.stderr.strip().splitlines()[-1:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def sb3_plain_time_to_solve(seed: int) -> dict:
    """SB3's DQN on CartPole-v1 by ``benchmarks/sb3_plain.py`` (no dsac code in the process, its own
    evaluation loop): the check that ``sb3_baseline.py`` times SB3 as SB3 runs by itself."""
    result = subprocess.run([sys.executable, "-m", "benchmarks.sb3_plain", "--seed", str(seed)], capture_output=True,
                            text=True, cwd=REPO_ROOT)
    if result.returncode != 0:
        return {"seed": seed, "solved": False, "error": result.stderr.strip().splitlines()[-1:]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def solve_rows(report: dict, args) -> None:
    """dsac and SB3 to each threshold, alternating seed by seed on the same machine, both
    evaluated on the same start states (dsac.runtime.evaluation.evaluation_seed); for DQN also SB3 by a
    plain script (``sb3_plain.py``), which should agree with ``sb3_baseline.py``."""
    report["solve"], report["solve_settings"] = {}, args.settings
    report["sb3"] = None if "sb3" in args.skip else {}
    for algo in ("sac", "dqn"):
        runs, sb3_runs, plain_runs = [], [], []
        for seed in harness.seeds_of(args, [0, 1, 2]):
            runs.append(time_to_solve(algo, seed, args.settings))
            if report["sb3"] is not None:
                sb3_runs.append(sb3_time_to_solve(algo, seed))
                if sb3_runs[-1] is None:
                    report["sb3"] = None
                    print("SB3 not installed: pip install -r requirements-bench.txt for the side-by-side",
                          file=sys.stderr)
                elif algo == "dqn":
                    plain_runs.append(sb3_plain_time_to_solve(seed))
        report["solve"][algo] = {"runs": runs, "median_wall_s": median(r["wall_s"] for r in runs),
                                 "median_env_steps": median(r["env_steps"] for r in runs)}
        print(f"solve {algo}: {report['solve'][algo]}", file=sys.stderr)
        if report["sb3"] is not None:
            report["sb3"][algo] = {"runs": sb3_runs, "median_wall_s": median(r.get("wall_s") for r in sb3_runs),
                                   "median_env_steps": median(r.get("env_steps") for r in sb3_runs)}
            if plain_runs:
                report["sb3"][algo]["plain"] = {"runs": plain_runs,
                                                "median_wall_s": median(r.get("wall_s") for r in plain_runs)}
            print(f"sb3 {algo}: {report['sb3'][algo]}", file=sys.stderr)


def equal_rows(report: dict, args) -> None:
    """dsac (the solve rows' workers) and SB3 at equal settings — parity.py's for Pendulum and
    CartPole: network sizes, lr, batch, buffer, warm-up, updates per env step, target updates,
    exploration — to the same thresholds, alternating seed by seed, same evaluation start states."""
    from benchmarks import parity

    report["equal"] = {}
    for algo, task_name in (("sac", "sac-pendulum"), ("dqn", "dqn-cartpole")):
        task = parity.TASKS[task_name]
        env_id, threshold, budget = task["env"], task["threshold"], SOLVE[algo][2]
        row = report["equal"][algo] = {"settings": task["settings"], "dsac": [], "sb3": []}
        for seed in harness.seeds_of(args, [0, 1, 2]):
            flags = [*harness.dsac_flags(algo, task["settings"]), "--num_workers", str(harness.WORKERS[algo])]
            row["dsac"].append(harness.run_dsac(flags, env_id, seed, budget, task["eval_every"], threshold))
            if "sb3" not in args.skip:
                sb3 = harness.run_sb3(algo, env_id, harness.sb3_kwargs(algo, task["settings"]), seed, budget,
                                      task["eval_every"], threshold)
                if sb3 is not None:
                    row["sb3"].append(sb3)
        for side in ("dsac", "sb3"):
            hits = [harness.first_reaching(r["points"], threshold) for r in row[side]]
            row[f"{side}_median_wall_s"] = median(h["wall_s"] for h in hits if h)
            row[f"{side}_runs"] = [{"wall_s": h["wall_s"] if h else None, "env_steps": h["env_steps"] if h else None}
                                   for h in hits]
            del row[side]
        print(f"equal {algo}: {row}", file=sys.stderr)


def lunar_rows(report: dict, args) -> None:
    """SAC on LunarLanderContinuous-v3 to 200: ``launch.py --algo sac --num_workers 2`` as typed
    (product defaults) and SB3 with rl-zoo's settings (``sb3_baseline.py --algo sac-lunar``), each
    stopped at the threshold or after ``--lunar_cap`` minutes, alternating seed by seed, evaluated on
    the same start states."""
    env_id, threshold, budget = LUNAR
    cap = 60.0 * args.lunar_cap
    report["lunar"] = {"cap_s": cap, "dsac": [], "sb3": []}
    for seed in harness.seeds_of(args, [0], prefix="lunar_"):
        run = harness.run_dsac(DEFAULTS["sac"] + ["--max_seconds", str(cap)], env_id, seed, budget, None, threshold,
                               timeout=cap + 600, as_typed=True)
        hit, last = harness.first_reaching(run["points"], threshold), (run["points"] or [{}])[-1]
        report["lunar"]["dsac"].append({
            "seed": seed, "solved": hit is not None, "wall_s": hit["wall_s"] if hit else last.get("wall_s"),
            "env_steps": (hit or last).get("env_steps"), "updates": (hit or last).get("updates"),
            "best_return": max((p["return"] for p in run["points"]), default=None), "error": run["error"]})
        print(f"lunar dsac: {report['lunar']['dsac'][-1]}", file=sys.stderr, flush=True)
        if "sb3" in args.skip:
            continue
        sb3 = sb3_time_to_solve("sac-lunar", seed, cap)
        if sb3 is None:
            print("SB3 not installed: pip install -r requirements-bench.txt for the side-by-side", file=sys.stderr)
            args.skip.append("sb3")
            continue
        report["lunar"]["sb3"].append(sb3)
        print(f"lunar sb3: {sb3}", file=sys.stderr, flush=True)


# --- report ---------------------------------------------------------------------------------
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, spec=",.0f"):
    return "-" if value is None else format(value, spec)


def start_ray() -> float:
    """A local Ray for the parts measured in this process; its CPUs."""
    import ray

    global naive_worker
    naive_worker = ray.remote(_naive_worker)
    ray.init(address="local", include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": REPO_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}})
    return ray.cluster_resources()["CPU"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short windows (about 10 minutes on 2 cores)")
    harness.add_seed_flags(parser, "0 1 2")  # each time-to-solve's seeds
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8], help="rollout workers to measure")
    parser.add_argument("--skip", nargs="*", default=[], choices=PARTS, help="parts to leave out")
    parser.add_argument("--only", nargs="+", choices=[p for p in PARTS if p != "sb3"],
                        help="only these parts (with SB3's side unless --skip sb3)")
    parser.add_argument("--lunar", action="store_true", help="add the LunarLanderContinuous-v3 part (long)")
    parser.add_argument("--lunar_cap", type=float, default=60.0, help="minutes each Lunar run may take at most")
    parser.add_argument("--atari", action="store_true",
                        help="add the Atari part (benchmarks/atari.py; with the Pong run, over an hour)")
    parser.add_argument("--pong_minutes", type=float, default=60.0,
                        help="length of the Atari part's Pong run (0: none)")
    parser.add_argument("--pong_workers", type=int, default=2, help="rollout workers of the Pong run")
    harness.add_seed_flags(parser, "0", prefix="lunar_")  # the Lunar part's seeds
    parser.add_argument("--settings", choices=["defaults", "tuned"], default="defaults",
                        help="dsac's settings in the solve rows: the product's defaults (what users run) or "
                             "benchmarks/configs/")
    parser.add_argument("--out", default="benchmark.json", help="where the JSON goes")
    args = parser.parse_args(argv)
    if args.only:
        args.skip = [p for p in PARTS if p not in args.only and p != "sb3"] + [p for p in args.skip if p == "sb3"]
    else:
        args.skip = [*args.skip, *(["lunar"] if not args.lunar else []), *(["atari"] if not args.atari else [])]
    window = 3.0 if args.quick else 10.0
    report: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "platform": platform.platform()}, "quick": args.quick}
    t0 = time.time()
    report["raw_env_steps_per_s"] = {e: raw_env_rate(e, 2.0) for e in ("Pendulum-v1", "CartPole-v1")}
    print(f"raw env: {report['raw_env_steps_per_s']}", file=sys.stderr)

    in_ray = [p for p in ("collection", "naive", "learner", "sync", "atari") if p not in args.skip]
    cores = float(os.cpu_count() or 1)
    if in_ray:
        cores = start_ray()
    if "collection" not in args.skip:
        report["collection"] = {}
        for algo, env_id in (("sac", "Pendulum-v1"), ("dqn", "CartPole-v1")):
            report["collection"][env_id] = {w: collection_rate(algo, env_id, w, window) for w in args.workers}
            # Acting on a batch of envs spreads the policy's forward pass over them.
            report["collection"][env_id][f"2x{BATCHED_ENVS}"] = collection_rate(
                algo, env_id, 2, window, envs_per_worker=BATCHED_ENVS)
            print(f"collection {env_id}: {report['collection'][env_id]}", file=sys.stderr)
    if "naive" not in args.skip:
        w = 2
        report["naive"] = {"workers": w, "Pendulum-v1": collection_rate("sac", "Pendulum-v1", w, window, naive=True)}
        print(f"naive: {report['naive']}", file=sys.stderr)
    if "learner" not in args.skip:
        local = local_learner_rate(window)
        system = in_system(2 * window)
        report["learner"] = {"local_updates_per_s": local, **system, "feed_efficiency": system["updates_per_s"] / local}
        print(f"learner: {report['learner']}", file=sys.stderr)
    if "sync" not in args.skip:
        report["weight_sync_ms"] = []
        for w in sorted({2, max(args.workers)}):
            # A learner pushes every --push_every (20) updates: ~130 ms at ~150 updates/s.
            _, sync = collection_rate("sac", "Pendulum-v1", w, window, push_every_s=0.13)
            sync = [1000 * s for s in sync]
            report["weight_sync_ms"].append({"workers": w, "count": len(sync),
                                             "p50": float(np.percentile(sync, 50)) if sync else None,
                                             "p95": float(np.percentile(sync, 95)) if sync else None})
        print(f"sync: {report['weight_sync_ms']}", file=sys.stderr)
    if "atari" not in args.skip:
        from benchmarks import atari as atari_part

        atari_part.run(report, [w for w in (1, 2, 4) if w <= max(args.workers)], window, args.pong_minutes,
                            args.pong_workers, collection_rate)
    if in_ray:
        import ray

        ray.shutdown()
    if "solve" not in args.skip:
        solve_rows(report, args)
    if "equal" not in args.skip:
        equal_rows(report, args)
    if "lunar" not in args.skip:
        lunar_rows(report, args)
    report["benchmark_s"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2, default=float)
    print(markdown(report, cores))
    return 0


# --- races across commits ------------------------------------------------------------------
RACE_FILE = re.compile(r"^(?P<order>\d+)-(?P<side>[A-Z])-(?P<commit>[0-9a-f]{7,40})\.json$")
RACES = (("solve", "sac", "SAC Pendulum-v1 to -200"), ("solve", "dqn", "DQN CartPole-v1 to 475"),
         ("lunar", "dsac", "SAC LunarLanderContinuous-v3 to 200"))


def race_runs(report: dict, part: str, key: str) -> list[dict]:
    """The dsac runs a report holds for one race (none if it did not run it)."""
    section = (report.get(part) or {}).get(key)
    return list(section.get("runs", []) if isinstance(section, dict) else section or [])


def races_markdown(directory: str) -> str:
    """A sitting of time-to-solve races between commits: every ``<order>-<side>-<commit>.json``
    in ``directory`` (a ``python -m benchmarks speed`` report each, run in that order), one row
    per race and side with every run (seed: seconds) and the median of the side's runs. A run
    that did not solve counts at the time it stopped, marked, so a median is no better than the
    truth; one that ended without any evaluation is shown and left out of the median and n."""
    files = sorted((int(m["order"]), m["side"], m["commit"], name) for name in os.listdir(directory)
                   if (m := RACE_FILE.match(name)))
    reports = []
    for _, side, commit, name in files:
        with open(os.path.join(directory, name)) as f:
            reports.append((side, commit, json.load(f)))
    lines = ["| race | side, commit | runs, in order (seed: seconds to the threshold) | median s | n | vs A |",
             "|---|---|---|---:|---:|---:|"]
    for part, key, title in RACES:
        sides: dict[tuple[str, str], list[dict]] = {}
        for side, commit, report in reports:
            runs = race_runs(report, part, key)
            if runs:
                sides.setdefault((side, commit), []).extend(runs)
        timed = {side: [r["wall_s"] for r in runs if r.get("wall_s") is not None] for side, runs in sides.items()}
        medians = {side: statistics.median(times) if times else None for side, times in timed.items()}
        first = next((m for (side, _), m in medians.items() if side == "A"), None)
        for (side, commit), runs in sides.items():
            cells = "; ".join(f"{r['seed']}: no evaluation" if r.get("wall_s") is None else
                              f"{r['seed']}: {r['wall_s']:.0f}" + ("" if r.get("solved") else " (not solved)")
                              for r in runs)
            median_s = medians[(side, commit)]
            ratio = f"{median_s / first:.2f}x" if first and median_s is not None else ""
            lines.append(f"| {title} | {side}, {commit} | {cells} | "
                         f"{'' if median_s is None else f'{median_s:.1f}'} | {len(timed[(side, commit)])} | {ratio} |")
    return "\n".join(lines)


def markdown(r: dict, cores: float) -> str:
    """The report as a Markdown table, targets beside the figures."""
    rows = ["| measure | value | target |", "|---|---|---|"]
    raw = r["raw_env_steps_per_s"]
    rows += [f"| raw env steps/s, one env, one process: {e} | {fmt(v)} | |" for e, v in raw.items()]
    for env_id, by_w in r.get("collection", {}).items():
        for w, rate in by_w.items():
            workers, _, envs = str(w).partition("x")
            floor = raw[env_id] * min(int(workers), cores)
            target = f"≥ 35% of {fmt(floor)} (W=2, Pendulum)" if env_id == "Pendulum-v1" and int(workers) == 2 else ""
            label = f"W={workers}" + (f", {envs} envs per worker" if envs else "")
            rows.append(f"| collection {env_id}, {label} | {fmt(rate)} steps/s ({rate / floor:.0%} of "
                        f"raw×min(W,cores)) | {target} |")
    if "naive" in r:
        ours = r.get("collection", {}).get("Pendulum-v1", {}).get(r["naive"]["workers"])
        ratio = f" → dsac {ours / r['naive']['Pendulum-v1']:.0f}×" if ours else ""
        rows.append(f"| naive baseline (remote call per step, eager TF batch 1), Pendulum W={r['naive']['workers']} "
                    f"| {fmt(r['naive']['Pendulum-v1'])} steps/s{ratio} | dsac ≥ 20× |")
    if "learner" in r:
        lr = r["learner"]
        rows.append(f"| SAC learner updates/s, local batches | {fmt(lr['local_updates_per_s'])} | |")
        rows.append(f"| SAC learner updates/s, in the running system (4 workers) | {fmt(lr['updates_per_s'])} "
                    f"(waiting for data {lr['wait_fraction']:.0%} of the time) | |")
        rows.append(f"| feed efficiency (in system / local) | {lr['feed_efficiency']:.2f} | ≥ 0.9 |")
    for ws in r.get("weight_sync_ms", []):
        rows.append(f"| weight sync, push → all {ws['workers']} workers act with it (ms, n={ws['count']}) "
                    f"| p50 {fmt(ws['p50'], '.0f')}, p95 {fmt(ws['p95'], '.0f')} | p95 ≤ 100 |")
    for algo, s in r.get("solve", {}).items():
        env_id, threshold = SOLVE[algo][:2]
        per_seed = ", ".join(f"{fmt(x['wall_s'], '.1f')} s / {fmt(x['env_steps'])}" for x in s["runs"])
        sb3 = (r.get("sb3") or {}).get(algo)
        versus = ""
        if sb3:
            sb3_seeds = ", ".join(f"{fmt(x.get('wall_s'), '.1f')} s / {fmt(x.get('env_steps'))}" for x in sb3["runs"])
            ratio = (s["median_wall_s"] / sb3["median_wall_s"]) if s["median_wall_s"] and sb3["median_wall_s"] else None
            versus = f"; SB3 (rl-zoo) {fmt(sb3['median_wall_s'], '.1f')} ({sb3_seeds}) → {fmt(ratio, '.2f')}×"
        settings = r.get("solve_settings", "tuned")
        rows.append(f"| time to solve {algo.upper()} {env_id} to {threshold:g}, dsac {settings}: median wall s "
                    f"(per seed: s / steps), same evaluation start states | {fmt(s['median_wall_s'], '.1f')} "
                    f"({per_seed}){versus} | ≤ 0.5× SB3 |")
        if sb3 and sb3.get("plain"):
            plain = sb3["plain"]
            seeds = ", ".join(f"{fmt(x.get('wall_s'), '.1f')} s / {fmt(x.get('env_steps'))}" for x in plain["runs"])
            rows.append(f"| the same SB3 by a plain script (benchmarks/sb3_plain.py, no dsac code) | "
                        f"{fmt(plain['median_wall_s'], '.1f')} ({seeds}) | agrees with the SB3 row |")
    for algo, e in r.get("equal", {}).items():
        env_id, threshold = SOLVE[algo][:2]
        sides = []
        for side in ("dsac", "sb3"):
            seeds = ", ".join(f"{fmt(x['wall_s'], '.1f')} s / {fmt(x['env_steps'])}" for x in e[f"{side}_runs"])
            sides.append(f"{side} {fmt(e[f'{side}_median_wall_s'], '.1f')} ({seeds})")
        ratio = (e["dsac_median_wall_s"] / e["sb3_median_wall_s"]) if e["dsac_median_wall_s"] and e.get(
            "sb3_median_wall_s") else None
        rows.append(f"| time to solve {algo.upper()} {env_id} to {threshold:g}, equal settings on both sides "
                    f"({e['settings']}): median wall s | {'; '.join(sides)} → {fmt(ratio, '.2f')}× | |")
    if "lunar" in r:
        env_id, threshold, _ = LUNAR
        cap_min = r["lunar"]["cap_s"] / 60

        def lunar_cell(run):
            if run.get("error") and not run.get("env_steps"):
                return f"seed {run['seed']}: error {run['error']}"
            if run.get("solved"):
                return f"seed {run['seed']}: {fmt(run['wall_s'], '.0f')} s / {fmt(run['env_steps'])} steps"
            best = run.get("best_return")
            return (f"seed {run['seed']}: not reached in {cap_min:g} min ({fmt(run.get('env_steps'))} steps, best "
                    f"{fmt(best, '.0f')})")

        cells = [f"dsac defaults: {'; '.join(map(lunar_cell, r['lunar']['dsac']))}"]
        if r["lunar"]["sb3"]:
            cells.append(f"SB3 rl-zoo: {'; '.join(map(lunar_cell, r['lunar']['sb3']))}")
            # Medians of the seeds that reached it (the cells say which did not).
            ours, theirs = (median(x["wall_s"] for x in r["lunar"][side] if x.get("solved"))
                            for side in ("dsac", "sb3"))
            if ours and theirs:
                cells[-1] += f" → {ours / theirs:.2f}× (medians of the runs that reached it)"
        rows.append(f"| time to solve SAC {env_id} to {threshold:g}, each capped at {cap_min:g} min | "
                    f"{' · '.join(cells)} | beside {RL_ZOO_LUNAR} |")
    if "atari" in r:
        from benchmarks import atari as atari_part

        rows += atari_part.markdown(r["atari"])
    rows.append(f"| benchmark wall time | {r['benchmark_s']} s | |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
