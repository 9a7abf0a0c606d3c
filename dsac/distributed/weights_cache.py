"""Weights delivered per node: one :class:`WeightsCache` actor on each node of a multi-node run
keeps the one waiting pull on the parameter server for every weights reader of its node
(rollout workers and the evaluator), which pull from it as they would from the server.

The server's work per version then grows with the number of nodes, not of workers: it answers
one pull per node, and the weights cross the network once per node (the cache hands out the
server's object reference; the first reader's fetch brings the object to the node's store,
the others read it there). The cache tells the server, in one call per version and node,
which version each of its readers acts with and how far behind they were, so the run's weight
sync and lag figures mean what they mean without caches.

A cache is restarted by Ray when its process dies (its readers' calls are retried on the new
one, which starts from the server's latest weights); the driver says so in one line.
"""

from __future__ import annotations

import asyncio

import ray

from dsac.distributed.actors import MAX_PULL_WAIT_S, hot_path, process_id, wait_until
from dsac.distributed.topology import describe_process
from dsac.messages import PullReply


@ray.remote
class WeightsCache:
    """The parameter server's ``pull`` for the readers of one node.

    Args:
        ps_name: the parameter server's actor name.
        name: this cache's role name (``weights_cache_<k>``), in its reports to the server.
    """

    def __init__(self, ps_name: str, name: str):
        self.ps = ray.get_actor(ps_name)
        self.name = name
        self.reply = PullReply(False, 0)  # the newest the server sent (weights by reference)
        self.changed = asyncio.Condition()
        self.held: dict[int, int] = {}  # reader -> the version it acts with
        self.lags: list[tuple[int, int]] = []  # (reader, versions behind) at its waiting pulls, not yet reported
        self.reported_slowest = -1
        self.follower: asyncio.Task | None = None
        self.process = process_id()

    async def _follow(self) -> None:
        """Keep one waiting pull on the server; each reply with newer weights is the cache's."""
        while not self.reply.stop:
            try:
                reply = await self.ps.pull.remote(self.reply.version, None, MAX_PULL_WAIT_S)
            except ray.exceptions.RayActorError:  # the server restarts: ask again shortly
                await asyncio.sleep(0.2)
                continue
            if reply.weights is not None and reply.version > self.reply.version:
                self.reply = reply
            elif reply.stop:
                self.reply = self.reply._replace(stop=True)
            async with self.changed:
                self.changed.notify_all()

    def _has_newer(self, version: int) -> bool:
        return self.reply.weights is not None and self.reply.version > version

    @hot_path
    async def pull(self, newer_than: int = 0, worker: int | None = None, wait_s: float = 0.0) -> PullReply:
        """As :meth:`dsac.distributed.actors.ParameterServer.pull`, answered from this node."""
        if self.follower is None:
            self.follower = asyncio.get_running_loop().create_task(self._follow())
        if worker is not None:
            self._note_reader(worker, newer_than, wait_s > 0)
        if wait_s > 0 and not self.reply.stop and not self._has_newer(newer_than):
            await wait_until(self.changed, lambda: self.reply.stop or self._has_newer(newer_than),
                             min(wait_s, MAX_PULL_WAIT_S))
        reply = self.reply
        return reply if self._has_newer(newer_than) else PullReply(reply.stop, reply.version)

    def _note_reader(self, worker: int, version: int, waiting: bool) -> None:
        """What a reader acts with; reported to the server when the node's slowest reader moved
        on (one call per version and node)."""
        self.held[worker] = version
        if waiting and self.reply.weights is not None:
            self.lags.append((worker, max(0, self.reply.version - version)))
        slowest = min(self.held.values())
        if slowest > self.reported_slowest or len(self.lags) >= 1_000:
            self.reported_slowest = slowest
            self.ps.report_readers.remote(self.name, self.process, dict(self.held), self.lags)
            self.lags = []

    async def where(self) -> dict:
        return {**describe_process(), "process": self.process}
