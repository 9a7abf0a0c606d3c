"""The folder and files of the weights boards (:mod:`dsac.distributed.weights_board`), and
the checks that keep what another user leaves there from being used.

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
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import re
import secrets
import stat
import struct
import tempfile
import time

from dsac.distributed.board_format import HEADER, MAGIC, BoardRefused

log = logging.getLogger("dsac")

NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")  # a board's name: never a path
_DATA_FILE = re.compile(r"wb-([A-Za-z0-9_-]+)\.[0-9a-f]{16}")
_NEW_FILE = re.compile(r"\.wb-[A-Za-z0-9_-]+\.[0-9a-f]{16}")
_TRIES = 8  # fresh random names tried when a name is taken

_logged: set[str] = set()


def log_once(message: str) -> None:
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
    return os.path.join(board_dir(), board_file(name))


def board_file(name: str) -> str:
    """The board's file name in the folder. ValueError for a name that is not a board's."""
    if not NAME.fullmatch(name):
        raise ValueError(f"weights board name {name!r} is not 1-200 letters, digits, '_' or '-'")
    return f"wb-{name}"


def data_file(name: str, data_id: int) -> str:
    """The file name of the board's data file ``data_id``."""
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


def open_dir(create: bool) -> int:
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


def open_ours(dir_fd: int, entry: str, flags: int) -> tuple[int, os.stat_result]:
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


def map_ours(dir_fd: int, entry: str, writable: bool) -> tuple[mmap.mmap, int]:
    """``(mapping, inode)`` of a file of ours (see :func:`open_ours`)."""
    fd, st = open_ours(dir_fd, entry, os.O_RDWR if writable else os.O_RDONLY)
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ), st.st_ino
    finally:
        os.close(fd)


def create_new(dir_fd: int, entry_for, size: int) -> tuple[int, str, int]:
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
            unlink_ours(dir_fd, entry)
            raise
        return fd, entry, data_id
    raise FileExistsError(f"{board_dir()}: {_TRIES} random names in a row were taken")


def unlink_ours(dir_fd: int, entry: str, inode: int | None = None) -> None:
    """Remove ``entry`` if it is a regular file of ours (and the file ``inode``, when given)."""
    try:
        st = os.stat(entry, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and inode in (None, st.st_ino):
            os.unlink(entry, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _stale_boards(dir_fd: int, boards: set[str], max_age_s: float) -> set[str]:
    """The boards of ours among ``boards`` whose writer has not beaten for ``max_age_s``."""
    gone = set()
    for entry in boards:
        try:
            fd, _ = open_ours(dir_fd, entry, os.O_RDONLY)
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
    return gone


def sweep_stale(max_age_s: float = 600.0) -> None:
    """Remove the boards (and their data files) of ours on this machine whose writer has not
    beaten for ``max_age_s``: those of runs whose writers were killed on a node no driver
    cleans. Only regular files of this user's, in this user's folder, are ever touched."""
    try:
        dir_fd = open_dir(create=False)
    except OSError:
        return
    try:
        names = os.listdir(dir_fd)
        boards = {n for n in names if n.startswith("wb-") and NAME.fullmatch(n[3:])}
        gone = _stale_boards(dir_fd, boards, max_age_s)
        for entry in names:  # the stale boards, their data files, and files whose board is gone, left long ago
            data = _DATA_FILE.fullmatch(entry)
            if entry in gone or (data and f"wb-{data.group(1)}" in gone):
                unlink_ours(dir_fd, entry)
            elif (data and f"wb-{data.group(1)}" not in boards) or _NEW_FILE.fullmatch(entry):
                try:
                    if time.time() - os.stat(entry, dir_fd=dir_fd, follow_symlinks=False).st_mtime > max_age_s:
                        unlink_ours(dir_fd, entry)
                except OSError:
                    continue
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def remove_boards(names: list[str]) -> None:
    """Remove the files of ours of these boards on this machine (those a writer that died left)."""
    try:
        dir_fd = open_dir(create=False)
    except OSError:
        return
    try:
        boards = {board_file(name) for name in names}
        for entry in os.listdir(dir_fd):
            data = _DATA_FILE.fullmatch(entry)
            if entry in boards or (data and f"wb-{data.group(1)}" in boards):
                unlink_ours(dir_fd, entry)
    finally:
        os.close(dir_fd)
