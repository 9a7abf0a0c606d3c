"""The only place that knows resources: how many CPUs and GPUs each role asks for, so the
requests fit the cluster that is there (8 workers on a 2-core laptop, 64 on a cluster)."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field

import ray

from dsac.distributed import ray_private
from dsac.errors import DsacError
from dsac.replay.buffer import per_shard

# What the evaluator asks for: it runs a few numpy episodes every --eval_every steps.
EVALUATOR_CPUS = 0.1
# Resident memory of one rollout worker process (Ray's worker runtime, numpy, gymnasium) and of
# a learner (TensorFlow), with a margin, to refuse plans that cannot fit.
WORKER_PROCESS_BYTES = 120 * 2**20
LEARNER_PROCESS_BYTES = 700 * 2**20
# At most this many add calls a second reach one replay shard: the rollout workers writing to
# it send chunks no more often, so that many workers of a fast-stepping env leave the shard
# room to sample (its capacity: docs/scaling.md, ``benchmarks/scale.py --only capacity``).
SHARD_ADD_CALLS_PER_S = 200
# What a replay shard or weights cache placed beside a node's workers asks for: Ray ignores a
# soft node affinity of an actor that asks for no resources at all (it lands on any node), so
# these ask for a token share, and each node keeps SOFT_ACTORS_RESERVE of its CPUs for them.
SOFT_ACTOR_CPUS = 0.001
SOFT_ACTORS_RESERVE = 0.01
# A Ray Tune trial's own process (its driver: Trainer, recorder, checkpoints).
TRIAL_DRIVER_CPUS = 1.0


@dataclass
class ResourcePlan:
    """Ray resource requests of every role, and the node each is placed on (``None``: let
    Ray choose). Placement is a soft node affinity: Ray falls back to another node if the
    planned one is gone or full."""

    total_cpus: float
    total_gpus: float
    learner_cpus: float
    learner_gpus: float
    worker_cpus: float
    evaluator_cpus: float
    num_workers: int
    num_learners: int = 1
    # How often a rollout worker sends a chunk at least (--chunk_seconds, or longer when many
    # workers share a replay shard: SHARD_ADD_CALLS_PER_S).
    chunk_seconds: float = 0.1
    learner_nodes: list = field(default_factory=list)
    evaluator_node: str | None = None
    worker_nodes: list = field(default_factory=list)
    node_names: dict = field(default_factory=dict)
    # The replay shards and the parameter server: on the head node (or the driver's), which the
    # driver reads all the time and a run cannot lose anyway, so a node of rollout workers holds
    # nothing else and can be lost without losing what was collected.
    actor_node: str | None = None
    # One weights cache per node that reads weights (rollout workers, the evaluator) in a run of
    # several nodes (dsac.distributed.weights_cache); none on one node, where they pull the
    # parameter server directly.
    cache_nodes: list = field(default_factory=list)
    # Replay beside its writers (several nodes): the node of each replay shard and the shard
    # each rollout worker writes to, one on its own node where there is one (place_shards).
    shard_nodes: list = field(default_factory=list)
    worker_shards: list = field(default_factory=list)
    num_shards: int = 1
    # A Ray Tune trial's placement group (trial_plan): every task and actor goes in it.
    placement_group: object = None

    def shard_of(self, worker: int) -> int:
        """The replay shard rollout worker ``worker`` writes to."""
        return self.worker_shards[worker] if self.worker_shards else worker % self.num_shards

    def writers_of(self, k: int) -> int:
        """How many rollout workers write to replay shard ``k``."""
        return sum(1 for i in range(self.num_workers) if self.shard_of(i) == k)

    def shard_node(self, k: int) -> str | None:
        return self.shard_nodes[k] if self.shard_nodes else self.actor_node

    def learner_bundle(self, j: int) -> int:
        """Learner ``j``'s bundle in a Tune trial's placement group (:func:`trial_bundles`)."""
        return 1 + j

    def worker_bundle(self, i: int) -> int:
        return 1 + self.num_learners + i

    def evaluator_bundle(self) -> int:
        return 1 + self.num_learners + self.num_workers

    def cache_index(self, node: str | None) -> int | None:
        """The weights cache of ``node``, or None (one node, or a node without one)."""
        return self.cache_nodes.index(node) if node in self.cache_nodes else None

    def describe(self) -> str:
        device = f"{self.learner_gpus:g} GPU" if self.learner_gpus else "CPU (no GPU in the cluster)"
        nodes = len(self.node_names) or 1
        where = (f"Tune trial's placement group of {self.total_cpus:g} CPUs / {self.total_gpus:g} GPUs"
                 if self.placement_group is not None else
                 f"cluster {nodes} node(s), {self.total_cpus:g} CPUs / {self.total_gpus:g} GPUs")
        return (
            f"{where}; "
            f"{self.num_learners} learner(s) x {self.learner_cpus:g} CPU on {device}; "
            f"{self.num_workers} rollout workers x {self.worker_cpus:g} CPU, a chunk every {self.chunk_seconds:g} s; "
            f"evaluator {self.evaluator_cpus:g} CPU; "
            + ("replay buffer and parameter server 0 CPU" if not self.shard_nodes else
               f"parameter server 0 CPU, {self.num_shards} replay shards beside their writers")
            + (f" on {self.node_names.get(self.actor_node, self.actor_node[:8])}" if self.actor_node else "")
            + (f"; a weights cache on each of {len(self.cache_nodes)} nodes" if self.cache_nodes else "")
        )

    def workers_per_node(self) -> dict[str, int]:
        """``{node name: planned rollout workers}``."""
        counts: dict[str, int] = {}
        for node in self.worker_nodes:
            name = self.node_names.get(node, "any node")
            counts[name] = counts.get(name, 0) + 1
        return counts

    def scheduling(self, node: str | None, soft: bool = True, spread: bool = False, bundle: int = 0):
        """The scheduling strategy that puts a task on ``node`` (soft: elsewhere if it is gone
        or busy), or Ray's default (``spread``: Ray's SPREAD); inside a Tune trial's placement
        group, that group's ``bundle`` (see :func:`trial_bundles`; 0, the driver's, holds the
        actors that ask for no CPU), whatever the node."""
        if self.placement_group is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            return PlacementGroupSchedulingStrategy(self.placement_group, placement_group_bundle_index=bundle,
                                                    placement_group_capture_child_tasks=True)
        if node is None:
            return "SPREAD" if spread else "DEFAULT"
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return NodeAffinitySchedulingStrategy(node_id=node, soft=soft)


def _floor4(x: float) -> float:
    """Ray accepts fractional resources to 4 decimals."""
    return math.floor(x * 10_000) / 10_000


def node_name(node: dict) -> str:
    """``host (node 1a2b3c4d)``: several nodes may share a host."""
    return f"{node.get('NodeManagerHostname') or node.get('NodeManagerAddress')} (node {node['NodeID'][:8]})"


def plan_resources(resources, flow, cluster: dict, nodes: list[dict] | None = None,
                   driver_node: str | None = None, *, shards_given: bool = True) -> ResourcePlan:
    """Fit every role's request (``resources``, ``flow``) into ``cluster`` (``ray.cluster_resources()``)
    and, given ``nodes`` (``ray.nodes()``), place learners on GPU nodes when they use GPUs, spread
    the rollout workers over the nodes in proportion to the CPUs each has left, and put the actors
    on ``driver_node``; unless ``shards_given``, one replay shard per node (:func:`shards_for_nodes`)."""
    total_cpus = float(cluster.get("CPU", 0))
    total_gpus = float(cluster.get("GPU", 0))
    if total_cpus <= 0:
        raise DsacError("the Ray cluster has no CPUs")
    if resources.learner_gpus is not None and resources.learner_gpus * resources.num_learners > total_gpus:
        raise DsacError(
            f"--learner_gpus {resources.learner_gpus:g} asked for {resources.num_learners} learner(s), but the Ray "
            f"cluster has {total_gpus:g} GPUs: drop --learner_gpus to train on CPU"
        )
    learners = resources.num_learners
    if resources.learner_gpus is not None:
        learner_gpus = float(resources.learner_gpus)
    else:
        learner_gpus = 1.0 if total_gpus >= learners else 0.0
    # A whole CPU per learner when there is room for it and the rollout workers; on a
    # laptop the learners and the workers share what there is.
    learner_cpus = 1.0 if total_cpus >= learners + 1 else _floor4(total_cpus / (learners + 1))
    evaluator_cpus = min(EVALUATOR_CPUS, _floor4(total_cpus / 10))
    alive = [n for n in nodes or [] if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
    reserve = SOFT_ACTORS_RESERVE * len(alive) if len(alive) > 1 else 0.0
    left = total_cpus - learner_cpus * learners - evaluator_cpus - reserve
    if resources.worker_cpus is not None:
        worker_cpus = float(resources.worker_cpus)
    else:
        worker_cpus = min(1.0, _floor4(left / resources.num_workers))
    if worker_cpus <= 0 or worker_cpus * resources.num_workers > left + 1e-9:
        raise DsacError(
            f"{resources.num_workers} rollout workers x {worker_cpus:g} CPU do not fit the "
            f"{left:g} CPUs the cluster has left after the learner(s) and evaluator: lower "
            "--num_workers or --worker_cpus"
        )
    memory = cluster.get("memory")
    needed = resources.num_workers * WORKER_PROCESS_BYTES + learners * LEARNER_PROCESS_BYTES
    if memory and needed > memory:
        raise DsacError(
            f"{resources.num_workers} rollout workers (~{WORKER_PROCESS_BYTES / 2**20:.0f} MiB each) and {learners} "
            f"learner(s) (~{LEARNER_PROCESS_BYTES / 2**20:.0f} MiB each) need ~{needed / 2**30:.1f} GiB, the Ray "
            f"cluster has {memory / 2**30:.1f} GiB for tasks: lower --num_workers"
        )
    plan = ResourcePlan(total_cpus, total_gpus, learner_cpus, learner_gpus, worker_cpus, evaluator_cpus,
                        resources.num_workers, learners, chunk_period(resources, flow),
                        num_shards=resources.num_replay_shards)
    if len(alive) > 1:  # one node: nothing to decide
        _place(plan, alive)
        head = [n["NodeID"] for n in alive if "node:__internal_head__" in n.get("Resources", {})]
        # The head node (where `ray job submit` runs the driver); the driver's own otherwise. A
        # driver on a host with several nodes' raylets may attach to any of them.
        plan.actor_node = head[0] if head else driver_node
        plan.num_shards = resources.num_replay_shards if shards_given else shards_for_nodes(resources, plan)
        place_shards(plan, plan.num_shards)
        plan.chunk_seconds = chunk_period(resources, flow, max(plan.writers_of(k) for k in range(plan.num_shards)))
        readers = [*plan.worker_nodes, plan.evaluator_node]
        plan.cache_nodes = [node for k, node in enumerate(readers) if node is not None and node not in readers[:k]]
    return plan


def plan_here(resources, flow, shards_given: bool = True) -> ResourcePlan:
    """The plan of a run started from this process: inside a placement group (a Ray Tune
    trial) the trial's own (:func:`trial_plan`), else fitted to the whole cluster."""
    from ray.util import get_current_placement_group

    group = get_current_placement_group()
    if group is not None:
        return trial_plan(resources, flow, group)
    return plan_resources(resources, flow, ray.cluster_resources(), ray.nodes(),
                          ray.get_runtime_context().get_node_id(), shards_given=shards_given)


