"""The only place that knows resources: how many CPUs and GPUs each role asks for, so the
requests fit the cluster that is there (8 workers on a 2-core laptop, 64 on a cluster)."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass

import ray

from dsac.errors import DsacError

# What the evaluator asks for: it runs a few numpy episodes every --eval_every steps.
EVALUATOR_CPUS = 0.1


@dataclass
class ResourcePlan:
    """Ray resource requests of every role."""

    total_cpus: float
    total_gpus: float
    learner_cpus: float
    learner_gpus: float
    worker_cpus: float
    evaluator_cpus: float
    num_workers: int

    def describe(self) -> str:
        device = f"{self.learner_gpus:g} GPU" if self.learner_gpus else "CPU (no GPU in the cluster)"
        return (
            f"cluster {self.total_cpus:g} CPUs / {self.total_gpus:g} GPUs; learner {self.learner_cpus:g} CPU "
            f"on {device}; {self.num_workers} rollout workers x {self.worker_cpus:g} CPU; "
            f"evaluator {self.evaluator_cpus:g} CPU; replay buffer and parameter server 0 CPU"
        )


def _floor4(x: float) -> float:
    """Ray accepts fractional resources to 4 decimals."""
    return math.floor(x * 10_000) / 10_000


def plan_resources(config, cluster: dict) -> ResourcePlan:
    """Fit every role's request into ``cluster`` (``ray.cluster_resources()``)."""
    total_cpus = float(cluster.get("CPU", 0))
    total_gpus = float(cluster.get("GPU", 0))
    if total_cpus <= 0:
        raise DsacError("the Ray cluster has no CPUs")
    if config.learner_gpus is not None and config.learner_gpus > total_gpus:
        raise DsacError(
            f"--learner_gpus {config.learner_gpus:g} asked for, but the Ray cluster has "
            f"{total_gpus:g} GPUs: drop --learner_gpus to train on CPU"
        )
    if config.learner_gpus is not None:
        learner_gpus = float(config.learner_gpus)
    else:
        learner_gpus = 1.0 if total_gpus >= 1 else 0.0
    learner_cpus = 1.0 if total_cpus >= 2 else _floor4(total_cpus / 2)
    evaluator_cpus = min(EVALUATOR_CPUS, _floor4(total_cpus / 10))
    left = total_cpus - learner_cpus * config.num_learners - evaluator_cpus
    if config.worker_cpus is not None:
        worker_cpus = float(config.worker_cpus)
    else:
        worker_cpus = min(1.0, _floor4(left / config.num_workers))
    if worker_cpus <= 0 or worker_cpus * config.num_workers > left + 1e-9:
        raise DsacError(
            f"{config.num_workers} rollout workers x {worker_cpus:g} CPU do not fit the "
            f"{left:g} CPUs the cluster has left after the learner and evaluator: lower "
            "--num_workers or --worker_cpus"
        )
    return ResourcePlan(total_cpus, total_gpus, learner_cpus, learner_gpus, worker_cpus,
                        evaluator_cpus, config.num_workers)


def describe_process() -> dict:
    """Where the calling Ray process runs: node id, host name, pid."""
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
