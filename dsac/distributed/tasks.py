"""The three kinds of Ray task: rollout worker, learner, evaluator.

They move data between the actors and a :class:`dsac.policy.Policy`; the algorithm's math
lives behind that interface. Every remote call carries a batch: a chunk of transitions,
several training batches, a set of weights — never one env step.
"""

from __future__ import annotations

import collections
import hashlib
import logging
import time

import numpy as np
import ray

from dsac.distributed.topology import describe_process
from dsac.evaluation import evaluate
from dsac.learning import LearnerLoop, NonFiniteUpdates
from dsac.registry import callbacks_for, policy_class_for
from dsac.rollout import EnvCollector

log = logging.getLogger("dsac")

# How long a task sleeps between polls while it has nothing to do.
IDLE_SLEEP_S = 0.05
# Weights: a rollout worker looks for a landed pull at most this often, and starts pulls at
# most this often (a fast worker would otherwise spend its time on RPCs: 20 steps of
# Pendulum take ~1 ms).
CHECK_INTERVAL_S = 0.002
MIN_PULL_INTERVAL_S = 0.02
# A worker that waited this long for insert budget fetches the newest weights before it
# collects again (it was idle anyway; otherwise it would act with weights from before the wait).
REFRESH_AFTER_WAIT_S = 0.02


class WeightsClient:
    """Keeps a policy's weights fresh: at most one ``pull(newer_than=version)`` in flight,
    started every ``pull_every`` env steps, collected without blocking the env loop."""

    def __init__(self, ps, policy, pull_every: int, worker: int | None = None):
        self.ps = ps
        self.policy = policy
        self.pull_every = pull_every
        self.worker = worker
        self.version = 0
        self.meta: dict = {}
        self.stop = False
        self.steps_since_pull = pull_every  # pull at the first chance
        self.next_check_at = 0.0
        self.pulled_at = -MIN_PULL_INTERVAL_S
        self.in_flight = None

    def take(self, reply: dict) -> None:
        """Apply a ``pull`` reply: new weights if it carries them, and the stop flag."""
        self.stop = self.stop or reply["stop"]
        if "weights" in reply and reply["version"] > self.version:  # a late reply never goes back
            self.policy.set_weights(reply["weights"])
            self.version = reply["version"]
            self.meta = reply["meta"]

    def poll(self, steps: int) -> None:
        """Count ``steps`` env steps; take the reply of the pull in flight once it has landed;
        start the next pull every ``pull_every`` steps, but at most every ``MIN_PULL_INTERVAL_S``.
        Runs after every env step, inside chunks too (so a long chunk does not hold new
        weights back), and costs a clock read between checks."""
        self.steps_since_pull += steps
        now = time.monotonic()
        if steps and now < self.next_check_at:
            return
        self.next_check_at = now + CHECK_INTERVAL_S
        if self.in_flight is not None:
            ready, _ = ray.wait([self.in_flight], timeout=0)
            if not ready:
                return
            self.take(ray.get(self.in_flight))
            self.in_flight = None
        if self.steps_since_pull >= self.pull_every and now - self.pulled_at >= MIN_PULL_INTERVAL_S:
            self.in_flight = self.ps.pull.remote(self.version, self.worker)
            self.steps_since_pull = 0
            self.pulled_at = now

    def refresh(self) -> None:
        """Fetch the newest weights now (blocking): one call, or two with a pull in flight."""
        if self.in_flight is not None:
            self.take(ray.get(self.in_flight))
            self.in_flight = None
        self.take(ray.get(self.ps.pull.remote(self.version, self.worker)))
        self.steps_since_pull = 0

    def wait_for_weights(self) -> None:
        """Block until the policy has weights (or the run stops)."""
        while not self.policy.has_weights and not self.stop:
            self.take(ray.get(self.ps.pull.remote(self.version, self.worker)))
            if not self.policy.has_weights:
                time.sleep(IDLE_SLEEP_S)


@ray.remote
def rollout_worker(index: int, config, replay, ps, seed: int, num_shards: int = 1) -> dict:
    """Steps ``config.envs_per_worker`` envs, acting on their batch of observations, and sends
    what it gathered to its replay shard in chunks, within the insert budget the shard grants.

    Uniform random actions while fewer than ``config.start_steps`` transitions have reached
    the replay buffer (counted over all workers; with shards, estimated from this one).
    """
    ps.report_placement.remote(f"rollout_worker_{index}", describe_process())
    callbacks = callbacks_for(config)
    collector = EnvCollector(
        config.env, config.envs_per_worker, seed, config.gamma, config.n_step, callbacks=callbacks,
        worker_index=index, env_kwargs=config.env_kwargs, flatten_obs=config.flatten_obs,
    )
    policy = policy_class_for(config)(
        collector.observation_space, collector.action_space, config, seed=seed,
        worker_index=index, num_workers=config.num_workers,
    )
    weights = WeightsClient(ps, policy, config.pull_every, worker=index)
    status = ray.get(replay.add.remote(index, None))
    chunks_sent = 0
    while not (status["stop"] or weights.stop):
        chunk = None
        if status["grant"] > 0:
            if status["added"] * num_shards < config.start_steps:
                act = lambda obs: policy.random_actions(len(obs))  # noqa: E731
            else:
                weights.wait_for_weights()
                if not policy.has_weights:  # stopped before the learner's first weights
                    break
                act = lambda obs: policy.compute_actions(obs, explore=True)  # noqa: E731
            deadline = time.monotonic() + config.chunk_seconds
            # New weights are taken (and the next pull started) every pull_every steps, also
            # inside a chunk: a chunk of 256 steps must not delay them.
            chunk = policy.postprocess_trajectory(collector.collect(act, status["grant"], deadline, weights.poll))
            if callbacks is not None:
                chunk = callbacks.on_sample_end(worker_index=index, batch=chunk)
            episodes = collector.drain_episodes()
            if episodes:
                ps.report_episodes.remote(episodes)
            chunks_sent += 1
        weights.poll(0)
        asked = time.monotonic()
        status = ray.get(replay.add.remote(index, chunk))
        if status["grant"] > 0 and policy.has_weights and time.monotonic() - asked > REFRESH_AFTER_WAIT_S:
            weights.refresh()
    collector.close()
    return {"worker": index, "env_steps": collector.total_steps, "chunks": chunks_sent}