def trial_plan(resources, flow, placement_group=None) -> ResourcePlan:
    """A distributed Tune trial's plan: each role sized from the trial's own flags, not from
    the cluster, so that trials sharing a cluster ask for what they use: a learner 1 CPU and
    ``--learner_gpus`` GPUs (none unless given), a rollout worker ``--worker_cpus`` (1 unless
    given), the evaluator ``EVALUATOR_CPUS``; the shared actors ask for none. Everything is
    placed in ``placement_group`` (made from :func:`trial_bundles`)."""
    learners, workers = resources.num_learners, resources.num_workers
    learner_gpus = float(resources.learner_gpus or 0.0)
    worker_cpus = float(resources.worker_cpus) if resources.worker_cpus is not None else 1.0
    return ResourcePlan(
        TRIAL_DRIVER_CPUS + learners + worker_cpus * workers + EVALUATOR_CPUS, learner_gpus * learners, 1.0,
        learner_gpus, worker_cpus, EVALUATOR_CPUS, workers, learners, chunk_period(resources, flow),
        num_shards=resources.num_replay_shards, placement_group=placement_group,
    )


def trial_bundles(resources, flow) -> list[dict]:
    """A distributed Tune trial's placement-group bundles, all asked for at once: the trial's
    driver first (Tune runs the trial there), then each learner, each rollout worker and the
    evaluator (see :func:`trial_plan`)."""
    plan = trial_plan(resources, flow)
    learner = {"CPU": plan.learner_cpus, **({"GPU": plan.learner_gpus} if plan.learner_gpus else {})}
    return ([{"CPU": TRIAL_DRIVER_CPUS}] + [dict(learner) for _ in range(plan.num_learners)]
            + [{"CPU": plan.worker_cpus} for _ in range(plan.num_workers)] + [{"CPU": plan.evaluator_cpus}])


