"""Deterministic evaluation episodes, free of Ray."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from dsac.envs.atari import FrameSettings
from dsac.envs.make import make_env
from dsac.envs.rollout import ActFn, CrashFn, rebuild_or_raise
from dsac.runtime.cpu import CpuMeter

# Evaluation episodes never share start states with training: episode j of every evaluation of
# a run with --seed s resets with s + EVAL_SEED_OFFSET + j.
EVAL_SEED_OFFSET = 100_000


def evaluation_seed(run_seed: int) -> int:
    """The seed evaluation episode 0 of a run with ``--seed run_seed`` resets with (episode j:
    this + j). Anything compared with dsac (``benchmarks/speed.py``'s SB3 side) evaluates on
    the same start states by calling :func:`evaluate` with this seed."""
    return int(run_seed) + EVAL_SEED_OFFSET


# How often, at most, an evaluation says it is still playing (``on_progress``).
PROGRESS_EVERY_S = 2.0
# Where an episode's last info says whether it reached its goal: Fetch and the hand tasks write
# "is_success", gymnasium-robotics' mazes "success".
SUCCESS_KEYS = ("is_success", "success")


class Episodes(NamedTuple):
    """What an evaluation's episodes gave, episode ``j`` at index ``j``."""

    returns: np.ndarray  # undiscounted returns (float64)
    lengths: np.ndarray  # agent steps (int64): an Atari step is ``frame_skip`` frames
    truncated: np.ndarray  # bool: ended by a time limit (ALE's frame cap, TimeLimit), not by the env
    # 1.0 / 0.0 where the last step's info said so (SUCCESS_KEYS; goal-conditioned envs), else NaN
    successes: np.ndarray | None = None

    def summary(self) -> dict:
        """The episodes as :class:`dsac.runtime.messages.Evaluation` reports them (its ``eval_*`` fields;
        ``eval_success_rate`` over the episodes whose env reported success)."""
        reported = self.successes[~np.isnan(self.successes)] if self.successes is not None else ()
        return {"eval_return_mean": float(self.returns.mean()), "eval_return_std": float(self.returns.std()),
                "eval_returns": [float(r) for r in self.returns], "eval_lengths": tuple(int(n) for n in self.lengths),
                "eval_truncated": int(self.truncated.sum()),
                "eval_success_rate": float(np.mean(reported)) if len(reported) else None}


def evaluate(act: ActFn, env_id: str, episodes: int, seed: int, env_kwargs: dict | None = None,
             flatten_obs: bool = False, atari: FrameSettings | None = None,
             on_env_crash: CrashFn | None = None, frames=None, goal: bool = False) -> np.ndarray:
    """The returns of :func:`play_episodes` (same arguments)."""
    return play_episodes(act, env_id, episodes, seed, env_kwargs, flatten_obs, atari, on_env_crash, frames,
                         goal=goal).returns


def play_episodes(act: ActFn, env_id: str, episodes: int, seed: int, env_kwargs: dict | None = None,
                  flatten_obs: bool = False, atari: FrameSettings | None = None,
                  on_env_crash: CrashFn | None = None, frames=None,
                  on_progress: Callable[[int], None] | None = None, cpu: CpuMeter | None = None,
                  goal: bool = False) -> Episodes:
    """Run ``episodes`` episodes side by side (episode ``j`` reset with ``seed + j``), acting
    on the batch of unfinished ones; return their returns, lengths and time-limit ends.

    The same seeds are used at every evaluation, so two evaluations of the same weights give
    the same numbers and curves compare policies, not luck. Returns are the env's own rewards
    over whole episodes (an Atari game's real score over all its lives: ``atari`` settings
    apply without their training-only parts).

    An env that raises is rebuilt when ``on_env_crash`` allows it and its episode played again
    from the same start state; otherwise :class:`dsac.envs.make.EnvCrashed` is raised.

    ``frames`` (a :class:`dsac.output.video.Frames`) takes episode 0's frames, from an env made with
    ``render_mode="rgb_array"``; an env that cannot render sets its ``error`` instead.
    ``on_progress(steps)`` is called with the agent steps played so far, at most every
    ``PROGRESS_EVERY_S`` seconds: a long evaluation says it is alive (the distributed stop
    waits for it). ``cpu``, when given, counts acting (``act``) and stepping the batch of
    episodes (``env_step``): two clock reads per batch. ``goal``: a goal-conditioned env
    observed as ``observation ++ desired_goal`` (``--her``; :func:`dsac.envs.make.make_env`).
    """
    build = _env_builder(env_id, env_kwargs, flatten_obs, atari, frames, goal)
    playing = _SideBySide(build, episodes, seed, frames, on_env_crash)
    said = time.monotonic()
    started = cpu.now() if cpu is not None else 0.0
    while playing.active.any():
        if on_progress is not None and time.monotonic() - said >= PROGRESS_EVERY_S:
            on_progress(int(playing.lengths.sum()))
            said = time.monotonic()
        idx = np.flatnonzero(playing.active)
        actions = act(playing.obs[idx])
        if cpu is not None:
            started = cpu.add("act", started)
        for k, j in enumerate(idx):
            playing.step(int(j), actions[k])
        if cpu is not None:
            started = cpu.add("env_step", started)
    playing.close()
    return Episodes(playing.returns, playing.lengths, playing.truncations, playing.successes)


def _env_builder(env_id: str, env_kwargs: dict | None, flatten_obs: bool, atari: FrameSettings | None,
                 frames, goal: bool = False) -> Callable[[int], object]:
    """``build(j)``: a new env for episode ``j``; episode 0's renders for ``frames`` while it
    can (an env that cannot render sets ``frames.error`` and is made without rendering)."""
    def build(j: int):
        if frames is None or j != 0 or frames.error is not None:
            return make_env(env_id, env_kwargs, flatten_obs, atari, goal=goal)
        try:
            return make_env(env_id, {**(env_kwargs or {}), "render_mode": "rgb_array"}, flatten_obs, atari, goal=goal)
        except Exception as exc:
            frames.fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            return make_env(env_id, env_kwargs, flatten_obs, atari, goal=goal)

    return build


class _SideBySide:
    """The episodes of :func:`play_episodes` in play: one env each, their latest observations
    as one batch, and what each gave so far.

    Args:
        build: ``build(j)`` makes episode ``j``'s env (:func:`_env_builder`).
        episodes: how many; episode ``j`` resets with ``seed + j``.
        seed: episode 0's reset seed.
        frames: a :class:`dsac.output.video.Frames` taking episode 0's frames, or None.
        on_env_crash: asked when an env raised (see :func:`dsac.envs.rollout.rebuild_or_raise`).
    """

    def __init__(self, build: Callable[[int], object], episodes: int, seed: int, frames,
                 on_env_crash: CrashFn | None):
        self.build, self.seed, self.frames, self.on_env_crash = build, seed, frames, on_env_crash
        self.envs = [build(j) for j in range(episodes)]
        self.obs = np.stack([env.reset(seed=seed + j)[0] for j, env in enumerate(self.envs)])
        if frames is not None:
            frames.take(self.envs[0])
        self.returns = np.zeros(episodes, dtype=np.float64)
        self.lengths = np.zeros(episodes, dtype=np.int64)
        self.truncations = np.zeros(episodes, dtype=bool)
        self.successes = np.full(episodes, np.nan)
        self.active = np.ones(episodes, dtype=bool)

    def step(self, j: int, action) -> None:
        """Step episode ``j`` with ``action``; an env that raised starts its episode again on a
        new env (or raises :class:`dsac.envs.make.EnvCrashed`)."""
        env, frames = self.envs[j], self.frames
        try:
            next_obs, reward, terminated, truncated, info = env.step(action)
        except Exception as exc:
            self._restart(j, exc)
            return
        self.returns[j] += reward
        self.lengths[j] += 1
        self.obs[j] = next_obs
        if frames is not None and j == 0:
            frames.take(env)
        if terminated or truncated:
            self.active[j] = False
            self.truncations[j] = bool(truncated) and not terminated
            reported = next((info[key] for key in SUCCESS_KEYS if key in info), None)
            if reported is not None:
                self.successes[j] = float(bool(np.asarray(reported).any()))

    def _restart(self, j: int, exc: BaseException) -> None:
        """Episode ``j`` from its start state again, on a new env (its frames too)."""
        rebuild_or_raise(self.on_env_crash, self.envs[j], exc)
        self.envs[j] = self.build(j)
        self.obs[j], self.returns[j], self.lengths[j] = self.envs[j].reset(seed=self.seed + j)[0], 0.0, 0
        if self.frames is not None and j == 0 and self.frames.error is None:
            self.frames.images.clear()
            self.frames.take(self.envs[0])

    def close(self) -> None:
        for env in self.envs:
            env.close()


class EvaluationBudget:
    """What evaluations during training may cost: their CPU time at most ``share`` of ``cores``
    over the run's wall time so far. An evaluation due while they have used more waits, and the
    next one the budget allows evaluates the weights of then, so long episodes or a fast learner
    mean fewer evaluations rather than an evaluator that takes a core from collection and
    learning. The final evaluation is not asked.

    Args:
        share: the most of ``cores`` evaluations may use (``--eval_cpu_share``; 0: no limit).
        cores: the CPUs the run has (the cluster's; 1 for the serial runner, whose evaluations
            stop everything else while they play).
        wall, cpu: the clocks of wall time and of this thread's CPU time.
    """

    def __init__(self, share: float, cores: float, wall: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time):
        self.rate = float(share) * float(cores)
        self.wall, self.cpu = wall, cpu
        self.started = wall()
        self.spent = 0.0

    def allows(self) -> bool:
        """Whether an evaluation may start now."""
        return self.rate <= 0 or self.spent <= self.rate * (self.wall() - self.started)

    def timed(self, evaluation: Callable[[], object]):
        """Run ``evaluation()``, counting its CPU time against the budget; its result."""
        started = self.cpu()
        try:
            return evaluation()
        finally:
            self.spent += self.cpu() - started
