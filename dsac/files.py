"""Files a run leaves: written atomically (temp file + rename), so a killed process never
leaves a half-written one behind."""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import stat
import zipfile
import zlib

import numpy as np

from dsac import safe_pickle
from dsac.errors import DsacError

# 2: builtins only (dsac.safe_pickle); 1 pickled numpy objects, and is refused.
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
    """Write a weights file atomically: a pickle of builtins only (see :mod:`dsac.safe_pickle`)."""
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
        from dsac.atari import FrameSettings

        try:
            FrameSettings.from_dict(payload["atari"])
        except DsacError as exc:
            raise DsacError(f"weights file {path}: {exc}") from None


def code_names(payload: dict) -> dict:
    """What a weights payload names that could be code: its env, policy class and custom
    model (see :func:`dsac.registry.refuse_untrusted_code`)."""
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


CHECKPOINT_DIR = "checkpoint"
# The folders a checkpoint passes through, newest first: it is written whole as checkpoint.new/
# (meta.json last), then checkpoint/ moves to checkpoint.old/, checkpoint.new/ to checkpoint/,
# and checkpoint.old/ is removed. So a whole checkpoint.new/ is always newer than checkpoint/,
# and checkpoint/ than checkpoint.old/, wherever a kill stopped the writer.
CHECKPOINT_SLOTS = (CHECKPOINT_DIR + ".new", CHECKPOINT_DIR, CHECKPOINT_DIR + ".old")


def _is_whole(folder: str) -> bool:
    """Whether ``folder`` holds a whole checkpoint: a real directory whose ``meta.json`` (written
    last) reads as dsac writes it, beside every file that meta.json implies (a folder being
    removed loses its files one by one, in any order)."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return False
        meta = read_json(os.path.join(folder, "meta.json"), folder)
        check_meta(meta, folder)
        names = ["state.npz", "weights.pkl", *(f"replay_{k}.npz" for k in range(meta.get("replay_shards", 0)))]
        return all(stat.S_ISREG(os.lstat(os.path.join(folder, name)).st_mode) for name in names)
    except (DsacError, OSError):
        return False


def newest_checkpoint(run_dir: str) -> str | None:
    """The name of ``run_dir``'s newest whole checkpoint (the first whole one of
    :data:`CHECKPOINT_SLOTS`), or None. A write killed at any instant leaves one at least."""
    return next((name for name in CHECKPOINT_SLOTS if _is_whole(os.path.join(run_dir, name))), None)


def _remove(path: str) -> None:
    """Remove ``path``, whatever it is (a symlink is unlinked, never followed)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _fsync_dir(path: str) -> None:
    """Make a directory's entries (a rename, a new file) durable; a no-op where the OS refuses."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _save_npz(path: str, arrays: dict, compressed: bool) -> None:
    """``np.savez`` (or ``savez_compressed``) into a fresh file, flushed to disk before it counts."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as f:
        (np.savez_compressed if compressed else np.savez)(f, **arrays)
        f.flush()
        os.fsync(f.fileno())


def _swap_in(run_dir: str) -> None:
    """Make the whole ``checkpoint.new/`` the run's ``checkpoint/``: at every instant of it, the
    newest whole checkpoint is that one, as checkpoint.new/ before its rename and checkpoint/ after."""
    final = os.path.join(run_dir, CHECKPOINT_DIR)
    new, old = final + ".new", final + ".old"
    _remove(old)  # what an earlier swap left: older than checkpoint/ and the whole checkpoint.new/
    if os.path.lexists(final):
        os.replace(final, old)
    os.replace(new, final)
    _fsync_dir(run_dir)
    shutil.rmtree(old, ignore_errors=True)  # left over, it is older than checkpoint/ and gets removed next time


def write_checkpoint(run_dir: str, state: dict, meta: dict, weights_payload: dict,
                     replay: list[dict] | None = None) -> str:
    """Write ``<run_dir>/checkpoint/``: ``state.npz`` (the learner's full state),
    ``meta.json`` (counters), ``weights.pkl`` and, if given, ``replay_<k>.npz`` per shard
    (compressed). Crash-safe at every instant: it is written whole as ``checkpoint.new/``
    (``meta.json`` last, each file flushed to disk) and swapped in by renames, so a process
    killed anywhere in here leaves a whole checkpoint (:func:`newest_checkpoint` finds the
    newest) and the next write goes on from whatever it left. Returns the checkpoint's path."""
    final = os.path.join(run_dir, CHECKPOINT_DIR)
    new = final + ".new"
    if newest_checkpoint(run_dir) == CHECKPOINT_SLOTS[0]:
        _swap_in(run_dir)  # a write was killed after checkpoint.new/ was whole: finish it before reusing the name
    _remove(new)  # not whole here: half-written or half-removed
    os.mkdir(new)  # 0777 less the umask, a normal directory's mode
    try:
        _save_npz(os.path.join(new, "state.npz"), state, compressed=False)
        for k, snapshot in enumerate(replay or []):
            _save_npz(os.path.join(new, f"replay_{k}.npz"), snapshot, compressed=True)
        save_weights(os.path.join(new, "weights.pkl"), weights_payload)
        write_json(os.path.join(new, "meta.json"), {**meta, "replay_shards": len(replay or [])})
        _fsync_dir(new)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    _swap_in(run_dir)
    return final


