"""Files a run leaves: written atomically (temp file + rename), so a killed process never
leaves a half-written one behind."""

from __future__ import annotations

import json
import os
import secrets
import stat

import numpy as np

from dsac.errors import DsacError
from dsac.formats import safe_pickle

# 2: builtins only (dsac.formats.safe_pickle); 1 pickled numpy objects, and is refused.
FORMAT_VERSION = 2


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and a rename.

    Nothing here follows a symlink someone planted in a run directory: the temp file is a fresh
    name created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (an existing name, link or not, is an
    error, never opened), and ``rename`` replaces a symlink at ``path`` itself, never its target.
    """
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".tmp-{secrets.token_hex(6)}-{os.path.basename(path)}")
    # the mode: 0666 less the umask, as open() gives a new file
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def open_for_writing(path: str, append: bool = False):
    """``path`` opened for (binary) writing, created if absent, truncated unless ``append``;
    ``O_NOFOLLOW``: a symlink at ``path`` is an error (ELOOP), not a way to write elsewhere;
    ``O_NONBLOCK`` and a regular-file check: a FIFO planted under the name fails (ENXIO, or
    refused), never blocks the run."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
             | (os.O_APPEND if append else os.O_TRUNC))
    fd = os.open(path, flags, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return os.fdopen(fd, "ab" if append else "wb")


def check_writable_dir(path: str, flag: str) -> None:
    """Create ``path`` if needed and make sure files can be written in it (one-line error). The
    probe is a fresh name (``O_CREAT | O_EXCL | O_NOFOLLOW``), removed after: no file already
    there, nor a symlink planted under a name dsac once used, is opened."""
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".write-test-{secrets.token_hex(6)}")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise DsacError(f"{flag} {path} is not writable: {exc.strerror or exc}") from None


# What dsac writes (or reads back) in a run directory, by name: files (written atomically or
# appended to) and folders (TensorBoard's, the videos', W&B's, the checkpoint and the one a
# checkpoint swap leaves). Each must be itself, never a symlink: a run directory from someone
# else must not take a write (or a read) elsewhere (docs/safety.md).
RUN_FILES = ("config.json", "progress.jsonl", "weights.pkl", "best_weights.pkl", "summary.json", "trackers.json",
             "restored_from.json")
RUN_FOLDERS = ("checkpoint", "checkpoint.new", "checkpoint.old", "tb", "videos", "wandb")

CHECKPOINT_DIR = "checkpoint"
# The folders a checkpoint passes through, newest first: it is written whole as checkpoint.new/
# (meta.json last), then checkpoint/ moves to checkpoint.old/, checkpoint.new/ to checkpoint/,
# and checkpoint.old/ is removed. So a whole checkpoint.new/ is always newer than checkpoint/,
# and checkpoint/ than checkpoint.old/, wherever a kill stopped the writer.
CHECKPOINT_SLOTS = (CHECKPOINT_DIR + ".new", CHECKPOINT_DIR, CHECKPOINT_DIR + ".old")


def check_run_dir(path: str, what: str) -> None:
    """Refuse a run directory (one line naming the path) where a file or folder dsac writes or
    reads — or a file inside its checkpoint or videos — is a symlink, a folder is not a
    directory, or a file is not a regular file. Checked before anything is read or written (``lstat``:
    nothing is followed)."""
    names = [*RUN_FILES, *RUN_FOLDERS]
    for folder in (*CHECKPOINT_SLOTS, "videos"):
        inside = os.path.join(path, folder)
        if os.path.isdir(inside) and not os.path.islink(inside):
            try:
                names += [os.path.join(folder, name) for name in sorted(os.listdir(inside))]
            except OSError as exc:
                raise DsacError(f"{what} {path}: {folder}/ cannot be read ({exc.strerror or exc})") from None
    for name in names:
        full = os.path.join(path, name)
        if os.path.islink(full):
            raise DsacError(f"{what} {path}: {name} is a symlink (to {os.readlink(full)}); dsac never follows links "
                            "in a run directory, remove it")
        if name in RUN_FOLDERS and os.path.lexists(full) and not os.path.isdir(full):
            raise DsacError(f"{what} {path}: {name} is not a directory")
        if name in RUN_FILES and os.path.lexists(full) and not os.path.isfile(full):  # a FIFO would block a write
            raise DsacError(f"{what} {path}: {name} is not a regular file")


def real_dir(path: str) -> str:
    """``path``, created if absent, refused if it is a symlink or not a directory: a folder
    dsac writes into (TensorBoard's, the videos') is its own, made here."""
    try:
        os.mkdir(path)
    except FileExistsError:
        if os.path.islink(path) or not os.path.isdir(path):
            raise DsacError(f"{path} is {'a symlink' if os.path.islink(path) else 'not a directory'}; dsac writes "
                            "only into a folder of its own") from None
    return path


