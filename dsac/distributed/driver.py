"""The driver: checks the input, starts or joins Ray, wires actors and tasks, watches the
run, and writes every file the user needs on its own filesystem.

Everything that can be checked without Ray and TensorFlow is checked first, so a typo costs
about a second, not a cluster start-up.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import statistics
import sys
import time
from collections import deque

import numpy as np
import ray

import dsac
from dsac.artifacts import (
    read_checkpoint,
)
from dsac.config import Config
from dsac.distributed.actors import GradientAverager, ParameterServer, ReplayBuffer
from dsac.distributed.recovery import Restarts, process_died
from dsac.distributed.tasks import evaluator, learner, rollout_worker
from dsac.distributed.topology import per_shard, plan_resources
from dsac.errors import DsacError, RunFailed
from dsac.monitoring import ProgressDisplay, Signals
from dsac.preparation import Prepared, check_resume_state, in_ray_job, prepare, resume_checkpoint
from dsac.recorder import Recorder, custom_metric_means
from dsac.registry import callbacks_for
from dsac.replay import field_specs, storage_bytes

log = logging.getLogger("dsac")

POLL_S = 0.5  # how often the driver reads the actors' counters
SHUTDOWN_TIMEOUT_S = 30.0
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(dsac.__file__)))


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
            in_job = in_ray_job()
            ray.init(address=address, runtime_env=None if in_job else {"py_modules": [dsac, *user_env_modules(config)]})
        else:
            roots = [REPO_ROOT, *(package_root(m) for m in user_env_modules(config)), os.environ.get("PYTHONPATH")]
            pythonpath = os.pathsep.join(p for p in roots if p)
            ray.init(include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
        raise DsacError(f"cannot join a Ray cluster at {address}: {_one_line(exc)}") from None
    return True


def user_env_modules(config: Config) -> list:
    """The top-level package of a ``module:Name`` env that is the user's own code (not an
    installed package): every Ray worker must be able to import it."""
    if ":" not in config.env:
        return []
    top = sys.modules.get(config.env.split(":", 1)[0].split(".")[0])
    path = getattr(top, "__file__", None) or ""
    if top is None or top is dsac or not path or "-packages" + os.sep in path:
        return []
    return [top]


def package_root(module) -> str:
    """The directory to put on PYTHONPATH so that ``import <module>`` works."""
    path = os.path.dirname(os.path.abspath(module.__file__))
    return os.path.dirname(path) if os.path.basename(module.__file__) == "__init__.py" else path


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


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    lines = [line for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"


def ship_user_code(config: Config) -> None:
    """Make the user's callbacks, policy class and custom model builders reach every Ray
    worker: their modules (unless part of dsac or installed packages) travel by value."""
    import ray.cloudpickle

    objects = [config.callbacks, config.policy_class, *config.custom_models.values()]
    for obj in objects:
        if obj is None or isinstance(obj, str):
            continue
        module = sys.modules.get(getattr(obj, "__module__", ""))
        name = getattr(module, "__name__", "")
        if module is None or name == "__main__" or name.split(".")[0] == "dsac":
            continue
        if "site-packages" in (getattr(module, "__file__", "") or ""):
            continue
        ray.cloudpickle.register_pickle_by_value(module)


class DistributedRun:
    """A running system: the actors, the tasks, and the files in the output dir.

    ``poll()`` reads the actors' reports and writes progress; ``set_insert_limit()`` bounds how
    far collection may go (a Trainer's iteration); ``stop()`` shuts everything down gracefully
    and saves the final weights. Tasks run from construction to ``stop()`` — never restarted.
    """

    def __init__(self, prepared: Prepared, started_at: float, insert_limit: int | None = None,
                 initial_weights: dict | None = None, checkpoint: dict | None = None):
        config = self.config = prepared.config
        self.output_dir = prepared.output_dir
        self.started_at = started_at
        obs_space, act_space = self.observation_space, self.action_space = (
            prepared.observation_space, prepared.action_space
        )
        self.plan = plan_resources(config, ray.cluster_resources(), ray.nodes())
        log.info("placement plan: %s", self.plan.describe())
        log.info("run directory: %s on %s (the driver's machine)", os.path.abspath(self.output_dir),
                 socket.gethostname())
        if self.plan.node_names:
            log.info("rollout workers per node (planned): %s", self.plan.workers_per_node())
        if self.plan.learner_gpus == 0:
            log.info("no GPU requested or available: the learner runs on CPU (num_gpus=0)")
        ship_user_code(config)
        self.callbacks = callbacks_for(config)

        specs = field_specs(obs_space.shape, obs_space.dtype, act_space.shape, act_space.dtype)
        log.info(
            "replay buffer: %d transitions, %.1f MiB when full",
            config.buffer_size, storage_bytes(config.buffer_size, specs) / 2**20,
        )
        meta = (checkpoint or {}).get("meta", {})
        replay_snapshots = (checkpoint or {}).get("replay") or []
        if replay_snapshots and len(replay_snapshots) != config.num_replay_shards:
            log.warning("checkpoint has %d replay shards, the run %d: the buffer starts empty",
                        len(replay_snapshots), config.num_replay_shards)
            replay_snapshots = []
        if checkpoint:
            log.info(
                "resuming from %d env steps, %d updates, weights v%d (%s)", meta["env_steps"], meta["updates"],
                meta["version"], "with replay contents" if replay_snapshots else "replay refills",
            )
        # Actors Ray restarts when their process dies; calls to them wait for the new one.
        restartable = {"num_cpus": 0, "max_restarts": config.max_restarts, "max_task_retries": -1}
        self.ps = ParameterServer.options(**restartable).remote(meta.get("version", 0))
        # Shard k takes the transitions of workers k, k + K, ...; each keeps the update ratio
        # for its own share of the data, so together they keep it for all of it.
        self.num_shards = num_shards = config.num_replay_shards
        self.shards = [
            ReplayBuffer.options(**restartable).remote(
                specs,
                per_shard(config.buffer_size, num_shards),
                updates_per_step=config.updates_per_step,
                learning_starts=per_shard(config.learning_starts, num_shards),
                max_steps_ahead=max(1, config.max_steps_ahead // num_shards),
                num_writers=len(range(k, config.num_workers, num_shards)),
                max_chunk=config.max_chunk,
                seed=config.seed + k,
                prioritized=config.prioritized,
                priority_alpha=config.priority_alpha,
                priority_beta=config.priority_beta,
                beta_anneal_steps=per_shard(config.total_env_steps, num_shards),
                insert_limit=per_shard(insert_limit, num_shards),
                restore=replay_snapshots[k] if replay_snapshots else None,
                start_added=meta.get("env_steps", 0) // num_shards,
            )
            for k in range(num_shards)
        ]
        self.insert_limit = insert_limit
        # Independent, non-overlapping seeds for every role, whatever --seed and --num_workers are.
        self.worker_seeds = [
            int(s.generate_state(1)[0]) for s in np.random.SeedSequence(config.seed).spawn(config.num_workers)
        ]
        self.eval_seed = config.seed + 100_000  # evaluation episodes reset with eval_seed + j
        self.recorder = Recorder(config, self.output_dir, obs_space, act_space, started_at, self.eval_seed, meta)
        self.weights_path = self.recorder.weights_path
        # Several learners: synchronous data-parallel SGD through a GradientAverager; learner j
        # samples shards j, j + N, ... (each shard is read by one learner: no shared hot spot).
        learners = config.num_learners
        self.averager = GradientAverager.options(num_cpus=0).remote(learners) if learners > 1 else None
        # What a restarted learner resumes from: the latest snapshot of the full state.
        self.snapshot = {"state": checkpoint["state"], "updates": meta.get("updates", 0),
                         "at": time.monotonic()} if checkpoint else None
        self.restarts = Restarts(config.max_restarts)
        self.roles = {}  # task ref -> role
        for j in range(learners):
            self.roles[self._submit_learner(j, initial_weights, (checkpoint or {}).get("state"))] = (
                "learner" if learners == 1 else f"learner_{j}"
            )
        self.roles[self._submit_evaluator()] = "evaluator"
        for i in range(config.num_workers):
            self.roles[self._submit_worker(i)] = f"rollout_worker_{i}"
        self.pending = list(self.roles)
        self.stopping = False
        # As of the last save, or the checkpoint resumed from: what a restarted parameter server gets.
        self.last_weights: dict | None = (checkpoint or {}).get("weights")
        self.shard_added = [meta.get("env_steps", 0) // num_shards] * num_shards  # as of the last poll
        # The actors' own placement (the tasks report theirs through the parameter server).
        # A different process behind an actor later means Ray restarted it (restore_restarted_actors).
        self.actor_processes: dict[str, str] = {}
        for name, where in zip(
            ["parameter_server", *(f"replay_shard_{k}" for k in range(num_shards))],
            ray.get([self.ps.where.remote(), *(shard.where.remote() for shard in self.shards)]),
            strict=True,
        ):
            log.info("placed %s on %s (node %s, pid %s)", name, where["host"], where["node"][:8], where["pid"])
            self.actor_processes[name] = where["process"]
        self.counters: dict = {
            "env_steps": meta.get("env_steps", 0), "updates": meta.get("updates", 0),
            "version": meta.get("version", 0), "add_calls": 0, "sample_wait_s": 0.0,
        }
        self.learner_stats: dict = {}
        self.learner_results: dict[str, dict] = {}  # what each learner task returned
        self.last_checkpoint = time.monotonic()
        self.placements: dict[str, str] = {}
        self.failure: str | None = None
        self.episodes: list[tuple[float, int, dict]] = []  # since the last take_episodes()
        self.recent_returns: deque[float] = deque(maxlen=20)
        self._metrics_since_eval: list[dict] = []

    # --- tasks ---------------------------------------------------------------------------
    # max_retries=0: Ray would rerun a task whose process died silently; the driver restarts
    # it instead (restart_task), so that it can say so, count it and give a learner its state.
    def _submit_learner(self, j: int, initial_weights: dict | None, initial_state: dict | None):
        config, plan = self.config, self.plan
        return learner.options(
            num_cpus=plan.learner_cpus, num_gpus=plan.learner_gpus, max_retries=0,
            scheduling_strategy=plan.scheduling(plan.learner_nodes[j] if plan.learner_nodes else None),
        ).remote(
            config, self.observation_space, self.action_space, self.shards[j::config.num_learners], self.ps,
            config.seed, plan.learner_gpus, plan.learner_cpus, initial_weights, initial_state, j, self.averager,
        )

    def _submit_evaluator(self):
        plan = self.plan
        return evaluator.options(
            num_cpus=plan.evaluator_cpus, max_retries=0, scheduling_strategy=plan.scheduling(plan.evaluator_node)
        ).remote(self.config, self.observation_space, self.action_space, self.ps, self.eval_seed)

    def _submit_worker(self, i: int, seed: int | None = None):
        config, plan = self.config, self.plan
        node = plan.worker_nodes[i] if plan.worker_nodes else None
        strategy = plan.scheduling(node) if node else "SPREAD"
        return rollout_worker.options(num_cpus=plan.worker_cpus, max_retries=0, scheduling_strategy=strategy).remote(
            i, config, self.shards[i % self.num_shards], self.ps, self.worker_seeds[i] if seed is None else seed,
            self.num_shards,
        )

    def restart_task(self, role: str, exc: BaseException) -> bool:
        """Resubmit a task whose process died; False when it cannot be (data-parallel learners
        wait for each other) or its restarts are used up."""
        if not self.restarts.allowed(role) or role.startswith("learner_"):
            return False
        if role == "learner":
            if self.snapshot is not None:
                ref = self._submit_learner(0, None, self.snapshot["state"])
                how = (f"resumes from the snapshot at {self.snapshot['updates']:,} updates "
                       f"({time.monotonic() - self.snapshot['at']:.1f} s old)")
            else:
                latest = self.latest()
                ref = self._submit_learner(0, latest["weights"], None)
                how = f"no snapshot yet: acts from weights v{latest['version']}, critics and optimizer start afresh"
        elif role == "evaluator":
            ref, how = self._submit_evaluator(), "a new process"
        else:
            i = int(role.rsplit("_", 1)[1])
            # A fresh seed: the replacement should not replay the episodes already collected.
            seed = self.worker_seeds[i] + 1_000_003 * (self.restarts.counts.get(role, 0) + 1)
            ref, how = self._submit_worker(i, seed), "a new process with a fresh env seed"
        self.restarts.record(role, _one_line(exc), how)
        self.roles[ref] = role
        self.pending.append(ref)
        return True

    def restore_restarted_actors(self, reports: dict, shard_stats: list[dict]) -> None:
        """Give actors that Ray restarted what the run had: the parameter server its version
        and weights, a replay shard its counts (and, with replay snapshots, its contents)."""
        if reports["process"] != self.actor_processes["parameter_server"]:
            version = max(self.counters["version"], reports["version"])
            weights = self.last_weights
            self.restarts.record("parameter_server", "its process exited; Ray restarted the actor",
                                 f"versions carry on above v{version}, with the weights last saved")
            ray.get(self.ps.restore.remote(version, weights, {}, self.stopping))
            self.actor_processes["parameter_server"] = reports["process"]
            reports["version"] = version
        for k, stats in enumerate(shard_stats):
            if stats["process"] == self.actor_processes[f"replay_shard_{k}"]:
                self.shard_added[k] = stats["added"]
                continue
            snapshot = None
            if self.config.checkpoint_replay and self.recorder.checkpoint_path is not None:
                snapshot = (read_checkpoint(self.output_dir).get("replay") or [None] * self.num_shards)[k]
            limit = per_shard(self.insert_limit, self.num_shards)
            self.restarts.record(
                f"replay_shard_{k}", "its process exited; Ray restarted the actor",
                "refilled from the last replay snapshot" if snapshot is not None else
                f"its {min(self.shard_added[k], stats['capacity']):,} transitions are lost; it refills and the learner "
                "waits for warm-up again",
            )
            ray.get(self.shards[k].resume.remote(self.shard_added[k], limit, snapshot))
            if self.stopping:  # restarted after stop(): its stop flag went with the old process
                ray.get(self.shards[k].stop.remote())
            shard_stats[k] = ray.get(self.shards[k].stats.remote())
            self.shard_added[k] = shard_stats[k]["added"]
            self.actor_processes[f"replay_shard_{k}"] = stats["process"]

    # --- files ---------------------------------------------------------------------------
    @property
    def last_eval(self) -> dict:
        return self.recorder.last_eval

    def latest(self) -> dict:
        """The parameter server's latest weights, version and metadata."""
        return ray.get(self.ps.latest.remote())

    def save_latest(self, path: str | None = None) -> str | None:
        """Write the latest weights (their eval return only when the last evaluation was of
        this very version); returns the path, or None before the learner's first push."""
        latest = self.latest()
        if latest["weights"] is None:
            return None
        self.last_weights = latest["weights"]
        return self.recorder.save_weights(latest["weights"], latest["version"], self.counters, path)

    # --- watching ------------------------------------------------------------------------
    def check_tasks(self, timeout: float) -> None:
        """Wait up to ``timeout`` for a task to end. A task whose process died is restarted;
        any other end before stop() is a failure."""
        if not self.pending:
            time.sleep(timeout)
            return
        done, self.pending = ray.wait(self.pending, num_returns=len(self.pending), timeout=timeout)
        for ref in done:
            role = self.roles[ref]
            try:
                ray.get(ref)
                self.failure = self.failure or f"{role} ended before the run was stopped"
            except Exception as exc:  # a role crashed: restart it, or the caller stops, saves, reports
                if process_died(exc) and self.restart_task(role, exc):
                    continue
                self.failure = self.failure or f"{role} failed: {_one_line(exc)}"

    def poll(self) -> list[dict]:
        """Read the actors' reports; write one progress line per evaluation; keep the best
        weights. Returns the new progress lines."""
        reports = ray.get(self.ps.drain_reports.remote())
        shard_stats = ray.get([shard.stats.remote() for shard in self.shards])
        self.restore_restarted_actors(reports, shard_stats)
        stats = {
            key: sum(s[key] for s in shard_stats) for key in ("added", "size", "capacity", "add_calls", "sample_wait_s")
        }
        for p in reports["placements"]:
            where = f"{p['host']} (node {p['node'][:8]}, pid {p['pid']})"
            self.placements[p["role"]] = p["node"]
            log.info("placed %s on %s%s", p["role"], where, f" using {p['device']}" if "device" in p else "")
            if p["role"].startswith("rollout_worker"):
                per_node = self.workers_per_node()
                if sum(per_node.values()) == self.config.num_workers:  # the last one just reported
                    log.info("rollout workers per node: %s", {node[:8]: n for node, n in per_node.items()})
        self.episodes.extend(reports["episodes"])
        self.recent_returns.extend(r for r, _, _ in reports["episodes"])
        self._metrics_since_eval.extend(m for _, _, m in reports["episodes"] if m)
        self.learner_stats = reports["learner_stats"] or self.learner_stats
        worker_versions = reports["worker_versions"].values()
        self.counters.update(
            env_steps=stats["added"], updates=reports["meta"].get("updates", 0), version=reports["version"],
            replay_size=stats["size"], replay_capacity=stats["capacity"], add_calls=stats["add_calls"],
            sample_wait_s=stats["sample_wait_s"], learner_wait_s=reports["meta"].get("learner_wait_s", 0.0),
            learner_updates={f"learner_{k}": v for k, v in sorted(reports["learner_updates"].items())},
            skipped_updates=reports["meta"].get("skipped_updates", self.counters.get("skipped_updates", 0)),
            # How far the slowest worker's weights are behind (as of its last pull).
            version_lag=reports["version"] - min(worker_versions) if worker_versions else None,
        )
        lines = []
        for ev in reports["evaluations"]:
            lines.append(self.recorder.evaluation(ev, {
                "env_steps_collected": stats["added"],
                **({"learner_updates": self.counters["learner_updates"]} if self.averager is not None else {}),
                "rollout_workers_per_node": self.workers_per_node(),
                **({"restarts": dict(self.restarts.counts)} if self.restarts.counts else {}),
                **({"skipped_updates": self.counters["skipped_updates"]} if self.counters.get("skipped_updates") else {}),
                **custom_metric_means(self._metrics_since_eval),
            }))
            self._metrics_since_eval = []
        if lines:
            self.save_latest()
        self.recorder.system(self.status(), reports["episodes"], self.learner_stats)
        self.write_checkpoint_if_ready()
        return lines

    def workers_per_node(self) -> dict[str, int]:
        """``{node id: rollout workers}`` as the workers reported where they run."""
        counts: dict[str, int] = {}
        for role, node in self.placements.items():
            if role.startswith("rollout_worker"):
                counts[node] = counts.get(node, 0) + 1
        return counts

    def averager_contributions(self) -> list[int] | None:
        """Gradients the averager received from each learner."""
        try:
            return ray.get(self.averager.stats.remote(), timeout=10)["contributions"]
        except (ray.exceptions.RayError, TimeoutError):
            return None

    def status(self) -> dict:
        """Counters for the progress display and TensorBoard."""
        c = self.counters
        return {
            "env_steps": c["env_steps"],
            "total_env_steps": self.config.total_env_steps,
            "updates": c["updates"],
            "version": c["version"],
            "version_lag": c.get("version_lag"),
            "replay_size": c.get("replay_size", 0),
            "replay_fill": c.get("replay_size", 0) / max(1, c.get("replay_capacity", 1)),
            "learner_wait_s": c.get("learner_wait_s", 0.0),
            "wall_s": time.time() - self.started_at,
            "last_eval_return": self.last_eval.get("eval_return_mean"),
            "recent_episode_return": statistics.fmean(self.recent_returns) if self.recent_returns else None,
        }

    # --- checkpoints ---------------------------------------------------------------------
    def request_checkpoint_if_due(self) -> None:
        """Every ``snapshot_every`` seconds, ask the learner for its full state."""
        every = self.config.snapshot_every
        if every is not None and time.monotonic() - self.last_checkpoint >= every:
            self.last_checkpoint = time.monotonic()
            self.ps.request_state.remote()

    def write_checkpoint_if_ready(self) -> None:
        """Write the learner's state, if it sent one, as ``<output_dir>/checkpoint``."""
        taken = ray.get(self.ps.take_state.remote())
        if taken is None:
            return
        latest = self.latest()
        replay = (
            ray.get([shard.snapshot.remote() for shard in self.shards]) if self.config.checkpoint_replay else None
        )
        updates = int(taken["meta"].get("updates", 0))
        self.recorder.checkpoint(taken["state"], latest["weights"], latest["version"],
                                 {**self.counters, "updates": updates}, replay)
        self.snapshot = {"state": taken["state"], "updates": updates, "at": time.monotonic()}

    def full_state(self, timeout_s: float = 120.0) -> dict:
        """The learner's full state now (``{"state", "meta"}``), asked for and waited for."""
        ray.get(self.ps.request_state.remote())
        deadline = time.monotonic() + timeout_s
        while (taken := ray.get(self.ps.take_state.remote())) is None:
            self.check_tasks(0.05)
            if self.failure:
                raise DsacError(f"no state to save: {self.failure}")
            if time.monotonic() > deadline:
                raise DsacError(f"the learner sent no state within {timeout_s:.0f} s")
        return taken

    def take_episodes(self) -> list[tuple[float, int, dict]]:
        """Episodes reported since the last call: (return, length, custom metrics)."""
        episodes, self.episodes = self.episodes, []
        return episodes

    def set_insert_limit(self, total_env_steps: int | None) -> None:
        """Let collection go up to ``total_env_steps`` transitions (all shards together)."""
        self.insert_limit = total_env_steps
        limit = per_shard(total_env_steps, self.num_shards)
        ray.get([shard.set_insert_limit.remote(limit) for shard in self.shards])

    # --- stopping ------------------------------------------------------------------------
    def stop(self, reason: str) -> dict:
        """Stop every task, wait for them, read the last reports, save the final weights, and
        write ``summary.json``; returns the summary."""
        log.info("stopping (%s)", self.failure or reason)
        self.stopping = True
        try:
            stopping = [self.ps.stop.remote(reason)] + [shard.stop.remote() for shard in self.shards]
            ray.get(stopping + ([self.averager.stop.remote()] if self.averager is not None else []))
            done, not_done = ([], [])
            if self.pending:
                done, not_done = ray.wait(self.pending, num_returns=len(self.pending), timeout=SHUTDOWN_TIMEOUT_S)
            for ref in done:
                try:
                    result = ray.get(ref)
                    if self.roles[ref].startswith("learner"):
                        self.learner_results[self.roles[ref]] = result
                except Exception as exc:
                    self.failure = self.failure or f"{self.roles[ref]} failed: {_one_line(exc)}"
            for ref in not_done:
                log.warning("%s did not stop within %.0f s; cancelling it", self.roles[ref], SHUTDOWN_TIMEOUT_S)
                ray.cancel(ref, force=True)
            self.pending = []
            self.poll()
            self.recorder.system(self.status(), [], self.learner_stats, force=True)
            self.save_latest()
        except (ray.exceptions.RayError, OSError) as exc:
            # An actor died or the disk failed: the weights saved at the last evaluation are what is left.
            self.failure = self.failure or f"shutdown failed: {_one_line(exc)}"
            log.warning("%s; %s keeps the weights of the last evaluation", self.failure, self.weights_path)
        counters = self.counters
        return self.recorder.summary(reason, self.failure, counters, {
            "restarts": dict(self.restarts.counts),
            "skipped_updates": counters.get("skipped_updates", 0),
            "replay_add_calls": counters["add_calls"],
            "transitions_per_add": round(counters["env_steps"] / max(1, counters["add_calls"]), 1),
            "rollout_workers_per_node": self.workers_per_node(),
            "placement": self.plan.describe(),
            **({"learners": self.learner_results, "gradients_per_learner": self.averager_contributions()}
               if self.averager is not None else {}),
        })


def start(config: Config, started_at: float, insert_limit: int | None = None,
          initial_weights: dict | None = None, checkpoint: dict | None = None) -> tuple[DistributedRun, bool]:
    """Check the input, start or join Ray and start the system; returns the run and whether
    Ray was started here (and so should be shut down)."""
    prepared = prepare(config)
    if checkpoint is not None:
        check_resume_state(prepared, checkpoint["state"], config.resume or "the checkpoint")
    output_dir = prepared.output_dir
    started_ray = False
    try:
        started_ray = connect_ray(prepared.config)
        initial_weights = initial_weights if initial_weights is not None else prepared.initial_weights
        return DistributedRun(prepared, started_at, insert_limit, initial_weights, checkpoint), started_ray
    except BaseException:
        # Refused or failed before training: leave no run directory behind.
        if prepared.created_output_dir and set(os.listdir(output_dir)) <= {"config.json", "tb"}:
            shutil.rmtree(output_dir, ignore_errors=True)
        if started_ray:
            ray.shutdown()
        raise


def run(config: Config, started_at: float | None = None) -> dict:
    """Train until a stop condition; returns a summary dict (``stop_reason``, counters, paths).

    Raises:
        DsacError: bad input, found before training starts.
        RunFailed: a role failed during the run (weights so far are saved).
        KeyboardInterrupt: after a graceful stop on Ctrl-C (weights saved).
    """
    started_at = time.time() if started_at is None else started_at
    config = config.validate()
    checkpoint, started_at = resume_checkpoint(config, started_at)
    system, started_ray = start(config, started_at, insert_limit=config.total_env_steps, checkpoint=checkpoint)
    try:
        return _watch(system)
    finally:
        if started_ray:
            ray.shutdown()


def _watch(system: DistributedRun) -> dict:
    config = system.config
    stop_reason = None
    progress = ProgressDisplay(config.total_env_steps, config.log_every, log.info,
                               use_bar=None if config.progress_bar else False)
    with Signals() as signals:
        try:
            while stop_reason is None:
                system.check_tasks(POLL_S)
                system.request_checkpoint_if_due()
                lines = system.poll()
                system.take_episodes()  # the status keeps the recent returns it needs
                if system.callbacks is not None and lines:
                    for line in lines:
                        system.callbacks.on_train_result(trainer=None, result=dict(line))
                wall = time.time() - system.started_at
                if system.failure:
                    stop_reason = "failed"
                elif signals.received is not None:
                    stop_reason = "sigterm"
                elif config.stop_return is not None and any(
                    line["eval_return_mean"] >= config.stop_return for line in lines
                ):
                    stop_reason = "stop_return"
                elif system.counters["env_steps"] >= config.total_env_steps:
                    stop_reason = "total_env_steps"
                elif config.max_seconds is not None and wall >= config.max_seconds:
                    stop_reason = "max_seconds"
                progress.update(system.status())
        except KeyboardInterrupt:
            stop_reason = "interrupted"
        except ray.exceptions.RayError as exc:  # an actor died under the driver
            system.failure, stop_reason = f"lost an actor: {_one_line(exc)}", "failed"
        except OSError as exc:  # e.g. the output disk filled up
            system.failure, stop_reason = f"cannot write to {system.output_dir}: {exc}", "failed"
        signals.shield()
        progress.close()
        summary = system.stop(stop_reason)
    if summary["failure"]:
        raise RunFailed(summary["failure"])
    if stop_reason == "interrupted":
        raise KeyboardInterrupt
    return summary
