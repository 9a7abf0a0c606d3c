"""The driver: checks the input, starts or joins Ray, wires actors and tasks, watches the
run, and writes every file the user needs on its own filesystem.

Everything that can be checked without Ray and TensorFlow is checked first, so a typo costs
about a second, not a cluster start-up.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import statistics
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import psutil
import ray

import dsac
from dsac.artifacts import append_jsonl, save_weights, write_json
from dsac.config import Config
from dsac.distributed.actors import ParameterServer, ReplayBuffer
from dsac.distributed.tasks import evaluator, learner, rollout_worker
from dsac.distributed.topology import plan_resources
from dsac.envs import check_spaces, describe_space, make_env
from dsac.errors import DsacError
from dsac.replay import check_fits_in_memory, field_specs, storage_bytes

log = logging.getLogger("dsac")

POLL_S = 0.5  # how often the driver reads the actors' counters
SHUTDOWN_TIMEOUT_S = 30.0
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(dsac.__file__)))


class RunFailed(Exception):
    """A role failed mid-run; what was learned so far has been saved."""


@dataclass
class Prepared:
    """What :func:`prepare` learned without starting Ray."""

    config: Config
    observation_space: object
    action_space: object
    output_dir: str
    created_output_dir: bool


def default_output_dir(config: Config) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{config.algo}-{config.env.replace('/', '_')}-{stamp}")


def prepare(config: Config) -> Prepared:
    """Validate the config, the env and its spaces, the replay's memory and the output dir."""
    config = config.validate()
    env = make_env(config.env)
    observation_space, action_space = env.observation_space, env.action_space
    env.close()
    check_spaces(config.env, observation_space, action_space, config.algo)
    specs = field_specs(observation_space.shape, observation_space.dtype, action_space.shape, action_space.dtype)
    check_fits_in_memory(
        storage_bytes(config.buffer_size, specs), psutil.virtual_memory().available, "this machine"
    )
    output_dir = config.output_dir or default_output_dir(config)
    created = not os.path.exists(output_dir)
    try:
        os.makedirs(output_dir, exist_ok=True)
        probe = os.path.join(output_dir, ".write-test")
        with open(probe, "w") as f:
            f.write("ok")
        os.unlink(probe)
    except OSError as exc:
        raise DsacError(f"--output_dir {output_dir} is not writable: {exc.strerror}") from None
    if os.path.exists(os.path.join(output_dir, "progress.jsonl")):
        raise DsacError(f"--output_dir {output_dir} already holds a run: choose another directory")
    return Prepared(config, observation_space, action_space, output_dir, created)


