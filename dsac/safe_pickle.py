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
   number of opcodes is bounded. The walk also follows what each opcode leaves on the stack,
   so it knows what every memo entry holds: a memo reference (``BINGET``) may only repeat a
   string of at most :data:`MAX_SHARED_STR` characters (dict keys, dtype names — all that
   :mod:`pickle` shares in what :func:`dumps` writes; and ``b""``). A reference to anything
   else — a list, dict or tuple, non-empty bytes, a longer string — is refused: a weights
   file holds a tree, and one whose subtrees are shared (``a = []; b = [a, a]; c = [b, b]``...)
   decodes to a tree exponentially larger than the file;
2. only then is it unpickled, by an unpickler whose ``find_class`` admits nothing;
3. arrays are rebuilt from bytes whose length must equal the declared shape times the
   dtype's item size, by a walk that visits at most as many values as the file has bytes
   (each value is pushed by an opcode of its own) and builds a value's path only for an
   error message.

So the decoded tree has at most one value per byte of the file, no value but a short string
(or ``b""``) appears in it twice, and reading, decoding and checking a file take time and memory linear
in its size, whatever its memo references.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
import reprlib

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
MAX_SHARED_STR = 256  # the longest string a memo reference may repeat

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

# What each allowed opcode does to the stack, as the walk follows it. A stack entry is None
# for a value a memo reference may repeat (a short string, empty bytes), else what the value is.
_PUSH = {
    "EMPTY_DICT": "dict", "EMPTY_LIST": "list", "EMPTY_TUPLE": "tuple",
    "BININT": "int", "BININT1": "int", "BININT2": "int", "LONG1": "int", "BINFLOAT": "float",
    "NONE": "None", "NEWTRUE": "bool", "NEWFALSE": "bool",
}
_BYTES_OPCODES = {"SHORT_BINBYTES": "bytes object", "BINBYTES": "bytes object", "BINBYTES8": "bytes object",
                  "BYTEARRAY8": "bytearray"}
_FROM_MARK = {"DICT": "dict", "LIST": "list", "TUPLE": "tuple"}  # pop to the mark, push one
_POP_N = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3, "SETITEM": 2, "APPEND": 1}  # pop n (then push)
_AFTER_POP = {"TUPLE1": "tuple", "TUPLE2": "tuple", "TUPLE3": "tuple"}
_GETS = ("BINGET", "LONG_BINGET")
_PUTS = ("MEMOIZE", "BINPUT", "LONG_BINPUT")


class UnsafePickle(ValueError):
    """The data is not a builtins-only pickle; ``globals`` lists the ``module.name``s it
    names (empty when another opcode or a malformed argument was the reason)."""

    def __init__(self, message: str, globals_named: tuple[str, ...] = ()):
        super().__init__(message)
        self.globals_named = globals_named


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


class _StackKinds:
    """The unpickler's stack as :func:`check_opcodes` follows it: what kind of value each entry
    is (None for one a memo reference may repeat: a short string, ``b""``), the stacks a MARK
    set aside, and what each memo index holds. ``problem``: the first memo reference to a shared
    value. Raises IndexError where the unpickler's stack would underflow."""

    def __init__(self):
        self.stack: list = []
        self.marks: list[list] = []
        self.memo: dict[int, str | None] = {}
        self.problem: str | None = None

    def step(self, name: str, arg, pos: int, index) -> None:
        """Follow one allowed opcode (``index``: the memo index it stores or reads)."""
        stack = self.stack
        if name in _PUSH:
            stack.append(_PUSH[name])
        elif name in _STRING_OPCODES:
            stack.append(None if len(arg) <= MAX_SHARED_STR else f"string of {len(arg):,} characters")
        elif name in _BYTES_OPCODES:  # an empty one is harmless (and b"" is a singleton pickle shares)
            stack.append(f"{_BYTES_OPCODES[name]} of {len(arg):,} bytes" if arg else None)
        elif name in _GETS:
            kind = self.memo.get(index, "value of unknown kind")
            if kind is not None and self.problem is None:
                self.problem = (f"memo reference to a shared {kind} at byte {pos}: a weights file holds a tree, "
                                f"whose memo references repeat only strings of at most {MAX_SHARED_STR} characters")
            stack.append(kind)
        elif name in _PUTS:
            if not stack:
                raise IndexError
            self.memo[index] = stack[-1]
        elif name == "MARK":
            self.marks.append(stack)
            self.stack = []
        elif name == "POP":
            if stack:
                stack.pop()
            else:
                self.stack = self.marks.pop()
        elif name in ("POP_MARK", "SETITEMS", "APPENDS") or name in _FROM_MARK:
            self.stack = self.marks.pop()
            if name in _FROM_MARK:
                self.stack.append(_FROM_MARK[name])
            elif name != "POP_MARK" and not self.stack:  # the dict or list the items go in
                raise IndexError
        elif name in _POP_N:
            n = _POP_N[name]
            if len(stack) < n + (name not in _AFTER_POP):
                raise IndexError
            del stack[-n:]
            if name in _AFTER_POP:
                stack.append(_AFTER_POP[name])