class ShardedSampler:
    """Keeps ``prefetch`` sample calls in flight on every replay shard and hands out their
    results round-robin, so the next batches arrive while the current ones train."""

    def __init__(self, shards: list, batch_size: int, num_batches: int, prefetch: int):
        self.shards = shards
        self.batch_size = batch_size
        self.num_batches = num_batches
        self.in_flight = collections.deque(
            (i, shard.sample.remote(batch_size, num_batches)) for _ in range(prefetch) for i, shard in enumerate(shards)
        )
        self.wait_s = 0.0

    def next(self):
        """``(shard index, result)`` of the oldest call; a new call replaces it at once."""
        shard, ref = self.in_flight.popleft()
        started = time.monotonic()
        result = ray.get(ref)
        self.wait_s += time.monotonic() - started
        self.in_flight.append((shard, self.shards[shard].sample.remote(self.batch_size, self.num_batches)))
        return shard, result


class GradientSync:
    """A learner's side of :class:`dsac.distributed.actors.GradientAverager`: flattens the
    policy's gradients into one array, averages it with the other learners', applies the mean."""

    def __init__(self, averager, index: int):
        self.averager = averager
        self.index = index
        self.env_steps = 0  # run-wide, summed over the learners' shards at the last step

    def learn(self, policy, batch: dict, step: int, own_env_steps: int) -> dict | None:
        """One synchronous update; its stats, or None when the run stopped meanwhile."""
        grads, stats = policy.compute_gradients(batch)
        shapes = [np.shape(g) for g in grads]
        flat = np.concatenate([np.asarray(g, np.float32).ravel() for g in grads])
        reply = ray.get(self.averager.average.remote(self.index, step, flat, own_env_steps))
        if reply is None:
            return None
        mean, self.env_steps = reply
        ends = np.cumsum([int(np.prod(shape)) for shape in shapes])
        policy.apply_gradients([part.reshape(shape) for part, shape in zip(np.split(mean, ends[:-1]), shapes,
                                                                              strict=True)])
        return stats


def weights_digest(weights: dict[str, np.ndarray]) -> str:
    """A hash of weights by name: equal digests, bit-identical weights."""
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name]).tobytes())
    return digest.hexdigest()[:16]


