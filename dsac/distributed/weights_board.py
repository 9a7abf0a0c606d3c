"""A node's newest weights in shared memory: one writer (the parameter server on its own node,
a :mod:`weights cache <dsac.distributed.weights_cache>` on every other node) and any number of
readers (rollout workers, the evaluator) on the same machine, which see a new version without
any call: a reader's check is one read of a sequence counter, and a new version is one copy.

Two files in the machine's shared-memory folder (``/dev/shm``, or the temporary folder where
there is none), named after the run and the node:

- the *board*: a header (a sequence counter, the version, the data file's generation, the
  writer's heartbeat, the stop flag) and one slot per rollout worker, where each writes the
  version it acts with, when it took it and how far behind it had been;
- the *data* file ``<board>.<generation>``: the pickled ``(weights, report)`` of the version.
  A payload that outgrows it goes to a new generation (readers map it when they see the
  generation change).

The writer changes a version under a sequence lock: the counter is odd while it writes; a
reader that saw it odd, or changed across its copy, tries again at its next check. The files
are the run's own (created 0600 by its processes) and are unlinked at the stop.

A reader whose board's heartbeat is older than :data:`STALE_S` treats the writer as gone (the
caller falls back to pulling the parameter server).
"""

from __future__ import annotations

import asyncio
import glob
import logging
import mmap
import os
import pickle
import struct
import tempfile
import time

log = logging.getLogger("dsac")

MAGIC = b"dsacwb01"
# magic, sequence, version, data generation, payload bytes, heartbeat (time.monotonic(): one clock
# for every process of a machine), stop
HEADER = struct.Struct("<8sQqqqdq")
SEQ, FIELDS, BEAT, STOP = struct.Struct("<Q"), struct.Struct("<qqq"), struct.Struct("<d"), struct.Struct("<q")
SEQ_AT, FIELDS_AT, BEAT_AT, STOP_AT = 8, 16, 40, 48
# per rollout worker: the version it acts with, how many versions it skipped at its last take,
# when it took it (time.monotonic()), then its count of takes, written last (a writer that sees
# a new count sees the fields before it); version -1: none (never written, or its reader left)
SLOT = struct.Struct("<qqdq")
SLOT_FIELDS, TAKEN = struct.Struct("<qqd"), struct.Struct("<q")
TAKEN_AT = SLOT_FIELDS.size
# A board whose heartbeat is this old has lost its writer.
STALE_S = 10.0
# How often a writer beats and reads its readers' slots.
HEARTBEAT_S = 0.02


def board_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def board_path(name: str) -> str:
    """Where the board called ``name`` (a run's and a node's: see its writer) lives."""
    return os.path.join(board_dir(), f"dsac-wb-{name}")


def _map(path: str, size: int | None = None) -> mmap.mmap:
    """Map ``path``: created (``size`` bytes, 0600) when ``size`` is given, else as it is."""
    if size is None:
        fd = os.open(path, os.O_RDWR)
    else:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            os.ftruncate(fd, size)
            if hasattr(os, "posix_fallocate"):  # a full /dev/shm is an OSError now, not a SIGBUS at a write
                os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            _unlink(path)
            raise
    try:
        return mmap.mmap(fd, 0)
    finally:
        os.close(fd)


