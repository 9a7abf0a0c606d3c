"""Which failures a run survives, and the count of restarts.

A role whose *process* died — SIGKILL, the out-of-memory killer, a lost node — is replaced:
tasks (rollout workers, learner, evaluator) by the driver, which resubmits them; actors
(replay shards, parameter server, run monitor) by Ray (``max_restarts``), after which the driver gives
them back what the run had (versions, counts, the last checkpoint). A role that raised an
error is not restarted: the same input would fail the same way.
"""

from __future__ import annotations

import logging
import time
from typing import NamedTuple

import ray

from dsac.envs.make import EnvCrashed, env_restart_message
from dsac.replay.buffer import per_shard

log = logging.getLogger("dsac")

# What a task's or actor call's caller gets when the process under it died.
PROCESS_DEATHS = (
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.NodeDiedError,
    ray.exceptions.OutOfMemoryError,
    ray.exceptions.LocalRayletDiedError,
    ray.exceptions.ActorDiedError,
)


def process_died(exc: BaseException) -> bool:
    """Whether ``exc`` says the process running a role died (rather than the role failing)."""
    return isinstance(exc, PROCESS_DEATHS)


class Restarts:
    """Restarts per role, at most ``limit`` each."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.counts: dict[str, int] = {}

    def allowed(self, role: str) -> bool:
        return self.counts.get(role, 0) < self.limit

    def record(self, role: str, cause: str, how: str = "", quiet: bool = False) -> None:
        """Count a restart of ``role`` and log it with its cause (``quiet``: at debug level,
        the caller says it in one line with others)."""
        self.counts[role] = self.counts.get(role, 0) + 1
        (log.debug if quiet else log.warning)(
            "%s died (%s); restarting it (restart %d of at most %d)%s",
            role, cause, self.counts[role], self.limit, f": {how}" if how else "",
        )


class Recovery:
    """All repairs of a running system (:mod:`dsac.distributed.system`), each said in the log
    and counted: a task whose process died is resubmitted (a learner from the latest checkpoint
    of its full state), an actor Ray restarted gets back what the run had. The driver calls
    it with what it read; reading never repairs anything by itself.

    Args:
        system: the running actors (:class:`~dsac.distributed.system.System`).
        tasks: the running tasks (:class:`~dsac.distributed.system.Tasks`).
        actor_processes: ``{actor name: node:pid}`` as first met (a different one later: restarted).
        start_added: transitions the run had at the start (a resumed run's).
        checkpoint: the learner's state to restart it from (a resumed run's checkpoint), or None.
        last_weights: the weights a restarted parameter server gets, or None.
        last_weights_version: their version.
    """

    def __init__(self, system, tasks, actor_processes: dict[str, str], start_added: int = 0,
                 checkpoint: LearnerCheckpoint | None = None, last_weights: dict | None = None,
                 last_weights_version: int = 0):
        self.system, self.tasks = system, tasks
        self.restarts = Restarts(system.config.resources.max_restarts)
        self.actor_processes = dict(actor_processes)
        self.shard_added = [start_added // system.num_shards] * system.num_shards  # as of the last read
        self.checkpoint = checkpoint
        self.last_weights = last_weights
        self.last_weights_version = int(last_weights_version)

    def restart_task(self, role: str, exc: BaseException, quiet: bool = False) -> bool:
        """Resubmit a task whose process died; False when it did not die that way or its
        restarts are used up. A data-parallel learner (``learner_<j>``) rejoins the learner
        group, which continues from the state of the learner with the most updates."""
        if not process_died(exc) or not self.restarts.allowed(role):
            return False
        tasks = self.tasks
        if role == "learner" or role.startswith("learner_"):
            how = self._restart_learner(int(role.rsplit("_", 1)[1]) if role.startswith("learner_") else 0)
            if role.startswith("learner_"):  # where it starts matters only when every learner died at once
                how = "rejoins the learner group, which goes on from the state of the learner with the most updates"
        elif role == "evaluator":
            tasks.submit_evaluator()
            how = "a new process"
        else:
            i = int(role.rsplit("_", 1)[1])
            # A fresh seed: the replacement should not replay the episodes already collected.
            seed = tasks.seeds.workers[i] + 1_000_003 * (self.restarts.counts.get(role, 0) + 1)
            tasks.submit_worker(i, seed)
            how = "a new process with a fresh env seed"
        self.restarts.record(role, ray_error_line(exc), how, quiet)
        return True

    def _restart_learner(self, j: int) -> str:
        """Resubmit learner ``j`` from the latest checkpoint (else the latest weights); says how."""
        if self.checkpoint is not None:
            self.tasks.submit_learner(j, None, self.checkpoint.state)
            return (f"resumes from the checkpoint at {self.checkpoint.updates:,} updates "
                    f"({time.monotonic() - self.checkpoint.taken_at:.1f} s old)")
        latest = self.system.latest()
        self.tasks.submit_learner(j, latest.weights, None)
        return f"no checkpoint yet: acts from weights v{latest.version}, critics and optimizer start afresh"

    def note_env_restarts(self, env_restarts: list[tuple[str, str]]) -> None:
        """Count and say the envs rebuilt (the run monitor granted each: ``--env_restarts``)."""
        limit = self.system.config.resources.env_restarts
        for role, error in env_restarts:
            self.restarts.counts[f"{role}/env"] = self.restarts.counts.get(f"{role}/env", 0) + 1
            log.warning(env_restart_message(role, error, self.env_restarts_used(), limit))

    def env_restarts_used(self) -> int:
        return sum(n for role, n in self.restarts.counts.items() if role.endswith("/env"))

    def restore_actors(self, reports, shard_stats: list, known_version: int, insert_limit: int | None,
                       stopping: bool, replay_snapshot=None) -> int:
        """Give actors that Ray restarted what the run had: the parameter server its version
        and weights, the run monitor the env rebuilds used, a replay shard its counts (and its
        contents from ``replay_snapshot(k)``, when replay checkpoints exist). ``known_version``:
        the latest the driver saw. Updates ``shard_stats`` in place; returns the parameter
        server's version."""
        system = self.system
        version = reports.version
        if reports.process != self.actor_processes["parameter_server"]:
            version = max(known_version, reports.version)
            self.restarts.record("parameter_server", "its process exited; Ray restarted the actor",
                                 f"versions carry on above v{version}, with the weights last saved")
            ray.get(system.ps.restore.remote(version, self.last_weights, self.last_weights_version, stopping))
            self.actor_processes["parameter_server"] = reports.process
        if reports.monitor and reports.monitor != self.actor_processes.get("run_monitor", reports.monitor):
            self.restarts.record("run_monitor", "its process exited; Ray restarted the actor",
                                 "the reports since the last read are lost; the env-rebuild budget carries on")
            ray.get(system.monitor.restore.remote(self.env_restarts_used()))
        self.actor_processes["run_monitor"] = reports.monitor or self.actor_processes.get("run_monitor", "")
        for name, process in reports.caches.items():
            if process != self.actor_processes.get(name, process):
                self.restarts.record(name, "its process exited; Ray restarted the actor",
                                     "its node's readers pull from the new one, which starts from the latest weights")
            self.actor_processes[name] = process
        averager = system.averager_process()
        if averager is not None and averager != self.actor_processes["gradient_averager"]:
            self.restarts.record("gradient_averager", "its process exited; Ray restarted the actor",
                                 "the learners form their group again, from the state of the one with the most updates")
            if stopping:  # restarted after stop(): its stop flag went with the old process
                ray.get(system.averager.stop.remote())
            self.actor_processes["gradient_averager"] = averager
        for k, stats in enumerate(shard_stats):
            if stats.process == self.actor_processes[f"replay_shard_{k}"]:
                self.shard_added[k] = stats.added
                continue
            snapshot = replay_snapshot(k) if replay_snapshot is not None else None  # read only when needed
            self.restarts.record(
                f"replay_shard_{k}", "its process exited; Ray restarted the actor",
                "refilled from the last replay snapshot" if snapshot is not None else
                f"its {min(self.shard_added[k], stats.capacity):,} transitions are lost; it refills and the learner "
                "waits for warm-up again",
            )
            shard = system.shards[k]
            ray.get(shard.resume.remote(self.shard_added[k], per_shard(insert_limit, system.num_shards), snapshot))
            if stopping:  # restarted after stop(): its stop flag went with the old process
                ray.get(shard.stop.remote())
            shard_stats[k] = ray.get(shard.stats.remote())
            self.shard_added[k] = shard_stats[k].added
            self.actor_processes[f"replay_shard_{k}"] = stats.process
        return version


class LearnerCheckpoint(NamedTuple):
    """The learner's latest full state, what a restarted learner resumes from."""

    state: dict
    updates: int
    taken_at: float  # time.monotonic()


def ray_error_line(exc: BaseException) -> str:
    """An exception from Ray (or the error under a Ray task error) as ``Type: last line``: Ray
    puts the traceback first. An env that raised (:class:`dsac.envs.make.EnvCrashed`) is the env's
    own error, as :func:`dsac.envs.make.one_line` gives it."""
    cause = getattr(exc, "cause", None) or exc
    if isinstance(cause, EnvCrashed):
        return str(cause)
    lines = [line for line in str(cause).strip().splitlines() if line.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"