# A GPU learner by default; the driver overrides num_gpus to 0 on a cluster without GPUs.
# max_calls=1: the process exits after the task, so its GPU memory is given back.
@ray.remote(num_gpus=1, max_calls=1)
def learner(config, observation_space, action_space, shards: list, ps, seed: int, num_gpus: float,
            num_cpus: float, initial_weights: dict | None = None, initial_state: dict | None = None,
            index: int = 0, averager=None) -> dict:
    """Trains the policy on batches from its replay shards (each sample call's batches in one
    ``learn_on_batches``), pushes weights after the call that passes a multiple of
    ``config.push_every`` updates, and (prioritized replay) sends each sample call's new
    priorities back to its shard in one fire-and-forget call. ``initial_weights`` (e.g. from a
    restored Trainer) replace the fresh policy's weights before the first push; ``initial_state``
    (a resumed run's checkpoint) replaces its whole training state. When the parameter server
    asks for it (checkpoints) and at the end, the learner sends its full state.

    With several learners (``averager`` given), learner ``index`` trains on its own shards,
    every update is the mean of all learners' gradients, and learner 0 alone pushes weights
    and state (the replicas are identical); each reports its update count."""
    from dsac.tf_setup import configure_tensorflow

    device = configure_tensorflow(num_gpus, num_cpus, config.learner_threads, config.verbose)
    primary = index == 0
    role = "learner" if averager is None else f"learner_{index}"
    ps.report_placement.remote(role, {**describe_process(), "device": device})
    policy = policy_class_for(config)(observation_space, action_space, config, build_learner=True, seed=seed)
    if initial_weights is not None:
        policy.set_weights(initial_weights)
    loop = LearnerLoop(policy, config, callbacks_for(config))
    if initial_state is not None:
        loop.set_state(initial_state)
    sync, learn = None, None
    if averager is not None:
        sync = GradientSync(averager, index)
        # Every replica starts from learner 0's state, whatever its own initialization was.
        state = ray.get(averager.broadcast.remote(index, loop.state() if primary else None))
        if state is None:
            return {"learner": index, "updates": loop.updates}
        loop.set_state(state)

        def learn(batches):  # every update is the mean of all learners' gradients
            results = []
            for i, batch in enumerate(batches):
                result = sync.learn(policy, batch, loop.updates + i, sum(env_steps_by_shard))
                if result is None:  # the run stopped while the others were waited for
                    break
                results.append(result)
            return results

    env_steps_by_shard = [0] * len(shards)
    sampler = ShardedSampler(shards, config.batch_size, config.batches_per_sample, config.prefetch)

    def meta(**extra):
        env_steps = sync.env_steps if sync is not None else sum(env_steps_by_shard)
        return loop.meta(env_steps, learner_wait_s=sampler.wait_s, **extra)

    reply = ray.get(ps.push.remote(policy.get_weights(), meta())) if primary else {"stop": False}
    last_push = None
    try:
        while not reply["stop"]:
            shard, result = sampler.next()
            if result is None:  # the ratio holds the learner back, or the run is stopping
                reply = ray.get(ps.learner_poll.remote())
                if reply["state_wanted"] and primary:  # idle, e.g. between Trainer.train() calls
                    ray.get(ps.put_state.remote(loop.state(), meta()))
                continue
            batches, env_steps_by_shard[shard] = result
            step = loop.step(batches, learn)
            if step.stopped:
                reply = {"stop": True}
            # Push once a multiple of push_every was passed, with the weights after the whole block.
            if step.push and not step.stopped:
                if sync is not None:
                    ps.report_learner.remote(index, loop.updates)
                if primary:
                    if last_push is not None:
                        reply = ray.get(last_push)  # long done: carries the stop flag
                        if reply.get("state_wanted"):
                            ps.put_state.remote(loop.state(), meta())
                    last_push = ps.push.remote(policy.get_weights(), meta())
            if step.priorities is not None and "indices" in batches:
                shards[shard].update_priorities.remote(batches["indices"], batches["generations"], step.priorities)
    except NonFiniteUpdates:
        # The weights are still the last good ones (no skipped step changed them): hand them
        # and the counters over, then fail with the reason.
        if primary:
            ray.get(ps.push.remote(policy.get_weights(), meta(final=True)))
        raise
    final = meta(final=True)
    if sync is not None:
        ray.get(ps.report_learner.remote(index, loop.updates))
    if primary:
        ray.get(ps.put_state.remote(loop.state(), final))  # before the push the evaluator waits for
        ray.get(ps.push.remote(policy.get_weights(), final))
    return {"learner": index, "updates": loop.updates, "weights_digest": weights_digest(policy.get_weights())}


@ray.remote
def evaluator(config, observation_space, action_space, ps, seed: int) -> int:
    """Every ``config.eval_every`` env steps, runs ``config.eval_episodes`` deterministic
    episodes with the latest weights and reports the returns; a last evaluation of the final
    weights when the run stops. Returns the number of evaluations."""
    ps.report_placement.remote("evaluator", describe_process())
    policy = policy_class_for(config)(observation_space, action_space, config, seed=seed)
    weights = WeightsClient(ps, policy, pull_every=1)
    next_eval, evaluated_version, count = config.eval_every, 0, 0

    def run_evaluation():
        started = time.monotonic()
        returns = evaluate(
            lambda obs: policy.compute_actions(obs, explore=False), config.env, config.eval_episodes, seed,
            config.env_kwargs, config.flatten_obs,
        )
        # Waited for: the final report must reach the parameter server before this task ends.
        ray.get(ps.report_eval.remote({
            "env_steps": int(weights.meta.get("env_steps", 0)),
            "updates": int(weights.meta.get("updates", 0)),
            "weights_version": weights.version,
            "eval_return_mean": float(returns.mean()),
            "eval_return_std": float(returns.std()),
            "eval_returns": [float(r) for r in returns],
            "eval_seconds": time.monotonic() - started,
            "weights": policy.get_weights(),  # the driver keeps the best as best_weights.pkl
        }))

    while True:
        weights.take(ray.get(ps.pull.remote(weights.version)))
        if weights.stop:
            break
        env_steps = weights.meta.get("env_steps", 0)
        if policy.has_weights and env_steps >= next_eval:
            run_evaluation()
            evaluated_version, count = weights.version, count + 1
            next_eval = (env_steps // config.eval_every + 1) * config.eval_every
        else:
            time.sleep(IDLE_SLEEP_S * 2)
    # The final weights: the learner's last push may land just after the stop flag.
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        if ray.get(ps.latest.remote())["meta"].get("final"):
            break
        time.sleep(IDLE_SLEEP_S)
    weights.take(ray.get(ps.pull.remote(weights.version)))
    if policy.has_weights and weights.version != evaluated_version:
        run_evaluation()
        count += 1
    return count
