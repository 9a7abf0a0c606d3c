"""A node's newest weights in shared memory: one writer (the parameter server on its own node,
a :mod:`weights cache <dsac.distributed.weights_cache>` on every other node) and any number of
readers (rollout workers, the evaluator) on the same machine, which see a new version without
any call: a reader's check is one read of a sequence counter, and a new version is one copy.

The files live in a folder of the user's own, ``dsac-<uid>`` in the machine's shared-memory
folder (``/dev/shm``, or the temporary folder where there is none; ``DSAC_WEIGHTS_BOARD_DIR``
names another), made mode 0700. On a machine several users share, anyone can list
``/dev/shm`` and guess a board's name, so nothing found there is trusted: the folder is used
only when it is a real folder (not a symbolic link), owned by this process's effective uid,
with no group or other permission bits; each file is opened with ``O_NOFOLLOW`` and used only
when ``fstat`` shows a regular file of ours with no group or other bits; files are created
``O_CREAT | O_EXCL`` mode 0600, under a fresh random name when one is taken. A folder or
file that fails a check is skipped with one log line and its readers pull the parameter
server; it never raises into a worker, and another user's file is never opened for writing,
adopted or removed.

Two files per run and node, named after the board:

- the *board* ``wb-<name>``: a header (a sequence counter, the version, the data file's id,
  the payload's length, the writer's heartbeat, the stop flag) and one slot per rollout
  worker, where each writes the version it acts with, when it took it and how far behind it
  had been. A new board is made under a temporary name, filled in, then renamed onto its
  name (readers never see half a header; whatever stood at the name is replaced, not opened);
- the *data* file ``wb-<name>.<id>`` (16 hex digits, random): the version's payload, decoded
  without :mod:`pickle` (nothing in it is ever called or imported): :data:`DATA_HEAD` (a
  magic, the JSON header's length, the CRC-32 of everything after :data:`DATA_HEAD` up to
  the payload's length), the JSON header ``{"version", "arrays": [[name, dtype, shape], ...],
  "report"}`` (the learner's report as the list of its fields), then each array's raw
  little-endian bytes at the next multiple of :data:`ALIGN`. A reader checks the sizes
  against the mapped file before it copies, the checksum after, and the dtypes (numeric
  only: :data:`dsac.safe_pickle.DTYPES`), shapes and offsets against the copy before any
  array is made. A payload that outgrows its file goes to a new data file.

The writer changes a version under a sequence lock: the counter is odd while it writes; a
reader that saw it odd, or changed across its copy, tries again at its next check. Where
stores may be seen out of order (ARM servers, Apple silicon) a copy can still mix two writes
with the counter unchanged: the checksum refuses it, and the next check reads it again. A
version whose checksum fails twice with nothing written in between was changed by something
else than its writer: the board is refused. The files are unlinked at the stop.

A reader whose board's heartbeat is older than :data:`STALE_S` treats the writer as gone (the
caller falls back to pulling the parameter server), as does one whose board was refused.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import math
import mmap
import os
import re
import secrets
import stat
import struct
import tempfile
import time
import zlib

import numpy as np

from dsac.messages import LearnerReport
from dsac.safe_pickle import DTYPES, MAX_NDIM

log = logging.getLogger("dsac")

MAGIC = b"dsacwb02"
# magic, sequence, version, data file id, payload bytes, heartbeat (time.monotonic(): one clock
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
# A data file's start: magic, the JSON header's bytes, CRC-32 of the rest of the payload (the
# header, the padding, the arrays), reserved. CRC-32 is a check against torn copies, not
# against a forger (the owner checks are that): at ~5 GB/s it adds ~1 ms per 4 MB version.
DATA_MAGIC = b"dsacwd01"
DATA_HEAD = struct.Struct("<8sQII")
ALIGN = 64  # each array starts at a multiple of this (aligned arrays for numpy and TensorFlow)
# A board whose heartbeat is this old has lost its writer.
STALE_S = 10.0
# How often a writer beats and reads its readers' slots.
HEARTBEAT_S = 0.02
NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")  # a board's name: never a path
_DATA_FILE = re.compile(r"wb-([A-Za-z0-9_-]+)\.[0-9a-f]{16}")
_NEW_FILE = re.compile(r"\.wb-[A-Za-z0-9_-]+\.[0-9a-f]{16}")
_TRIES = 8  # fresh random names tried when a name is taken

_logged: set[str] = set()


class BoardRefused(OSError):
    """A board's folder or file that is not ours alone (another owner, group or other
    permission bits, a symbolic link, not a regular file) or not what a writer of ours
    writes. An OSError, so that a writer's callers treat it as a board that cannot be made."""


def _log_once(message: str) -> None:
    """One line per process for each refusal: a reader checks at every poll, and says it once."""
    if message not in _logged:
        _logged.add(message)
        log.warning("%s", message)


