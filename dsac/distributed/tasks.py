"""The three kinds of Ray task: rollout worker, learner, evaluator.

They move data between the actors and a :class:`dsac.policy.Policy`; the algorithm's math
lives behind that interface. Every remote call carries a batch: a chunk of transitions,
several training batches, a set of weights — never one env step.
"""

from __future__ import annotations

import logging
import math
import time
from typing import NamedTuple

import ray

from dsac import build, video
from dsac.cpu import CpuMeter
from dsac.distributed.learner_transport import GradientSync, LearnerTransport, ShardedSampler, weights_digest
from dsac.distributed.topology import describe_process
from dsac.distributed.weights_client import IDLE_SLEEP_S, WeightsClient
from dsac.envs import one_line
from dsac.evaluation import EvaluationBudget
from dsac.frames import frame_layout
from dsac.learning import NonFiniteUpdates
from dsac.messages import Placement
from dsac.registry import callbacks_for

log = logging.getLogger("dsac")

# A chunk waits for at least this many transitions (up to MAX_CHUNK_S) before it is sent: with a
# slow env, a chunk every --chunk_seconds would be a few transitions per add call, and the call,
# not the env, would be most of a worker's CPU.
MIN_CHUNK_TRANSITIONS = 128
MAX_CHUNK_S = 1.0
# The evaluator's pull waits this long for new weights: it wakes on each version, so a long
# wait only spares an idle evaluator calls that bring nothing.
EVALUATOR_WAIT_S = 1.0


def next_chunk_seconds(chunk_seconds: float, steps: int, seconds: float) -> float:
    """How long the next chunk collects: ``chunk_seconds``, or long enough for
    ``MIN_CHUNK_TRANSITIONS`` at the rate of the last chunk (``steps`` in ``seconds``), at most
    ``MAX_CHUNK_S``."""
    if steps <= 0 or seconds <= 0:
        return chunk_seconds
    return min(max(chunk_seconds, MIN_CHUNK_TRANSITIONS * seconds / steps), max(chunk_seconds, MAX_CHUNK_S))


def env_crash_handler(monitor, role: str, limit: int):
    """Asks the run monitor, which keeps the run-wide budget, whether ``role`` may rebuild an
    env that raised (``--env_restarts``): one call per crash, never per step."""
    def allowed(exc: BaseException) -> bool:
        return limit > 0 and ray.get(monitor.env_crashed.remote(role, one_line(exc)))
    return allowed


class WorkerParts(NamedTuple):
    """What a rollout worker collects with, built by :func:`worker_parts`."""

    index: int
    collector: object  # a dsac.rollout.EnvCollector
    policy: object  # its acting policy
    callbacks: object
    encoder: object  # a dsac.frames.FrameEncoder, or None
    weights: WeightsClient
    monitor: object  # the run monitor, which takes the finished episodes


def worker_parts(index: int, config, ps, monitor, seed: int, weights_board: str | None) -> WorkerParts:
    """Rollout worker ``index``'s envs, acting policy, frame encoder and weights client (started)."""
    callbacks = callbacks_for(config.run)
    collector = build.collector(config, seed, index, callbacks,
                                env_crash_handler(monitor, f"rollout_worker_{index}", config.resources.env_restarts))
    policy = build.acting_policy(config, collector.observation_space, collector.action_space, seed, index,
                                 config.resources.num_workers)
    encoder = build.frame_encoder(config, frame_layout(collector.observation_space.shape,
                                                       collector.observation_space.dtype))
    weights = WeightsClient(ps, policy, worker=index, board=weights_board).start()
    return WorkerParts(index, collector, policy, callbacks, encoder, weights, monitor)


def acting(parts: WorkerParts, env_steps: int, start_steps: int):
    """How the next chunk acts: uniformly at random before ``start_steps`` run-wide env steps,
    then the policy with the newest weights; None when the run stopped before the first weights."""
    policy = parts.policy
    if env_steps < start_steps:
        return lambda obs: policy.random_actions(len(obs))
    policy.set_env_steps(env_steps)  # schedules follow the run's count
    parts.weights.wait_for_weights()
    if not policy.has_weights:
        return None
    return lambda obs: policy.compute_actions(obs, explore=True)


