"""The running system's parts and their wiring. :class:`System` builds the actors — the
parameter server, the run monitor, the replay shards, the weights caches, the gradient
averager — holds their handles and reads them; :class:`Tasks` submits the tasks — which actor
each talks to, with which seed, on which node — and follows them until they end. Neither
decides anything (the driver does) nor repairs anything (``recovery.py`` does); neither names
an algorithm.
"""

from __future__ import annotations

import logging
import time
import uuid

import ray

from dsac.config import Config
from dsac.distributed.actors import ParameterServer, ReplayBuffer
from dsac.distributed.board_files import remove_boards
from dsac.distributed.gradient_averager import GradientAverager
from dsac.distributed.monitor import RunMonitor
from dsac.distributed.tasks import evaluator, learner, learner_role, rollout_worker
from dsac.distributed.topology import SOFT_ACTOR_CPUS, ResourcePlan
from dsac.distributed.weights_cache import WeightsCache
from dsac.replay.buffer import per_shard, replay_specs
from dsac.runtime import build
from dsac.runtime.build import role_seeds
from dsac.runtime.evaluation import PROGRESS_EVERY_S
from dsac.runtime.messages import Latest, LearnerState, Reports, ShardStats

log = logging.getLogger("dsac")

# A stop waits this long at most for an evaluator that is still playing (saying so every few
# seconds): a slow env's final evaluation (Atari games, CarRacing, Humanoid) can take minutes.
EVALUATOR_STOP_LIMIT_S = 1800.0
PROGRESS_WAIT_S = 2 * PROGRESS_EVERY_S


