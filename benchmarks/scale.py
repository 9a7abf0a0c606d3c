"""How dsac scales out: env steps collected by many rollout workers of an expensive env, against
the machine's own ceiling, on one node and on a local 4-node cluster; and the capacity of each
shared actor, driven directly.

    python -m benchmarks scale --quick --json benchmarks/results/scale/quick.json   # everything, ~15 min on 2 cores
    python -m benchmarks scale                                # the full run: longer windows
    python -m benchmarks scale --only capacity                # one part: collection, cluster, capacity

The env is Pendulum-v1 made to take ``--env_step_ms`` per step by sleeping
(``launch.py --env_step_ms``, :class:`dsac.envs.make.SimulatedCost`): W workers wait on their envs
as they would on a simulator or a robot, so on 2 cores 64 workers are I/O-bound, as on a
large cluster, and what is measured is dsac's own coordination cost.

collection   env steps/s landing in replay from W rollout workers (one env each, SAC with
             2x256 networks, the learner held off the critical path at 0.002 updates per env
             step, pushing new weights every 4 updates), in steady state: after warm-up
             iterations (until every worker delivered), windows of ``--seconds`` inside one long
             ``Trainer.train()`` iteration, read from the replay shards' counters. Ideal:
             W * envs_per_worker * 1000 / env_step_ms, as if a worker's envs slept
             concurrently (they step one after another, so with several envs per worker the
             ideal is not reachable: use 1). Beside it the bare ceiling: the same env stepped
             by W plain Ray actors acting with the same numpy actor (2x256), nothing else (no
             replay, no weights), with the CPU share dsac gives a worker. efficiency = measured / ideal;
             of_bare = measured / bare. Weight sync: seconds from a push until every worker's
             next pull says it acts with that version (p50/p95); weights lag: versions behind
             the latest at each pull a worker made while acting (mean/p95). CPU (% of one core)
             and RSS per role, summed over the role's processes, over the measured windows.
cluster      the same on ``ray.cluster_utils.Cluster`` (4 nodes of 2 logical CPUs on this
             machine), workers spread by dsac's placement; per-node worker counts.
capacity     one replay shard's ``add`` rate (transitions/s) for chunks of 16 ... 1024 of
             Pendulum-sized and 4x84x84-uint8-sized transitions (stacks as such: dsac's frame
             store sends about one 84x84 frame per transition instead) and ``sample`` rate
             (batches of 256/s); the parameter server's ``pull`` rate (every pull carrying the
             weights) and push-to-every-worker latency with W workers waiting on it, for weights
             of a 2x256 MLP (0.3 MB) and of the Nature conv net (~6.5 MB); the gradient
             averager's rounds/s for 2 and 4 learners (2x256 SAC-sized gradients).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ENV = "Pendulum-v1"
WORKERS = [1, 2, 4, 8, 16, 32, 64]
# The learner off the critical path: 64 workers of a 10 ms env need 12.8 updates/s of it (a
# sample call of 16 batches opens 8,000 env steps of insert budget), and it pushes new
# weights every 4 updates, so that weight sync is measured from 8 workers up.
UPDATES_PER_STEP = 0.002
PUSH_EVERY = 4
WARMUP_ITERATIONS = 5
# Seconds from the start of the measured iteration to the first window (workers granted budget
# again after the warm-up's insert limit).
RAMP_S = 2.0
CLUSTER_NODES = 4
CLUSTER_NODE_CPUS = 2


# --- collection ----------------------------------------------------------------------------


def acting_policy(seed: int, env_id: str = ENV):
    """The numpy actor dsac's rollout workers act with here (SAC, 2x256, on ``env_id``), with
    random weights: what acting costs any system that uses this network."""
    from dsac.config import Config
    from dsac.envs.make import make_env
    from dsac.settings.registry import policy_class_for

    config = Config(env=env_id, fcnet_hiddens=[256, 256]).validate()
    env = make_env(env_id)
    policy = policy_class_for(config.run)(env.observation_space, env.action_space, config, seed=seed)
    rng = np.random.default_rng(seed)
    policy.set_weights({name: (0.05 * rng.normal(size=shape)).astype(np.float32)
                        for name, shape in policy.weight_shapes().items()})
    return policy


class BareWorker:
    """A plain Ray actor stepping ``envs_per_worker`` envs (one after another), acting on their
    observations with the same numpy actor as a dsac rollout worker, and nothing else: the bare
    ceiling's worker. Its envs are made when it starts, so that what :meth:`run` measures is
    stepping alone, not process start-up (64 Python processes take tens of seconds to start
    on 2 cores)."""

    def __init__(self, step_ms: float, envs_per_worker: int, seed: int, env_id: str = ENV):
        from dsac.envs.make import make_env, with_simulated_cost

        self.envs = [with_simulated_cost(make_env(env_id), step_ms) for _ in range(envs_per_worker)]
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.policy = acting_policy(seed, env_id)

    def ready(self) -> bool:
        return True

    def run(self, start_at: float, seconds: float) -> tuple[int, float]:
        """Env steps taken between ``start_at`` and ``start_at + seconds`` (wall clock), and
        the CPU seconds this process used meanwhile."""
        time.sleep(max(0.0, start_at - time.time()))
        steps, end, cpu = 0, start_at + seconds, time.process_time()
        while time.time() < end:
            actions = self.policy.compute_actions(self.obs, explore=True)
            for i, env in enumerate(self.envs):
                next_obs, _, terminated, truncated, _ = env.step(actions[i])
                self.obs[i] = env.reset()[0] if terminated or truncated else next_obs
                steps += 1
        return steps, time.process_time() - cpu


def started(actors: list, timeout: float = 600.0) -> list:
    """``actors`` once every one has answered ``ready()``."""
    import ray

    ray.get([a.ready.remote() for a in actors], timeout=timeout)
    return actors


def bare_rate(workers: int, step_ms: float, seconds: float, envs_per_worker: int = 1,
              env_id: str = ENV) -> tuple[float, float]:
    """Env steps/s of ``workers`` :class:`BareWorker` actors with the CPU share dsac gives a
    rollout worker, all started (envs made) before the window, which they all begin together;
    and their CPU (% of one core) together."""
    import ray

    bare = ray.remote(BareWorker).options(num_cpus=cpus_per_worker(workers))
    actors = started([bare.remote(step_ms, envs_per_worker, 1000 * i, env_id) for i in range(workers)])
    try:
        start_at = time.time() + 1.0
        runs = ray.get([a.run.remote(start_at, seconds) for a in actors])
        return sum(steps for steps, _ in runs) / seconds, 100.0 * sum(cpu for _, cpu in runs) / seconds
    finally:
        for a in actors:
            ray.kill(a)


def cpus_per_worker(workers: int) -> float:
    """The CPU share dsac's placement gives each of ``workers`` rollout workers on this
    cluster (the bare tasks get the same)."""
    import ray

    from dsac.config import Config
    from dsac.distributed.topology import plan_resources

    config = Config(num_workers=workers).validate()
    return plan_resources(config.resources, config.flow, ray.cluster_resources()).worker_cpus


def percentile_ms(seconds: np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile of ``seconds`` in milliseconds (None when there are none)."""
    return round(1000 * float(np.percentile(seconds, q)), 1) if len(seconds) else None


