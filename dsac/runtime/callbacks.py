"""Callbacks: user code that runs on episode and training events, as in RLlib.

Subclass :class:`Callbacks`, override what you need, and pass the class as
``config["callbacks"]`` (or ``--callbacks module:Class``). Episode hooks run inside rollout
workers, ``on_learn_on_batch`` inside the learner, ``on_train_result`` in the driver. Values a
hook stores in ``episode.custom_metrics`` are averaged per report and appear in the result
dict and ``progress.jsonl`` as ``custom_metrics/<name>_mean``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Episode:
    """One running episode of one env in a rollout worker.

    Attributes:
        env_index: which of the worker's envs it runs in.
        worker_index: which rollout worker.
        length: steps so far.
        total_reward: undiscounted return so far.
        custom_metrics: name -> number, reported when the episode ends.
        user_data: anything the callbacks want to keep between steps.
    """

    env_index: int
    worker_index: int | None = None
    length: int = 0
    total_reward: float = 0.0
    custom_metrics: dict = field(default_factory=dict)
    user_data: dict = field(default_factory=dict)


class Callbacks:
    """Base class: every hook does nothing. Override the ones you need."""

    def on_episode_start(self, *, episode: Episode, obs: np.ndarray) -> None:
        """An episode began (after ``reset``); ``obs`` is its first observation."""

    def on_episode_step(self, *, episode: Episode, obs, action, reward: float, info: dict) -> None:
        """A step was taken; ``obs`` is the observation it returned. Only called when a
        subclass overrides it (it costs a Python call per env step)."""

    def on_episode_end(self, *, episode: Episode, terminated: bool, truncated: bool) -> None:
        """The episode ended by termination or truncation."""

    def on_sample_end(self, *, worker_index: int | None, batch: dict) -> dict:
        """A chunk of transitions is about to be sent to the replay buffer; may return a
        changed batch (same keys and lengths)."""
        return batch

    def on_learn_on_batch(self, *, policy, batch: dict, result: dict) -> None:
        """The learner trained on ``batch``; ``result`` (its stats) may be added to. ``policy``
        is what learns: the algorithm's :class:`dsac.algorithms.learner.Learner`, or a
        ``policy_class`` built with ``build_learner=True``."""

    def on_train_result(self, *, trainer, result: dict) -> None:
        """The driver produced a result dict (one per ``Trainer.train()`` / progress report)."""


def overrides(callbacks: Callbacks | None, hook: str) -> bool:
    """Whether ``callbacks`` implements ``hook`` (so the base no-op can be skipped)."""
    return callbacks is not None and getattr(type(callbacks), hook) is not getattr(Callbacks, hook)