def board_dir() -> str:
    """This user's folder of boards (see the module's docstring)."""
    base = os.environ.get("DSAC_WEIGHTS_BOARD_DIR") or (
        "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    return os.path.join(base, f"dsac-{os.geteuid()}")


def board_path(name: str) -> str:
    """Where the board called ``name`` (a run's and a node's: see its writer) lives."""
    return os.path.join(board_dir(), _board_file(name))


def _board_file(name: str) -> str:
    if not NAME.fullmatch(name):
        raise ValueError(f"weights board name {name!r} is not 1-200 letters, digits, '_' or '-'")
    return f"wb-{name}"


def _data_file(name: str, data_id: int) -> str:
    return f"wb-{name}.{data_id:016x}"


def _not_ours(st: os.stat_result, is_kind, kind: str) -> str | None:
    """Why a folder or file is not this user's alone (None: it is)."""
    if not is_kind(st.st_mode):
        return f"not a {kind}"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):04o} lets others in"
    return None


def _open_dir(create: bool) -> int:
    """A descriptor of this user's folder of boards (every file is opened relative to it, so
    the folder checked is the folder used), made 0700 when ``create``. Raises
    FileNotFoundError where there is none, :class:`BoardRefused` where it is not ours alone."""
    path = board_dir()
    if create:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EACCES, errno.EPERM):
            raise BoardRefused(f"{path}: not a folder of ours ({exc.strerror})") from None
        raise
    problem = _not_ours(os.fstat(fd), stat.S_ISDIR, "folder")
    if problem:
        os.close(fd)
        raise BoardRefused(f"{path}: {problem}")
    return fd


def _open_ours(dir_fd: int, entry: str, flags: int) -> tuple[int, os.stat_result]:
    """Open ``entry`` of the folder (never through a symbolic link, never blocking on a FIFO)
    and check it is a regular file of ours alone. Raises FileNotFoundError, :class:`BoardRefused`."""
    try:
        fd = os.open(entry, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENXIO):
            raise BoardRefused(f"{entry}: not a file of ours ({exc.strerror})") from None
        raise
    st = os.fstat(fd)
    problem = _not_ours(st, stat.S_ISREG, "regular file") or ("empty" if st.st_size == 0 else None)
    if problem:
        os.close(fd)
        raise BoardRefused(f"{entry}: {problem}")
    return fd, st


def _map_ours(dir_fd: int, entry: str, writable: bool) -> tuple[mmap.mmap, int]:
    """``(mapping, inode)`` of a file of ours (see :func:`_open_ours`)."""
    fd, st = _open_ours(dir_fd, entry, os.O_RDWR if writable else os.O_RDONLY)
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ), st.st_ino
    finally:
        os.close(fd)


def _create(dir_fd: int, entry_for, size: int) -> tuple[int, str, int]:
    """``(fd, entry, id)`` of a new file of ``size`` bytes, mode 0600, created ``O_EXCL`` under
    ``entry_for(random id)``: a name taken (a stale or foreign file) is never opened, the next
    random one is tried."""
    for _ in range(_TRIES):
        data_id = secrets.randbits(62) + 1
        entry = entry_for(data_id)
        try:
            fd = os.open(entry, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dir_fd)
        except FileExistsError:
            continue
        try:
            os.fchmod(fd, 0o600)  # the umask cannot leave it unwritable to ourselves
            os.ftruncate(fd, size)
            if hasattr(os, "posix_fallocate"):  # a full /dev/shm is an OSError now, not a SIGBUS at a write
                os.posix_fallocate(fd, 0, size)
        except OSError:
            os.close(fd)
            _unlink_ours(dir_fd, entry)
            raise
        return fd, entry, data_id
    raise FileExistsError(f"{board_dir()}: {_TRIES} random names in a row were taken")