def read_checkpoint(run_dir: str, label: str | None = None) -> dict:
    """``{"state", "meta", "replay", "weights"}`` of ``run_dir``'s newest whole checkpoint
    (:func:`newest_checkpoint`: ``checkpoint/``, or the folder a killed write left; replay: a list
    of per-shard snapshots, empty without replay checkpointing; weights: the acting weights
    at the snapshot, or None). Every file is checked before it
    is used: ``meta.json``'s types, each ``.npz`` member's dtype and declared size (from its
    header, before anything is allocated; a replay snapshot's rows at most what the run's
    ``buffer_size`` keeps: :func:`replay_rows`), and the weights file as :func:`load_weights` does."""
    label = label or f"--resume {run_dir}"
    name = newest_checkpoint(run_dir)
    if name is None:  # none whole: read the one there is, for the one line that says what is wrong with it
        name = next((n for n in CHECKPOINT_SLOTS[1:] if os.path.lexists(os.path.join(run_dir, n, "meta.json"))), None)
        if name is None:
            raise DsacError(f"{label}: no checkpoint in it (runs write one when they stop)")
    path = os.path.join(run_dir, name)
    meta = read_json(os.path.join(path, "meta.json"), f"{label}: {name}/meta.json")
    check_meta(meta, f"{label}: {name}/meta.json")
    budget = _memory_budget()
    state = read_npz(os.path.join(path, "state.npz"), f"{label}: {name}/state.npz", budget)
    shards = meta.get("replay_shards", 0)
    rows = replay_rows(run_dir, label, meta["env_steps"]) if shards else None
    replay = [
        read_npz(os.path.join(path, f"replay_{k}.npz"), f"{label}: {name}/replay_{k}.npz", budget, rows)
        for k in range(shards)
    ]
    weights = None
    weights_path = os.path.join(path, "weights.pkl")
    if os.path.exists(weights_path):  # the acting weights at the snapshot (a restarted parameter server's)
        try:
            weights = load_weights(weights_path)["weights"]
        except DsacError as exc:
            raise DsacError(f"{label}: {exc}") from None
    return {"state": state, "meta": meta, "replay": replay, "weights": weights}


def replay_rows(run_dir: str, label: str, env_steps: int) -> int:
    """The most rows a member of ``run_dir``'s replay snapshots may hold: the frames a buffer of
    the run's own ``buffer_size`` (its ``config.json``) keeps, which is at least as many as its
    transitions (:func:`dsac.frames.frame_capacity`) — or of ``env_steps``, the transitions the
    run ever collected, when more (a run resumed with a smaller ``--buffer_size`` writes that
    size before its first checkpoint replaces the older, larger snapshot). A snapshot is
    decompressed against this bound as well as the file's size and the free memory."""
    from dsac.frames import frame_capacity

    config = read_json(os.path.join(run_dir, "config.json"), f"{label}: config.json")
    size = config.get("buffer_size") if isinstance(config, dict) else None
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise DsacError(f"{label}: config.json has no buffer_size (a positive integer) to bound its replay snapshots")
    return frame_capacity(max(size, int(env_steps)))


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


# meta.json of a checkpoint: key -> types (all optional but env_steps, updates, version).
_META_SCHEMA = {
    "env_steps": int, "updates": int, "version": int, "replay_shards": int,
    "wall_s": (int, float), "last_eval": dict, "best_eval_return": (int, float, type(None)),
}


