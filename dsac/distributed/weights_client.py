"""A reader's side of the weights: :class:`WeightsClient` keeps an acting policy's weights
fresh, from its node's shared-memory board (:mod:`dsac.distributed.board_reader`) where this
machine has one, else by waiting pulls on the parameter server.
"""

from __future__ import annotations

import logging
import threading
import time

import ray

from dsac.distributed.board_format import STALE_S
from dsac.distributed.board_reader import BoardReader
from dsac.runtime.messages import LearnerReport, PullReply

log = logging.getLogger("dsac")

# How long a reader sleeps between polls while it has nothing to do.
IDLE_SLEEP_S = 0.05
# A rollout worker's receiver thread starts pulls at most this often, which bounds its pulls per
# second when the learner pushes faster than that.
MIN_PULL_INTERVAL_S = 0.02
# How long the parameter server holds a pull that finds nothing newer before answering anyway
# (it answers at once on a push or the stop flag).
PULL_WAIT_S = 10.0
# A worker on a weights board reads its counter at every poll, its header every this many polls.
BOARD_CHECK_EVERY = 64
# How long a reader waits for its board to appear before it pulls the parameter server instead.
BOARD_WAIT_S = 10.0
# While a call waits (the replay shard holding a worker back), new weights are applied this often.
POLL_WHILE_WAITING_S = 0.02


def pulled_weights(weights):
    """A pull reply's weights as a dict: fetched from Ray's object store when the parameter
    server sent a reference (see :class:`dsac.distributed.actors.ParameterServer`)."""
    return ray.get(weights) if isinstance(weights, ray.ObjectRef) else weights


