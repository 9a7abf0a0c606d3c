"""The three kinds of Ray task — rollout worker, learner, evaluator — around the loops of
:mod:`dsac.runtime.roles` (the serial runner runs the same ones), wired to the actors by the Ray side of
the roles' ports: :class:`ShardWriter`, :class:`MonitorReports`,
:class:`~dsac.distributed.weights_client.WeightsClient` and the learner's
:mod:`~dsac.distributed.learner_transport`. Every remote call carries a batch: a chunk of
transitions, several training batches, a set of weights — never one env step.
"""

from __future__ import annotations

import time

import ray

from dsac.distributed.learner_transport import GradientSync, LearnerTransport, ShardedSampler, weights_digest
from dsac.distributed.topology import describe_process
from dsac.distributed.weights_client import IDLE_SLEEP_S, POLL_WHILE_WAITING_S, WeightsClient
from dsac.runtime.learning import NonFiniteUpdates
from dsac.runtime.messages import Grant, Placement
from dsac.runtime.roles import Collect, Evaluate, Learn, learner_loop
from dsac.runtime.tf_setup import own_this_process
from dsac.settings.registry import callbacks_for

# The evaluator's pull waits this long for new weights: it wakes on each version, so a long
# wait only spares an idle evaluator calls that bring nothing.
EVALUATOR_WAIT_S = 1.0


class ShardWriter:
    """A rollout worker's replay writer (see :mod:`dsac.runtime.roles`): add calls on its shard."""

    def __init__(self, replay, index: int):
        self.replay, self.index = replay, index

    def send(self, chunk, keep: int):
        return self.replay.add.remote(self.index, chunk, keep)

    def wait(self, ref, poll) -> Grant:
        """``ray.get(ref)``, applying weights as they arrive meanwhile (``poll``): a worker the
        shard holds back must not come back to stale weights."""
        while not ray.wait([ref], timeout=POLL_WHILE_WAITING_S)[0]:
            poll()
        poll()
        return ray.get(ref)


class MonitorReports:
    """A task's reports sink (see :mod:`dsac.runtime.roles`): the run monitor, which keeps the run-wide
    budget of env rebuilds."""

    def __init__(self, monitor):
        self.monitor = monitor

    def episodes(self, episodes: list) -> None:
        self.monitor.report_episodes.remote(episodes)

    def evaluation(self, evaluation) -> None:
        # Waited for: the final report must reach the run monitor before the task ends.
        ray.get(self.monitor.report_eval.remote(evaluation))

    def env_crashed(self, role: str, error: str) -> bool:
        return ray.get(self.monitor.env_crashed.remote(role, error))

    def evaluator_alive(self, steps: int, final: bool) -> None:
        self.monitor.evaluator_alive.remote(steps, final)


@ray.remote
def rollout_worker(index: int, config, replay, ps, monitor, seed: int, num_shards: int = 1,
                   chunk_seconds: float | None = None, weights_board: str | None = None) -> dict:
    """Rollout worker ``index``'s :class:`dsac.runtime.roles.Collect` loop, on its ``replay`` shard (the
    run's env steps estimated from it), its node's weights board where this machine has it (else
    the parameter server) and the run ``monitor``. Returns its counters and CPU seconds by part."""
    cpu_started = time.process_time()
    monitor.report_placement.remote(Placement(f"rollout_worker_{index}", **describe_process()))
    collect = Collect(config, index, seed, config.resources.num_workers, callbacks_for(config.run),
                      MonitorReports(monitor),
                      lambda policy: WeightsClient(ps, policy, worker=index, board=weights_board).start(),
                      ShardWriter(replay, index), chunk_seconds, num_shards)
    collect.collector.cpu.started = cpu_started  # the worker's total counts from its task's start
    try:
        while collect.step():
            pass
    finally:
        collect.close()
    return {"worker": index, "env_steps": collect.collector.total_steps, "chunks": collect.chunks,
            "cpu": collect.collector.cpu.seconds()}