def _unlink_ours(dir_fd: int, entry: str, inode: int | None = None) -> None:
    """Remove ``entry`` if it is a regular file of ours (and the file ``inode``, when given)."""
    try:
        st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and inode in (None, st.st_ino):
            os.unlink(entry, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _align(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _plain(value):
    """JSON for the numpy scalars a report's statistics may hold."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a {type(value).__name__} cannot go on a weights board")


def _arrays(weights) -> list[tuple[str, np.ndarray]]:
    """The weights as ``(name, contiguous little-endian array)``; TypeError for anything else
    than a dict of numeric arrays by string names."""
    if not isinstance(weights, dict):
        raise TypeError(f"weights on a board are a dict of arrays, not a {type(weights).__name__}")
    arrays = []
    for key, value in weights.items():
        array = np.asarray(value)
        if not isinstance(key, str) or array.dtype.name not in DTYPES or array.ndim > MAX_NDIM:
            raise TypeError(f"weights entry {key!r} ({array.dtype}, {array.ndim} dims) cannot go on a weights board")
        arrays.append((key, np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))))
    return arrays


class _Torn(Exception):
    """A copy that is not one write of the writer's (checked again at the next check)."""


def _decode(payload: bytearray, version: int):
    """``(version, weights, report)`` from a copied payload. Raises :class:`_Torn` where it
    is not one coherent write of ``version``, :class:`BoardRefused` where a coherent write is
    not what a writer of ours writes. The arrays are views of ``payload`` (no second copy)."""
    length = len(payload)
    if length < DATA_HEAD.size:
        raise _Torn("shorter than its start")
    magic, header_len, crc, _ = DATA_HEAD.unpack_from(payload)
    if magic != DATA_MAGIC or header_len > length - DATA_HEAD.size:
        raise _Torn("its start does not match its length")
    with memoryview(payload) as view, view[DATA_HEAD.size:] as body:
        if zlib.crc32(body) != crc:
            raise _Torn("checksum mismatch")
    try:
        header = json.loads(bytes(payload[DATA_HEAD.size:DATA_HEAD.size + header_len]))
    except (ValueError, RecursionError) as exc:
        raise BoardRefused(f"unreadable header ({exc})") from None
    if not (isinstance(header, dict) and isinstance(header.get("arrays"), list)):
        raise BoardRefused("a header without its arrays")
    if header.get("version") != version:
        raise _Torn(f"version {header.get('version')!r} inside, {version} in the board")
    weights, offset = {}, DATA_HEAD.size + header_len
    for entry in header["arrays"]:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str) and entry[0] not in weights
                and isinstance(entry[1], str) and entry[1] in DTYPES and isinstance(entry[2], list) and len(entry[2]) <= MAX_NDIM
                and all(type(n) is int and n >= 0 for n in entry[2])):
            raise BoardRefused(f"array entry {str(entry)[:100]} is not [new name, numeric dtype, shape]")
        name, dtype_name, shape = entry
        dtype = np.dtype(dtype_name).newbyteorder("<")
        count = math.prod(shape)  # Python ints: no overflow
        offset = _align(offset)
        if offset + count * dtype.itemsize > length:
            raise BoardRefused(f"array {name[:100]} {shape} of {dtype_name} runs past the payload's {length} bytes")
        weights[name] = np.frombuffer(payload, dtype, count, offset).reshape(shape)
        offset += count * dtype.itemsize
    if offset != length:
        raise BoardRefused(f"the arrays end at byte {offset}, the payload at {length}")
    report = header.get("report")
    if report is not None:
        if not (isinstance(report, list) and len(report) == len(LearnerReport._fields)):
            raise BoardRefused("a report that is not a learner report's fields")
        report = LearnerReport(*report)
    return version, weights, report


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
        entry = _board_file(name)
        sweep_stale()
        self.name, self.path = name, board_path(name)
        self.num_slots = int(num_slots)
        size = HEADER.size + SLOT.size * self.num_slots
        seq, generation, board = 0, 0, None
        dir_fd = _open_dir(create=True)
        try:
            try:  # a restarted writer: the board of ours it replaces (its readers keep their mapping)
                board, self.inode = _map_ours(dir_fd, entry, writable=True)
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
                _unlink_ours(dir_fd, _data_file(name, generation))
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
        fd, new, _ = _create(dir_fd, lambda i: f".{entry}.{i:016x}", size)
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
            _unlink_ours(dir_fd, new)
            raise
        return board

    def publish(self, version: int, weights, report) -> None:
        """Make ``(weights, report)`` the node's newest, as ``version``. TypeError for weights
        that are not a dict of numeric arrays or a report that is not a learner report."""
        arrays = _arrays(weights)
        if report is not None and not isinstance(report, LearnerReport):
            raise TypeError(f"a board's report is a LearnerReport, not a {type(report).__name__}")
        header = json.dumps({"version": int(version), "arrays": [[n, a.dtype.name, list(a.shape)] for n, a in arrays],
                             "report": None if report is None else list(report)},
                            separators=(",", ":"), default=_plain).encode()
        offsets, end = [], DATA_HEAD.size + len(header)
        for _, array in arrays:
            offsets.append(_align(end))
            end = offsets[-1] + array.nbytes
        self.seq += 1  # odd: being written; the fields change only while it is odd
        SEQ.pack_into(self.board, SEQ_AT, self.seq)
        if self.data is None or end > len(self.data):
            self._new_data(end)
        data, at = self.data, DATA_HEAD.size + len(header)
        data[DATA_HEAD.size:at] = header
        for offset, (_, array) in zip(offsets, arrays, strict=True):
            data[at:offset] = bytes(offset - at)  # the padding: zeros, as the checksum saw them
            data[offset:offset + array.nbytes] = array.reshape(-1).view(np.uint8)
            at = offset + array.nbytes
        with memoryview(data) as view, view[DATA_HEAD.size:end] as body:
            crc = zlib.crc32(body)
        DATA_HEAD.pack_into(data, 0, DATA_MAGIC, len(header), crc, 0)
        FIELDS.pack_into(self.board, FIELDS_AT, int(version), self.generation, end)
        self.seq += 1
        SEQ.pack_into(self.board, SEQ_AT, self.seq)

    def _new_data(self, size: int) -> None:
        """A data file twice ``size`` (and 64 KiB) under a fresh random name."""
        dir_fd = _open_dir(create=False)
        try:
            fd, _, generation = _create(dir_fd, lambda i: _data_file(self.name, i), 2 * size + 65536)
            try:
                data = mmap.mmap(fd, 0)
                inode = os.fstat(fd).st_ino
            finally:
                os.close(fd)
            if self.data is not None:
                self.data.close()
                # readers that mapped it keep their mapping
                _unlink_ours(dir_fd, _data_file(self.name, self.generation), self.data_inode)
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
                dir_fd = _open_dir(create=False)
            except OSError:
                return
            try:
                _unlink_ours(dir_fd, _board_file(self.name), self.inode)
                if self.generation:
                    _unlink_ours(dir_fd, _data_file(self.name, self.generation), self.data_inode)
            finally:
                os.close(dir_fd)