class WeightsClient:
    """Keeps a policy's weights fresh without a call per version where it can.

    - **From the node's board** (``board`` names one this machine has: the parameter server's
      on its node, a weights cache's on the others; :mod:`dsac.distributed.weights_board`):
      :meth:`poll`, which the env loop calls after every batch of env steps, reads the board's
      sequence counter and, when a newer version is there, copies it and applies it, and
      writes in its slot the version the worker acts with. No remote call at all. A board
      whose writer stopped beating for ``STALE_S`` is left for the parameter server.
    - **From the parameter server** (no board here): :meth:`start` runs a receiver thread that
      keeps one ``pull(newer_than=version, worker, wait_s)`` waiting on the server, which
      answers it as soon as a newer version is pushed; the thread fetches the weights (sent
      by reference: from its node's object store) and leaves them for the env loop, which
      applies them at its next :meth:`poll` (one attribute read). The thread's next pull,
      made once they are applied (at most every ``MIN_PULL_INTERVAL_S``), tells the server
      the version the worker acts with. The evaluator (no ``worker``) calls :meth:`refresh`.
    """

    def __init__(self, ps, policy, worker: int | None = None, wait_s: float = PULL_WAIT_S, board: str | None = None):
        self.ps = ps
        self.policy = policy
        self.worker = worker
        self.wait_s = wait_s
        self.version = 0
        self.report = LearnerReport()  # what the learner sent with the weights held
        self.stop = False
        self.board = open_board(board, worker) if board else None
        if board and self.board is None:
            log.info("%s: no weights board %s on this machine; pulling the parameter server", self._role(), board)
        self._board_checked = time.monotonic()
        self._polls = 0
        self._received: tuple | None = None  # (version, weights, report) fetched, not yet applied
        self._applied = threading.Event()  # the env loop took what the thread left
        self._applied.set()
        self._closed = False
        self._started = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def pull(self, wait_s: float = 0.0) -> PullReply:
        """A pull on the parameter server, waiting up to ``wait_s`` for a newer version."""
        return ray.get(self.ps.pull.remote(self.version, self.worker, wait_s))

    def take(self, reply: PullReply) -> None:
        """Apply a ``pull`` reply: new weights if it carries them, and the stop flag."""
        self.stop = self.stop or reply.stop
        if reply.weights is not None and reply.version > self.version:  # a late reply never goes back
            try:
                weights = pulled_weights(reply.weights)
            except ray.exceptions.ObjectLostError:  # its owner, a parameter server since restarted, is gone
                return  # the next pull brings the new server's weights
            self._apply(reply.version, weights, reply.report)

    def _apply(self, version: int, weights: dict, report: LearnerReport | None) -> None:
        self.policy.set_weights(weights)
        self.version = version
        self.report = report or LearnerReport()

    def start(self) -> WeightsClient:
        """Start taking weights: from the board, or by a receiver thread (a daemon; :meth:`close` ends it)."""
        self._started = True
        if self.board is None:
            self._thread = threading.Thread(target=self._receive, name="dsac-weights", daemon=True)
            self._thread.start()
        return self

    def _receive(self) -> None:
        try:
            while True:
                self._applied.wait()
                if self._closed or self.stop:
                    return
                pulled_at = time.monotonic()
                reply = self.pull(self.wait_s)
                if reply.stop:
                    self.stop = True
                if reply.weights is not None and reply.version > self.version:
                    try:
                        weights = pulled_weights(reply.weights)
                    except ray.exceptions.ObjectLostError:  # a restarted server's: pull again
                        continue
                    self._applied.clear()
                    self._received = (reply.version, weights, reply.report)
                    time.sleep(max(0.0, pulled_at + MIN_PULL_INTERVAL_S - time.monotonic()))
        except BaseException as exc:
            if not self._closed:
                self._error = exc
                self.stop = True

    def poll(self, steps: int = 0) -> None:
        """Apply the newest weights there are, if newer (the env loop calls this after every
        batch of ``steps`` env steps, inside chunks too). Raises what ended the receiver."""
        board = self.board
        if board is not None:
            # Per env step: one read of the board's counter; the header (stop flag, the
            # writer's heartbeat) every BOARD_CHECK_EVERY polls.
            self._polls += 1
            if self._polls >= BOARD_CHECK_EVERY or not board.unchanged():
                self._read_board()
            return
        received = self._received
        if received is not None:
            self._received = None
            self._apply(*received)
            self._applied.set()
        if self._error is not None:
            raise self._error

    def _read_board(self) -> None:
        board, self._polls = self.board, 0
        newer = board.newer(self.version)
        if newer is not None:
            version, weights, report = newer
            skipped = max(0, version - self.version - 1)  # versions pushed that it never acted with
            self._apply(version, weights, report)
            board.took(version, skipped)
        self.stop = self.stop or board.stop
        now = time.monotonic()
        if now - self._board_checked > 1.0:
            self._board_checked = now
            if board.refused or (board.heartbeat_age() > STALE_S and not board.stop):  # as newer() just read it
                if not board.refused:  # a refused board said why in its own line
                    log.warning("%s: its node's weights board has had no writer for %.0f s; pulling the parameter "
                                "server", self._role(), STALE_S)
                board.close()
                self.board = None
                if self._started:
                    self.start()

    def _role(self) -> str:
        return "evaluator" if self.worker is None else f"rollout_worker_{self.worker}"

    def refresh(self, wait_s: float) -> None:
        """Apply a newer version, waiting up to ``wait_s`` for one (or the stop flag)."""
        if self.board is None:
            self.take(self.pull(wait_s))
            return
        deadline, before = time.monotonic() + wait_s, self.version
        while True:
            self.poll()
            if self.version != before or self.stop or self.board is None or time.monotonic() >= deadline:
                return
            time.sleep(POLL_WHILE_WAITING_S)

    def wait_for_weights(self) -> None:
        """Block until the policy has weights (or the run stops)."""
        while not self.policy.has_weights and not self.stop:
            self.poll()
            if not self.policy.has_weights:
                time.sleep(IDLE_SLEEP_S / 5)

    def close(self) -> None:
        """End the receiver thread: at once if the run stopped (the server answers waiting
        pulls on the stop flag); else it ends when its waiting pull is answered, unwaited for
        (a daemon, it makes no further call)."""
        self._closed = True
        self._applied.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.board is not None:
            self.board.close()
            self.board = None


def open_board(name: str, slot: int | None, wait_s: float = BOARD_WAIT_S) -> BoardReader | None:
    """The board ``name`` of this machine, waiting up to ``wait_s`` for its writer to make it
    (a task may start before the actor that writes it); None where there is none, at once
    where this user's folder of boards is refused (no board will appear in it)."""
    deadline = time.monotonic() + wait_s
    while ((board := BoardReader.open(name, slot)) is None and not BoardReader.folder_refused
           and time.monotonic() < deadline):
        time.sleep(IDLE_SLEEP_S)
    return board