class BoardWriter:
    """The writing side: :meth:`publish` each version, :meth:`beat` often (heartbeat), and
    :meth:`readers` to learn what the node's rollout workers act with.

    Args:
        name: the board's name (unique to the run and the node).
        num_slots: rollout workers of the run (slot ``i`` is worker ``i``'s).
    """

    def __init__(self, name: str, num_slots: int):
        sweep_stale()
        self.path = board_path(name)
        self.num_slots = int(num_slots)
        size = HEADER.size + SLOT.size * self.num_slots
        seq, generation = 0, 0
        if os.path.exists(self.path):  # a restarted writer: the sequence never goes back
            try:
                old = _map(self.path)
                if len(old) >= HEADER.size and old[:8] == MAGIC:
                    _, seq, _, generation, *_ = HEADER.unpack_from(old)
                old.close()
            except (OSError, ValueError, struct.error):
                pass
        self.board = _map(self.path, size)
        self.seq = (seq | 1) + 1
        self.generation = generation
        self.data: mmap.mmap | None = None
        self.board[HEADER.size:] = b"\xff" * (SLOT.size * self.num_slots)  # every slot "never written"
        HEADER.pack_into(self.board, 0, MAGIC, self.seq, 0, self.generation, 0, time.monotonic(), 0)
        if generation:  # the data of the writer this one replaces: nobody reads it any more (length 0)
            _unlink(f"{self.path}.{generation}")
        self.taken = [0] * self.num_slots  # versions taken per slot at the last read of the slots

    def publish(self, version: int, weights, report) -> None:
        """Make ``(weights, report)`` the node's newest, as ``version``."""
        payload = pickle.dumps((int(version), weights, report), protocol=pickle.HIGHEST_PROTOCOL)
        self.seq += 1  # odd: being written; the fields change only while it is odd
        SEQ.pack_into(self.board, SEQ_AT, self.seq)
        if self.data is None or len(payload) > len(self.data):
            self._new_data(len(payload))
        self.data[:len(payload)] = payload
        FIELDS.pack_into(self.board, FIELDS_AT, int(version), self.generation, len(payload))
        self.seq += 1
        SEQ.pack_into(self.board, SEQ_AT, self.seq)

    def _new_data(self, size: int) -> None:
        if self.data is not None:
            self.data.close()
            _unlink(f"{self.path}.{self.generation}")  # readers that mapped it keep their mapping
        self.generation += 1
        self.data = _map(f"{self.path}.{self.generation}", 2 * size + 65536)

    def stop(self) -> None:
        """Raise the stop flag (readers see it at their next check)."""
        STOP.pack_into(self.board, STOP_AT, 1)
        self.seq += 2  # a change readers notice at their next counter read
        SEQ.pack_into(self.board, SEQ_AT, self.seq)

    def beat(self) -> None:
        BEAT.pack_into(self.board, BEAT_AT, time.monotonic())

    def readers(self) -> tuple[dict[int, int], list[tuple[int, int]], float | None]:
        """``(held, lags, age_s)``: the version each rollout worker that wrote its slot acts
        with; ``(worker, versions behind)`` for each that took a version since the last call;
        seconds since the latest take (None: nobody took one)."""
        held, lags, latest = {}, [], None
        for i in range(self.num_slots):
            version, lag, at, taken = SLOT.unpack_from(self.board, HEADER.size + i * SLOT.size)
            if version < 0:
                continue
            held[i] = version
            if taken != self.taken[i]:
                self.taken[i] = taken
                lags.append((i, lag))
                latest = at if latest is None else max(latest, at)
        return held, lags, (None if latest is None else max(0.0, time.monotonic() - latest))

    def close(self, unlink: bool = True) -> None:
        """Unmap; with ``unlink`` remove the files (readers that mapped them keep reading)."""
        for mapped in (self.board, self.data):
            if mapped is not None:
                mapped.close()
        if unlink:
            _unlink(self.path)
            _unlink(f"{self.path}.{self.generation}")


def sweep_stale(max_age_s: float = 600.0) -> None:
    """Remove the boards (and their data files) on this machine whose writer has not beaten
    for ``max_age_s``: those of runs whose writers were killed on a node no driver cleans."""
    folder = board_dir()
    try:
        names = [n for n in os.listdir(folder) if n.startswith("dsac-wb-")]
    except OSError:
        return
    boards = {n for n in names if not n.rpartition(".")[2].isdigit()}
    for name in boards:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                header = f.read(HEADER.size)
            magic, *_, beat, _ = HEADER.unpack(header)
        except (OSError, struct.error):
            continue
        if magic == MAGIC and time.monotonic() - beat > max_age_s:
            remove_boards([name.removeprefix("dsac-wb-")])
    for name in names:  # data files whose board is gone, left long ago
        stem, _, generation = name.rpartition(".")
        path = os.path.join(folder, name)
        try:
            if generation.isdigit() and stem not in boards and time.time() - os.stat(path).st_mtime > max_age_s:
                _unlink(path)
        except OSError:
            continue