class System:
    """The actors of one run, started in the constructor, and what the driver reads of them.

    Args:
        config: the run's validated config.
        plan: where everything goes (:func:`dsac.distributed.topology.plan_resources`).
        observation_space, action_space: the env's spaces.
        insert_limit: no collection past this many transitions (None: unbounded).
        start: counters to carry on from (``env_steps``, ``version``: a resumed run's).
        replay_snapshots: one replay checkpoint per shard, or None (the buffer starts empty).
    """

    def __init__(self, config: Config, plan: ResourcePlan, observation_space, action_space, insert_limit: int | None,
                 start: dict, replay_snapshots: list | None):
        self.config, self.plan = config, plan
        self.num_shards = plan.num_shards
        resources = config.resources
        # Actors Ray restarts when their process dies; calls to them wait for the new one.
        restartable = {"num_cpus": 0, "max_restarts": resources.max_restarts, "max_task_retries": -1,
                       # hard: a soft affinity let Ray put them elsewhere while the node's CPUs were leased
                       "scheduling_strategy": plan.scheduling(plan.actor_node, soft=False)}
        # Named, so that a weights cache finds it by name when Ray restarts the cache (a handle
        # among its constructor arguments would keep an object-store reference alive instead).
        self.ps_name = f"dsac_parameter_server_{uuid.uuid4().hex[:12]}"
        caches = range(len(plan.cache_nodes))
        # The shared-memory weights boards: the parameter server's, then each cache's.
        self.boards = [f"{self.ps_name}-ps", *(f"{self.ps_name}-{k}" for k in caches)]
        self.ps = self._parameter_server(restartable, start.get("version", 0))
        # The run's reports (placements, evaluations, episodes, the env-rebuild budget, the
        # learner's state for checkpoints), beside the parameter server.
        self.monitor = RunMonitor.options(**restartable).remote(resources.env_restarts)
        # Weights per node (several nodes): a cache on each node keeps one pull waiting on the
        # parameter server and publishes each version on its node's board. Ray restarts a
        # cache on its own node.
        cache_names = [f"weights_cache_{k}" for k in caches]
        self.caches = [
            WeightsCache.options(num_cpus=SOFT_ACTOR_CPUS, max_restarts=resources.max_restarts, max_task_retries=-1,
                                 scheduling_strategy=plan.scheduling(node, soft=True)).remote(
                self.ps_name, name, board, resources.num_workers)
            for name, node, board in zip(cache_names, plan.cache_nodes, self.boards[1:], strict=True)
        ]
        specs, frames = replay_specs(observation_space, action_space)
        self.shards = [self._replay_shard(k, restartable, specs, frames, insert_limit, start.get("env_steps", 0),
                                          replay_snapshots[k] if replay_snapshots else None)
                       for k in range(self.num_shards)]
        # Several learners: synchronous data-parallel SGD through a GradientAverager; learner j
        # samples shards j, j + N, ... (each shard is read by one learner: no shared hot spot).
        # Ray restarts it when its process dies; the calls then in flight fail (max_task_retries=0),
        # which tells the learners to form their group again (see GradientAverager).
        learners = resources.num_learners
        self.averager = GradientAverager.options(
            **{**restartable, "max_task_retries": 0}
        ).remote(learners) if learners > 1 else None
        self.actor_names = ["parameter_server", "run_monitor", *(f"replay_shard_{k}" for k in range(self.num_shards)),
                            *(["gradient_averager"] if self.averager is not None else []), *cache_names]

    def _parameter_server(self, restartable: dict, start_version: int):
        """The parameter server, which publishes every version on its node's shared-memory
        board, where that node's readers take it without a call (dsac.distributed.board_writer).
        Every rollout worker keeps one pull waiting on it (and may have a refresh beside it):
        Ray's default limit of concurrent calls of an async actor would queue them."""
        num_workers = self.config.resources.num_workers
        return ParameterServer.options(
            **restartable, name=self.ps_name, max_concurrency=max(1000, 4 * num_workers + 100)
        ).remote(start_version, board=self.boards[0], num_workers=num_workers)

    def _replay_shard(self, k: int, restartable: dict, specs: dict, frames, insert_limit: int | None,
                      start_added: int, snapshot: dict | None):
        """Replay shard ``k``. It takes the transitions of the workers plan.shard_of() names
        (workers k, k + K, ... on one node; the workers of its node on several) and keeps the
        update ratio for its own share of the data, so together the shards keep it for all of it."""
        options = build.replay_options(self.config, frames, shard=k, num_shards=self.num_shards,
                                       writers=self.plan.writers_of(k), insert_limit=insert_limit,
                                       start_added=start_added, restore=snapshot)
        return ReplayBuffer.options(**{**restartable, **self._shard_placement(k)}).remote(specs, **options)

    def _shard_placement(self, k: int) -> dict:
        """Beside the parameter server (one node); or on the node of its writers, softly (Ray
        restarts it on another node when that one is lost), with the token CPU share a soft
        affinity needs to be honoured."""
        if self.plan.shard_nodes:
            return {"num_cpus": SOFT_ACTOR_CPUS, "scheduling_strategy": self.plan.scheduling(self.plan.shard_node(k))}
        return {"scheduling_strategy": self.plan.scheduling(self.plan.actor_node, soft=False)}

    def where_actors(self) -> dict[str, dict]:
        """``{actor name: where it runs}`` (host, node, pid, ``process`` = node:pid)."""
        averager = [self.averager.where.remote()] if self.averager is not None else []
        wheres = ray.get([self.ps.where.remote(), self.monitor.where.remote(),
                          *(shard.where.remote() for shard in self.shards), *averager,
                          *(cache.where.remote() for cache in self.caches)])
        return dict(zip(self.actor_names, wheres, strict=True))

    def averager_process(self) -> str | None:
        """The gradient averager's node:pid (a new one: Ray restarted it); None without one, or
        while Ray restarts it (its calls then fail at once: it takes no retries)."""
        if self.averager is None:
            return None
        try:
            return ray.get(self.averager.where.remote())["process"]
        except ray.exceptions.ActorUnavailableError:
            return None

    # --- reading -------------------------------------------------------------------------
    def read(self) -> tuple[Reports, list[ShardStats]]:
        """The run monitor's reports since the last read, the parameter server's status and
        every shard's counters."""
        monitored, status = ray.get([self.monitor.drain_reports.remote(), self.ps.status.remote(telemetry=False)])
        reports = Reports(
            monitored["placements"], monitored["evaluations"], monitored["episodes"], status["version"],
            status["report"], status["held"], monitored["learner_updates"], status["stop"], status["stop_reason"],
            status["process"], monitored["env_restarts"], status["caches"], monitored["monitor"])
        return reports, ray.get([shard.stats.remote() for shard in self.shards])

    def latest(self) -> Latest:
        """The parameter server's latest weights, version and learner report."""
        return ray.get(self.ps.latest.remote())

    def learner_state(self, wanted: bool = False) -> LearnerState | None:
        """The learner's full state, once it arrived at the run monitor; else None, and with
        ``wanted`` the learner is asked for one (it arrives with a later call)."""
        return ray.get(self.monitor.learner_state.remote(wanted))

    def replay_snapshots(self) -> list[dict]:
        return ray.get([shard.snapshot.remote() for shard in self.shards])

    def set_insert_limit(self, total_env_steps: int | None) -> None:
        """Let collection go up to ``total_env_steps`` transitions (all shards together)."""
        limit = per_shard(total_env_steps, self.num_shards)
        ray.get([shard.set_insert_limit.remote(limit) for shard in self.shards])

    def replay_writers(self) -> list[dict] | None:
        """Per replay shard: its node, and the transitions each rollout worker delivered to it
        (since the shard's process started)."""
        try:
            wheres = ray.get([shard.where.remote() for shard in self.shards], timeout=10)
            counts = ray.get([shard.writer_counts.remote() for shard in self.shards], timeout=10)
        except (ray.exceptions.RayError, TimeoutError):
            return None
        return [{"node": where["node"], "writers": {str(w): n for w, n in sorted(c.items())}}
                for where, c in zip(wheres, counts, strict=True)]

    def averager_contributions(self) -> list[int] | None:
        """Gradients the averager received from each learner."""
        try:
            return ray.get(self.averager.stats.remote(), timeout=10)["contributions"]
        except (ray.exceptions.RayError, TimeoutError):
            return None

    def stop(self, reason: str) -> None:
        """Raise every actor's stop flag (the tasks read them and end)."""
        stopping = [self.ps.stop.remote(reason)] + [shard.stop.remote() for shard in self.shards]
        ray.get(stopping + ([self.averager.stop.remote()] if self.averager is not None else []))


