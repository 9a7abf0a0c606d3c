"""The reading side of a weights board (:mod:`dsac.distributed.weights_board`): a rollout
worker or the evaluator that takes each newer version with one copy, after one read of the
board's sequence counter tells it there is one.

A copy made while the counter was odd, or that changed across it, is read again at the next
check. Where stores may be seen out of order (ARM servers, Apple silicon) a copy can still mix
two writes with the counter unchanged: the checksum refuses it, and the next check reads it
again. A version whose checksum fails twice with nothing written in between was changed by
something else than its writer: the board is refused, and its reader pulls the parameter
server from then on, as does one whose writer's heartbeat is older than
:data:`~dsac.distributed.board_format.STALE_S`.
"""

from __future__ import annotations

import mmap
import os
import time

from dsac.distributed.board_files import board_file, board_path, data_file, log_once, map_ours, open_dir
from dsac.distributed.board_format import (
    BEAT,
    BEAT_AT,
    DATA_HEAD,
    HEADER,
    MAGIC,
    SEQ,
    SEQ_AT,
    SLOT,
    SLOT_FIELDS,
    STOP,
    STOP_AT,
    TAKEN,
    TAKEN_AT,
    BoardRefused,
    Torn,
    decode,
)


class BoardReader:
    """The reading side. :meth:`open` returns None where the board is not there (this
    machine has none for that name) or was refused; :meth:`newer` returns a newer version's
    ``(version, weights, report)`` or None. ``refused`` says why a board found unusable was
    left (its caller pulls the parameter server from then on).

    Args:
        board: the board's mapping, name: its name (:meth:`open` makes both).
        slot: this rollout worker's slot, or None (a reader that reports nothing: the evaluator).
    """

    def __init__(self, board: mmap.mmap, name: str, slot: int | None):
        self.board, self.name, self.slot = board, name, slot
        self.path = board_path(name)
        self.generation, self.data = 0, None
        self.taken = 0
        self.stop = False
        self.seen = -1  # the sequence counter at the last :meth:`newer`
        self.refused: str | None = None
        self._torn_at = -1  # the sequence counter of the last copy refused as torn

    def unchanged(self) -> bool:
        """Nothing was written since the last :meth:`newer` (one read of the counter)."""
        return SEQ.unpack_from(self.board, SEQ_AT)[0] == self.seen

    # Why this user's folder of boards was refused at the last :meth:`open` (None: it was fine
    # or not there yet). No board will appear in a refused folder, so a caller stops waiting.
    folder_refused: str | None = None

    @classmethod
    def open(cls, name: str, slot: int | None = None) -> BoardReader | None:
        path = board_path(name)
        BoardReader.folder_refused = None
        try:
            dir_fd = open_dir(create=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            BoardReader.folder_refused = str(exc)
            log_once(f"weights board {path} not used ({exc}); its readers pull the parameter server")
            return None
        try:
            board, _ = map_ours(dir_fd, board_file(name), writable=True)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log_once(f"weights board {path} not used ({exc}); its readers pull the parameter server")
            return None
        finally:
            os.close(dir_fd)
        if len(board) < HEADER.size or board[:8] != MAGIC:
            board.close()
            log_once(f"weights board {path} not used (not a board of this version of dsac); its readers pull "
                      "the parameter server")
            return None
        if slot is not None and HEADER.size + (slot + 1) * SLOT.size > len(board):
            slot = None
        reader = cls(board, name, slot)
        if slot is not None:  # a restarted worker counts on from its slot's takes
            reader.taken = max(0, SLOT.unpack_from(board, HEADER.size + slot * SLOT.size)[3])
        return reader

    def newer(self, version: int):
        """The newest ``(version, weights, report)`` when newer than ``version``, else None
        (also while the writer is writing, or for a copy that raced it: the next check reads
        it again; and once the board is refused)."""
        if self.refused:
            return None
        _, seq, newest, generation, length, _, stop = HEADER.unpack_from(self.board)
        self.stop = self.stop or bool(stop)
        self.seen = seq  # odd, or written over during the copy: the next check reads it again
        if newest <= version or seq & 1 or length <= 0:
            return None  # nothing newer, or being written: the next check
        if generation != self.generation:
            try:
                dir_fd = open_dir(create=False)
                try:
                    data, _ = map_ours(dir_fd, data_file(self.name, generation), writable=False)
                finally:
                    os.close(dir_fd)
            except FileNotFoundError:  # replaced meanwhile (or a header read mid-write): the next check
                return None
            except (OSError, ValueError) as exc:
                return self._refuse(f"its data file is not used ({exc})")
            if self.data is not None:
                self.data.close()
            self.data, self.generation = data, generation
        if not DATA_HEAD.size <= length <= len(self.data):  # a header read while it changed: the next check
            return None
        with memoryview(self.data) as view, view[:length] as mapped:
            payload = bytearray(mapped)  # one copy; the arrays are views of it
        if SEQ.unpack_from(self.board, SEQ_AT)[0] != seq:  # written over during the copy
            return None
        try:
            return decode(payload, newest)
        except Torn as exc:
            if self._torn_at != seq:  # a copy that raced the writer where stores may be reordered (not x86)
                self._torn_at = seq
                return None
            return self._refuse(f"version {newest} read twice, nothing written in between, and still {exc}: "
                                "its data was changed by something else than its writer")
        except (BoardRefused, TypeError, ValueError, OverflowError) as exc:  # never into the worker
            return self._refuse(f"version {newest} is not what a writer writes ({exc})")

    def _refuse(self, reason: str) -> None:
        self.refused = reason
        log_once(f"weights board {self.path}: {reason}; its reader pulls the parameter server")
        return None

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

