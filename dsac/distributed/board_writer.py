"""The writing side of a weights board (:mod:`dsac.distributed.weights_board`): the one
process per node that publishes each version (the parameter server on its own node, a
:mod:`weights cache <dsac.distributed.weights_cache>` on the others), beats, and reads what
the node's rollout workers act with from their slots.

A new board is made under a temporary name, filled in, then renamed onto its name (readers
never see half a header; whatever stood at the name is replaced, not opened). A version is
changed under a sequence lock: the counter is odd while it is written (see
:mod:`dsac.distributed.board_reader` for the reader's side). A payload that outgrows its data
file goes to a new data file. The files are unlinked at the stop.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import time

from dsac.distributed.board_files import (
    board_file,
    board_path,
    create_new,
    data_file,
    map_ours,
    open_dir,
    sweep_stale,
    unlink_ours,
)
from dsac.distributed.board_format import (
    BEAT,
    BEAT_AT,
    FIELDS,
    FIELDS_AT,
    HEADER,
    HEARTBEAT_S,
    MAGIC,
    SEQ,
    SEQ_AT,
    SLOT,
    STOP,
    STOP_AT,
    encode,
    write,
)

log = logging.getLogger("dsac")


class BoardWriter:
    """The writing side: :meth:`publish` each version, :meth:`beat` often (heartbeat), and
    :meth:`readers` to learn what the node's rollout workers act with.

    Raises OSError where the board cannot be made (:class:`BoardRefused` where this user's
    folder is not ours alone): its readers then pull the parameter server.

    Args:
        name: the board's name (unique to the run and the node).
        num_slots: rollout workers of the run (slot ``i`` is worker ``i``'s).
    """

    def __init__(self, name: str, num_slots: int):
        entry = board_file(name)
        sweep_stale()
        self.name, self.path = name, board_path(name)
        self.num_slots = int(num_slots)
        size = HEADER.size + SLOT.size * self.num_slots
        seq, generation, board = 0, 0, None
        dir_fd = open_dir(create=True)
        try:
            try:  # a restarted writer: the board of ours it replaces (its readers keep their mapping)
                board, self.inode = map_ours(dir_fd, entry, writable=True)
                if len(board) >= size and board[:8] == MAGIC:
                    _, seq, _, generation, *_ = HEADER.unpack_from(board)
                else:
                    board.close()
                    board = None
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as exc:  # not ours, or unusable: replaced, never written into
                log.warning("weights board %s: the file there is not used (%s); a new one replaces it", self.path, exc)
            self.seq = (seq | 1) + 1
            self.generation = generation
            if board is None:
                board = self._new_board(dir_fd, entry, size)
            else:
                self._fill(board)
            self.board = board
            if generation:  # the data of the writer this one replaces: nobody reads it any more (length 0)
                unlink_ours(dir_fd, data_file(name, generation))
        finally:
            os.close(dir_fd)
        self.data: mmap.mmap | None = None
        self.data_inode = None
        self.taken = [0] * self.num_slots  # versions taken per slot at the last read of the slots

    def _fill(self, board: mmap.mmap) -> None:
        board[HEADER.size:HEADER.size + SLOT.size * self.num_slots] = b"\xff" * (SLOT.size * self.num_slots)
        HEADER.pack_into(board, 0, MAGIC, self.seq, 0, self.generation, 0, time.monotonic(), 0)

    def _new_board(self, dir_fd: int, entry: str, size: int) -> mmap.mmap:
        """A board made under a fresh name, filled in, then renamed onto ``entry``."""
        fd, new, _ = create_new(dir_fd, lambda i: f".{entry}.{i:016x}", size)
        try:
            board = mmap.mmap(fd, 0)
            self.inode = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        try:
            self._fill(board)
            os.rename(new, entry, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            board.close()
            unlink_ours(dir_fd, new)
            raise
        return board

    def publish(self, version: int, weights, report) -> None:
        """Make ``(weights, report)`` the node's newest, as ``version``. TypeError for weights
        that are not a dict of numeric arrays or a report that is not a learner report."""
        encoded = encode(version, weights, report)
        self.seq += 1  # odd: being written; the fields change only while it is odd
        SEQ.pack_into(self.board, SEQ_AT, self.seq)
        if self.data is None or encoded.length > len(self.data):
            self._new_data(encoded.length)
        write(self.data, encoded)
        FIELDS.pack_into(self.board, FIELDS_AT, int(version), self.generation, encoded.length)
        self.seq += 1
        SEQ.pack_into(self.board, SEQ_AT, self.seq)

    def _new_data(self, size: int) -> None:
        """A data file twice ``size`` (and 64 KiB) under a fresh random name."""
        dir_fd = open_dir(create=False)
        try:
            fd, _, generation = create_new(dir_fd, lambda i: data_file(self.name, i), 2 * size + 65536)
            try:
                data = mmap.mmap(fd, 0)
                inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            if self.data is not None:
                self.data.close()
                # readers that mapped it keep their mapping
                unlink_ours(dir_fd, data_file(self.name, self.generation), self.data_inode)
            self.data, self.data_inode, self.generation = data, inode, generation
        finally:
            os.close(dir_fd)

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
        """Unmap; with ``unlink`` remove the files, if they are still this writer's (readers
        that mapped them keep reading)."""
        for mapped in (self.board, self.data):
            if mapped is not None:
                mapped.close()
        if unlink:
            try:
                dir_fd = open_dir(create=False)
            except OSError:
                return
            try:
                unlink_ours(dir_fd, board_file(self.name), self.inode)
                if self.generation:
                    unlink_ours(dir_fd, data_file(self.name, self.generation), self.data_inode)
            finally:
                os.close(dir_fd)



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
        except OSError as exc:  # e.g. no room in /dev/shm, or a folder not ours: readers find no board and pull
            log.warning("weights board %s not made (%s); its readers pull the parameter server", name, exc)
            self.writer = None

    def publish(self, version: int, weights, report) -> None:
        if self.writer is None:
            return
        try:
            self.writer.publish(version, weights, report)
        except (OSError, TypeError, ValueError) as exc:  # no room for a larger payload, or weights a board cannot hold
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
