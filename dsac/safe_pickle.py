"""A pickle that holds only Python builtins, and a loader that admits no globals at all.

dsac's weights files are pickles (users reload "pickled weights", and ``pickle.load`` in any
Python 3.8+ reads them), but nothing in them is an object of a class: numpy arrays are
written as ``{"__ndarray__": [dtype name, shape, raw little-endian bytes]}`` and rebuilt with
:func:`numpy.frombuffer` after their dtype (an allow-list of numeric dtypes), shape and byte
count have been checked. Reading never calls a constructor a file names — so a file cannot
run code, set numpy's internal state (object arrays, forged dtype flags or field offsets),
or make the loader allocate more than the file's own size:

1. every opcode is read with :func:`pickletools.genops` (which executes nothing) and checked
   against the few a builtins-only pickle needs — no ``GLOBAL``, ``REDUCE``, ``BUILD``,
   ``NEWOBJ``, ``PERSID``, ...; memo indices must be those the file itself created, and the
   number of opcodes is bounded;
2. only then is it unpickled, by an unpickler whose ``find_class`` admits nothing;
3. arrays are rebuilt from bytes whose length must equal the declared shape times the
   dtype's item size.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools

import numpy as np

ARRAY_KEY = "__ndarray__"
# Numeric dtypes an array may have (stored little-endian).
DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
})
MAX_NDIM = 32
MAX_DEPTH = 32  # nesting of dicts and lists
MAX_OPCODES = 2_000_000  # a weights file of N arrays has ~20 N opcodes

# What a pickle of dicts, lists, str, bytes/bytearray, int, float, bool and None is made of.
_ALLOWED_OPCODES = frozenset({
    "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
    "EMPTY_LIST", "LIST", "APPEND", "APPENDS",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8",
    "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8",
    "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
    "NONE", "NEWTRUE", "NEWFALSE",
    "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
})
_STRING_OPCODES = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING",
                             "SHORT_BINSTRING", "BINSTRING"})


class UnsafePickle(ValueError):
    """The data is not a builtins-only pickle; ``globals`` lists the ``module.name``s it
    names (empty when another opcode or a malformed argument was the reason)."""

    def __init__(self, message: str, globals_named: tuple[str, ...] = ()):
        super().__init__(message)
        self.globals_named = globals_named


def encode(obj, path: str = "payload"):
    """``obj`` as builtins only: arrays as :data:`ARRAY_KEY` dicts, numpy scalars as Python
    numbers, tuples as lists. Raises TypeError for anything else (a class of ours, a set...)."""
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
        return {key: encode(value, f"{path}.{key}") for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [encode(value, f"{path}[{i}]") for i, value in enumerate(obj)]
    if obj is None or isinstance(obj, bool | int | float | str | bytes):
        return obj
    raise TypeError(f"{path}: a {type(obj).__name__} cannot be stored in a weights file")


def dumps(obj) -> bytes:
    """The builtins-only pickle of ``obj`` (see :func:`encode`)."""
    return pickle.dumps(encode(obj), protocol=5)


def check_opcodes(data: bytes) -> None:
    """Raise :class:`UnsafePickle` unless ``data`` is a builtins-only pickle whose memo
    references and sizes stay within itself. Executes nothing."""
    memo_size = 0
    strings: list[str] = []  # the last strings pushed, for naming a STACK_GLOBAL's target
    memo_strings: dict[int, str] = {}
    last_string_at = -1
    named: list[str] = []
    count = 0
    refused = None
    try:
        for opcode, arg, _pos in pickletools.genops(io.BytesIO(data)):
            count += 1
            if count > MAX_OPCODES:
                raise UnsafePickle(f"more than {MAX_OPCODES:,} pickle opcodes")
            name = opcode.name
            if name in _STRING_OPCODES:
                strings = [*strings[-1:], arg]
            elif name in ("BINGET", "LONG_BINGET") and arg in memo_strings:
                strings = [*strings[-1:], memo_strings[arg]]
            elif name in ("MEMOIZE", "BINPUT", "LONG_BINPUT") and strings and count - 1 == last_string_at:
                memo_strings[memo_size if name == "MEMOIZE" else arg] = strings[-1]
            if name in _STRING_OPCODES or name in ("BINGET", "LONG_BINGET"):
                last_string_at = count
            if name == "GLOBAL":
                named.append(arg.replace(" ", "."))
            elif name == "STACK_GLOBAL" and len(strings) == 2:
                named.append(f"{strings[0]}.{strings[1]}")
            if name not in _ALLOWED_OPCODES:
                refused = refused or name
                continue
            if name == "MEMOIZE":
                memo_size += 1
            elif name in ("BINPUT", "LONG_BINPUT"):
                if arg > memo_size:
                    raise UnsafePickle(f"memo index {arg} skips ahead of the {memo_size} objects stored")
                memo_size = max(memo_size, arg + 1)
            elif name in ("BINGET", "LONG_BINGET") and arg >= memo_size:
                raise UnsafePickle(f"memo index {arg} refers to nothing stored")
    except UnsafePickle:
        raise
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
        raise UnsafePickle(f"not a complete pickle ({type(exc).__name__}: {exc})") from None
    if named:
        raise UnsafePickle(f"refusing to load global {named[0]}", tuple(named))
    if refused:
        raise UnsafePickle(f"refusing pickle opcode {refused} (only builtins may be stored)")


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing a persistent id")


def decode(obj, path: str = "payload", depth: int = 0):
    """Rebuild the arrays :func:`encode` wrote, checking each one's dtype, shape and size."""
    if depth > MAX_DEPTH:
        raise UnsafePickle(f"{path}: nested deeper than {MAX_DEPTH}")
    if isinstance(obj, dict):
        if ARRAY_KEY in obj:
            if len(obj) != 1:
                raise UnsafePickle(f"{path}: an array entry has other keys beside {ARRAY_KEY}")
            return _array(obj[ARRAY_KEY], path)
        return {key: decode(value, f"{path}.{key}", depth + 1) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [decode(value, f"{path}[{i}]", depth + 1) for i, value in enumerate(obj)]
    return obj


def _array(spec, path: str) -> np.ndarray:
    if not (isinstance(spec, list | tuple) and len(spec) == 3):
        raise UnsafePickle(f"{path}: an array must be [dtype, shape, bytes]")
    dtype_name, shape, data = spec
    if not isinstance(dtype_name, str) or dtype_name not in DTYPES:
        raise UnsafePickle(f"{path}: dtype {dtype_name!r} is not one of {', '.join(sorted(DTYPES))}")
    if not (isinstance(shape, list | tuple) and len(shape) <= MAX_NDIM
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
        raise UnsafePickle(f"{path}: shape {shape!r} is not a list of at most {MAX_NDIM} sizes >= 0")
    if not isinstance(data, bytes | bytearray):
        raise UnsafePickle(f"{path}: array data must be bytes")
    dtype = np.dtype(dtype_name).newbyteorder("<")
    expected = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if expected != len(data):
        raise UnsafePickle(f"{path}: shape {list(shape)} of {dtype_name} needs {expected:,} bytes, "
                           f"the file holds {len(data):,}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def loads(data: bytes):
    """The object in ``data``, with arrays rebuilt. Raises :class:`UnsafePickle` for anything
    that is not a builtins-only pickle (nothing it names is ever imported or called)."""
    check_opcodes(data)
    try:
        obj = _NoGlobals(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, ValueError, EOFError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, RecursionError) as exc:
        raise UnsafePickle(f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    return decode(obj)
