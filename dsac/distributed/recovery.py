"""Which failures a run survives, and the count of restarts.

A role whose *process* died — SIGKILL, the out-of-memory killer, a lost node — is replaced:
tasks (rollout workers, learner, evaluator) by the driver, which resubmits them; actors
(replay shards, parameter server) by Ray (``max_restarts``), after which the driver gives
them back what the run had (versions, counts, the last snapshot). A role that raised an
error is not restarted: the same input would fail the same way.
"""

from __future__ import annotations

import logging

import ray

log = logging.getLogger("dsac")

# What a task's or actor call's caller gets when the process under it died.
PROCESS_DEATHS = (
    ray.exceptions.WorkerCrashedError,
    ray.exceptions.NodeDiedError,
    ray.exceptions.OutOfMemoryError,
    ray.exceptions.LocalRayletDiedError,
    ray.exceptions.ActorDiedError,
)


def process_died(exc: BaseException) -> bool:
    """Whether ``exc`` says the process running a role died (rather than the role failing)."""
    return isinstance(exc, PROCESS_DEATHS)


class Restarts:
    """Restarts per role, at most ``limit`` each."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.counts: dict[str, int] = {}

    def allowed(self, role: str) -> bool:
        return self.counts.get(role, 0) < self.limit

    def record(self, role: str, cause: str, how: str = "") -> None:
        """Count a restart of ``role`` and log it with its cause."""
        self.counts[role] = self.counts.get(role, 0) + 1
        log.warning(
            "%s died (%s); restarting it (restart %d of at most %d)%s",
            role, cause, self.counts[role], self.limit, f": {how}" if how else "",
        )