def save_weights(path: str, payload: dict) -> None:
    """Write a weights file atomically: a pickle of builtins only (see :mod:`dsac.formats.safe_pickle`)."""
    atomic_write_bytes(path, safe_pickle.dumps({"format_version": FORMAT_VERSION, **payload}))


# Globals the weights files of dsac's format 1 named (numpy arrays pickled as objects).
FORMAT_1_GLOBALS = {
    "numpy.ndarray", "numpy.dtype", "numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray.scalar", "numpy._core.multiarray.scalar", "numpy.core.numeric._frombuffer",
    "numpy._core.numeric._frombuffer",
}
CONVERT_COMMAND = "python -m dsac.convert_weights"


_NOT_REGULAR = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
                (stat.S_ISSOCK, "a socket"))


def open_regular(path: str, name: str) -> tuple[int, int]:
    """``(fd, size)`` of the regular file ``path``, opened for reading (the caller closes the
    fd); ``name``: how a one-line :class:`DsacError` calls it. Opened with ``O_NONBLOCK``, so a
    FIFO does not wait for a writer, and refused (a directory, a device such as ``/dev/zero``,
    a FIFO, a socket) before a byte is read: only a regular file has an end a read can trust."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise DsacError(f"{name} does not exist") from None
    except OSError as exc:
        raise DsacError(f"{name} cannot be read ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise DsacError(f"{name} is a directory, not a file")
        if not stat.S_ISREG(mode):
            kind = next((text for test, text in _NOT_REGULAR if test(mode)), "not a file")
            raise DsacError(f"{name} is {kind}, not a regular file: refusing to read it")
        return fd, os.fstat(fd).st_size
    except BaseException:
        os.close(fd)
        raise


def _bytes(n: int) -> str:
    """A size as a message gives it: KiB below a MiB, MiB above."""
    return f"{n / 2**10:,.0f} KiB" if n < 2**20 else f"{n / 2**20:,.1f} MiB".replace(".0 MiB", " MiB")


def _read_regular(path: str, name: str, limit: int, beyond: str) -> bytes:
    """At most ``limit`` bytes of the regular file ``path`` (:func:`open_regular`), or a one-line
    :class:`DsacError` ending in ``beyond`` when it holds more. The read stops at ``limit + 1``
    bytes whatever the file's size said (a file may grow while it is read)."""
    fd, size = open_regular(path, name)
    try:
        if size > limit:
            raise DsacError(f"{name} is {_bytes(size)}, more than the {_bytes(limit)} {beyond}")
        parts, total = [], 0
        while total <= limit:
            # the size stat gave (plus one, to see the end), then chunks: one read for a file as stated
            chunk = os.read(fd, min(limit + 1 - total, max(size + 1 - total, 1 << 20)))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
        if total > limit:
            raise DsacError(f"{name} grew past {_bytes(limit)} while read, more than {beyond}")
        return parts[0] if len(parts) == 1 else b"".join(parts)
    except OSError as exc:
        raise DsacError(f"{name} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def available_memory() -> int:
    """The bytes this process can still allocate: the machine's available memory, and no more
    than what its address-space and data limits (``ulimit -v``, ``ulimit -d``: RLIMIT_AS,
    RLIMIT_DATA) leave beyond what it already maps."""
    import resource

    import psutil

    free = psutil.virtual_memory().available
    usage = psutil.Process().memory_info()
    for limit, used in ((resource.RLIMIT_AS, usage.vms), (resource.RLIMIT_DATA, getattr(usage, "data", 0))):
        soft, _ = resource.getrlimit(limit)
        if soft != resource.RLIM_INFINITY:
            free = min(free, max(soft - used, 0))
    return free


def read_limited(path: str, what: str, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``; refuses anything else, and a file larger than
    ``limit`` (default: half of :func:`available_memory`), reading at most ``limit + 1`` bytes."""
    limit = limit if limit is not None else available_memory() // 2
    return _read_regular(path, f"{what} {path}", limit, "this machine can load safely")


def load_weights(path: str) -> dict:
    """Read a weights file written by :func:`save_weights`: no global is admitted, every
    array's dtype, shape and size is checked before it is built, and the metadata's types
    are checked (:func:`check_payload`).

    Raises:
        DsacError: one line naming the file and the problem (missing, corrupt, unsafe, an
            older format, wrong types).
    """
    data = read_limited(path, "weights file")
    try:
        payload = safe_pickle.loads(data)
    except safe_pickle.UnsafePickle as exc:
        if exc.globals_named and set(exc.globals_named) <= FORMAT_1_GLOBALS:
            raise DsacError(
                f"weights file {path} is in dsac's old format 1, whose numpy objects a crafted file can use to "
                f"crash the loader or read memory; if you trust it, convert it once: {CONVERT_COMMAND} {path}"
            ) from None
        if exc.globals_named:
            raise DsacError(f"weights file {path} is not a dsac weights file: {exc}") from None
        if exc.refused:  # well formed, of a shape dsac never writes (e.g. built to decode into far more than its size)
            raise DsacError(f"weights file {path} is refused: {exc}") from None
        raise DsacError(f"weights file {path} is truncated or corrupt ({exc})") from None
    check_payload(payload, path)
    return payload


# Metadata of a weights file: key -> (types it may have, required).
_PAYLOAD_SCHEMA = {
    "format_version": (int, True),
    "algo": (str, True),
    "env": (str, True),
    "observation_space": (dict, True),
    "action_space": (dict, True),
    "weights": (dict, True),
    "env_kwargs": (dict, False),
    "flatten_obs": (bool, False),
    "her": (bool, False),
    "atari": (dict, False),
    "model": (dict, False),
    "policy_class": ((str, type(None)), False),
    "eval_seed": (int, False),
    "eval_episodes": (int, False),
    "version": (int, False),
    "env_steps": (int, False),
    "updates": (int, False),
    "eval_return_mean": ((int, float, type(None)), False),
    "dsac_version": (str, False),
}


def check_payload(payload, path: str) -> None:
    """Refuse a weights payload whose keys or values are not of the types dsac writes."""
    if not isinstance(payload, dict) or "weights" not in payload:
        raise DsacError(f"weights file {path} is not a dsac weights file (no weights in it)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise DsacError(
            f"weights file {path} has format_version {payload.get('format_version')!r}; "
            f"this dsac reads {FORMAT_VERSION}"
        )
    for key, (types, required) in _PAYLOAD_SCHEMA.items():
        if key not in payload:
            if required:
                raise DsacError(f"weights file {path} is not a dsac weights file (no {key} in it)")
            continue
        value = payload[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
            raise DsacError(f"weights file {path}: {key} is a {type(value).__name__}, not what dsac writes")
    for name, array in payload["weights"].items():
        if not isinstance(name, str) or not isinstance(array, np.ndarray):
            raise DsacError(f"weights file {path}: weight {name!r} is not a named numpy array")
    if "atari" in payload:
        from dsac.envs.atari import FrameSettings

        try:
            FrameSettings.from_dict(payload["atari"])
        except DsacError as exc:
            raise DsacError(f"weights file {path}: {exc}") from None


def code_names(payload: dict) -> dict:
    """What a weights payload names that could be code: its env, policy class and custom
    model (see :func:`dsac.settings.registry.refuse_untrusted_code`)."""
    return {"env": payload.get("env"), "policy_class": payload.get("policy_class"),
            "custom_model": (payload.get("model") or {}).get("custom_model")}


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


def write_json(path: str, obj) -> None:
    """Pretty JSON, atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def append_jsonl(path: str, obj) -> None:
    """One JSON object per line, appended and flushed (never through a symlink)."""
    with open_for_writing(path, append=True) as f:
        f.write((json.dumps(obj) + "\n").encode())
        f.flush()


# The largest text file dsac reads a line at a time (progress.jsonl: a row per log line).
TEXT_LIMIT = 64 * 2**20
# The largest JSON and YAML documents dsac parses whole (config.json, meta.json, a --config or
# --space file; the ones dsac writes are a few KB). A parser builds an object for each bracket
# and scalar, which costs many times the bytes that spelled it (and PyYAML's pure-Python loader
# far more than json's), so the limits bound the parse's memory, not just the file's
# (docs/safety.md).
JSON_LIMIT = 2**20
YAML_LIMIT = 32 * 2**10


def document_limit(path: str) -> int:
    """The most bytes of ``path`` dsac parses as one document: :data:`YAML_LIMIT` for a
    ``.yaml``/``.yml`` file, :data:`JSON_LIMIT` for any other (read as JSON)."""
    return YAML_LIMIT if path.endswith((".yaml", ".yml")) else JSON_LIMIT


def read_text(path: str, what: str, limit: int = TEXT_LIMIT) -> str:
    """A UTF-8 text file's content, with one-line errors (missing, not a regular file, larger
    than ``limit``, unreadable, not UTF-8)."""
    data = _read_regular(path, what, limit, "a text file dsac reads may have")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DsacError(f"{what} is not UTF-8 text") from None


def read_json(path: str, what: str):
    """A JSON file's content, with one-line errors (missing, not a regular file, larger than
    :data:`JSON_LIMIT`, not UTF-8, not JSON)."""
    try:
        return json.loads(read_text(path, what, JSON_LIMIT))
    except ValueError as exc:
        raise DsacError(f"{what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise DsacError(f"{what} is nested too deeply to be a file dsac writes") from None
