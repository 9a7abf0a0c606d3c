"""The parts of a run, built in one place (Acme's builder): the roles both runners run
(:mod:`dsac.runtime.roles`) and the replay actor take them from here. Free of Ray. A transition's
parts: :func:`collector` steps the envs, :func:`acting_policy` acts, :func:`make_chunk` turns
what was collected into the :class:`dsac.runtime.messages.Chunk` that :func:`replay` stores. A weights
version's parts: :func:`learner_loop` learns and gives weights, :func:`evaluate` plays them.
:func:`role_seeds` and :class:`EnvRestartBudget` are run-wide rules every runner keeps alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from dsac.envs.rollout import CrashFn, EnvCollector
from dsac.models.normalization import check_normalizable
from dsac.models.vision import obs_input
from dsac.output import video
from dsac.policy import Policy
from dsac.replay.buffer import PrioritizedReplayStorage, Replay, ReplayStorage, per_shard, replay_specs
from dsac.replay.frames import FrameEncoder, FrameLayout
from dsac.runtime.cpu import CpuMeter
from dsac.runtime.evaluation import evaluation_seed, play_episodes
from dsac.runtime.learning import UpdateLoop
from dsac.runtime.messages import Chunk, Evaluation
from dsac.settings.registry import learner_class_for, policy_class_for

# Every object this module made, by id, while ``BUILT`` is a set: the test that both runners
# take their parts from here turns it on (None: nothing is kept).
BUILT: set[int] | None = None


def _built(part):
    if BUILT is not None:
        BUILT.add(id(part))
    return part


class RoleSeeds(NamedTuple):
    """Independent, non-overlapping seeds for every role, whatever ``--seed`` and
    ``--num_workers`` are."""

    workers: list[int]  # rollout worker i's envs reset with workers[i] + j; its policy's noise
    evaluator: int  # evaluation episode j resets with evaluator + j (the same at every evaluation)
    learner: int  # the networks' initialization


def role_seeds(run_seed: int, num_workers: int) -> RoleSeeds:
    """The seeds of a run with ``--seed run_seed`` and ``num_workers`` rollout workers (the serial
    runner is one worker)."""
    spawned = np.random.SeedSequence(run_seed).spawn(max(1, num_workers))
    return RoleSeeds([int(s.generate_state(1)[0]) for s in spawned], evaluation_seed(run_seed), int(run_seed))


def collector(config, seed: int, worker_index: int, callbacks=None,
              on_env_crash: CrashFn | None = None) -> EnvCollector:
    """Rollout worker ``worker_index``'s batch of ``envs_per_worker`` envs, emitting n-step
    transitions (:class:`dsac.envs.rollout.EnvCollector`), from the run's resolved ``config`` and the
    worker's ``seed`` (:func:`role_seeds`); the run's ``callbacks`` (or None) see its episodes,
    and ``on_env_crash`` says whether an env that raised may be rebuilt."""
    run = config.run
    return _built(EnvCollector(
        run.env, config.resources.envs_per_worker, seed, config.algorithm.gamma, config.replay.n_step,
        callbacks=callbacks, worker_index=worker_index, env_kwargs=run.env_kwargs,
        flatten_obs=run.flatten_obs, atari=config.frames, env_step_ms=run.env_step_ms,
        env_reset_ms=run.env_reset_ms, on_env_crash=on_env_crash,
        her_k=run.her_k if run.her else None, her_strategy=run.her_strategy,
    ))


def acting_policy(config, observation_space, action_space, seed: int, worker_index: int | None = None,
                  num_workers: int = 1, cls: type | None = None):
    """The acting policy (:class:`dsac.policy.ActingPolicy`; the built-in ones act in numpy, no
    TensorFlow) of a rollout worker (``worker_index``) or the evaluator (None); a user's
    ``policy_class`` as is. It acts once it has weights (``set_weights``). ``seed`` seeds its
    exploration noise; ``worker_index`` and ``num_workers`` may set it (e.g. Ape-X's ε per worker);
    ``cls`` is the class a weights file names (default: the config's)."""
    cls = cls or policy_class_for(config.run)
    return _built(cls(observation_space, action_space, config, seed=seed, worker_index=worker_index,
                      num_workers=num_workers))


def learner_loop(config, observation_space, action_space, seed: int, callbacks=None,
                 initial_weights: dict | None = None, initial_state: dict | None = None) -> UpdateLoop:
    """The learner — the algorithm's :class:`dsac.algorithms.learner.Learner` (networks and
    optimizers, TensorFlow), or a user's ``policy_class`` built with ``build_learner=True`` — in
    an :class:`dsac.runtime.learning.UpdateLoop` that keeps the update count and says when to push;
    ``seed`` initializes the networks, the run's ``callbacks`` (or None) see each update
    (``on_learn_on_batch``). It starts from ``initial_weights`` (``--init_weights``) or a resumed
    run's ``initial_state`` (networks, optimizers, updates)."""
    learner = make_learner(config, observation_space, action_space, seed)
    if initial_weights is not None:
        learner.set_weights(initial_weights)
    loop = UpdateLoop(learner, config.flow.push_every, config.algorithm.max_nonfinite_updates, callbacks)
    if initial_state is not None:
        loop.set_state(initial_state)
    return _built(loop)


def make_learner(config, observation_space, action_space, seed: int = 0):
    """What learns (TensorFlow for dsac's algorithms): the algorithm's
    :class:`dsac.algorithms.learner.Learner` on the config's sections, or a user's
    ``policy_class`` built with ``build_learner=True`` (a :class:`dsac.policy.Policy` plays both
    roles); ``seed`` initializes the networks."""
    cls = learner_class_for(config.run, config.output.verbose)
    if issubclass(cls, Policy):
        return cls(observation_space, action_space, config, build_learner=True, seed=seed)
    from dsac.settings.schedules import keras_learning_rate

    learner = cls(observation_space, action_space, config.algorithm, config.model, keras_learning_rate(config),
                  seed=seed, xla=config.resources.learner_xla)
    if not config.model.normalize_obs:
        return learner
    from dsac.algorithms.normalization import NormalizingLearner

    obs = obs_input(observation_space)
    check_normalizable(obs)
    return NormalizingLearner(learner, obs.flat_dim)


def frame_encoder(config, frames: FrameLayout | None) -> FrameEncoder | None:
    """What sends image observations frame by frame (each frame crosses once, see
    :mod:`dsac.replay.frames`); None for other observations."""
    if frames is None:
        return None
    return _built(FrameEncoder(frames, config.resources.envs_per_worker, config.replay.n_step))


def make_chunk(batch: dict, policy, callbacks, encoder: FrameEncoder | None, worker_index: int,
               env_steps: int | None = None) -> Chunk:
    """What a rollout worker collected in ``env_steps`` env steps, as the chunk it stores: the
    policy's ``postprocess_trajectory`` (e.g. initial priorities), the callbacks'
    ``on_sample_end``, and image observations frame by frame."""
    batch = policy.postprocess_trajectory(batch)
    if callbacks is not None:
        batch = callbacks.on_sample_end(worker_index=worker_index, batch=batch)
    chunk = Chunk.from_batch(batch, env_steps)
    if encoder is not None and chunk.size:
        chunk = chunk._replace(transitions=encoder.encode(chunk.transitions))
    return chunk


def replay(specs: dict, capacity: int, *, seed: int = 0, prioritized: bool = False, priority_alpha: float = 0.6,
           frames: FrameLayout | None = None, learning_starts: int = 0, restore: dict | None = None,
           start_added: int = 0, **budgets) -> Replay:
    """A replay (:class:`dsac.replay.buffer.Replay`, which takes ``budgets``) on a new storage,
    proportional prioritized (Schaul et al. 2016, exponent ``priority_alpha``) or uniform, of
    ``specs`` (:func:`dsac.replay.buffer.replay_specs`). It must hold ``learning_starts`` transitions
    before the first sample — counted from ``start_added`` for a resumed run whose contents were
    not kept (it warms up again); a resumed run's ``restore`` (a ``state_dict``) refills it."""
    if prioritized:
        storage = PrioritizedReplayStorage(specs, capacity, seed, alpha=priority_alpha, frames=frames)
    else:
        storage = ReplayStorage(specs, capacity, seed, frames=frames)
    warmup = int(learning_starts)
    if restore is not None:
        storage.load_state_dict(restore)
    elif start_added:
        storage.added = int(start_added)
        warmup += int(start_added)
    _built(storage)
    return _built(Replay(storage, warmup, learning_starts=learning_starts, **budgets))


def replay_options(config, frames: FrameLayout | None, *, shard: int = 0, num_shards: int = 1, writers: int = 1,
                   insert_limit: int | None = None, start_added: int = 0, restore: dict | None = None) -> dict:
    """What :func:`replay` takes for replay shard ``shard`` of ``num_shards`` (the serial runner's
    replay: shard 0 of 1), written by ``writers`` rollout workers: its share of the capacity,
    warm-up and insert limit, so that together the shards keep the update ratio for all the data."""
    algorithm, settings, flow, run = config.algorithm, config.replay, config.flow, config.run
    return dict(
        capacity=per_shard(settings.buffer_size, num_shards), seed=run.seed + shard, frames=frames,
        prioritized=settings.prioritized, priority_alpha=settings.priority_alpha, priority_beta=settings.priority_beta,
        beta_anneal_steps=per_shard(run.total_env_steps, num_shards), restore=restore,
        learning_starts=per_shard(algorithm.learning_starts, num_shards), start_added=start_added // num_shards,
        updates_per_step=algorithm.updates_per_step, max_steps_ahead=max(1, flow.max_steps_ahead // num_shards),
        batches_per_call=flow.batches_per_sample, max_chunk=flow.max_chunk, num_writers=writers,
        insert_limit=per_shard(insert_limit, num_shards), track_obs=config.model.normalize_obs)


def local_replay(config, observation_space, action_space, checkpoint: dict | None = None) -> Replay:
    """The serial runner's replay, built as a distributed run builds each replay shard; a resumed
    run's ``checkpoint`` refills it or says the env steps it counts on from."""
    specs, frames = replay_specs(observation_space, action_space)
    snapshots = (checkpoint or {}).get("replay") or []
    return replay(specs, **replay_options(
        config, frames, insert_limit=config.run.total_env_steps, restore=snapshots[0] if len(snapshots) == 1 else None,
        start_added=int((checkpoint or {}).get("meta", {}).get("env_steps", 0))))


def evaluate(config, policy, seed: int, number: int, final: bool, counters: tuple[int, int, int],
             on_env_crash: CrashFn | None = None,
             on_progress: Callable[[int], None] | None = None, cpu: CpuMeter | None = None) -> Evaluation:
    """``eval_episodes`` deterministic episodes of ``policy``'s weights (episode j reset with
    ``seed + j``; the evaluator's seed: :func:`role_seeds`), with a video when ``--video_every``
    asks for one at this process's evaluation ``number`` (1 for the first) or a ``final`` one.
    ``counters``: ``(env_steps, updates, weights_version)`` the weights come with;
    ``on_env_crash`` says whether an env that raised may be rebuilt; ``on_progress(steps)`` is
    called every few seconds; ``cpu`` (a :class:`dsac.runtime.cpu.CpuMeter`) counts acting and env steps."""
    run = config.run
    started = time.monotonic()
    frames = video.Frames() if video.wanted(config.output.video_every, number, final) else None
    episodes = play_episodes(lambda obs: policy.compute_actions(obs, explore=False), run.env,
                             config.output.eval_episodes, seed, run.env_kwargs, run.flatten_obs, config.frames,
                             on_env_crash, frames, on_progress=on_progress, cpu=cpu, goal=run.her)
    mp4, video_error, gif = video.finish(frames, gif=config.output.tensorboard)
    env_steps, updates, version = counters
    return Evaluation(
        env_steps=int(env_steps), updates=int(updates), weights_version=int(version),
        eval_seconds=time.monotonic() - started, weights=policy.get_weights(),
        video=mp4, video_error=video_error, video_gif=gif, **episodes.summary(),
    )


class EnvRestartBudget:
    """The run-wide budget of ``limit`` envs rebuilt after they raised (``--env_restarts``, all
    roles together), kept by the reports sink (:class:`dsac.runtime.roles.LocalReports`, the run
    monitor actor), asked once per crash."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.used: list[tuple[str, str]] = []  # (role, error) of every rebuild allowed

    def allow(self, role: str, error: str) -> int | None:
        """Count a rebuild of ``role``'s env that raised ``error``: its number (1 for the
        first), or None when the budget is spent."""
        if len(self.used) >= self.limit:
            return None
        self.used.append((role, error))
        return len(self.used)

    def by_env(self) -> dict[str, int]:
        """Rebuilds so far, by ``<role>/env``."""
        counts: dict[str, int] = {}
        for role, _ in self.used:
            counts[f"{role}/env"] = counts.get(f"{role}/env", 0) + 1
        return counts
