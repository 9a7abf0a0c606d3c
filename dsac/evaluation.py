"""Deterministic evaluation episodes, free of Ray."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from dsac.atari import FrameSettings
from dsac.envs import make_env
from dsac.rollout import ActFn, CrashFn, rebuild_or_raise

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


class Episodes(NamedTuple):
    """What an evaluation's episodes gave, episode ``j`` at index ``j``."""

    returns: np.ndarray  # undiscounted returns (float64)
    lengths: np.ndarray  # agent steps (int64): an Atari step is ``frame_skip`` frames
    truncated: np.ndarray  # bool: ended by a time limit (ALE's frame cap, TimeLimit), not by the env

    def summary(self) -> dict:
        """The episodes as :class:`dsac.messages.Evaluation` reports them (its ``eval_*`` fields)."""
        return {"eval_return_mean": float(self.returns.mean()), "eval_return_std": float(self.returns.std()),
                "eval_returns": [float(r) for r in self.returns], "eval_lengths": tuple(int(n) for n in self.lengths),
                "eval_truncated": int(self.truncated.sum())}


def evaluate(act: ActFn, env_id: str, episodes: int, seed: int, env_kwargs: dict | None = None,
             flatten_obs: bool = False, atari: FrameSettings | None = None,
             on_env_crash: CrashFn | None = None, frames=None) -> np.ndarray:
    """The returns of :func:`play_episodes` (same arguments)."""
    return play_episodes(act, env_id, episodes, seed, env_kwargs, flatten_obs, atari, on_env_crash, frames).returns


def play_episodes(act: ActFn, env_id: str, episodes: int, seed: int, env_kwargs: dict | None = None,
                  flatten_obs: bool = False, atari: FrameSettings | None = None,
                  on_env_crash: CrashFn | None = None, frames=None,
                  on_progress: Callable[[int], None] | None = None) -> Episodes:
    """Run ``episodes`` episodes side by side (episode ``j`` reset with ``seed + j``), acting
    on the batch of unfinished ones; return their returns, lengths and time-limit ends.

    The same seeds are used at every evaluation, so two evaluations of the same weights give
    the same numbers and curves compare policies, not luck. Returns are the env's own rewards
    over whole episodes (an Atari game's real score over all its lives: ``atari`` settings
    apply without their training-only parts).

    An env that raises is rebuilt when ``on_env_crash`` allows it and its episode played again
    from the same start state; otherwise :class:`dsac.envs.EnvCrashed` is raised.

    ``frames`` (a :class:`dsac.video.Frames`) takes episode 0's frames, from an env made with
    ``render_mode="rgb_array"``; an env that cannot render sets its ``error`` instead.
    ``on_progress(steps)`` is called with the agent steps played so far, at most every
    ``PROGRESS_EVERY_S`` seconds: a long evaluation says it is alive (the distributed stop
    waits for it).
    """
    def build(j: int):
        if frames is None or j != 0 or frames.error is not None:
            return make_env(env_id, env_kwargs, flatten_obs, atari)
        try:
            return make_env(env_id, {**(env_kwargs or {}), "render_mode": "rgb_array"}, flatten_obs, atari)
        except Exception as exc:
            frames.fail(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            return make_env(env_id, env_kwargs, flatten_obs, atari)

    envs = [build(j) for j in range(episodes)]
    obs = np.stack([env.reset(seed=seed + j)[0] for j, env in enumerate(envs)])
    if frames is not None:
        frames.take(envs[0])
    returns = np.zeros(episodes, dtype=np.float64)
    lengths = np.zeros(episodes, dtype=np.int64)
    truncations = np.zeros(episodes, dtype=bool)
    active = np.ones(episodes, dtype=bool)
    said = time.monotonic()
    while active.any():
        if on_progress is not None and time.monotonic() - said >= PROGRESS_EVERY_S:
            on_progress(int(lengths.sum()))
            said = time.monotonic()
        idx = np.flatnonzero(active)
        actions = act(obs[idx])
        for k, j in enumerate(idx):
            try:
                next_obs, reward, terminated, truncated, _ = envs[j].step(actions[k])
            except Exception as exc:  # the episode starts again on a new env
                rebuild_or_raise(on_env_crash, envs[j], exc)
                envs[j] = build(int(j))
                obs[j], returns[j], lengths[j] = envs[j].reset(seed=seed + int(j))[0], 0.0, 0
                if frames is not None and j == 0 and frames.error is None:
                    frames.images.clear()  # the episode starts again
                    frames.take(envs[0])
                continue
            returns[j] += reward
            lengths[j] += 1
            obs[j] = next_obs
            if frames is not None and j == 0:
                frames.take(envs[0])
            if terminated or truncated:
                active[j] = False
                truncations[j] = bool(truncated) and not terminated
    for env in envs:
        env.close()
    return Episodes(returns, lengths, truncations)
