"""Weights delivered per node: one :class:`WeightsCache` actor on each node of a multi-node run
keeps the one waiting pull on the parameter server for every weights reader of its node
(rollout workers and the evaluator) and publishes each version on the node's shared-memory
board (:mod:`dsac.distributed.weights_board`), where the readers take it without any call.

The server's work per version then grows with the number of nodes, not of workers: it answers
one pull per node, and the weights cross the network once per node. The cache tells the
server, in one call per version and node, which version each of its node's rollout workers
acts with and how far behind they were (from their slots on the board), so the run's weight
sync and lag figures mean what they mean without caches.

A cache is restarted by Ray when its process dies (the new one opens the same board and
publishes the server's latest weights); the driver says so in one line. Readers whose board
stopped beating for :data:`~dsac.distributed.board_format.STALE_S` pull the server instead.
"""

from __future__ import annotations

import asyncio
import logging

import ray

from dsac.distributed.actors import MAX_PULL_WAIT_S, process_id
from dsac.distributed.board_writer import BoardLoop
from dsac.distributed.topology import describe_process
from dsac.envs.make import one_line

log = logging.getLogger("dsac")


@ray.remote
class WeightsCache:
    """The parameter server's weights for the readers of one node.

    Args:
        ps_name: the parameter server's actor name.
        name: this cache's role name (``weights_cache_<k>``), in its reports to the server.
        board: the name of the node's board it writes.
        num_workers: rollout workers in the run (the board has a slot for each).
    """

    def __init__(self, ps_name: str, name: str, board: str, num_workers: int):
        self.ps = ray.get_actor(ps_name)
        self.name = name
        self.version = 0
        self.stopped = False
        self.process = process_id()
        self.board = BoardLoop(board, num_workers, self._report)
        loop = asyncio.get_running_loop()
        self.follower = loop.create_task(self._follow())
        self.beating = loop.create_task(self.board.run(alive=lambda: not self.follower.done()))

    async def _follow(self) -> None:
        """Keep one waiting pull on the server; publish each newer version on the board."""
        while not self.stopped:
            try:
                reply = await self.ps.pull.remote(self.version, None, MAX_PULL_WAIT_S)
                weights = await reply.weights if isinstance(reply.weights, ray.ObjectRef) else reply.weights
            except (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError):
                await asyncio.sleep(0.2)  # the server restarts: ask again shortly
                continue
            except Exception as exc:  # anything else: said, and asked again
                log.warning("%s: pulling the parameter server failed (%s); trying again", self.name, one_line(exc))
                await asyncio.sleep(1.0)
                continue
            if weights is not None and reply.version > self.version:
                self.version = reply.version
                self.board.publish(reply.version, weights, reply.report)
            if reply.stop:
                self.stopped = True
                self.board.stop()

    def _report(self, held: dict[int, int], lags: list, age_s: float | None) -> None:
        self.ps.report_readers.remote(self.name, self.process, held, lags, age_s)

    async def where(self) -> dict:
        return {**describe_process(), "process": self.process}
