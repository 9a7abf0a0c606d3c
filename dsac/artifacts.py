"""Files a run leaves: written atomically (temp file + rename), so a killed process never
leaves a half-written one behind."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import tempfile

import numpy as np

from dsac.errors import DsacError

FORMAT_VERSION = 1


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same directory and a rename."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; give the file a normal mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_weights(path: str, payload: dict) -> None:
    """Pickle a dict of plain values and numpy arrays (no classes of ours) atomically."""
    atomic_write_bytes(path, pickle.dumps({"format_version": FORMAT_VERSION, **payload}, protocol=4))


# Globals a weights file may name: numpy's array and dtype reconstruction, nothing else.
_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Admits numpy arrays/dtypes and builtin containers and scalars; any other global
    (``os.system``, ``builtins.eval``, ...) is refused before anything runs."""

    def find_class(self, module, name):
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def load_weights(path: str) -> dict:
    """Read a weights file written by :func:`save_weights` with a restricted unpickler.

    Raises:
        DsacError: one line naming the file and the problem (missing, corrupt, unsafe,
            wrong format version).
    """
    try:
        with open(path, "rb") as f:
            payload = _RestrictedUnpickler(f).load()
    except FileNotFoundError:
        raise DsacError(f"weights file {path} does not exist") from None
    except pickle.UnpicklingError as exc:
        if str(exc).startswith("refusing"):  # names a global: unsafe, and not ours
            raise DsacError(f"weights file {path} is not a dsac weights file: {exc}") from None
        raise DsacError(f"weights file {path} is truncated or corrupt ({exc})") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError, OSError) as exc:
        raise DsacError(f"weights file {path} is truncated or corrupt ({type(exc).__name__}: {exc})") from None
    if not isinstance(payload, dict) or "weights" not in payload:
        raise DsacError(f"weights file {path} is not a dsac weights file (no weights in it)")
    if payload.get("format_version") != FORMAT_VERSION:
        raise DsacError(
            f"weights file {path} has format_version {payload.get('format_version')!r}; "
            f"this dsac reads {FORMAT_VERSION}"
        )
    return payload


def write_json(path: str, obj) -> None:
    """Pretty JSON, atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def append_jsonl(path: str, obj) -> None:
    """One JSON object per line, appended and flushed."""
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()


CHECKPOINT_DIR = "checkpoint"


def write_checkpoint(run_dir: str, state: dict, meta: dict, weights_payload: dict,
                     replay: list[dict] | None = None) -> str:
    """Write ``<run_dir>/checkpoint/``: ``state.npz`` (the learner's full state),
    ``meta.json`` (counters), ``weights.pkl`` and, if given, ``replay_<k>.npz`` per shard
    (compressed). Built in a temp dir and swapped in by renames, so a crash mid-write leaves
    the previous checkpoint whole. Returns the checkpoint's path."""
    final = os.path.join(run_dir, CHECKPOINT_DIR)
    tmp = tempfile.mkdtemp(dir=run_dir, prefix=".checkpoint-")
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; give the directory a normal mode
    try:
        np.savez(os.path.join(tmp, "state.npz"), **state)
        for k, snapshot in enumerate(replay or []):
            np.savez_compressed(os.path.join(tmp, f"replay_{k}.npz"), **snapshot)
        save_weights(os.path.join(tmp, "weights.pkl"), weights_payload)
        write_json(os.path.join(tmp, "meta.json"), {**meta, "replay_shards": len(replay or [])})
        old = final + ".old"
        if os.path.exists(final):
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def read_checkpoint(run_dir: str) -> dict:
    """``{"state", "meta", "replay"}`` of ``<run_dir>/checkpoint/`` (replay: a list of
    per-shard snapshots, empty without replay checkpointing)."""
    path = os.path.join(run_dir, CHECKPOINT_DIR)
    if not os.path.exists(os.path.join(path, "meta.json")):
        old = path + ".old"  # a crash between the two renames
        if os.path.exists(os.path.join(old, "meta.json")):
            path = old
        else:
            raise DsacError(f"--resume {run_dir}: no checkpoint in it (runs write one when they stop)")
    try:
        with open(os.path.join(path, "meta.json")) as f:
            meta = json.load(f)
        with np.load(os.path.join(path, "state.npz"), allow_pickle=False) as data:
            state = {k: data[k] for k in data.files}
        replay = []
        for k in range(meta.get("replay_shards", 0)):
            with np.load(os.path.join(path, f"replay_{k}.npz"), allow_pickle=False) as data:
                replay.append({key: data[key] for key in data.files})
    except (OSError, ValueError, KeyError) as exc:
        raise DsacError(f"--resume {run_dir}: the checkpoint is unreadable ({exc})") from None
    return {"state": state, "meta": meta, "replay": replay}