def shards_for_nodes(resources, plan: ResourcePlan) -> int:
    """Replay shards for a run whose ``--num_replay_shards`` is the default (one per learner,
    one per 64 workers): at least one per node with rollout workers, so that each node's
    workers write beside them."""
    nodes = len({node for node in plan.worker_nodes if node is not None})
    return min(resources.num_workers, max(resources.num_replay_shards, nodes))


def place_shards(plan: ResourcePlan, num_shards: int) -> None:
    """On several nodes: put the replay shards on the nodes of the rollout workers, in
    proportion to their workers (every such node one at least, while there are enough shards),
    and have each worker write to a shard on its node (round-robin among them); the workers of
    a node left without one write to all shards in turn. One node: nothing to do
    (the shards stay beside the parameter server)."""
    if not plan.worker_nodes or len(set(plan.worker_nodes)) <= 1:
        return
    workers_on: dict = {}
    for i, node in enumerate(plan.worker_nodes):
        workers_on.setdefault(node, []).append(i)
    ranked = sorted(workers_on, key=lambda node: -len(workers_on[node]))
    shards_on = {node: 1 if k < num_shards else 0 for k, node in enumerate(ranked)}
    for _ in range(num_shards - sum(shards_on.values())):  # the rest: most workers per shard first
        node = max(ranked, key=lambda n: (len(workers_on[n]) / (shards_on[n] + 1), -ranked.index(n)))
        shards_on[node] += 1
    plan.shard_nodes = [node for node in ranked for _ in range(shards_on[node])]
    plan.worker_shards = [0] * len(plan.worker_nodes)
    homeless = []
    for node, workers in workers_on.items():
        own = [k for k, n in enumerate(plan.shard_nodes) if n == node]
        if not own:
            homeless.extend(workers)
        for j, i in enumerate(workers):
            if own:
                plan.worker_shards[i] = own[j % len(own)]
    for j, i in enumerate(homeless):
        plan.worker_shards[i] = j % num_shards


