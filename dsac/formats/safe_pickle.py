"""A pickle that holds only Python builtins, and a loader that admits no globals at all.

dsac's weights files are pickles (users reload "pickled weights", and ``pickle.load`` in any
Python 3.8+ reads them), but nothing in them is an object of a class: numpy arrays are
written as ``{"__ndarray__": [dtype name, shape, raw little-endian bytes]}`` and rebuilt with
:func:`numpy.frombuffer` after their dtype (an allow-list of numeric dtypes), shape and byte
count have been checked. Reading never calls a constructor a file names, so a file cannot
run code or set numpy's internal state (object arrays, forged dtype flags or field offsets).
The loader admits only the shapes :func:`encode` writes — a tree of dicts with string keys,
lists, strings, bytes, numbers, booleans and None — and refuses the rest before anything is
built:

1. every opcode is read with :func:`pickletools.genops` (which executes nothing) and checked
   against the few such a pickle needs — no ``GLOBAL``, ``REDUCE``, ``BUILD``, ``NEWOBJ``,
   ``PERSID``, ...; memo indices must be those the file itself created, and the number of
   opcodes is bounded. The walk follows what each opcode leaves on the unpickler's stack, so
   it knows the kind and nesting height of every value, and refuses:

   - a memo reference (``BINGET``) to anything but a string of at most :data:`MAX_SHARED_STR`
     characters (or ``b""``): a weights file holds a tree, and one whose subtrees are shared
     (``a = []; b = [a, a]; c = [b, b]``...) decodes to a tree exponentially larger than the
     file;
   - a dict key that is not a string (keys are hashed as they are inserted: an int key costs
     its attacker-chosen hash, a tuple key is hashed recursively), and any tuple;
   - values nested deeper than :data:`MAX_DEPTH` (the C unpickler, ``repr`` and a recursive
     walk all recurse on nesting);
   - more than ``64 + size // CONTAINER_BYTES`` lists and dicts (an empty list costs Python
     ~70 bytes, twice over once decoded, from 2 bytes of the file; a weights file spends more
     than 15 bytes per list or dict, dsac's own files 48-80);

2. only then is it unpickled, by an unpickler whose ``find_class`` admits nothing;
3. arrays are rebuilt from bytes whose length must equal the declared shape times the
   dtype's item size, and whose dimensions other than zeros multiply to at most the file's
   size (so an empty array cannot claim a shape numpy cannot represent), by a walk that
   visits at most as many values as the file has bytes and builds a value's path only for
   an error message.

The bound: checking and decoding a file of ``n`` bytes takes at most 20 µs × ``n`` + 0.25 s
and a peak of ``PEAK_BYTES_PER_BYTE * n + PEAK_CONSTANT`` (64 × ``n`` + 1 MiB) bytes of
memory (Python's traced allocations), whatever the file holds; every outcome is a value or
one line of :class:`UnsafePickle`. ``python -m benchmarks fuzz`` checks it over
structure-aware mutations of dsac's own files and hand-built hostile ones, a subprocess
catching any crash: 3,093 cases in two minutes (seed 0), no crash, at worst 0.71 µs and 26
bytes of peak memory per byte of the file (files of 4 KiB or more).
"""

from __future__ import annotations

import io
import math
import pickle
import reprlib

import numpy as np

from dsac.formats.pickle_opcodes import MAX_DEPTH, MAX_OPCODES, MAX_SHARED_STR, UnsafePickle, check_opcodes

ARRAY_KEY = "__ndarray__"
# Numeric dtypes an array may have (stored little-endian).
DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
})
MAX_NDIM = 32
# The stated bound on peak memory while loading a file of n bytes (see the module docstring).
PEAK_BYTES_PER_BYTE = 64
PEAK_CONSTANT = 1 << 20

def encode(obj, path: str = "payload"):
    """``obj`` as builtins only: arrays as :data:`ARRAY_KEY` dicts, numpy scalars as Python
    numbers, tuples as lists. Raises TypeError for anything else (a class of ours, a set...).

    The result is a tree that :func:`loads` admits: every list and dict is built anew, and a
    bytes object or a string longer than :data:`MAX_SHARED_STR` met twice is copied, so that
    the pickle's memo references repeat short strings only."""
    return _encode(obj, path, set())


def _encode(obj, path: str, seen: set[int]):
    if isinstance(obj, np.ndarray):
        if obj.dtype.name not in DTYPES:
            raise TypeError(f"{path}: arrays of dtype {obj.dtype} cannot be stored")
        little = np.ascontiguousarray(obj, dtype=obj.dtype.newbyteorder("<"))
        return {ARRAY_KEY: [obj.dtype.name, list(obj.shape), bytearray(little.tobytes())]}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise TypeError(f"{path}: keys must be strings, got {key!r}")
        return {_unshared(key, seen): _encode(value, f"{path}.{key}", seen) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_encode(value, f"{path}[{i}]", seen) for i, value in enumerate(obj)]
    if isinstance(obj, str | bytes):
        return _unshared(obj, seen)
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    raise TypeError(f"{path}: a {type(obj).__name__} cannot be stored in a weights file")


def _unshared(value: str | bytes, seen: set[int]) -> str | bytes:
    """``value``, or a copy of it if it is a long string or non-empty bytes already met (the
    ids in ``seen`` are of objects the payload or the result keeps alive)."""
    if not value or (isinstance(value, str) and len(value) <= MAX_SHARED_STR):
        return value
    if id(value) in seen:
        value = (value + "\0")[:-1] if isinstance(value, str) else bytes(bytearray(value))
    seen.add(id(value))
    return value


