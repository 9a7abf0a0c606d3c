"""The env loop of a rollout worker, free of Ray: step a batch of envs with one batched
action call and gather transitions into chunks.

Gymnasium 1.x semantics: an episode ends by *termination* (the MDP ended: no bootstrap) or
*truncation* (a time limit: bootstrap through it). Only ``terminated`` is stored, and the
``next_obs`` of a final step is the observation ``step`` returned — never the observation
of the next episode's ``reset``. With n-step returns, a window that meets an episode's end
sums only the rewards up to it and bootstraps (truncation) or not (termination) from there.

A training env may learn from a signal other than what is reported (see :mod:`dsac.envs.atari`):
a step's ``info["real_reward"]`` is what the episode's return counts instead of the (clipped)
reward stored, and ``info["episode_continues"]`` marks a termination for learning only (a lost
life) after which the same game goes on: its transitions end there, its episode does not.

An env that raises (a simulator that crashed) is rebuilt when the run allows it
(``on_env_crash``, see ``--env_restarts``): its broken episode is dropped — no transition
crosses the crash, its pending n-step window is discarded, no return is reported — and a new
episode starts on the new env. Otherwise :class:`dsac.envs.make.EnvCrashed` ends the collection.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import numpy as np

from dsac.envs.atari import EPISODE_CONTINUES, REAL_REWARD, FrameSettings
from dsac.envs.make import EnvCrashed, make_env, one_line, with_simulated_cost
from dsac.errors import DsacError
from dsac.replay.buffer import FIELDS
from dsac.replay.her import ACHIEVED_GOAL, HindsightRelabeler
from dsac.runtime.callbacks import Callbacks, Episode, overrides
from dsac.runtime.cpu import CpuMeter
from dsac.runtime.messages import FinishedEpisode

ActFn = Callable[[np.ndarray], np.ndarray]
# Asked when an env raised, with the error: True rebuilds the env, False ends the run.
CrashFn = Callable[[BaseException], bool]


def rebuild_or_raise(on_env_crash: CrashFn | None, env, exc: BaseException) -> None:
    """After ``env`` raised ``exc``: close it and return when ``on_env_crash`` allows a new one,
    else raise :class:`dsac.envs.make.EnvCrashed`."""
    if on_env_crash is None or not on_env_crash(exc):
        raise EnvCrashed(one_line(exc)) from exc
    try:
        env.close()
    except Exception:  # a crashed simulator may not close cleanly either
        pass


class EnvCollector:
    """Steps ``num_envs`` copies of one environment in lockstep and emits n-step transitions.

    Args:
        env_id: gymnasium id.
        num_envs: envs acted on as one batch.
        seed: seed of the first reset of env ``i`` is ``seed + i``.
        gamma: discount, folded into n-step rewards and the stored ``discount``.
        n_step: rewards summed per transition (1 = plain one-step transitions).
        callbacks: a :class:`dsac.runtime.callbacks.Callbacks` whose episode hooks run here.
        worker_index: reported to the callbacks.
        env_kwargs: keyword arguments of the env's constructor.
        flatten_obs: flatten the observations into one Box (see :func:`dsac.envs.make.make_env`).
        atari: preprocessing of Atari envs (default: :class:`dsac.envs.atari.FrameSettings`).
        env_step_ms, env_reset_ms: each step / reset takes at least this wall time, sleeping
            (:class:`dsac.envs.make.SimulatedCost`; 0: the env as it is). The envs are stepped one
            after another, so a batch costs ``num_envs`` times a step.
        on_env_crash: asked when an env's ``step`` or ``reset`` raised: True rebuilds it (its
            episode is dropped), False (or None) raises :class:`dsac.envs.make.EnvCrashed`.
        her_k: hindsight copies per transition (``--her``; None: no relabeling): the envs are
            goal-conditioned, each episode is held until it ends and then emitted with its
            relabeled copies (:class:`dsac.replay.her.HindsightRelabeler`; one-step transitions only).
        her_strategy: where the copies' goals come from (``--her_strategy``).

    ``cpu`` counts this thread's CPU in acting (``act``: the policy, and taking new weights
    through ``on_step``) and in stepping the batch of envs with its per-transition bookkeeping
    (``env_step``): two clock reads per batch.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int, gamma: float = 0.99, n_step: int = 1,
                 callbacks: Callbacks | None = None, worker_index: int | None = None,
                 env_kwargs: dict | None = None, flatten_obs: bool = False, atari: FrameSettings | None = None,
                 env_step_ms: float = 0.0, env_reset_ms: float = 0.0, on_env_crash: CrashFn | None = None,
                 her_k: int | None = None, her_strategy: str = "future"):
        self.cpu = CpuMeter(time.thread_time)  # the envs and acting run on this thread
        self._make_env = lambda: with_simulated_cost(
            make_env(env_id, env_kwargs, flatten_obs, atari, training=True, goal=her_k is not None),
            env_step_ms, env_reset_ms)
        self.envs = [self._make_env() for _ in range(num_envs)]
        self.seed = int(seed)
        self.on_env_crash = on_env_crash
        self.env_rebuilds = 0
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.gamma = float(gamma)
        self.n_step = int(n_step)
        # Per env: the last (obs, action, reward) steps whose n-step return is not complete.
        self.pending: list[collections.deque] = [collections.deque() for _ in range(num_envs)]
        # (return, length, custom metrics) of finished episodes, drained by the caller.
        self.finished_episodes: list[FinishedEpisode] = []
        self.total_steps = 0
        self.callbacks = callbacks
        self.worker_index = worker_index
        self.step_hook = overrides(callbacks, "on_episode_step")
        self.episodes = [self._start_episode(i) for i in range(num_envs)]
        self.her = None if her_k is None else HindsightRelabeler(
            her_k, her_strategy, self.envs[0].get_wrapper_attr("goal_shape"), seed)
        if self.her is not None and self.n_step != 1:
            raise DsacError("--her relabels one-step transitions: n-step returns would sum rewards of the real goal "
                            "(set --n_step 1)")
        # --her: per env, the current episode's steps (obs, action, reward, next_obs, terminated, info:
        # it holds the achieved goal); finished episodes with their copies wait in ``ready``.
        self.her_steps: list[list[tuple]] = [[] for _ in range(num_envs)]
        self.ready: list[dict[str, np.ndarray]] = []

    def _start_episode(self, i: int) -> Episode:
        episode = Episode(env_index=i, worker_index=self.worker_index)
        if self.callbacks is not None:
            self.callbacks.on_episode_start(episode=episode, obs=self.obs[i])
        return episode

    @property
    def num_envs(self) -> int:
        return len(self.envs)

    def _reset(self, i: int) -> np.ndarray:
        """Env ``i``'s next first observation; a new env when the reset raised (and the run
        allows it: see :meth:`_rebuild`)."""
        try:
            return self.envs[i].reset()[0]
        except Exception as exc:
            return self._rebuild(i, exc)

    def _rebuild(self, i: int, exc: BaseException) -> np.ndarray:
        """Replace env ``i``, which raised ``exc``, by a new one, or raise EnvCrashed; drops its
        pending n-step window and returns the new env's first observation (a seed no env of
        this collector used)."""
        rebuild_or_raise(self.on_env_crash, self.envs[i], exc)
        self.env_rebuilds += 1
        self.pending[i].clear()
        self.her_steps[i].clear()
        self.envs[i] = self._make_env()
        return self.envs[i].reset(seed=self.seed + self.num_envs * self.env_rebuilds + i)[0]

    def _emit(self, chunk: dict, n: int, steps, next_obs, terminated: bool) -> int:
        """Write the transition that starts at ``steps[0]`` and ends with ``next_obs``."""
        ret, discount = 0.0, 1.0
        for _, _, reward in steps:
            ret += discount * reward
            discount *= self.gamma
        chunk["obs"][n] = steps[0][0]
        chunk["action"][n] = steps[0][1]
        chunk["reward"][n] = ret
        chunk["next_obs"][n] = next_obs
        chunk["terminated"][n] = terminated
        chunk["discount"][n] = discount
        return n + 1

    def collect(self, act: ActFn, max_transitions: int, deadline: float | None = None,
                on_step: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
        """Step all envs until about ``max_transitions`` env steps are taken (rounded up to
        whole batches of envs) or ``time.monotonic()`` passes ``deadline``; at least one batch.
        ``on_step(n)`` runs after every batch of ``n`` env steps (e.g. to take new weights).

        Returns the transitions completed meanwhile: with n-step returns a transition is
        emitted n steps after it started, or when its episode ends.
        """
        n_envs = self.num_envs
        steps = max(1, -(-max_transitions // n_envs))
        chunk = self._new_chunk((steps + self.n_step) * n_envs)
        n = taken = 0
        cpu = self.cpu
        started = cpu.now()
        for _ in range(steps):
            actions = act(self.obs)
            started = cpu.add("act", started)
            for i, env in enumerate(self.envs):
                try:
                    next_obs, reward, terminated, truncated, info = env.step(actions[i])
                except Exception as exc:  # the env crashed: its episode is dropped
                    self.obs[i] = self._rebuild(i, exc)
                    self.episodes[i] = self._start_episode(i)
                    continue
                taken += 1
                episode = self.episodes[i]
                episode.length += 1
                episode.total_reward += float(info.get(REAL_REWARD, reward))
                if self.step_hook:
                    self.callbacks.on_episode_step(
                        episode=episode, obs=next_obs, action=actions[i], reward=float(reward), info=info
                    )
                if self.her is not None:
                    self.her_steps[i].append((self.obs[i].copy(), actions[i], float(reward), next_obs,
                                              bool(terminated), info))
                    if terminated or truncated:
                        self.ready.append(self._relabeled_episode(i))
                pending = self.pending[i]
                if self.her is None:
                    pending.append((self.obs[i].copy(), actions[i], float(reward)))
                if terminated or truncated:
                    n = self._end(i, chunk, n, next_obs, bool(terminated), bool(truncated), info)
                    continue
                if pending and len(pending) == self.n_step:
                    n = self._emit(chunk, n, pending, next_obs, False)
                    pending.popleft()
                self.obs[i] = next_obs
            started = cpu.add("env_step", started)  # and acting's from here: taking new weights
            if on_step is not None:
                on_step(n_envs)
            if deadline is not None and time.monotonic() >= deadline:
                break
        self.total_steps += taken
        if not self.ready:  # views, not copies: a chunk of frames is megabytes
            return {key: chunk[key][:n] for key in FIELDS}
        ready, self.ready = self.ready, []
        return {key: np.concatenate([chunk[key][:n], *(episode[key] for episode in ready)]) for key in FIELDS}

    def _relabeled_episode(self, i: int) -> dict[str, np.ndarray]:
        """Env ``i``'s episode that just ended, as one-step transitions followed by their
        hindsight copies (:meth:`dsac.replay.her.HindsightRelabeler.relabel`)."""
        steps, self.her_steps[i] = self.her_steps[i], []
        obs, actions, rewards, next_obs, terminated, infos = zip(*steps, strict=True)
        episode = {
            "obs": np.stack(obs), "action": np.asarray(actions, dtype=self.action_space.dtype),
            "reward": np.asarray(rewards, np.float32), "next_obs": np.stack(next_obs),
            "terminated": np.asarray(terminated, np.float32), "discount": np.full(len(steps), self.gamma, np.float32),
        }
        achieved = np.stack([info[ACHIEVED_GOAL] for info in infos])
        return self.her.relabel(episode, achieved, list(infos), self.envs[i])

    def _new_chunk(self, capacity: int) -> dict[str, np.ndarray]:
        """Room for ``capacity`` transitions, a column per field."""
        obs_shape, act_shape = self.observation_space.shape, self.action_space.shape
        return {
            "obs": np.empty((capacity, *obs_shape), dtype=self.obs.dtype),
            "action": np.empty((capacity, *act_shape), dtype=self.action_space.dtype),
            "reward": np.empty(capacity, dtype=np.float32),
            "next_obs": np.empty((capacity, *obs_shape), dtype=self.obs.dtype),
            "terminated": np.empty(capacity, dtype=np.float32),
            "discount": np.empty(capacity, dtype=np.float32),
        }

    def _end(self, i: int, chunk: dict, n: int, next_obs, terminated: bool, truncated: bool, info: dict) -> int:
        """Env ``i``'s step ended its episode, or (``info["episode_continues"]``) a life the
        same game goes on after: write every pending transition into ``chunk`` from row ``n``
        and start what comes next. Returns the next free row."""
        pending = self.pending[i]
        # Each pending start sums the rewards up to the episode's end and ends at the real
        # final observation (never the reset's).
        while pending:
            n = self._emit(chunk, n, pending, next_obs, terminated)
            pending.popleft()
        if terminated and info.get(EPISODE_CONTINUES):  # a lost life: the game goes on
            rebuilds = self.env_rebuilds
            self.obs[i] = self._reset(i)
            if self.env_rebuilds != rebuilds:  # the game's reset crashed: a new game
                self.episodes[i] = self._start_episode(i)
            return n
        episode = self.episodes[i]
        if self.callbacks is not None:
            self.callbacks.on_episode_end(episode=episode, terminated=terminated, truncated=truncated)
        self.finished_episodes.append(FinishedEpisode(episode.total_reward, episode.length, episode.custom_metrics))
        self.obs[i] = self._reset(i)
        self.episodes[i] = self._start_episode(i)
        return n

    def drain_episodes(self) -> list[FinishedEpisode]:
        """Episodes finished since the last call, as (return, length, custom metrics)."""
        done, self.finished_episodes = self.finished_episodes, []
        return done

    def close(self) -> None:
        for env in self.envs:
            env.close()