def sweep_stale(max_age_s: float = 600.0) -> None:
    """Remove the boards (and their data files) of ours on this machine whose writer has not
    beaten for ``max_age_s``: those of runs whose writers were killed on a node no driver
    cleans. Only regular files of this user's, in this user's folder, are ever touched."""
    try:
        dir_fd = _open_dir(create=False)
    except OSError:
        return
    try:
        names = os.listdir(dir_fd)
        boards = {n for n in names if n.startswith("wb-") and NAME.fullmatch(n[3:])}
        gone = set()
        for entry in boards:
            try:
                fd, _ = _open_ours(dir_fd, entry, os.O_RDONLY)
            except OSError:
                continue
            try:
                magic, *_, beat, _ = HEADER.unpack(os.pread(fd, HEADER.size, 0))
            except (OSError, struct.error):
                continue
            finally:
                os.close(fd)
            if magic == MAGIC and time.monotonic() - beat > max_age_s:
                gone.add(entry)
        for entry in names:  # the stale boards, their data files, and files whose board is gone, left long ago
            data = _DATA_FILE.fullmatch(entry)
            if entry in gone or (data and f"wb-{data.group(1)}" in gone):
                _unlink_ours(dir_fd, entry)
            elif (data and f"wb-{data.group(1)}" not in boards) or _NEW_FILE.fullmatch(entry):
                try:
                    if time.time() - os.stat(entry, dir_fd=dir_fd, follow_symlinks=False).st_mtime > max_age_s:
                        _unlink_ours(dir_fd, entry)
                except OSError:
                    continue
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def remove_boards(names: list[str]) -> None:
    """Remove the files of ours of these boards on this machine (those a writer that died left)."""
    try:
        dir_fd = _open_dir(create=False)
    except OSError:
        return
    try:
        boards = {_board_file(name) for name in names}
        for entry in os.listdir(dir_fd):
            data = _DATA_FILE.fullmatch(entry)
            if entry in boards or (data and f"wb-{data.group(1)}" in boards):
                _unlink_ours(dir_fd, entry)
    finally:
        os.close(dir_fd)


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
            dir_fd = _open_dir(create=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            BoardReader.folder_refused = str(exc)
            _log_once(f"weights board {path} not used ({exc}); its readers pull the parameter server")
            return None
        try:
            board, _ = _map_ours(dir_fd, _board_file(name), writable=True)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            _log_once(f"weights board {path} not used ({exc}); its readers pull the parameter server")
            return None
        finally:
            os.close(dir_fd)
        if len(board) < HEADER.size or board[:8] != MAGIC:
            board.close()
            _log_once(f"weights board {path} not used (not a board of this version of dsac); its readers pull "
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
                dir_fd = _open_dir(create=False)
                try:
                    data, _ = _map_ours(dir_fd, _data_file(self.name, generation), writable=False)
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
            return _decode(payload, newest)
        except _Torn as exc:
            if self._torn_at != seq:  # a copy that raced the writer where stores may be reordered (not x86)
                self._torn_at = seq
                return None
            return self._refuse(f"version {newest} read twice, nothing written in between, and still {exc}: "
                                "its data was changed by something else than its writer")
        except (BoardRefused, TypeError, ValueError, OverflowError) as exc:  # never into the worker
            return self._refuse(f"version {newest} is not what a writer writes ({exc})")

    def _refuse(self, reason: str) -> None:
        self.refused = reason
        _log_once(f"weights board {self.path}: {reason}; its reader pulls the parameter server")
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