def connect_ray(config: Config) -> bool:
    """Join the cluster named by ``--address`` or ``RAY_ADDRESS``, else start a local Ray.
    Returns whether this call started Ray (and so should shut it down)."""
    if ray.is_initialized():
        return False
    address = config.address or os.environ.get("RAY_ADDRESS")
    try:
        if address:
            check_reachable(address)
            # Joining: the cluster's resources are what they are — no num_cpus/num_gpus here.
            # A `ray job submit` driver already ships its working dir; any other driver ships
            # the dsac package so tasks on other nodes can import it.
            in_job = "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ
            ray.init(address=address, runtime_env=None if in_job else {"py_modules": [dsac]})
        else:
            pythonpath = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
            ray.init(include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
        raise DsacError(f"cannot join a Ray cluster at {address}: {_one_line(exc)}") from None
    return True


def check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail fast when nothing answers at a ``host:port`` address (``ray.init`` would hang)."""
    if address in ("auto", "local"):
        return
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit():
        raise DsacError(f"--address {address} is not of the form host:port")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise DsacError(f"nothing answers at Ray address {address} ({exc.strerror or exc})") from None


class _Signals:
    """Turns SIGTERM (``ray job stop``) into a graceful stop, like Ctrl-C; once stopping,
    further Ctrl-C / SIGTERM are noted but do not cut the shutdown (and the final save) short."""

    def __init__(self):
        self.received: int | None = None
        self._previous = {}

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._previous[sig] = signal.getsignal(sig)
            except ValueError:  # not the main thread
                pass
        self._install(signal.SIGTERM, self._handle)
        return self

    def _install(self, sig, handler):
        if sig in self._previous:
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        self.received = signum

    def shield(self):
        """From now on, both signals only set ``received``."""
        self._install(signal.SIGTERM, self._handle)
        self._install(signal.SIGINT, self._handle)

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    lines = [line for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"


def run(config: Config, started_at: float | None = None) -> dict:
    """Train until a stop condition; returns a summary dict (``stop_reason``, counters, paths).

    Raises:
        DsacError: bad input, found before training starts.
        RunFailed: a role failed during the run (weights so far are saved).
        KeyboardInterrupt: after a graceful stop on Ctrl-C (weights saved).
    """
    started_at = time.time() if started_at is None else started_at
    prepared = prepare(config)
    output_dir = prepared.output_dir
    try:
        started_ray = connect_ray(config)
    except BaseException:
        if prepared.created_output_dir and not os.listdir(output_dir):
            os.rmdir(output_dir)
        raise
    try:
        return _run_on_ray(prepared, started_at)
    except DsacError:
        # Refused before training (e.g. a GPU the cluster lacks): leave no run directory.
        if prepared.created_output_dir and not os.listdir(output_dir):
            os.rmdir(output_dir)
        raise
    finally:
        if started_ray:
            ray.shutdown()


def _run_on_ray(prepared: Prepared, started_at: float) -> dict:
    config = prepared.config
    output_dir = prepared.output_dir
    obs_space, act_space = prepared.observation_space, prepared.action_space
    plan = plan_resources(config, ray.cluster_resources())
    log.info("placement plan: %s", plan.describe())
    if plan.learner_gpus == 0:
        log.info("no GPU requested or available: the learner runs on CPU (num_gpus=0)")
    write_json(os.path.join(output_dir, "config.json"), config.to_dict())
    progress_path = os.path.join(output_dir, "progress.jsonl")
    weights_path = os.path.join(output_dir, "weights.pkl")
    best_weights_path = os.path.join(output_dir, "best_weights.pkl")

    specs = field_specs(obs_space.shape, obs_space.dtype, act_space.shape, act_space.dtype)
    log.info(
        "replay buffer: %d transitions, %.1f MiB when full",
        config.buffer_size, storage_bytes(config.buffer_size, specs) / 2**20,
    )
    ps = ParameterServer.options(num_cpus=0).remote()
    # Shard k takes the transitions of workers k, k + K, ...; each keeps the update ratio
    # for its own share of the data, so together they keep it for all of it.
    num_shards = config.num_replay_shards
    shards = [
        ReplayBuffer.options(num_cpus=0).remote(
            specs,
            -(-config.buffer_size // num_shards),
            samples_per_insert=config.updates_per_step,
            min_size_to_sample=-(-config.learning_starts // num_shards),
            max_inserts_ahead=max(1, config.max_steps_ahead // num_shards),
            num_writers=len(range(k, config.num_workers, num_shards)),
            max_chunk=config.max_chunk,
            seed=config.seed + k,
            prioritized=config.prioritized,
            priority_alpha=config.priority_alpha,
            priority_beta=config.priority_beta,
            beta_anneal_steps=-(-config.total_env_steps // num_shards),
        )
        for k in range(num_shards)
    ]
    # Independent, non-overlapping seeds for every worker, whatever --seed and --num_workers are.
    seeds = [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(config.seed).spawn(config.num_workers + 2)]
    roles = {
        learner.options(num_cpus=plan.learner_cpus, num_gpus=plan.learner_gpus).remote(
            config, obs_space, act_space, shards, ps, config.seed, plan.learner_gpus, plan.learner_cpus
        ): "learner",
        evaluator.options(num_cpus=plan.evaluator_cpus).remote(
            config, obs_space, act_space, ps, config.seed + 100_000
        ): "evaluator",
    }
    for i in range(config.num_workers):
        ref = rollout_worker.options(num_cpus=plan.worker_cpus, scheduling_strategy="SPREAD").remote(
            i, config, shards[i % num_shards], ps, seeds[i + 2], num_shards
        )
        roles[ref] = f"rollout_worker_{i}"

    def payload(latest: dict, counters: dict) -> dict:
        return {
            "algo": config.algo,
            "env": config.env,
            "observation_space": describe_space(obs_space),
            "action_space": describe_space(act_space),
            "model": {"hiddens": list(config.hiddens), "activation": "relu", "dueling": config.dueling},
            "weights": latest["weights"],
            "version": latest["version"],
            "env_steps": counters.get("env_steps", 0),
            "updates": counters.get("updates", 0),
            "eval_return_mean": counters.get("eval_return_mean"),
            "dsac_version": dsac.__version__,
        }

    def save_latest() -> None:
        """weights.pkl: the parameter server's latest weights; their eval return only when
        the last evaluation was of this very version."""
        latest = ray.get(ps.latest.remote())
        if latest["weights"] is not None:
            evaluated = last_eval.get("weights_version") == latest["version"]
            save_weights(weights_path, payload(latest, {
                **counters, "eval_return_mean": last_eval.get("eval_return_mean") if evaluated else None,
            }))

    best_return = -math.inf
    pending = list(roles)
    recent_returns: deque[float] = deque(maxlen=20)
    last_eval: dict = {}
    placements: dict[str, str] = {}
    stop_reason = None
    failure = None
    last_log = time.monotonic()
    counters: dict = {}

    def drain() -> list[dict]:
        """Read the actors' reports; write one progress line per evaluation."""
        nonlocal last_eval, best_return
        reports = ray.get(ps.drain_reports.remote())
        per_shard = ray.get([shard.stats.remote() for shard in shards])
        stats = {key: sum(s[key] for s in per_shard) for key in ("added", "size", "add_calls", "sample_wait_s")}
        for p in reports["placements"]:
            where = f"{p['host']} (node {p['node'][:8]}, pid {p['pid']})"
            placements[p["role"]] = p["node"]
            log.info("placed %s on %s%s", p["role"], where, f" using {p['device']}" if "device" in p else "")
        recent_returns.extend(r for r, _ in reports["episodes"])
        counters.update(
            env_steps=stats["added"], updates=reports["meta"].get("updates", 0), version=reports["version"],
            replay_size=stats["size"], add_calls=stats["add_calls"], sample_wait_s=stats["sample_wait_s"],
        )
        for ev in reports["evaluations"]:
            line = {
                "env_steps": ev["env_steps"],
                "updates": ev["updates"],
                "wall_s": round(time.time() - started_at, 3),
                "eval_return_mean": ev["eval_return_mean"],
                "eval_return_std": ev["eval_return_std"],
                "weights_version": ev["weights_version"],
                "env_steps_collected": stats["added"],
                "eval_episodes": len(ev["eval_returns"]),
            }
            append_jsonl(progress_path, line)
            last_eval = line
            if ev["eval_return_mean"] > best_return:
                best_return = ev["eval_return_mean"]
                latest = {"weights": ev["weights"], "version": ev["weights_version"]}
                save_weights(best_weights_path, payload(latest, {**line, "env_steps": ev["env_steps"]}))
            log.info(
                "eval at %d env steps (%d updates, %.1f s): return %.1f +- %.1f",
                line["env_steps"], line["updates"], line["wall_s"], line["eval_return_mean"],
                line["eval_return_std"],
            )
        return reports["evaluations"]

    with _Signals() as signals:
        try:
            while stop_reason is None:
                if pending:
                    done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
                else:
                    done = []
                    time.sleep(POLL_S)
                for ref in done:
                    try:
                        ray.get(ref)
                        failure = f"{roles[ref]} ended before the run was stopped"
                    except Exception as exc:  # a role crashed: stop, save, report
                        failure = f"{roles[ref]} failed: {_one_line(exc)}"
                    stop_reason = "failed"
                evaluations = drain()
                if evaluations:
                    save_latest()
                wall = time.time() - started_at
                if stop_reason:
                    pass
                elif signals.received is not None:
                    stop_reason = "sigterm"
                elif config.stop_return is not None and any(
                    e["eval_return_mean"] >= config.stop_return for e in evaluations
                ):
                    stop_reason = "stop_return"
                elif counters["env_steps"] >= config.total_env_steps:
                    stop_reason = "total_env_steps"
                elif config.max_seconds is not None and wall >= config.max_seconds:
                    stop_reason = "max_seconds"
                if time.monotonic() - last_log >= config.log_every:
                    last_log = time.monotonic()
                    mean_ret = statistics.fmean(recent_returns) if recent_returns else math.nan
                    log.info(
                        "%d env steps, %d updates, weights v%d, %.0f s; recent episode return %.1f",
                        counters["env_steps"], counters["updates"], counters["version"], wall, mean_ret,
                    )
        except KeyboardInterrupt:
            stop_reason = "interrupted"
        except ray.exceptions.RayError as exc:  # an actor died under the driver
            failure, stop_reason = f"lost an actor: {_one_line(exc)}", "failed"
        except OSError as exc:  # e.g. the output disk filled up
            failure, stop_reason = f"cannot write to {output_dir}: {exc}", "failed"
        signals.shield()
        log.info("stopping (%s)", failure or stop_reason)
        try:
            ray.get([ps.stop.remote(stop_reason)] + [shard.stop.remote() for shard in shards])
            done, not_done = ray.wait(pending, num_returns=len(pending), timeout=SHUTDOWN_TIMEOUT_S)
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as exc:
                    failure = failure or f"{roles[ref]} failed: {_one_line(exc)}"
            for ref in not_done:
                log.warning("%s did not stop within %.0f s; cancelling it", roles[ref], SHUTDOWN_TIMEOUT_S)
                ray.cancel(ref, force=True)
            drain()
            save_latest()
        except (ray.exceptions.RayError, OSError) as exc:
            # An actor died: the weights saved at the last evaluation are what is left.
            failure = failure or f"shutdown failed: {_one_line(exc)}"
            log.warning("%s; %s keeps the weights of the last evaluation", failure, weights_path)
    workers_per_node: dict[str, int] = {}
    for role, node in placements.items():
        if role.startswith("rollout_worker"):
            workers_per_node[node] = workers_per_node.get(node, 0) + 1
    summary = {
        "stop_reason": stop_reason,
        "failure": failure,
        "env_steps": counters.get("env_steps", 0),
        "updates": counters.get("updates", 0),
        "weights_version": counters.get("version", 0),
        "replay_add_calls": counters.get("add_calls", 0),
        "transitions_per_add": round(counters.get("env_steps", 0) / max(1, counters.get("add_calls", 0)), 1),
        "wall_s": round(time.time() - started_at, 3),
        "last_eval": last_eval,
        "output_dir": output_dir,
        "weights_path": weights_path if os.path.exists(weights_path) else None,
        "rollout_workers_per_node": workers_per_node,
        "placement": plan.describe(),
    }
    write_json(os.path.join(output_dir, "summary.json"), summary)
    log.info(
        "done (%s): %d env steps, %d updates, %.1f s; weights in %s",
        stop_reason, summary["env_steps"], summary["updates"], summary["wall_s"], weights_path,
    )
    if failure:
        raise RunFailed(failure)
    if stop_reason == "interrupted":
        raise KeyboardInterrupt
    return summary
