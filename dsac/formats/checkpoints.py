"""A run's checkpoint (``checkpoint/``: the learner's full state, counters, acting weights and
the replay's snapshots) written crash-safe at every instant, and read back with every size it
states checked against the file before anything is allocated (docs/safety.md)."""

from __future__ import annotations

import math
import os
import shutil
import stat
import zipfile
import zlib

import numpy as np

from dsac.errors import DsacError
from dsac.formats.files import (
    CHECKPOINT_DIR,
    CHECKPOINT_SLOTS,
    available_memory,
    load_weights,
    open_regular,
    read_json,
    save_weights,
    write_json,
)


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
    transitions (:func:`dsac.replay.frames.frame_capacity`) — or of ``env_steps``, the transitions the
    run ever collected, when more (a run resumed with a smaller ``--buffer_size`` writes that
    size before its first checkpoint replaces the older, larger snapshot). A snapshot is
    decompressed against this bound as well as the file's size and the free memory."""
    from dsac.replay.frames import frame_capacity

    config = read_json(os.path.join(run_dir, "config.json"), f"{label}: config.json")
    size = config.get("buffer_size") if isinstance(config, dict) else None
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise DsacError(f"{label}: config.json has no buffer_size (a positive integer) to bound its replay snapshots")
    return frame_capacity(max(size, int(env_steps)))


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


def _check_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, what: str, budget: list[int],
                  max_rows: int | None) -> None:
    """Refuse a member of an ``.npz`` whose stated sizes do not hold together (see :func:`read_npz`);
    takes what it will need from ``budget``."""
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
                _check_member(archive, info, what, budget, max_rows)
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