def check_meta(meta, what: str) -> None:
    """Refuse a checkpoint's ``meta.json`` whose values are not of the types dsac writes."""
    if not isinstance(meta, dict):
        raise DsacError(f"{what} must hold a JSON object, not a {type(meta).__name__}")
    for key, types in _META_SCHEMA.items():
        if key not in meta:
            if key in ("env_steps", "updates", "version"):
                raise DsacError(f"{what} has no {key}")
            continue
        value = meta[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise DsacError(f"{what}: {key} is {value!r}, not what dsac writes")
        if types is int and not 0 <= value < 2**62:
            raise DsacError(f"{what}: {key} is {value}, out of range")
        if isinstance(value, float) and not math.isfinite(value):
            raise DsacError(f"{what}: {key} is {value}, not a finite number")
    if meta.get("replay_shards", 0) > 4096:
        raise DsacError(f"{what}: replay_shards {meta['replay_shards']} is out of range")


def _memory_budget() -> list[int]:
    """What all the arrays of one checkpoint may take together: half of :func:`available_memory`."""
    return [available_memory() // 2]


# Deflate expands at most ~1032:1 (258 bytes from 2 bits); a member declaring more than this
# many bytes per compressed byte (plus a small member's slack) was not written by numpy.
DEFLATE_MAX_RATIO = 1032


def read_npz(path: str, what: str, budget: list[int] | None = None,
             max_rows: int | None = None) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file (a regular file: :func:`open_regular`), read without
    pickles. No size the file states is taken on trust: its members' compressed lengths must
    fit in the file together, a stored member's length must be its compressed length, and a
    deflated one's at most what deflate can expand it to (:data:`DEFLATE_MAX_RATIO`). Then
    each member's header is read: a numeric dtype, and a declared size equal to the member's
    length and within ``budget`` (a one-element list, reduced by what is read). Decompression
    stops at the stated length (``zipfile`` reads a member in chunks up to it), so a member — a
    forged header, a zip bomb — makes the loader allocate at most ``DEFLATE_MAX_RATIO`` times
    the file's real size (plus 4 KiB a member), and never more than the budget. ``max_rows``:
    the most rows (first dimension) a member may declare (a replay snapshot: what its run's
    buffer keeps)."""
    budget = budget if budget is not None else _memory_budget()
    fd, size = open_regular(path, what)
    try:
        with os.fdopen(fd, "rb") as file, zipfile.ZipFile(file) as archive:
            infos = archive.infolist()
            claimed = sum(info.compress_size for info in infos)
            if claimed > size:
                raise DsacError(f"{what}: its members claim {claimed:,} compressed bytes, more than the file's "
                                f"{size:,}")
            for info in infos:
                name = repr(info.filename)
                # zipfile inflates a bzip2 or LZMA chunk whole before cutting it to the declared
                # length: only numpy's own methods (stored, deflate) keep the bounds below.
                if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 1:
                    kind = "encrypted" if info.flag_bits & 1 else "compressed"
                    raise DsacError(f"{what}: member {name} is {kind}"
                                    f"{'' if info.flag_bits & 1 else f' with method {info.compress_type}'}, "
                                    "not as numpy writes it (stored or deflate)")
                if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
                    raise DsacError(f"{what}: member {name} is stored, yet declares {info.file_size:,} bytes from "
                                    f"{info.compress_size:,}")
                if info.file_size > DEFLATE_MAX_RATIO * info.compress_size + 4096:
                    raise DsacError(f"{what}: member {name} declares {info.file_size:,} bytes from "
                                    f"{info.compress_size:,} compressed, more than deflate can expand")
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, _, dtype = read_header(member)
                    header_len = member.tell()
                if dtype.kind not in "biufU" or dtype.fields is not None or dtype.subdtype is not None:
                    raise DsacError(f"{what}: member {name} has dtype {dtype}, not plain numbers or text")
                if max_rows is not None and len(shape) and shape[0] > max_rows:
                    raise DsacError(f"{what}: member {name} declares {shape[0]:,} rows, more than the "
                                    f"{max_rows:,} its run's replay buffer keeps")
                nbytes = math.prod(shape) * dtype.itemsize
                if header_len + nbytes != info.file_size:
                    raise DsacError(f"{what}: member {name} declares {nbytes:,} bytes of data but holds "
                                    f"{info.file_size - header_len:,}")
                if nbytes > budget[0]:
                    raise DsacError(f"{what}: member {name} needs {nbytes / 2**20:,.0f} MiB, more than "
                                    "this machine can load safely")
                budget[0] -= nbytes
            file.seek(0)
            with np.load(file, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
    except DsacError:
        raise
    except FileNotFoundError:
        raise DsacError(f"{what} does not exist") from None
    except MemoryError:  # what the budget admitted, taken by another process meanwhile
        raise DsacError(f"{what} needs more memory than this machine has free") from None
    except (OSError, ValueError, EOFError, KeyError, RuntimeError, zipfile.BadZipFile, zlib.error,
            NotImplementedError) as exc:
        raise DsacError(f"{what} is truncated or corrupt ({type(exc).__name__}: {exc})") from None