def dumps(obj) -> bytes:
    """The builtins-only pickle of ``obj`` (see :func:`encode`). :func:`encode` builds every
    list and dict anew, so the pickle holds a tree: its memo references repeat strings only."""
    return pickle.dumps(encode(obj), protocol=5)


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing a persistent id")


_short = reprlib.Repr()
_short.maxstring = _short.maxother = 60


def _path_text(path) -> str:
    """``payload.weights.actor/out/kernel`` from the chain of ``(parent, key or index, is_key)``
    the walk keeps (built only for an error message; an odd key is shown as a short repr)."""
    parts = []
    while path is not None:
        path, key, is_key = path
        if not is_key:
            parts.append(f"[{key}]")
        elif isinstance(key, str) and key.isprintable() and len(key) <= 60:
            parts.append(f".{key}")
        else:
            parts.append(f".{_short.repr(key)}")
    return "payload" + "".join(reversed(parts))


def decode(obj, max_values: int = MAX_OPCODES):
    """Rebuild the arrays :func:`encode` wrote, checking each one's dtype, shape and size, in
    place: ``obj``'s dicts and lists are changed and returned (tuples become lists).
    Visits at most ``max_values`` values (:func:`loads` passes the file's size: each value
    is pushed by an opcode of at least one byte), else raises :class:`UnsafePickle`; an
    array's dimensions other than zeros may multiply to at most ``max_values``."""
    return _decode(obj, None, 0, [max_values], max_values)


def _decode(obj, path, depth: int, left: list[int], limit: int):
    left[0] -= 1
    if left[0] < 0:
        raise UnsafePickle(f"{_path_text(path)}: more than the {limit:,} values allowed (a pickle holds at most "
                           "one value per byte: each is pushed by an opcode of its own)", refused=True)
    if depth > MAX_DEPTH:
        raise UnsafePickle(f"{_path_text(path)}: nested deeper than {MAX_DEPTH}", refused=True)
    if isinstance(obj, dict):
        if ARRAY_KEY in obj:
            if len(obj) != 1:
                raise UnsafePickle(f"{_path_text(path)}: an array entry has other keys beside {ARRAY_KEY}")
            return _array(obj[ARRAY_KEY], path, limit)
        for key, value in obj.items():  # in place: the unpickled tree is ours, and a copy would double it
            obj[key] = _decode(value, (path, key, True), depth + 1, left, limit)
        return obj
    if isinstance(obj, list):
        for i, value in enumerate(obj):
            obj[i] = _decode(value, (path, i, False), depth + 1, left, limit)
        return obj
    if isinstance(obj, tuple):
        return [_decode(value, (path, i, False), depth + 1, left, limit) for i, value in enumerate(obj)]
    return obj


def _array(spec, path, limit: int) -> np.ndarray:
    """The array ``spec`` (``[dtype name, shape, bytes]``) describes, or :class:`UnsafePickle`.
    Its non-zero dimensions multiply to at most ``limit`` (the file's size: a non-empty array's
    items all come from the file), so an empty one cannot claim a shape numpy cannot hold."""
    if not (isinstance(spec, list | tuple) and len(spec) == 3):
        raise UnsafePickle(f"{_path_text(path)}: an array must be [dtype, shape, bytes]")
    dtype_name, shape, data = spec
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise UnsafePickle(f"{_path_text(path)}: dtype {_short.repr(dtype_name)} is not one of "
                           f"{', '.join(sorted(DTYPES))}")
    if not (isinstance(shape, list | tuple) and len(shape) <= MAX_NDIM
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise UnsafePickle(f"{_path_text(path)}: shape {_short.repr(shape)} is not a list of at most "
                           f"{MAX_NDIM} sizes >= 0")
    if not isinstance(data, bytes | bytearray):
        raise UnsafePickle(f"{_path_text(path)}: array data must be bytes")
    items = 1
    for n in shape:  # stops as soon as the product passes the limit: no huge Python int is built
        items *= n or 1
        if items > limit:
            raise UnsafePickle(f"{_path_text(path)}: shape {_short.repr(list(shape))} claims more items than a "
                               f"file of {limit:,} bytes can hold", refused=True)
    dtype = np.dtype(dtype_name).newbyteorder("<")
    expected = math.prod(shape) * dtype.itemsize
    if expected != len(data):
        raise UnsafePickle(f"{_path_text(path)}: shape {list(shape)} of {dtype_name} needs {expected:,} bytes, "
                           f"the file holds {len(data):,}")
    try:
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    except ValueError as exc:  # numpy's own limits, should a shape pass the checks above
        raise UnsafePickle(f"{_path_text(path)}: shape {list(shape)} of {dtype_name} cannot be built ({exc})",
                           refused=True) from None


def loads(data: bytes):
    """The object in ``data``, with arrays rebuilt. Raises :class:`UnsafePickle` for anything
    that is not a pickle of the shape :func:`encode` writes (nothing it names is ever imported
    or called; see :func:`check_opcodes`). Time linear in ``len(data)``, peak memory below
    ``PEAK_BYTES_PER_BYTE * len(data) + PEAK_CONSTANT``."""
    check_opcodes(data)
    try:
        obj = _NoGlobals(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, ValueError, EOFError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, RecursionError, OverflowError) as exc:
        raise UnsafePickle(f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    return decode(obj, max(len(data), 1))