class RoleUsage:
    """CPU and RSS of this machine's Ray processes by role (their process titles:
    ``ray::rollout_worker``, ``ray::ParameterServer``, ...) and of the driver, between
    :meth:`start` and :meth:`stop`."""

    def start(self) -> None:
        self.before = self._times()
        self.started = time.monotonic()

    @staticmethod
    def _role(proc) -> str | None:
        import psutil

        try:
            if proc.pid == os.getpid():
                return "driver"
            title = " ".join(proc.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        if not title.startswith("ray::"):
            return None
        role = title[5:].split()[0].split(".")[0]
        return None if role in ("IDLE", "") else role

    def _times(self) -> dict:
        import psutil

        out = {}
        for proc in psutil.process_iter():
            role = self._role(proc)
            if role is None:
                continue
            try:
                times, rss = proc.cpu_times(), proc.memory_info().rss
            except psutil.NoSuchProcess:
                continue
            out[proc.pid] = (role, times.user + times.system, rss)
        return out

    def stop(self) -> dict:
        after, elapsed = self._times(), time.monotonic() - self.started
        roles: dict[str, dict] = {}
        for pid, (role, cpu, rss) in after.items():
            was = self.before.get(pid)
            used = cpu - was[1] if was and was[0] == role else 0.0
            entry = roles.setdefault(role, {"processes": 0, "cpu_percent": 0.0, "rss_mib": 0.0})
            entry["processes"] += 1
            entry["cpu_percent"] += 100.0 * used / elapsed
            entry["rss_mib"] += rss / 2**20
        return {role: {k: round(v, 1) for k, v in e.items()} for role, e in sorted(roles.items())}


def delivering(trainer) -> dict[int, int]:
    """``{rollout worker: transitions it delivered}`` of the workers that delivered any."""
    import ray

    counts = {}
    for shard in trainer.actor_handles["replay_shards"]:
        counts.update(ray.get(shard.writer_counts.remote()))
    return {w: n for w, n in counts.items() if n > 0}


def replay_added(trainer) -> tuple[int, int]:
    """Transitions in the run's replay shards so far, and the add calls that brought them."""
    import ray

    stats = ray.get([s.stats.remote() for s in trainer.actor_handles["replay_shards"]])
    return sum(s.added for s in stats), sum(s.add_calls for s in stats)


def learner_updates(trainer) -> int:
    """The learner's update count (its last push's report)."""
    import ray

    return int(ray.get(trainer.actor_handles["parameter_server"].latest.remote()).report.updates)


def cross_node_add_bytes(trainer) -> int:
    """Bytes of chunks the rollout workers sent to a replay shard on another node."""
    import ray

    system = trainer._run
    nodes = {role: node for role, node in system.placements.items()}
    total = 0
    for shard in trainer.actor_handles["replay_shards"]:
        shard_node = ray.get(shard.where.remote())["node"]
        for writer, nbytes in ray.get(shard.writer_bytes.remote()).items():
            if nodes.get(f"rollout_worker_{writer}", shard_node) != shard_node:
                total += nbytes
    return total


def dsac_rate(workers: int, step_ms: float, seconds: float, iterations: int, envs_per_worker: int = 1,
              address: str | None = None, env_id: str = ENV) -> dict:
    """Env steps/s into replay from ``workers`` dsac rollout workers, weight sync and lag,
    per-role CPU/RSS, and the workers per node (see the module)."""
    import ray

    from dsac import Trainer
    from dsac.distributed.driver import workers_per_node

    # A CPU-bound env (no sleep): sized for ~20k env steps/s per worker.
    ideal = workers * envs_per_worker * (1000.0 / step_ms if step_ms else 20_000.0)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer({
            "env": env_id, "env_step_ms": step_ms, "num_workers": workers, "envs_per_worker": envs_per_worker,
            "fcnet_hiddens": [256, 256], "updates_per_step": UPDATES_PER_STEP, "push_every": PUSH_EVERY,
            "learning_starts": 100, "start_steps": 100,
            "steps_per_iteration": max(200, int(ideal * seconds)), "eval_every": 10**9, "tensorboard": False,
            "progress_bar": False, "log_every": 3600.0, "output_dir": os.path.join(out, "run"), "address": address,
        })
        try:
            ps = trainer.actor_handles["parameter_server"]
            # Until every worker delivered: started (64 processes take a while on 2 cores), env
            # made, first weights pulled.
            for _ in range(WARMUP_ITERATIONS):
                trainer.train()
                if len(delivering(trainer)) == workers:
                    break
            # Steady state: one long iteration (no insert limit met inside the windows) in a
            # thread; the windows read the replay shards' counters.
            trainer.config = trainer.config.replace(
                steps_per_iteration=int(ideal * (seconds * iterations + 2 * RAMP_S)))
            running = threading.Thread(target=trainer.train, daemon=True)
            running.start()
            time.sleep(RAMP_S)  # every worker granted budget again
            ray.get(ps.status.remote(drain_synced=True))  # from here on
            lag_before, updates_before = ray.get(ps.status.remote()), learner_updates(trainer)
            cross_before = cross_node_add_bytes(trainer)
            usage = RoleUsage()
            usage.start()
            rates = []
            (added, calls_before), at = replay_added(trainer), time.monotonic()
            added_before = added
            for _ in range(iterations):
                time.sleep(max(0.0, at + seconds - time.monotonic()))
                (now_added, calls), now = replay_added(trainer), time.monotonic()
                rates.append((now_added - added) / (now - at))
                added, at = now_added, now
            add_calls = calls - calls_before
            roles = usage.stop()
            steps_in_windows = added - added_before
            cross_bytes = cross_node_add_bytes(trainer) - cross_before
            updates_after, elapsed = learner_updates(trainer), iterations * seconds
            sync = np.asarray(ray.get(ps.status.remote(drain_synced=True))["synced"])
            lag = ray.get(ps.status.remote())
            delivered = delivering(trainer)
            per_node = workers_per_node(getattr(trainer._run, "placements", {}))
            running.join()
        finally:
            trainer.stop()
    return {
        "env_steps_per_s": statistics.median(rates),
        "iterations": [round(r, 1) for r in rates],
        "updates_per_s": round((updates_after - updates_before) / elapsed, 1),
        "add_calls_per_s": round(add_calls / elapsed, 1),
        "weight_sync_p50_ms": percentile_ms(sync, 50),
        "weight_sync_p95_ms": percentile_ms(sync, 95),
        "weight_syncs": len(sync), "pushes": lag["version"] - lag_before["version"],
        "ps_pulls_per_version": round((lag["pulls_answered"] - lag_before["pulls_answered"])
                                      / max(1, lag["version"] - lag_before["version"]), 2),
        "env_steps_in_windows": steps_in_windows, "cross_node_add_mb": round(cross_bytes / 1e6, 2),
        "weights_lag_mean": None if lag["mean"] is None else round(lag["mean"], 3), "weights_lag_p95": lag["p95"],
        "weights_lag_max": lag["max"], "workers_delivering": len(delivered),
        "workers_per_node": sorted(per_node.values(), reverse=True), "roles": roles,
    }


# The processes of a run that are dsac's (not Ray's own agents): "all dsac processes".
DSAC_ROLES = ("rollout_worker", "ReplayBuffer", "ParameterServer", "RunMonitor", "WeightsCache", "GradientAverager",
              "learner", "evaluator", "driver")


def cpu_per_step_ratios(measured: dict, bare: float, bare_cpu: float, seconds: float, iterations: int) -> dict:
    """Rollout worker processes' CPU seconds per env step ÷ the bare loop's, and all dsac
    processes' (every role, the driver included) ÷ the bare loop's, over the measured windows."""
    steps_per_s = measured["env_steps_in_windows"] / (seconds * iterations)
    bare_per_step = bare_cpu / 100.0 / max(bare, 1e-9)
    workers = measured["roles"].get("rollout_worker", {}).get("cpu_percent", 0.0)
    everything = sum(u["cpu_percent"] for role, u in measured["roles"].items() if role in DSAC_ROLES)
    per_step = lambda cpu: cpu / 100.0 / max(steps_per_s, 1e-9) / max(bare_per_step, 1e-12)  # noqa: E731
    return {"cpu_per_step_vs_bare": round(per_step(workers), 3),
            "cpu_per_step_vs_bare_all": round(per_step(everything), 3)}


def collection_rows(workers: list[int], step_ms: float, seconds: float, iterations: int, envs_per_worker: int,
                    nodes: int = 1, address: str | None = None, env_id: str = ENV) -> list[dict]:
    rows = []
    for w in workers:
        ideal = w * envs_per_worker * 1000.0 / step_ms if step_ms else None
        # The bare loop before and after dsac's windows: the machine's speed drifts over
        # minutes (the bare CPU per step of a CPU-bound env moved by a quarter between runs),
        # and the ratios divide by their mean.
        before = bare_rate(w, step_ms, seconds, envs_per_worker, env_id)
        measured = dsac_rate(w, step_ms, seconds, iterations, envs_per_worker, address, env_id)
        after = bare_rate(w, step_ms, seconds, envs_per_worker, env_id)
        bare, bare_cpu = (before[0] + after[0]) / 2, (before[1] + after[1]) / 2
        ratios = cpu_per_step_ratios(measured, bare, bare_cpu, seconds, iterations)
        rate = measured.pop("env_steps_per_s")
        row = {
            "workers": w, "nodes": nodes, "env": env_id, "envs_per_worker": envs_per_worker, "env_step_ms": step_ms,
            "env_steps_per_s": round(rate, 1), "ideal_env_steps_per_s": ideal or bare,
            "bare_env_steps_per_s": round(bare, 1),
            "efficiency": round(rate / (ideal or bare), 3), "bare_efficiency": round(bare / (ideal or bare), 3),
            "of_bare": round(rate / bare, 3), "bare_cpu_percent": round(bare_cpu, 1),
            "bare_before_after": [[round(r, 1), round(c, 1)] for r, c in (before, after)], **ratios, **measured,
            "cpu_percent": round(sum(u["cpu_percent"] for u in measured["roles"].values()), 1),
        }
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def cluster_rows(workers: list[int], step_ms: float, seconds: float, iterations: int, envs_per_worker: int,
                 env_id: str = ENV) -> list[dict]:
    """The collection rows on a local multi-node cluster (this machine's Ray must be down)."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": CLUSTER_NODE_CPUS,
                                                            "include_dashboard": False})
    try:
        for _ in range(CLUSTER_NODES - 1):
            cluster.add_node(num_cpus=CLUSTER_NODE_CPUS)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": REPO_ROOT}})
        try:
            return collection_rows(workers, step_ms, seconds, iterations, envs_per_worker, nodes=CLUSTER_NODES,
                                   address=cluster.address, env_id=env_id)
        finally:
            ray.shutdown()
    finally:
        cluster.shutdown()


# --- capacity of the shared actors ---------------------------------------------------------


def _pipelined(call, seconds: float, in_flight: int = 8) -> float:
    """Calls/s of ``call()`` (returning an ObjectRef) kept ``in_flight`` deep for ``seconds``."""
    import ray

    refs = [call() for _ in range(in_flight)]
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        ready, refs = ray.wait(refs, num_returns=1)
        ray.get(ready)
        done += 1
        refs.append(call())
    elapsed = time.monotonic() - started
    ray.get(refs)
    return done / elapsed


def replay_capacity(seconds: float, chunks=(16, 64, 256, 1024)) -> list[dict]:
    """One shard's add rate per chunk size and transition size, and its sample rate."""
    import ray

    from dsac.distributed.actors import ReplayBuffer
    from dsac.replay.buffer import field_specs
    from dsac.runtime.messages import Chunk

    rows = []
    kinds = {"pendulum": ((3,), np.float32, 200_000), "84x84x4 uint8": ((4, 84, 84), np.uint8, 4_096)}
    rng = np.random.default_rng(0)
    for kind, (shape, dtype, capacity) in kinds.items():
        specs = field_specs(shape, dtype, (1,), np.float32)
        replay = ReplayBuffer.options(num_cpus=0).remote(
            specs, capacity, updates_per_step=1e9, learning_starts=0, max_steps_ahead=10**12, num_writers=1,
            max_chunk=max(chunks),
        )
        for size in chunks:
            arrays = {}
            for name, (field_shape, field_dtype) in specs.items():
                if field_dtype == np.uint8:
                    arrays[name] = rng.integers(0, 256, (size, *field_shape), dtype=np.uint8)
                else:
                    arrays[name] = rng.normal(size=(size, *field_shape)).astype(field_dtype)
            chunk = ray.put(Chunk(arrays))  # serialized once: what is measured is the actor's side
            calls = _pipelined(lambda c=chunk, r=replay: r.add.remote(0, c), seconds, in_flight=4)
            rows.append({"actor": "replay", "op": "add", "transition": kind, "chunk": size,
                         "calls_per_s": round(calls, 1), "transitions_per_s": round(calls * size, 1),
                         "mb_per_s": round(calls * sum(a.nbytes for a in arrays.values()) / 1e6, 1)})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        batches = _pipelined(lambda r=replay: r.sample.remote(256, 1), seconds, in_flight=4)
        rows.append({"actor": "replay", "op": "sample", "transition": kind, "batch": 256,
                     "batches_per_s": round(batches, 1)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        ray.get(replay.stop.remote())
        ray.kill(replay)
    return rows


def fake_weights(megabytes: float) -> dict:
    """Float32 arrays of about ``megabytes`` in all, shaped like a network's layers."""
    n = int(megabytes * 1e6 / 4)
    return {f"layer_{i}/kernel": np.random.default_rng(i).normal(size=n // 4).astype(np.float32) for i in range(4)}


class Client:
    """A stand-in for a rollout worker or a learner, driving a shared actor directly. A pool of
    them is started once (processes up, modules imported) and reused, so that what is timed is
    the actor, not process start-up."""

    def ready(self) -> bool:
        return True

    def pull_loop(self, ps, seconds: float, start_at: float) -> int:
        """Pulls, each carrying the weights (resolved as a worker does), in ``seconds``."""
        import ray

        from dsac.distributed.weights_client import pulled_weights

        time.sleep(max(0.0, start_at - time.time()))
        count, end = 0, start_at + seconds
        while time.time() < end:
            pulled_weights(ray.get(ps.pull.remote(0)).weights)
            count += 1
        return count

    def wait_loop(self, ps, index: int, board: str | None = None) -> int:
        """A rollout worker's weights loop around a 10 ms env step, until the stop flag (from
        the parameter server's shared-memory ``board`` where given)."""
        from dsac.distributed.weights_client import WeightsClient

        class Holder:  # what a worker's policy does with weights, minus the numpy copy
            has_weights = False

            def set_weights(self, weights):
                self.has_weights = True

        client = WeightsClient(ps, Holder(), worker=index, board=board).start()
        while not client.stop:
            client.poll()
            time.sleep(0.01)
        client.close()
        return client.version

    def average_loop(self, averager, index: int, seconds: float, start_at: float, megabytes: float) -> int:
        """Gradient-averaging rounds of one learner in ``seconds``."""
        import ray

        gradient = np.ones(int(megabytes * 1e6 / 4), np.float32)
        group, state = ray.get(averager.join.remote(index, 0))  # the learner group forms first
        if state is None:  # this client's (empty) state is the group's
            ray.get(averager.share.remote(index, group, {}))
        time.sleep(max(0.0, start_at - time.time()))
        step, end = 0, start_at + seconds
        while time.time() < end:
            if ray.get(averager.average.remote(index, group, step, gradient, 1.0)) is None:
                break
            step += 1
        return step


def client_pool(size: int) -> list:
    import ray

    return started([ray.remote(Client).options(num_cpus=0).remote() for _ in range(size)])


def push_to_all(ps, weights, pushes: int, timeout: float = 10.0) -> np.ndarray:
    """Seconds from a push until every waiting client holds it, for ``pushes`` pushes, each
    made once the one before has reached every client (so none queues behind another)."""
    import ray

    ray.get(ps.status.remote(drain_synced=True))
    pushed = ray.put(weights)
    out = []
    for _ in range(pushes):
        ray.get(ps.push.remote(pushed))
        deadline = time.monotonic() + timeout
        synced = []
        while not synced and time.monotonic() < deadline:
            time.sleep(0.01)
            synced = ray.get(ps.status.remote(drain_synced=True))["synced"]
        out += synced
        time.sleep(0.05)
    return np.asarray(out)


def ps_capacity(seconds: float, workers=(8, 32, 64), sizes=(("mlp 2x256", 0.3), ("nature conv", 6.5)),
                pushes: int = 10) -> list[dict]:
    """The parameter server's pull rate (each pull carries the weights, which the puller
    resolves) and its push-to-every-worker latency with W clients keeping a waiting pull on it
    (:meth:`Client.wait_loop`), by value and by reference; and the same latency with the W
    clients on its shared-memory board (``delivery: board``: no pulls)."""
    import uuid

    import ray

    from dsac.distributed.actors import ParameterServer

    pool = client_pool(max(workers))
    rows = []
    for (label, megabytes), delivery, w in itertools.product(sizes, ("value", "reference", "board"), workers):
        weights = fake_weights(megabytes)
        board = f"scale-{uuid.uuid4().hex[:8]}" if delivery == "board" else None
        ps = ParameterServer.options(num_cpus=0, max_concurrency=max(1000, 4 * w + 100)).remote(
            0, delivery != "value", board=board, num_workers=w)
        ray.get(ps.push.remote(weights))
        clients = pool[:w]
        start_at = time.time() + 1.0
        pulls = 0.0
        if board is None:
            pulls = sum(ray.get([c.pull_loop.remote(ps, seconds, start_at) for c in clients])) / seconds
        refs = [c.wait_loop.remote(ps, i, board) for i, c in enumerate(clients)]
        deadline = time.monotonic() + 60
        while len(ray.get(ps.status.remote())["held"]) < w and time.monotonic() < deadline:
            time.sleep(0.2)  # until every client holds the first version and waits on the next
        time.sleep(0.5)
        sync = push_to_all(ps, weights, pushes)
        ray.get(ps.stop.remote("benchmark"))
        ray.get(refs)
        ray.kill(ps)
        rows.append({"actor": "parameter_server", "weights": label, "weights_mb": megabytes, "workers": w,
                     "by_reference": delivery != "value", "delivery": delivery,
                     "pulls_per_s": round(pulls, 1), "mb_per_s": round(pulls * megabytes, 1),
                     "push_to_all_p50_ms": percentile_ms(sync, 50),
                     "push_to_all_p95_ms": percentile_ms(sync, 95),
                     "pushes_synced": len(sync)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    for c in pool:
        ray.kill(c)
    return rows


def averager_capacity(seconds: float, learners=(2, 4), megabytes: float = 0.9) -> list[dict]:
    """Rounds/s of the gradient averager: ``learners`` clients each sending a gradient of
    ``megabytes`` per step and waiting for the mean (a 2x256 SAC's actor, critics and alpha)."""
    import ray

    from dsac.distributed.gradient_averager import GradientAverager

    pool = client_pool(max(learners))
    rows = []
    for n in learners:
        averager = GradientAverager.options(num_cpus=0).remote(n)
        start_at = time.time() + 1.0
        refs = [c.average_loop.remote(averager, i, seconds, start_at, megabytes) for i, c in enumerate(pool[:n])]
        # A learner whose window ended leaves the others waiting on a round it never joins:
        # the stop flag answers them.
        time.sleep(max(0.0, start_at + seconds + 0.5 - time.time()))
        ray.get(averager.stop.remote())
        steps = ray.get(refs)
        ray.kill(averager)
        rows.append({"actor": "gradient_averager", "learners": n, "gradient_mb": megabytes,
                     "rounds_per_s": round(min(steps) / seconds, 1)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    for c in pool:
        ray.kill(c)
    return rows


# --- output ----------------------------------------------------------------------------------


def collection_markdown(rows: list[dict]) -> str:
    lines = ["| workers | nodes | env steps/s | ideal | bare ceiling | efficiency | bare / ideal | of bare | "
             "sync p50 / p95 ms | lag mean / p95 | delivering | per node | CPU % dsac / bare | updates/s | "
             "CPU/step workers / all vs bare | PS pulls/version | cross-node add MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['workers']} | {r['nodes']} | {r['env_steps_per_s']:,.0f} | {r['ideal_env_steps_per_s']:,.0f} | "
            f"{r['bare_env_steps_per_s']:,.0f} | {r['efficiency']:.2f} | {r['bare_efficiency']:.2f} | "
            f"{r['of_bare']:.2f} | {r['weight_sync_p50_ms']} / {r['weight_sync_p95_ms']} | "
            f"{r['weights_lag_mean']} / {r['weights_lag_p95']} | {r['workers_delivering']} | "
            f"{'/'.join(map(str, r['workers_per_node']))} | {r['cpu_percent']:.0f} / {r['bare_cpu_percent']:.0f} | "
            f"{r['updates_per_s']} | {r.get('cpu_per_step_vs_bare')} / {r.get('cpu_per_step_vs_bare_all')} | "
            f"{r.get('ps_pulls_per_version')} | {r.get('cross_node_add_mb')} |")
    roles = [f"- W={r['workers']}, {r['nodes']} node(s): " + ", ".join(
        f"{role} ×{u['processes']} {u['cpu_percent']:.0f}% CPU {u['rss_mib']:,.0f} MiB"
        for role, u in r["roles"].items())
        for r in rows]
    return "\n".join([*lines, "", "CPU (% of one core) and RSS per role over the measured windows:", *roles])


def runs_markdown(runs: dict[str, dict]) -> str:
    """One row per collection row of each named run (``{name: {"collection": [...]}}``, as
    several ``--json`` files merged under names), the figures that compare runs."""
    lines = ["| run | workers, nodes | env | env steps/s (bare) | of bare | CPU/step workers ÷ bare | all ÷ bare | "
             "PS pulls/version | sync p50 / p95 ms | add calls/s | cross-node add MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        for r in run.get("collection", []):
            env = r.get("env", ENV) + (f", {r['env_step_ms']:g} ms" if r.get("env_step_ms") else "")
            lines.append(
                f"| {name} | {r['workers']}, {r['nodes']} | {env} | {r['env_steps_per_s']:,.0f} "
                f"({r['bare_env_steps_per_s']:,.0f}) | {r['of_bare']:.2f} | {r.get('cpu_per_step_vs_bare')} | "
                f"{r.get('cpu_per_step_vs_bare_all')} | {r.get('ps_pulls_per_version')} | "
                f"{r['weight_sync_p50_ms']} / {r['weight_sync_p95_ms']} | {r.get('add_calls_per_s')} | "
                f"{r.get('cross_node_add_mb')} |")
    return "\n".join(lines)


def capacity_markdown(rows: list[dict]) -> str:
    out = []
    for r in rows:
        if r["actor"] == "replay" and r["op"] == "add":
            out.append(f"| replay add | {r['transition']}, chunk {r['chunk']} | {r['transitions_per_s']:,.0f} "
                       f"transitions/s ({r['calls_per_s']:,.0f} calls/s, {r['mb_per_s']:,.0f} MB/s) |")
        elif r["actor"] == "replay":
            out.append(f"| replay sample | {r['transition']}, batch {r['batch']} "
                       f"| {r['batches_per_s']:,.0f} batches/s |")
        elif r["actor"] == "parameter_server":
            how = {"value": "by value", "reference": "by reference", "board": "on its board"}[
                r.get("delivery", "reference" if r["by_reference"] else "value")]
            pulls = ("no pulls" if how == "on its board"
                     else f"{r['pulls_per_s']:,.0f} pulls/s ({r['mb_per_s']:,.0f} MB/s)")
            out.append(f"| parameter server, {how} | {r['weights']} ({r['weights_mb']} MB), {r['workers']} workers | "
                       f"{pulls}; push to all p50/p95 {r['push_to_all_p50_ms']} / {r['push_to_all_p95_ms']} ms |")
        else:
            out.append(f"| gradient averager | {r['learners']} learners, {r['gradient_mb']} MB | "
                       f"{r['rounds_per_s']:,.1f} rounds/s |")
    return "\n".join(["| actor | load | capacity |", "|---|---|---|", *out])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer cluster sizes (~15 min)")
    parser.add_argument("--only", choices=["collection", "cluster", "capacity"], nargs="+")
    parser.add_argument("--workers", type=int, nargs="+", default=WORKERS)
    parser.add_argument("--cluster_workers", type=int, nargs="+", default=None, help="default: 16 64 (--quick: 64)")
    parser.add_argument("--env", default=ENV, help="env id (e.g. HalfCheetah-v5 with --env_step_ms 0: CPU-bound)")
    parser.add_argument("--env_step_ms", type=float, default=10.0, help="each env step sleeps this long (0: none)")
    parser.add_argument("--envs_per_worker", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of one measured window")
    parser.add_argument("--iterations", type=int, default=3, help="measured Trainer.train() windows (median)")
    parser.add_argument("--json", help="write {'collection': [...], 'capacity': [...]} here (the docs' tables: "
                                       "benchmarks/results/scale/)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.iterations = 4.0, 2
    cluster_workers = args.cluster_workers or ([64] if args.quick else [16, 64])
    parts = set(args.only or ["collection", "cluster", "capacity"])
    import ray

    from dsac.distributed.cluster import REPO_ROOT as root
    from dsac.distributed.cluster import start_local_ray

    report = {"collection": [], "capacity": []}
    if parts & {"collection", "capacity"}:
        start_local_ray(root)
        try:
            if "capacity" in parts:  # first: the processes of 64 workers take a while to go
                window = args.seconds / 2
                report["capacity"] += replay_capacity(window)
                report["capacity"] += ps_capacity(window)
                report["capacity"] += averager_capacity(window)
            if "collection" in parts:
                report["collection"] += collection_rows(args.workers, args.env_step_ms, args.seconds, args.iterations,
                                                        args.envs_per_worker, env_id=args.env)
        finally:
            ray.shutdown()
    if "cluster" in parts:
        report["collection"] += cluster_rows(cluster_workers, args.env_step_ms, args.seconds, args.iterations,
                                             args.envs_per_worker, args.env)
    if report["collection"]:
        print(collection_markdown(report["collection"]))
    if report["capacity"]:
        print()
        print(capacity_markdown(report["capacity"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