def check_opcodes(data: bytes) -> None:
    """Raise :class:`UnsafePickle` unless ``data`` is a builtins-only pickle whose memo
    references and sizes stay within itself, and whose memo references repeat short strings
    only (no shared list, dict, tuple, bytes or long string). Executes nothing; time and
    memory linear in ``len(data)``."""
    memo_size = 0
    strings: list[str] = []  # the last strings pushed, for naming a STACK_GLOBAL's target
    memo_strings: dict[int, str] = {}
    last_string_at = -1
    named: list[str] = []
    count = 0
    refused = None
    kinds: _StackKinds | None = _StackKinds()  # None once an opcode refused anyway makes it unknown
    try:
        for opcode, arg, pos in pickletools.genops(io.BytesIO(data)):
            count += 1
            if count > MAX_OPCODES:
                raise UnsafePickle(f"more than {MAX_OPCODES:,} pickle opcodes")
            name = opcode.name
            if name in _STRING_OPCODES:
                strings = [*strings[-1:], arg]
            elif name in _GETS and arg in memo_strings:
                strings = [*strings[-1:], memo_strings[arg]]
            elif name in _PUTS and strings and count - 1 == last_string_at:
                memo_strings[memo_size if name == "MEMOIZE" else arg] = strings[-1]
            if name in _STRING_OPCODES or name in _GETS:
                last_string_at = count
            if name == "GLOBAL":
                named.append(arg.replace(" ", "."))
            elif name == "STACK_GLOBAL" and len(strings) == 2:
                named.append(f"{strings[0]}.{strings[1]}")
            if name not in _ALLOWED_OPCODES:
                refused = refused or name
                kinds = None
                continue
            index = memo_size if name == "MEMOIZE" else arg
            if name == "MEMOIZE":
                memo_size += 1
            elif name in ("BINPUT", "LONG_BINPUT"):
                if arg > memo_size:
                    raise UnsafePickle(f"memo index {arg} skips ahead of the {memo_size} objects stored")
                memo_size = max(memo_size, arg + 1)
            elif name in _GETS and arg >= memo_size:
                raise UnsafePickle(f"memo index {arg} refers to nothing stored")
            if kinds is not None:
                kinds.step(name, arg, pos, index)
    except UnsafePickle:
        raise
    except IndexError:  # from the stack the walk follows: the unpickler would fail here too
        kinds.problem = kinds.problem or f"not a complete pickle (stack underflow at {name} at byte {pos})"
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
        raise UnsafePickle(f"not a complete pickle ({type(exc).__name__}: {exc})") from None
    if named:
        raise UnsafePickle(f"refusing to load global {named[0]}", tuple(named))
    if refused:
        raise UnsafePickle(f"refusing pickle opcode {refused} (only builtins may be stored)")
    if kinds is not None and kinds.problem:
        raise UnsafePickle(kinds.problem)


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
    """Rebuild the arrays :func:`encode` wrote, checking each one's dtype, shape and size.
    Visits at most ``max_values`` values (:func:`loads` passes the file's size: each value
    is pushed by an opcode of at least one byte), else raises :class:`UnsafePickle`."""
    return _decode(obj, None, 0, [max_values], max_values)


def _decode(obj, path, depth: int, left: list[int], limit: int):
    left[0] -= 1
    if left[0] < 0:
        raise UnsafePickle(f"{_path_text(path)}: more than the {limit:,} values allowed (a pickle holds at most "
                           "one value per byte: each is pushed by an opcode of its own)")
    if depth > MAX_DEPTH:
        raise UnsafePickle(f"{_path_text(path)}: nested deeper than {MAX_DEPTH}")
    if isinstance(obj, dict):
        if ARRAY_KEY in obj:
            if len(obj) != 1:
                raise UnsafePickle(f"{_path_text(path)}: an array entry has other keys beside {ARRAY_KEY}")
            return _array(obj[ARRAY_KEY], path)
        return {key: _decode(value, (path, key, True), depth + 1, left, limit) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_decode(value, (path, i, False), depth + 1, left, limit) for i, value in enumerate(obj)]
    return obj


def _array(spec, path) -> np.ndarray:
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
    dtype = np.dtype(dtype_name).newbyteorder("<")
    expected = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if expected != len(data):
        raise UnsafePickle(f"{_path_text(path)}: shape {list(shape)} of {dtype_name} needs {expected:,} bytes, "
                           f"the file holds {len(data):,}")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def loads(data: bytes):
    """The object in ``data``, with arrays rebuilt. Raises :class:`UnsafePickle` for anything
    that is not a builtins-only pickle (nothing it names is ever imported or called), or
    that shares a list, dict, tuple, bytes or long string through its memo. Time and memory
    linear in ``len(data)``."""
    check_opcodes(data)
    try:
        obj = _NoGlobals(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, ValueError, EOFError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError, RecursionError) as exc:
        raise UnsafePickle(f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    return decode(obj, len(data))