def learner_role(index: int, num_learners: int) -> str:
    """A learner's role name: ``learner``, or ``learner_<index>`` among data-parallel learners."""
    return "learner" if num_learners == 1 else f"learner_{index}"


# A GPU learner by default; the driver overrides num_gpus to 0 on a cluster without GPUs.
# max_calls=1: the process exits after the task, so its GPU memory is given back.
@ray.remote(num_gpus=1, max_calls=1)
def learner(config, observation_space, action_space, shards: list, ps, monitor, seed: int, num_gpus: float,
            num_cpus: float, initial_weights: dict | None = None, initial_state: dict | None = None,
            index: int = 0, averager=None) -> dict:
    """The :class:`dsac.runtime.roles.Learn` loop on batches from its replay ``shards``, from
    ``initial_weights`` (``--init_weights``) or a resumed run's ``initial_state``. With several
    learners (``averager`` given), learner ``index`` trains on its own shards and every update is
    the mean of all learners' gradients."""
    cpu_started = time.process_time()
    own_this_process()  # max_calls=1: the learner's process ends with it
    loop, device, warning = learner_loop(config, observation_space, action_space, seed, num_gpus, num_cpus,
                                         callbacks_for(config.run), initial_weights, initial_state)
    loop.cpu.started = cpu_started  # TensorFlow's start-up is the learner's too
    role = learner_role(index, config.resources.num_learners)
    monitor.report_placement.remote(Placement(role, **describe_process(), device=device, warning=warning))
    sync = GradientSync(averager, index, config.resources.num_learners) if averager is not None else None
    if sync is not None and not sync.join(loop):
        return {"learner": index, "updates": loop.updates}
    flow, transport = config.flow, LearnerTransport(ps, monitor, index, sync is not None)
    sampler = ShardedSampler(shards, config.algorithm.batch_size, flow.batches_per_sample, flow.prefetch)
    learn = Learn(loop, sampler, transport, flow.push_interval, sync)
    transport.first_push(loop, learn.report())
    try:
        while not (learn.stopped or transport.orders.stop):
            learn.step()
    except NonFiniteUpdates:
        # The weights are still the last good ones (no skipped step changed them): hand them
        # and the counters over, then fail with the reason.
        transport.hand_over(loop, learn.report(final=True), state=False)
        raise
    transport.hand_over(loop, learn.report(final=True), state=True)
    # Digests of the acting weights and of the whole state (optimizers and running statistics
    # too): data-parallel replicas must agree on both.
    return {"learner": index, "updates": loop.updates, "weights_digest": weights_digest(loop.get_weights()),
            "state_digest": weights_digest(loop.state())}


@ray.remote
def evaluator(config, observation_space, action_space, ps, monitor, seed: int,
              weights_board: str | None = None) -> dict:
    """The :class:`dsac.runtime.roles.Evaluate` loop (its budget a share of the cluster's CPUs), then the
    final weights' evaluation; weights from its node's board where this machine has it, else by
    waiting pulls. Returns its number of ``evaluations`` and CPU seconds by part (``cpu``)."""
    monitor.report_placement.remote(Placement("evaluator", **describe_process()))
    evaluate = Evaluate(config, observation_space, action_space, seed,
                        lambda policy: WeightsClient(ps, policy, board=weights_board), MonitorReports(monitor),
                        ray.cluster_resources().get("CPU", 1.0))
    while evaluate.step(EVALUATOR_WAIT_S):
        pass
    # The final weights: the learner's last push may land just after the stop flag.
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and not ray.get(ps.latest.remote()).report.final:
        time.sleep(IDLE_SLEEP_S)
    evaluate.weights.take(ray.get(ps.pull.remote(evaluate.weights.version)))  # the server's own: a board may lag
    evaluate.final()
    evaluate.weights.close()
    return {"evaluations": evaluate.count, "cpu": evaluate.cpu.seconds()}