def chunk_period(resources, flow, writers: int | None = None) -> float:
    """Seconds between a rollout worker's chunks at least: ``--chunk_seconds``, or longer so
    that the ``writers`` sharing a replay shard (default: an even share of the workers) send it
    at most ``SHARD_ADD_CALLS_PER_S`` calls/s."""
    writers = writers or per_shard(resources.num_workers, resources.num_replay_shards)
    return max(float(flow.chunk_seconds), round(writers / SHARD_ADD_CALLS_PER_S, 3))


def local_cluster_resources() -> dict:
    """What ``ray.init()`` without an address will find here — CPUs, GPUs and the memory
    tasks may use (as Ray counts them) — known before Ray starts, so that requests that
    cannot fit are refused in a second rather than after Ray's start-up."""
    import psutil

    return {"CPU": float(ray_private.num_cpus()), "memory": float(psutil.virtual_memory().available) * 0.7,
            "GPU": ray_private.num_gpus()}


def _place(plan: ResourcePlan, nodes: list[dict]) -> None:
    """Greedy placement: each role goes to the node with the most CPUs left (GPU roles to a
    node with a GPU left), so the rollout workers spread evenly."""
    cpus = {n["NodeID"]: float(n["Resources"].get("CPU", 0)) - SOFT_ACTORS_RESERVE for n in nodes}
    gpus = {n["NodeID"]: float(n["Resources"].get("GPU", 0)) for n in nodes}
    plan.node_names = {n["NodeID"]: node_name(n) for n in nodes}

    def take(cpu: float, gpu: float = 0.0) -> str | None:
        candidates = [node for node in cpus if gpus[node] >= gpu - 1e-9]
        if not candidates:
            return None
        node = max(candidates, key=lambda k: (cpus[k] >= cpu - 1e-9, cpus[k]))
        cpus[node] -= cpu
        gpus[node] -= gpu
        return node

    plan.learner_nodes = [take(plan.learner_cpus, plan.learner_gpus) for _ in range(plan.num_learners)]
    plan.evaluator_node = take(plan.evaluator_cpus)
    plan.worker_nodes = [take(plan.worker_cpus) for _ in range(plan.num_workers)]


def describe_process() -> dict:
    """Where the calling Ray process runs: node id, host name, pid."""
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }
