"""The run's reports in one actor, :class:`RunMonitor`: where each role runs, evaluations and
finished episodes, the data-parallel learners' counts, the evaluator's liveness, the run-wide
budget of env rebuilds (``--env_restarts``), and the learner's full state when a checkpoint
asks for it. The driver drains it at every step.

The :class:`~dsac.distributed.actors.ParameterServer` keeps the weights, their versions and
the stop flag; nothing here is on the weights' path.
"""

from __future__ import annotations

import time

import ray

from dsac.distributed.actors import hot_path, process_id
from dsac.distributed.topology import describe_process
from dsac.runtime.build import EnvRestartBudget
from dsac.runtime.messages import Evaluation, FinishedEpisode, LearnerReport, LearnerState, Placement


@ray.remote
class RunMonitor:
    """What the roles report, until the driver drains it.

    After a restart (Ray calls ``__init__`` again in a new process) the reports since the last
    drain are lost; the driver gives back the env rebuilds the run used (:meth:`restore`).

    Args:
        env_restarts: envs the run may rebuild after they raised, all roles together.
    """

    def __init__(self, env_restarts: int = 0):
        self.env_budget = EnvRestartBudget(env_restarts)
        self.env_restarts: list[tuple[str, str]] = []  # (role, error) since the last drain
        self.placements: list[Placement] = []
        self.evaluations: list[Evaluation] = []
        self.episodes: list[FinishedEpisode] = []
        self.evaluator_said: tuple[float, int, bool] | None = None  # (when, steps, final): still playing
        self.learner_updates: dict[int, int] = {}
        self.state: LearnerState | None = None  # the learner's full state, when asked for (checkpoints)
        self.state_wanted = False
        self.process = process_id()

    async def restore(self, env_restarts_used: int) -> None:
        """After a restart: the env rebuilds the run already used count against its budget."""
        self.env_budget.limit = max(0, self.env_budget.limit - int(env_restarts_used))

    # --- the roles' reports ----------------------------------------------------------------
    async def report_placement(self, placement: Placement) -> None:
        """Where a task runs, as it says on start."""
        self.placements.append(placement)

    async def report_eval(self, result: Evaluation) -> None:
        """An evaluation (the evaluator waits for this call)."""
        self.evaluations.append(result)
        self.evaluator_said = None

    @hot_path
    async def report_episodes(self, episodes: list) -> None:
        """A rollout worker's finished training episodes."""
        self.episodes.extend(episodes)

    async def evaluator_alive(self, steps: int, final: bool) -> None:
        """The evaluator is inside an evaluation (``final``: of the final weights) and has
        played ``steps`` agent steps of it (fire-and-forget, every few seconds)."""
        self.evaluator_said = (time.monotonic(), int(steps), bool(final))

    async def evaluator_progress(self) -> tuple[float, int, bool] | None:
        """Seconds since the evaluator last said it was playing, with the steps and ``final``
        it said; None when it is not inside an evaluation."""
        if self.evaluator_said is None:
            return None
        when, steps, final = self.evaluator_said
        return time.monotonic() - when, steps, final

    async def env_crashed(self, role: str, error: str) -> bool:
        """An env of ``role`` raised ``error``: whether the run may rebuild it (within the
        run-wide budget, all roles together)."""
        if self.env_budget.allow(role, error) is None:
            return False
        self.env_restarts.append((role, error))
        return True

    # --- the learner -----------------------------------------------------------------------
    @hot_path
    async def report_learner(self, learner: int, updates: int | None = None) -> bool:
        """A learner's update count (data-parallel learners; None: not counted); answers
        whether its full state is wanted (a checkpoint, ``Trainer.save``)."""
        if updates is not None:
            self.learner_updates[learner] = max(updates, self.learner_updates.get(learner, 0))
        return self.state_wanted

    async def put_state(self, state: dict, report: LearnerReport) -> None:
        """The learner's full state (networks, targets, optimizer, counters)."""
        self.state, self.state_wanted = LearnerState(state, report), False

    async def learner_state(self, wanted: bool = False) -> LearnerState | None:
        """The state put since the last call, or None; then, with ``wanted``, the learner is
        asked for one (its next :meth:`report_learner` says so)."""
        taken, self.state = self.state, None
        self.state_wanted = self.state_wanted or (wanted and taken is None)
        return taken

    # --- the driver ------------------------------------------------------------------------
    @hot_path
    async def drain_reports(self) -> dict:
        """Placements, evaluations, episodes and env rebuilds reported since the last call,
        the learners' counts, and this actor's process (a new one: Ray restarted it)."""
        placements, self.placements = self.placements, []
        evaluations, self.evaluations = self.evaluations, []
        episodes, self.episodes = self.episodes, []
        env_restarts, self.env_restarts = self.env_restarts, []
        return {"placements": placements, "evaluations": evaluations, "episodes": episodes,
                "env_restarts": env_restarts, "learner_updates": dict(self.learner_updates),
                "monitor": self.process}

    async def where(self) -> dict:
        """Where this actor runs (host, node, pid, ``process`` = node:pid)."""
        return {**describe_process(), "process": self.process}