def collect_chunk(parts: WorkerParts, act, budget: int, seconds: float) -> tuple[object, int, float]:
    """Up to ``budget`` steps for at most ``seconds``, as a chunk; with the steps taken and the
    seconds they took. New weights are applied as they land, also inside a chunk: a long chunk
    must not delay them. Finished episodes are reported on the way."""
    collector = parts.collector
    started, steps_before = time.monotonic(), collector.total_steps
    batch = collector.collect(act, budget, started + seconds, parts.weights.poll)
    steps, took = collector.total_steps - steps_before, time.monotonic() - started
    chunk = build.make_chunk(batch, parts.policy, parts.callbacks, parts.encoder, parts.index, env_steps=steps)
    episodes = collector.drain_episodes()
    if episodes:
        parts.monitor.report_episodes.remote(episodes)
    return chunk, steps, took


@ray.remote
def rollout_worker(index: int, config, replay, ps, monitor, seed: int, num_shards: int = 1,
                   chunk_seconds: float | None = None, weights_board: str | None = None) -> dict:
    """Steps ``config.envs_per_worker`` envs, acting on their batch of observations, and sends
    what it gathered to its replay shard in chunks (at least every ``chunk_seconds``, default
    ``config.chunk_seconds``), within the insert budget the shard grants. Weights come from
    its node's weights board (``weights_board``) where this machine has it, else the
    parameter server. It reports where it runs, finished episodes and env crashes to the run
    ``monitor``. Uniform random actions while fewer than ``config.start_steps``
    transitions have reached the replay buffer (counted over all workers; with shards,
    estimated from this one).

    The insert budget in hand was granted by the shard and not yet collected. A chunk's add
    call is in flight while the next chunk is collected with a budget kept from earlier grants,
    and its reply (more budget) is taken once that chunk is done: a worker waits for the shard
    only when it kept no budget (the ratio holding it back, or a fast env that fills its whole
    grant in one chunk).

    Returns its counters, with its CPU seconds by part (``cpu``: env steps, acting, its total).
    """
    cpu_started = time.process_time()
    monitor.report_placement.remote(Placement(f"rollout_worker_{index}", **describe_process()))
    parts = worker_parts(index, config, ps, monitor, seed, weights_board)
    parts.collector.cpu.started = cpu_started  # the worker's total counts from its task's start
    weights, chunk_seconds = parts.weights, chunk_seconds or config.flow.chunk_seconds
    chunks_sent, chunk_s = 0, chunk_seconds
    try:
        status = ray.get(replay.add.remote(index, None))
        budget, in_flight = status.grant, None
        while not (status.stop or weights.stop):
            chunk = None
            if budget > 0:
                act = acting(parts, status.added * num_shards, config.algorithm.start_steps)
                if act is None:  # stopped before the learner's first weights
                    break
                chunk, steps, seconds = collect_chunk(parts, act, budget, chunk_s)
                budget -= steps
                chunk_s = next_chunk_seconds(chunk_seconds, steps, seconds)
                wanted = math.ceil(steps * chunk_s / max(seconds, 1e-6))  # the next chunk's steps, about
                chunks_sent += 1
            if in_flight is not None:  # the last chunk's reply, sent a chunk ago: mostly here already
                status = weights.get(in_flight)
                budget += status.grant
            if chunk is not None:  # keep what the next chunk is likely to take; the rest goes back to the shard
                budget = min(budget, wanted)
            in_flight = replay.add.remote(index, chunk, max(0, budget))
            if budget <= 0 or status.stop:  # nothing left to collect with: wait for the shard
                status = weights.get(in_flight)
                budget, in_flight = budget + status.grant, None
        if in_flight is not None:  # the last chunk is stored before the worker ends
            weights.get(in_flight)
    finally:
        weights.close()
        parts.collector.close()
    return {"worker": index, "env_steps": parts.collector.total_steps, "chunks": chunks_sent,
            "cpu": parts.collector.cpu.seconds()}


def learner_role(index: int, num_learners: int) -> str:
    """A learner's role name: ``learner``, or ``learner_<index>`` among data-parallel learners."""
    return "learner" if num_learners == 1 else f"learner_{index}"


