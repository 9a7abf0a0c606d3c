"""The driver: the coordinator of a distributed run. It checks the input, starts or joins Ray
(``cluster.py``), builds the system (``system.py``), and then steps it: reads what the
actors report, has ``recovery.py`` repair what died, and hands results to the
:class:`dsac.output.recorder.Recorder`, which writes every file on the driver's filesystem.
``launch.py`` (through :func:`dsac.runtime.run_loop.run_until_stopped`) and ``Trainer.train`` drive the same ``step()``.

Everything that can be checked without Ray and TensorFlow is checked first, so a typo costs
about a second, not a cluster start-up.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from collections import deque

import ray

from dsac.config import Config
from dsac.distributed.cluster import connect_ray, ship_user_code
from dsac.distributed.recovery import LearnerCheckpoint, Recovery, process_died, ray_error_line
from dsac.distributed.system import System, Tasks
from dsac.distributed.topology import plan_here
from dsac.errors import DsacError
from dsac.formats.checkpoints import read_checkpoint
from dsac.output.recorder import Recorder, custom_metric_means
from dsac.replay.buffer import replay_specs, storage_bytes
from dsac.runtime import cpu
from dsac.runtime.messages import LearnerState, Reports, ShardStats
from dsac.runtime.preparation import Prepared, check_resume_state, prepare
from dsac.runtime.run_loop import Step, run_status
from dsac.settings.registry import callbacks_for

log = logging.getLogger("dsac")

POLL_S = 0.5  # how long a step waits for a task to end (the driver reads the actors' counters this often)


class DistributedRun:
    """A running distributed system, its counters and the files in the output dir.

    ``step()`` reads the tasks and actors, has :class:`Recovery` repair what died, and records
    the reports;
    ``set_insert_limit()`` bounds how far collection may go (a Trainer's iteration);
    ``stop()`` shuts everything down gracefully and saves the final weights.

    Args:
        prepared: what :func:`dsac.runtime.preparation.prepare` checked.
        started_at: ``time.time()`` the run counts its wall seconds from.
        insert_limit: no collection past this many transitions (None: unbounded).
        initial_weights: the learner's starting weights (``--init_weights``), or None.
        checkpoint: a resumed run's checkpoint (:func:`dsac.formats.checkpoints.read_checkpoint`), or None.
    """

    def __init__(self, prepared: Prepared, started_at: float, insert_limit: int | None = None,
                 initial_weights: dict | None = None, checkpoint: dict | None = None):
        config = self.config = prepared.config
        self.output_dir, self.insert_limit = prepared.output_dir, insert_limit
        self.observation_space, self.action_space = prepared.observation_space, prepared.action_space
        self.plan = plan_here(config.resources, config.flow, "num_replay_shards" not in config.defaulted)
        # By default, replay beside the writers of each node.
        if self.plan.num_shards != config.resources.num_replay_shards:
            config = self.config = config.replace(num_replay_shards=self.plan.num_shards)
        log_plan(self.plan, config, self.output_dir, self.observation_space, self.action_space)
        ship_user_code(config.run, config.model)
        self.callbacks = callbacks_for(config.run)
        meta = (checkpoint or {}).get("meta", {})
        self.system = System(config, self.plan, self.observation_space, self.action_space, insert_limit,
                             meta, self._replay_to_restore(checkpoint))
        self.tasks = Tasks(config, self.system, self.observation_space, self.action_space)
        self.ps, self.monitor, self.shards = self.system.ps, self.system.monitor, self.system.shards
        self.recorder = Recorder(config, self.output_dir, self.observation_space, self.action_space, started_at,
                                 self.tasks.seeds.evaluator, meta)
        self.weights_path = self.recorder.weights_path
        # The tasks go first: the learner's start-up (TensorFlow's import) is the longest, and
        # it need not wait for the actors to answer. On several nodes the actors go first: a
        # replay shard or weights cache is placed beside its node's workers softly, and Ray puts
        # it elsewhere while that node is busy starting the tasks' processes.
        spread = bool(self.plan.shard_nodes or self.plan.cache_nodes)
        wheres = self.system.where_actors() if spread else None
        self.tasks.start(initial_weights, (checkpoint or {}).get("state"))
        # The actors' own placement (the tasks report theirs through the run monitor).
        # A different process behind an actor later means Ray restarted it (Recovery.restore_actors).
        wheres = wheres or self.system.where_actors()
        for name, where in wheres.items():
            log.info("placed %s on %s (node %s, pid %s)", name, where["host"], where["node"][:8], where["pid"])
        learner_checkpoint = (
            LearnerCheckpoint(checkpoint["state"], meta["updates"], time.monotonic()) if checkpoint else None)
        self.recovery = Recovery(self.system, self.tasks, {n: w["process"] for n, w in wheres.items()},
                                 meta.get("env_steps", 0), learner_checkpoint, (checkpoint or {}).get("weights"),
                                 meta.get("version", 0))
        self.stopping = False
        self.counters: dict = {
            "env_steps": meta.get("env_steps", 0), "updates": meta.get("updates", 0),
            "version": meta.get("version", 0), "add_calls": 0, "sample_wait_s": 0.0,
        }
        self.learner_stats: dict = {}
        self.learner_results: dict[str, dict] = {}  # what each learner task returned
        self.task_results: dict[str, object] = {}  # what every task that stopped returned
        self.learner_cpu: dict | None = None  # the learner's CPU by part, as of its last report
        self.last_checkpoint = time.monotonic()
        self.placements: dict[str, str] = {}  # role -> node id
        self.failure: str | None = None
        self.recent_returns: deque[float] = deque(maxlen=20)
        self._metrics_since_eval: list[dict] = []

    def _replay_to_restore(self, checkpoint: dict | None) -> list | None:
        """A resumed run's replay snapshots, when they fit the run's shards; logs the resume."""
        if not checkpoint:
            return None
        meta, snapshots = checkpoint["meta"], checkpoint.get("replay") or []
        if snapshots and len(snapshots) != self.config.resources.num_replay_shards:
            log.warning("checkpoint has %d replay shards, the run %d: the buffer starts empty",
                        len(snapshots), self.config.resources.num_replay_shards)
            snapshots = []
        log.info("resuming from %d env steps, %d updates, weights v%d (%s)", meta["env_steps"], meta["updates"],
                 meta["version"], "with replay contents" if snapshots else "replay refills")
        return snapshots or None

    # --- one step ------------------------------------------------------------------------
    def step(self, timeout: float = POLL_S) -> Step:
        """Wait up to ``timeout`` for a task to end (restarting one whose process died; any
        other end before ``stop()`` is a failure), and read and record the actors' reports
        (with a checkpoint when one is due). An actor lost under the driver is a failure too."""
        try:
            self.check_tasks(timeout)
            return self.read_and_record()
        except ray.exceptions.RayError as exc:  # an actor died under the driver
            self.failure = self.failure or f"lost an actor: {ray_error_line(exc)}"
            return Step([], [])

    def check_tasks(self, timeout: float) -> None:
        """Tasks that ended: one whose process died is restarted, any other end is a failure.
        Tasks lost with their node are restarted quietly and said in one line per node."""
        ended = self.tasks.ended(timeout)
        dead = dead_nodes() if any(exc is not None and process_died(exc) for _, _, exc in ended) else set()
        lost: dict[str, list[str]] = {}
        for role, _, exc in ended:
            node = self.placements.get(role)
            if exc is None:
                self.failure = self.failure or f"{role} ended before the run was stopped"
            elif not self.recovery.restart_task(role, exc, quiet=node in dead):
                self.failure = self.failure or f"{role}: {ray_error_line(exc)}"
            elif node in dead:
                lost.setdefault(node, []).append(role)
        announce_lost_nodes(lost, self.placements, dead)

    def read_and_record(self) -> Step:
        """Read the actors' reports, have :class:`Recovery` give actors Ray restarted what the
        run had, then record what was read."""
        reports, shard_stats = self.system.read()
        version = self.recovery.restore_actors(reports, shard_stats, self.counters["version"], self.insert_limit,
                                               self.stopping, self._replay_snapshot)
        return self._record(reports, shard_stats, version)

    def _record(self, reports: Reports, shard_stats: list[ShardStats], version: int) -> Step:
        """Count what was read; record one progress line per evaluation, the best weights,
        TensorBoard scalars, and a checkpoint when the learner sent its state."""
        self._note_placements(reports)
        self.recovery.note_env_restarts(reports.env_restarts)
        self.recent_returns.extend(e.episode_return for e in reports.episodes)
        self._metrics_since_eval.extend(e.custom_metrics for e in reports.episodes if e.custom_metrics)
        self._count(reports, shard_stats, version)
        lines = []
        for ev in reports.evaluations:
            lines.append(self.recorder.evaluation(ev, self._evaluation_extras()))
            self._metrics_since_eval = []
        if lines:
            self.save_latest()
        self.recorder.system(self.status(), reports.episodes, self.learner_stats)
        self._checkpoint()
        return Step(lines, list(reports.episodes))

    def _replay_snapshot(self, k: int) -> dict | None:
        """Replay shard ``k``'s contents in the run's last checkpoint, if it holds them."""
        if not self.config.output.checkpoint_replay or self.recorder.checkpoint_path is None:
            return None
        return (read_checkpoint(self.output_dir).get("replay") or [None] * self.system.num_shards)[k]

    def _note_placements(self, reports: Reports) -> None:
        for p in reports.placements:
            self.placements[p.role] = p.node
            log.info("placed %s on %s (node %s, pid %s)%s", p.role, p.host, p.node[:8], p.pid,
                     f" using {p.device}" if p.device else "")
            if p.warning:
                log.warning("%s: %s", p.role, p.warning)
            if p.role.startswith("rollout_worker"):
                per_node = workers_per_node(self.placements)
                if sum(per_node.values()) == self.config.resources.num_workers:  # the last one just reported
                    log.info("rollout workers per node: %s", {node[:8]: n for node, n in per_node.items()})

    def _count(self, reports: Reports, shard_stats: list[ShardStats], version: int) -> None:
        report = reports.report
        self.learner_stats = report.stats or self.learner_stats
        self.learner_cpu = report.cpu or self.learner_cpu
        worker_versions = reports.worker_versions.values()
        self.counters.update(
            env_steps=sum(s.added for s in shard_stats), updates=report.updates, version=version,
            replay_size=sum(s.size for s in shard_stats), replay_capacity=sum(s.capacity for s in shard_stats),
            add_calls=sum(s.add_calls for s in shard_stats), sample_wait_s=sum(s.sample_wait_s for s in shard_stats),
            learner_wait_s=report.learner_wait_s,
            learner_updates={f"learner_{k}": v for k, v in sorted(reports.learner_updates.items())},
            skipped_updates=report.skipped_updates,
            # How far the slowest worker's weights are behind (as of its last pull).
            version_lag=version - min(worker_versions) if worker_versions else None,
        )

    def _evaluation_extras(self) -> dict:
        """What a distributed run's progress line has beyond the evaluation itself."""
        c = self.counters
        return {
            "env_steps_collected": c["env_steps"],
            **({"learner_updates": c["learner_updates"]} if self.system.averager is not None else {}),
            "rollout_workers_per_node": workers_per_node(self.placements),
            **({"restarts": dict(self.recovery.restarts.counts)} if self.recovery.restarts.counts else {}),
            **({"skipped_updates": c["skipped_updates"]} if c.get("skipped_updates") else {}),
            **custom_metric_means(self._metrics_since_eval),
        }

    def status(self) -> dict:
        """Counters for the progress display and TensorBoard."""
        return run_status(self.counters, self.config.run.total_env_steps, self.recorder.wall_s(),
                          self.recorder.last_eval, self.recent_returns)

    # --- weights and checkpoints -----------------------------------------------------------
    def latest(self):
        """The parameter server's latest weights, version and learner report."""
        return self.system.latest()

    def save_latest(self, path: str | None = None) -> str | None:
        """Write the latest weights (their eval return only when the last evaluation was of
        this very version); returns the path, or None before the learner's first push."""
        latest = self.latest()
        if latest.weights is None:
            return None
        self.recovery.last_weights, self.recovery.last_weights_version = latest.weights, latest.version
        return self.recorder.save_weights(latest.weights, latest.version, self.counters, path)

    def _checkpoint(self) -> None:
        """Every ``checkpoint_every`` seconds (not while stopping), ask the learner for its full
        state; write the one it sent as ``<output_dir>/checkpoint``."""
        every = self.config.output.checkpoint_every
        due = not self.stopping and every is not None and time.monotonic() - self.last_checkpoint >= every
        if due:
            self.last_checkpoint = time.monotonic()
        taken = self.system.learner_state(wanted=due)
        if taken is None:
            return
        latest = self.latest()
        replay = self.system.replay_snapshots() if self.config.output.checkpoint_replay else None
        updates = int(taken.report.updates)
        self.recorder.checkpoint(taken.state, latest.weights, latest.version, {**self.counters, "updates": updates},
                                 replay)
        self.recovery.checkpoint = LearnerCheckpoint(taken.state, updates, time.monotonic())

    def full_state(self, timeout_s: float = 120.0) -> LearnerState:
        """The learner's full state now, asked for and waited for."""
        deadline = time.monotonic() + timeout_s
        while (taken := self.system.learner_state(wanted=True)) is None:
            self.check_tasks(0.05)
            if self.failure:
                raise DsacError(f"no state to save: {self.failure}")
            if time.monotonic() > deadline:
                raise DsacError(f"the learner sent no state within {timeout_s:.0f} s")
        return taken

    def set_insert_limit(self, total_env_steps: int | None) -> None:
        """Let collection go up to ``total_env_steps`` transitions (all shards together)."""
        self.insert_limit = total_env_steps
        self.system.set_insert_limit(total_env_steps)

    # --- stopping ------------------------------------------------------------------------
    def stop(self, reason: str) -> dict:
        """Stop every task, wait for them, read the last reports, save the final weights, and
        write ``summary.json``; returns the summary."""
        log.info("stopping (%s)", self.failure or reason)
        self.stopping = True
        try:
            # The evaluator may be inside an evaluation and then runs the final one: a slow env's
            # (an Atari game, CarRacing) can take minutes; the stop waits while it plays.
            for role, result, exc in self.tasks.stop(reason):
                if exc is not None:
                    self.failure = self.failure or f"{role}: {ray_error_line(exc)}"
                else:
                    self.task_results[role] = result
            self.learner_results = {r: v for r, v in self.task_results.items() if r.startswith("learner")}
            self.read_and_record()
            self.recorder.system(self.status(), [], self.learner_stats, force=True)
            self.save_latest()
        except (ray.exceptions.RayError, OSError) as exc:
            # An actor died or the disk failed: the weights saved at the last evaluation are what is left.
            self.failure = self.failure or f"shutdown failed: {ray_error_line(exc)}"
            log.warning("%s; %s keeps the weights of the last evaluation", self.failure, self.weights_path)
        counters = self.counters
        return self.recorder.summary(reason, self.failure, counters, {
            "restarts": dict(self.recovery.restarts.counts),
            "skipped_updates": counters.get("skipped_updates", 0),
            "replay_size": counters.get("replay_size", 0),
            "replay_add_calls": counters["add_calls"],
            "transitions_per_add": round(counters["env_steps"] / max(1, counters["add_calls"]), 1),
            "rollout_workers_per_node": workers_per_node(self.placements),
            "placement": self.plan.describe(),
            "replay_shards": self.system.replay_writers(),
            **({"learners": self.learner_results, "gradients_per_learner": self.system.averager_contributions()}
               if self.system.averager is not None else {}),
            "cpu": cpu_section(self.learner_cpu, self.task_results),
        })


def workers_per_node(placements: dict[str, str]) -> dict[str, int]:
    """``{node id: rollout workers}`` as the workers reported where they run (``placements``:
    ``{role: node id}``)."""
    counts: dict[str, int] = {}
    for role, node in placements.items():
        if role.startswith("rollout_worker"):
            counts[node] = counts.get(node, 0) + 1
    return counts


def cpu_section(learner_cpu: dict | None, task_results: dict[str, object]) -> dict:
    """The roles' CPU by part (:func:`dsac.runtime.cpu.section`): the learner's from its last report,
    the rollout workers' and the evaluator's from what their tasks returned (a task that was
    cancelled counts none, a restarted one only its last process), and this driver's."""
    results = [r for r in task_results.values() if isinstance(r, dict) and "cpu" in r]
    workers = [r["cpu"] for r in results if "worker" in r]
    evaluator = next((r["cpu"] for r in results if "evaluations" in r), None)
    return cpu.section(learner_cpu, workers, evaluator, driver=time.process_time())


def log_plan(plan, config: Config, output_dir: str, observation_space, action_space) -> None:
    """Say where everything goes: the placement plan, the run directory, the workers and
    replay shards per node, the learner's device and the replay's size."""
    log.info("placement plan: %s", plan.describe())
    log.info("run directory: %s on %s (the driver's machine)", os.path.abspath(output_dir), socket.gethostname())
    if plan.node_names:
        log.info("rollout workers per node (planned): %s", plan.workers_per_node())
    if plan.shard_nodes:
        names = [plan.node_names.get(node, str(node)[:8]) for node in plan.shard_nodes]
        log.info("replay shards beside their writers: %s", ", ".join(
            f"shard {k} on {name} ({plan.writers_of(k)} workers)" for k, name in enumerate(names)))
    if plan.learner_gpus == 0:
        log.info("no GPU requested or available: the learner runs on CPU (num_gpus=0)")
    specs, frames = replay_specs(observation_space, action_space)
    log.info("replay buffer: %d transitions, %.1f MiB when full%s", config.replay.buffer_size,
             storage_bytes(config.replay.buffer_size, specs, frames) / 2**20,
             f" (image observations stored frame by frame: {frames.stack} frames of {frames.frame_shape} "
             "each, every frame once)" if frames else "")


def announce_lost_nodes(lost: dict[str, list[str]], placements: dict[str, str], dead: set[str]) -> None:
    """One line per lost node naming the roles restarted elsewhere; they leave ``placements``
    (their replacements report where they run)."""
    for node, roles in lost.items():
        alive = len({n for n in placements.values() if n not in dead})
        log.warning("node %s lost with %s; restarted on the %d node(s) left", node[:8], ", ".join(roles), alive)
        for role in roles:
            placements.pop(role, None)


def dead_nodes() -> set[str]:
    """Ids of the cluster's nodes Ray knows to be dead."""
    try:
        return {n["NodeID"] for n in ray.nodes() if not n.get("Alive")}
    except Exception:  # the GCS unreachable: no node is known dead
        return set()


def start(config: Config, started_at: float, insert_limit: int | None = None,
          initial_weights: dict | None = None, checkpoint: dict | None = None) -> tuple[DistributedRun, bool]:
    """Check the input, start or join Ray and start the system; returns the run and whether
    Ray was started here (and so should be shut down)."""
    prepared = prepare(config)
    if checkpoint is not None:
        check_resume_state(prepared, checkpoint["state"], config.run.resume or "the checkpoint")
    output_dir = prepared.output_dir
    started_ray = False
    try:
        run, resources, output = prepared.config.run, prepared.config.resources, prepared.config.output
        started_ray = connect_ray(resources.address, run.env, output.verbose)
        initial_weights = initial_weights if initial_weights is not None else prepared.initial_weights
        return DistributedRun(prepared, started_at, insert_limit, initial_weights, checkpoint), started_ray
    except BaseException:
        # Refused or failed before training: leave no run directory behind.
        if prepared.created_output_dir and set(os.listdir(output_dir)) <= {"config.json", "tb"}:
            shutil.rmtree(output_dir, ignore_errors=True)
        if started_ray:
            ray.shutdown()
        raise