def remove_boards(names: list[str]) -> None:
    """Remove the files of these boards on this machine (those a writer that died left)."""
    for name in names:
        path = board_path(name)
        for leftover in glob.glob(glob.escape(path) + ".*") + [path]:
            _unlink(leftover)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class BoardReader:
    """The reading side. :meth:`open` returns None where the board is not there (this
    machine has none for that name); :meth:`newer` returns a newer version's
    ``(version, weights, report)`` or None.

    Args:
        path: the board's file (:func:`board_path`).
        slot: this rollout worker's slot, or None (a reader that reports nothing: the evaluator).
    """

    def __init__(self, board: mmap.mmap, path: str, slot: int | None):
        self.board, self.path, self.slot = board, path, slot
        self.generation, self.data = 0, None
        self.taken = 0
        self.stop = False
        self.seen = -1  # the sequence counter at the last :meth:`newer`

    def unchanged(self) -> bool:
        """Nothing was written since the last :meth:`newer` (one read of the counter)."""
        return SEQ.unpack_from(self.board, SEQ_AT)[0] == self.seen

    @classmethod
    def open(cls, name: str, slot: int | None = None) -> BoardReader | None:
        path = board_path(name)
        try:
            board = _map(path)
        except (FileNotFoundError, ValueError):
            return None
        if len(board) < HEADER.size or board[:8] != MAGIC:
            board.close()
            return None
        if slot is not None and HEADER.size + (slot + 1) * SLOT.size > len(board):
            slot = None
        reader = cls(board, path, slot)
        if slot is not None:  # a restarted worker counts on from its slot's takes
            reader.taken = max(0, SLOT.unpack_from(board, HEADER.size + slot * SLOT.size)[3])
        return reader

    def newer(self, version: int):
        """The newest ``(version, weights, report)`` when newer than ``version``, else None
        (also while the writer is writing: the next check sees it)."""
        _, seq, newest, generation, length, _, stop = HEADER.unpack_from(self.board)
        self.stop = self.stop or bool(stop)
        self.seen = seq  # odd, or written over during the copy: the next check reads it again
        if newest <= version or seq & 1 or length <= 0:
            return None  # nothing newer, or being written: the next check
        if generation != self.generation:
            try:
                data = _map(f"{self.path}.{generation}")
            except (FileNotFoundError, ValueError):  # replaced meanwhile: the next check
                return None
            if self.data is not None:
                self.data.close()
            self.data, self.generation = data, generation
        if length > len(self.data):  # a header read while it changed: the next check
            return None
        payload = self.data[:length]
        if SEQ.unpack_from(self.board, SEQ_AT)[0] != seq:  # written over during the copy
            return None
        version_inside, weights, report = pickle.loads(payload)
        if version_inside != newest:  # a copy that raced the writer where stores may be reordered (not x86)
            return None
        return newest, weights, report

    def heartbeat_age(self) -> float:
        return time.monotonic() - BEAT.unpack_from(self.board, BEAT_AT)[0]

    def stopped(self) -> bool:
        self.stop = self.stop or bool(STOP.unpack_from(self.board, STOP_AT)[0])
        return self.stop

    def took(self, version: int, skipped: int) -> None:
        """Tell the writer this worker acts with ``version`` now, having skipped ``skipped``
        versions pushed since the one it held (it never acted with them)."""
        if self.slot is None:
            return
        at = HEADER.size + self.slot * SLOT.size
        self.taken += 1
        SLOT_FIELDS.pack_into(self.board, at, version, skipped, time.monotonic())
        TAKEN.pack_into(self.board, at + TAKEN_AT, self.taken)

    def close(self) -> None:
        """Leave the board: the slot says nobody holds a version (a worker that pulls the
        server from now on, or ended), and the files are unmapped."""
        if self.slot is not None:
            SLOT_FIELDS.pack_into(self.board, HEADER.size + self.slot * SLOT.size, -1, 0, 0.0)
        for mapped in (self.board, self.data):
            if mapped is not None:
                mapped.close()


class BoardLoop:
    """A writer's side in an asyncio actor: :meth:`publish` and :meth:`stop` as the versions
    come; :meth:`run` (a task) beats every :data:`HEARTBEAT_S` and calls ``report(held, lags,
    age_s)`` (see :meth:`BoardWriter.readers`) when a worker took a version. At the stop it
    unlinks the files: readers that mapped them still see the stop flag; later ones find none
    and pull the parameter server, which says the same."""

    def __init__(self, name: str, num_workers: int, report):
        self.report = report
        try:
            self.writer: BoardWriter | None = BoardWriter(name, num_workers)
        except OSError as exc:  # e.g. no room in /dev/shm: readers find no board and pull
            log.warning("weights board %s not made (%s); its readers pull the parameter server", name, exc)
            self.writer = None

    def publish(self, version: int, weights, report) -> None:
        if self.writer is None:
            return
        try:
            self.writer.publish(version, weights, report)
        except OSError as exc:  # a larger payload found no room: the readers leave the board
            log.warning("weights board: version %d not published (%s); its readers pull the parameter server",
                        version, exc)
            BEAT.pack_into(self.writer.board, BEAT_AT, -1e18)  # stale at once
            self.writer.close(unlink=True)
            self.writer = None

    def stop(self) -> None:
        if self.writer is not None:
            self.writer.stop()
            self.writer.close(unlink=True)
            self.writer = None

    async def run(self, alive=lambda: True) -> None:
        """Beat while ``alive()`` (a writer whose source of versions died stops beating, so
        that its readers go to the parameter server) and report the readers' takes."""
        while self.writer is not None:
            if alive():
                self.writer.beat()
            held, lags, age_s = self.writer.readers()
            if lags:
                self.report(held, lags, age_s)
            await asyncio.sleep(HEARTBEAT_S)