# A GPU learner by default; the driver overrides num_gpus to 0 on a cluster without GPUs.
# max_calls=1: the process exits after the task, so its GPU memory is given back.
@ray.remote(num_gpus=1, max_calls=1)
def learner(config, observation_space, action_space, shards: list, ps, monitor, seed: int, num_gpus: float,
            num_cpus: float, initial_weights: dict | None = None, initial_state: dict | None = None,
            index: int = 0, averager=None) -> dict:
    """Trains the policy on batches from its replay shards through a
    :class:`dsac.learning.UpdateLoop` (each sample call's batches in one
    ``learn_on_batches``) and forwards its outputs
    (:class:`~dsac.distributed.learner_transport.LearnerTransport`). ``initial_weights``
    (e.g. ``--init_weights``) replace the fresh policy's weights before the first push;
    ``initial_state`` (a resumed run's checkpoint) replaces its whole training state. With
    several learners (``averager`` given), learner ``index`` trains on its own shards and every
    update is the mean of all learners' gradients."""
    from dsac.tf_setup import configure_tensorflow

    cpu_started = time.process_time()
    device, warning = configure_tensorflow(num_gpus, num_cpus, config.resources.learner_threads,
                                           config.output.verbose)
    role = learner_role(index, config.resources.num_learners)
    monitor.report_placement.remote(Placement(role, **describe_process(), device=device, warning=warning))
    loop = build.learner_loop(config, observation_space, action_space, seed, callbacks_for(config.run),
                              initial_weights, initial_state)
    loop.cpu.started = cpu_started  # TensorFlow's start-up is the learner's too
    sync = GradientSync(averager, index) if averager is not None else None
    if sync is not None and not sync.join(loop):
        return {"learner": index, "updates": loop.updates}
    sampler = ShardedSampler(shards, config.algorithm.batch_size, config.flow.batches_per_sample, config.flow.prefetch)
    transport = LearnerTransport(loop, ps, monitor, shards, sampler, index, sync, config.flow.push_interval)
    transport.first_push()
    try:
        while not transport.orders.stop:
            transport.step()
    except NonFiniteUpdates:
        # The weights are still the last good ones (no skipped step changed them): hand them
        # and the counters over, then fail with the reason.
        transport.hand_over(state=False)
        raise
    transport.hand_over(state=True)
    # Digests of the acting weights and of the whole state (optimizers and running statistics
    # too): data-parallel replicas must agree on both.
    return {"learner": index, "updates": loop.updates, "weights_digest": weights_digest(loop.get_weights()),
            "state_digest": weights_digest(loop.state())}


@ray.remote
def evaluator(config, observation_space, action_space, ps, monitor, seed: int,
              weights_board: str | None = None) -> dict:
    """Every ``config.eval_every`` env steps, as the evaluation budget allows
    (:class:`dsac.evaluation.EvaluationBudget`: ``--eval_cpu_share`` of the cluster's CPUs), runs
    ``config.eval_episodes`` deterministic episodes with the latest weights and reports the
    returns; a last evaluation of the final weights when the run stops. Returns the number of
    evaluations (``evaluations``) and its CPU seconds by part (``cpu``: env steps, acting, its
    total). Weights come from its node's weights board (``weights_board``) where this
    machine has it, else from waiting pulls on the parameter server. Evaluations go to the run
    ``monitor``."""
    cpu = CpuMeter(time.thread_time)  # its envs and acting run on this thread
    monitor.report_placement.remote(Placement("evaluator", **describe_process()))
    policy = build.acting_policy(config, observation_space, action_space, seed)
    weights = WeightsClient(ps, policy, board=weights_board)
    next_eval, evaluated_version, count = config.output.eval_every, 0, 0
    budget = EvaluationBudget(config.output.eval_cpu_share, ray.cluster_resources().get("CPU", 1.0))

    if config.output.video_every:
        video.prepare_headless_rendering()

    def run_evaluation(final: bool = False):
        report = weights.report
        evaluation = build.evaluate(
            config, policy, seed, count + 1, final, (report.env_steps, report.updates, weights.version),
            env_crash_handler(monitor, "evaluator", config.resources.env_restarts),
            on_progress=lambda steps: monitor.evaluator_alive.remote(steps, final), cpu=cpu)
        # Waited for: the final report must reach the run monitor before this task ends.
        ray.get(monitor.report_eval.remote(evaluation))

    while True:
        weights.refresh(EVALUATOR_WAIT_S)
        if weights.stop:
            break
        env_steps = weights.report.env_steps
        if policy.has_weights and env_steps >= next_eval and budget.allows():
            budget.timed(run_evaluation)
            evaluated_version, count = weights.version, count + 1
            next_eval = (env_steps // config.output.eval_every + 1) * config.output.eval_every
    # The final weights: the learner's last push may land just after the stop flag.
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if ray.get(ps.latest.remote()).report.final:
            break
        time.sleep(IDLE_SLEEP_S)
    weights.take(ray.get(ps.pull.remote(weights.version)))  # the server's own: a board may be behind
    weights.close()
    if policy.has_weights and weights.version != evaluated_version:
        run_evaluation(final=True)
        count += 1
    return {"evaluations": count, "cpu": cpu.seconds()}