class Tasks:
    """The run's tasks — the learners, the evaluator, the rollout workers — each submitted with
    the actors of ``system`` it talks to, its seed and its place, and followed until it ends.

    Args:
        config: the run's validated config (the tasks get it whole).
        system: the run's actors.
        observation_space, action_space: the env's spaces.
    """

    def __init__(self, config: Config, system: System, observation_space, action_space):
        self.config, self.system, self.plan = config, system, system.plan
        self.observation_space, self.action_space = observation_space, action_space
        self.seeds = role_seeds(config.run.seed, config.resources.num_workers)
        self.roles: dict = {}  # task ref -> role
        self.pending: list = []  # refs of the tasks still running

    # max_retries=0: Ray would rerun a task whose process died silently; the driver restarts
    # it instead (recovery.py), so that it can say so, count it and give a learner its state.
    def start(self, initial_weights: dict | None, initial_state: dict | None) -> None:
        """Submit the learners, the evaluator and the rollout workers."""
        for j in range(self.config.resources.num_learners):
            self.submit_learner(j, initial_weights, initial_state)
        self.submit_evaluator()
        for i in range(self.config.resources.num_workers):
            self.submit_worker(i)

    def _track(self, ref, role: str):
        self.roles[ref] = role
        self.pending.append(ref)
        return ref

    def _weights_board(self, node: str | None) -> str:
        """The board a reader on ``node`` takes weights from: its node's cache's, or the
        parameter server's (one node). A reader on a machine without it pulls the server."""
        k = self.plan.cache_index(node)
        return self.system.boards[0 if k is None else k + 1]

    def submit_learner(self, j: int, initial_weights: dict | None, initial_state: dict | None):
        config, plan, system = self.config, self.plan, self.system
        ref = learner.options(
            num_cpus=plan.learner_cpus, num_gpus=plan.learner_gpus, max_retries=0,
            scheduling_strategy=plan.scheduling(plan.learner_nodes[j] if plan.learner_nodes else None,
                                                bundle=plan.learner_bundle(j)),
        ).remote(
            config, self.observation_space, self.action_space, system.shards[j::config.resources.num_learners],
            system.ps, system.monitor, self.seeds.learner, plan.learner_gpus, plan.learner_cpus, initial_weights,
            initial_state, j, system.averager,
        )
        return self._track(ref, learner_role(j, config.resources.num_learners))

    def submit_evaluator(self):
        plan, system = self.plan, self.system
        ref = evaluator.options(
            num_cpus=plan.evaluator_cpus, max_retries=0,
            scheduling_strategy=plan.scheduling(plan.evaluator_node, bundle=plan.evaluator_bundle())
        ).remote(self.config, self.observation_space, self.action_space, system.ps, system.monitor,
                 self.seeds.evaluator, self._weights_board(plan.evaluator_node))
        return self._track(ref, "evaluator")

    def submit_worker(self, i: int, seed: int | None = None):
        plan, system = self.plan, self.system
        node = plan.worker_nodes[i] if plan.worker_nodes else None
        strategy = plan.scheduling(node, spread=True, bundle=plan.worker_bundle(i))
        ref = rollout_worker.options(num_cpus=plan.worker_cpus, max_retries=0, scheduling_strategy=strategy).remote(
            i, self.config, system.shards[plan.shard_of(i)], system.ps, system.monitor,
            self.seeds.workers[i] if seed is None else seed,
            system.num_shards, plan.chunk_seconds, self._weights_board(node),
        )
        return self._track(ref, f"rollout_worker_{i}")

    def ended(self, timeout: float) -> list[tuple[str, object, BaseException | None]]:
        """Wait up to ``timeout`` for tasks to end; ``(role, result, error)`` of each that did."""
        if not self.pending:
            time.sleep(timeout)
            return []
        done, self.pending = ray.wait(self.pending, num_returns=len(self.pending), timeout=timeout)
        ended = []
        for ref in done:
            try:
                ended.append((self.roles[ref], ray.get(ref), None))
            except Exception as exc:  # the caller decides: restart, or stop and report
                ended.append((self.roles[ref], None, exc))
        return ended

    def _wait_for_playing_evaluator(self) -> list[tuple[str, object, BaseException | None]]:
        """After the stop: wait for an evaluator that is still playing (it said so within
        ``--stop_timeout``), so the final evaluation is not lost to a slow env; one that
        went quiet is stuck and is left to be cancelled."""
        ended, said, limit = [], False, time.monotonic() + EVALUATOR_STOP_LIMIT_S
        while any(self.roles[ref] == "evaluator" for ref in self.pending) and time.monotonic() < limit:
            try:
                progress = ray.get(self.system.monitor.evaluator_progress.remote(), timeout=10)
            except (ray.exceptions.RayError, TimeoutError):
                break
            if progress is None or progress[0] > self.config.resources.stop_timeout:
                break
            if not said:
                said = True
                log.info("waiting for the evaluator's %s evaluation (%d agent steps played so far)",
                         "final" if progress[2] else "current", progress[1])
            ended += self.ended(PROGRESS_WAIT_S)
        return ended

    def stop(self, reason: str) -> list[tuple[str, object, BaseException | None]]:
        """Raise every stop flag and wait up to ``--stop_timeout`` for the tasks, and for
        an evaluator still playing its evaluations as long as it says so (up to
        ``EVALUATOR_STOP_LIMIT_S``); those still running then are cancelled. Returns how the
        waited-for tasks ended."""
        self.system.stop(reason)
        timeout = self.config.resources.stop_timeout
        ended = self.ended(timeout) if self.pending else []
        ended += self._wait_for_playing_evaluator()
        for ref in self.pending:
            log.warning("%s did not stop within %.0f s (--stop_timeout); cancelling it", self.roles[ref], timeout)
            ray.cancel(ref, force=True)
        self.pending = []
        remove_boards(self.system.boards)  # what a writer that died left on this machine
        return ended
