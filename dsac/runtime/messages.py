"""Every message that crosses a process boundary in a distributed run, typed, in the order
data flows: a rollout worker's :class:`Chunk` and the replay's :class:`Grant`; the
learner's :class:`SampledBatches`, its :class:`LearnerReport` with each push and the
:class:`LearnerOrders` it gets back; a worker's :class:`PullReply`; the evaluator's
:class:`Evaluation`; and what the driver reads: :class:`Reports`, :class:`ShardStats`,
:class:`Latest` and :class:`LearnerState`.

Each is a ``NamedTuple``: fields by name, a docstring per field, no behaviour, and a wire
format that is the numpy arrays themselves — Ray's pickle 5 moves every array out of band, so
a receiver gets a zero-copy view of the object store, as with the plain dicts these replace
(``tests/test_messages.py`` checks it). Transitions stay dicts of arrays keyed by
:data:`dsac.replay.buffer.FIELDS`, as callbacks and custom policies see them (RLlib's SampleBatch).
Free of Ray and TensorFlow.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dsac.models.normalization import Moments


class FinishedEpisode(NamedTuple):
    """A finished training episode, as a rollout worker reports it."""

    episode_return: float
    length: int
    custom_metrics: dict  # name -> value, from the user's callbacks (may be empty)


class Chunk(NamedTuple):
    """Transitions a rollout worker sends to its replay shard in one ``add`` call."""

    transitions: dict[str, np.ndarray]  # FIELDS -> arrays with a leading axis of n transitions
    priorities: np.ndarray | None = None  # initial priority per transition (Ape-X), or None
    # Env steps taken to collect it (None: one per transition). They differ when a worker
    # stores more than it stepped (hindsight copies) or holds steps back (unfinished episodes,
    # n-step windows): the replay's counters, its rate limiter and the run's budget count these.
    env_steps: int | None = None

    @classmethod
    def from_batch(cls, batch: dict[str, np.ndarray], env_steps: int | None = None) -> Chunk:
        """Split a postprocessed batch (``Policy.postprocess_trajectory``) into transitions
        and the optional ``priority`` column the policy added."""
        transitions = dict(batch)
        return cls(transitions, transitions.pop("priority", None), env_steps)

    @property
    def steps(self) -> int:
        """The env steps it counts for."""
        return self.size if self.env_steps is None else int(self.env_steps)

    @property
    def size(self) -> int:
        return len(self.transitions["reward"])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays it carries (what crosses to the shard)."""
        arrays = [*self.transitions.values(), *([] if self.priorities is None else [self.priorities])]
        return sum(int(getattr(a, "nbytes", 0)) for a in arrays)


class Grant(NamedTuple):
    """The replay shard's reply to ``add``: the writer's next insert budget and the counters."""

    grant: int  # transitions the writer may collect and send next (0: none now)
    stop: bool  # the run is stopping
    added: int  # transitions this shard has received in all
    sampled_batches: int  # batches the learner has sampled from this shard


class SampledBatches(NamedTuple):
    """The replay shard's reply to ``sample``: ``num_batches`` batches stacked on a leading axis."""

    batches: dict[str, np.ndarray]  # FIELDS (+ importance ``weights`` when prioritized) -> (B, N, ...)
    env_steps: int  # env steps whose transitions this shard has received in all
    indices: np.ndarray | None = None  # prioritized replay: the slots sampled, (B, N)
    generations: np.ndarray | None = None  # ... and their write generations (stale updates are dropped)
    # --normalize_obs: the moments (dsac.models.normalization.Moments) of every observation this
    # shard stored since it started.
    obs_moments: Moments | None = None


class ShardStats(NamedTuple):
    """A replay shard's counters, for the driver."""

    added: int  # env steps whose transitions it received in all (a resumed run's count included)
    size: int  # transitions held now
    capacity: int
    sampled_batches: int
    add_calls: int
    sample_wait_s: float  # seconds learners' sample calls waited for the ratio
    process: str  # node:pid of the actor's process (a new one: Ray restarted it)


class LearnerReport(NamedTuple):
    """What the learner sends with its weights and its state: its counters and statistics."""

    updates: int = 0  # gradient updates so far (the run's one update counter)
    env_steps: int = 0  # transitions in the replay shards as of the last sample
    stats: dict | None = None  # means of the update statistics since the previous push
    skipped_updates: int = 0  # updates with non-finite gradients, not applied
    learner_wait_s: float = 0.0  # seconds spent waiting for batches
    final: bool = False  # the last push of the run
    cpu: dict | None = None  # CPU seconds by part (update, sample, push, total) since the learner started


class LearnerOrders(NamedTuple):
    """What a learner goes by: the parameter server's reply to a push (``state_wanted`` then
    False), completed by the learner with the run monitor's answer to its report."""

    version: int  # the latest weights version
    stop: bool  # the run is stopping: send the final state and weights, then end
    state_wanted: bool  # send the full state (a checkpoint or ``Trainer.save`` asked the run monitor for it)


class PullReply(NamedTuple):
    """The parameter server's reply to ``pull(newer_than=v)``: weights only when newer."""

    stop: bool
    version: int
    # The weights, or (a parameter server by reference) an ObjectRef to them in Ray's store.
    weights: dict[str, np.ndarray] | Any | None = None
    report: LearnerReport | None = None  # what the learner sent with these weights


class Latest(NamedTuple):
    """The parameter server's latest weights (None before the first push)."""

    version: int
    weights: dict[str, np.ndarray] | None
    report: LearnerReport


class LearnerState(NamedTuple):
    """The learner's full training state (networks, targets, optimizer, counters)."""

    state: dict[str, np.ndarray]
    report: LearnerReport


class Evaluation(NamedTuple):
    """One evaluation: deterministic episodes with one weights version."""

    env_steps: int
    updates: int
    weights_version: int
    eval_return_mean: float
    eval_return_std: float
    eval_returns: list[float]
    eval_seconds: float
    weights: dict[str, np.ndarray]  # the weights evaluated (the driver keeps the best)
    video: bytes | None = None  # episode 0 as mp4 (--video_every), written by the driver
    video_error: str | None = None  # why episode 0 could not be recorded
    video_gif: tuple | None = None  # (gif, height, width): a small copy for TensorBoard's Images tab
    eval_lengths: tuple = ()  # each episode's agent steps
    eval_truncated: int = 0  # episodes ended by a time limit (ALE's frame cap) rather than the env
    eval_success_rate: float | None = None  # share of episodes ending in success, if the env's info says


class Placement(NamedTuple):
    """Where a role runs, as it reports it on start."""

    role: str
    host: str
    node: str
    pid: int
    device: str | None = None  # the learner's TensorFlow device
    warning: str | None = None  # e.g. a GPU Ray gave that TensorFlow cannot see


class Reports(NamedTuple):
    """What the driver reads from the run monitor (drained) and the parameter server at every poll."""

    placements: list[Placement]
    evaluations: list[Evaluation]
    episodes: list[FinishedEpisode]
    version: int
    report: LearnerReport  # with the latest weights
    worker_versions: dict[int, int]  # rollout worker -> the version it acts with
    learner_updates: dict[int, int]  # data-parallel learner -> its update count
    stop: bool
    stop_reason: str
    process: str  # node:pid of the parameter server (a new one: Ray restarted it)
    env_restarts: list[tuple[str, str]]  # (role, the env's error) of each env rebuilt since the last read
    caches: dict[str, str]  # weights cache -> its node:pid as last reported (a new one: Ray restarted it)
    monitor: str = ""  # node:pid of the run monitor (a new one: Ray restarted it)
