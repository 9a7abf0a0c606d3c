"""Step 1 of reading a weights file (:mod:`dsac.formats.safe_pickle`): every opcode of a pickle read
with :func:`pickletools.genops`, which executes nothing, and checked against the few a pickle of
builtins needs, following what each leaves on the unpickler's stack (see that module's
docstring for what is refused and why)."""

from __future__ import annotations

import io
import pickletools

MAX_DEPTH = 32  # nesting of dicts and lists: a value at depth 32 is inside 32 containers
MAX_OPCODES = 2_000_000  # a weights file of N arrays has ~20 N opcodes
MAX_SHARED_STR = 256  # the longest string a memo reference may repeat
CONTAINER_BYTES = 8  # a file may hold one list or dict per this many bytes (plus 64)

# What a pickle of dicts, lists, str, bytes/bytearray, int, float, bool and None is made of.
# The tuple opcodes are followed by the walk (so a shared tuple is named as such) and refused.
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
_GETS = ("BINGET", "LONG_BINGET")
_PUTS = ("MEMOIZE", "BINPUT", "LONG_BINPUT")

# A stack entry, as the walk follows the unpickler's stack: (kind, nesting height, whether a
# memo reference may repeat it, what a message calls it). Leaves and containers of each height
# are shared constants, so following a stack costs a pointer per entry.
_SHORT_STR = ("str", 1, True, "string")
_EMPTY_BYTES = ("bytes", 1, True, "bytes object of 0 bytes")
_LEAVES = {
    "BININT": ("int", 1, False, "int"), "BININT1": ("int", 1, False, "int"), "BININT2": ("int", 1, False, "int"),
    "LONG1": ("int", 1, False, "int"), "BINFLOAT": ("float", 1, False, "float"),
    "NONE": ("None", 1, False, "None"), "NEWTRUE": ("bool", 1, False, "bool"), "NEWFALSE": ("bool", 1, False, "bool"),
}
_BYTES_OPCODES = {"SHORT_BINBYTES": "bytes object", "BINBYTES": "bytes object", "BINBYTES8": "bytes object",
                  "BYTEARRAY8": "bytearray"}
_SHORT_BYTES = {name: ("bytes", 1, False, f"{what} of at most {MAX_SHARED_STR} bytes")
                for name, what in _BYTES_OPCODES.items()}
_CONTAINERS = {kind: [(kind, h, False, kind) for h in range(MAX_DEPTH + 2)] for kind in ("list", "dict", "tuple")}
_EMPTY = {"EMPTY_LIST": "list", "EMPTY_DICT": "dict", "EMPTY_TUPLE": "tuple"}
_FROM_MARK = {"DICT": "dict", "LIST": "list", "TUPLE": "tuple"}  # pop to the mark, push one
_TUPLE_N = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}


class UnsafePickle(ValueError):
    """The data is not a pickle dsac reads; ``globals_named`` lists the ``module.name``s it
    names (empty when another opcode or a malformed argument was the reason); ``refused``:
    it is a well-formed pickle of a shape dsac never writes (shared subtrees, a tuple, a
    non-string key, too deep, too many containers, an array no file of its size can hold)."""

    def __init__(self, message: str, globals_named: tuple[str, ...] = (), refused: bool = False):
        super().__init__(message)
        self.globals_named = globals_named
        self.refused = refused


class _Walk:
    """The unpickler's stack as :func:`check_opcodes` follows it (entries as ``_LEAVES``
    describes them), the stacks a MARK set aside and what each memo index holds. ``shared``:
    the first memo reference to a value other than a short string; ``odd``: the first value of
    a shape dsac never writes. Raises IndexError where the unpickler's stack would underflow.
    Its memory is a pointer per stack entry and memo index: entries are shared constants."""

    def __init__(self, size: int):
        self.stack: list = []
        self.marks: list[list] = []
        self.memo: list = []
        self.shared: str | None = None
        self.odd: str | None = None
        self.containers = 0
        self.max_containers = 64 + size // CONTAINER_BYTES

    def _container(self, kind: str, height: int, pos: int) -> tuple:
        """The entry of a ``kind`` holding values up to ``height - 1`` deep. Too deep is refused
        at once: what follows cannot make the file admissible."""
        if height > MAX_DEPTH + 1:
            raise UnsafePickle(f"values nested deeper than {MAX_DEPTH} at byte {pos}", refused=True)
        return _CONTAINERS[kind][height]

    def _new(self, kind: str, items: list, pos: int) -> tuple:
        """Count a new container of ``items`` (refusing one too many at once, and a tuple)."""
        self.containers += 1
        if self.containers > self.max_containers:
            raise UnsafePickle(f"more than {self.max_containers:,} lists and dicts at byte {pos}, one per "
                               f"{CONTAINER_BYTES} bytes of the file (dsac's own files have one per 15 or more)",
                               refused=True)
        if kind == "tuple" and self.odd is None:
            self.odd = f"a tuple at byte {pos} (dsac writes lists)"
        if not items:
            return _CONTAINERS[kind][1]
        return self._container(kind, 1 + max(item[1] for item in items), pos)

    def _add(self, items: list, keyed: bool, pos: int) -> None:
        """Put ``items`` (key, value pairs if ``keyed``) into the container on top of the stack."""
        if keyed:
            self._add_keys(items, pos)
        target = self.stack[-1]
        if target[0] in _CONTAINERS:  # else the unpickler fails on it
            height = max(target[1], 1 + max((item[1] for item in items), default=0))
            self.stack[-1] = self._container(target[0], height, pos)

    def step(self, name: str, arg, pos: int, index) -> None:
        """Follow one allowed opcode (``index``: the memo index it stores or reads)."""
        stack = self.stack
        if name in _LEAVES:
            stack.append(_LEAVES[name])
        elif name in _STRING_OPCODES:
            stack.append(_SHORT_STR if len(arg) <= MAX_SHARED_STR
                         else ("str", 1, False, f"string of {len(arg):,} characters"))
        elif name in _BYTES_OPCODES:  # an empty one is harmless (and b"" is a singleton pickle shares)
            stack.append(_EMPTY_BYTES if not arg else _SHORT_BYTES[name] if len(arg) <= MAX_SHARED_STR
                         else ("bytes", 1, False, f"{_BYTES_OPCODES[name]} of {len(arg):,} bytes"))
        elif name in _EMPTY:
            stack.append(self._new(_EMPTY[name], [], pos))
        elif name in _GETS:
            entry = self.memo[index]
            if not entry[2] and self.shared is None:
                self.shared = (f"memo reference to a shared {entry[3]} at byte {pos}: a weights file holds a tree, "
                               f"whose memo references repeat only strings of at most {MAX_SHARED_STR} characters")
            stack.append(entry)
        elif name in _PUTS:
            if index == len(self.memo):
                self.memo.append(stack[-1])
            else:
                self.memo[index] = stack[-1]
        else:
            self._build(name, pos)

    def _build(self, name: str, pos: int) -> None:
        """Follow an opcode that opens or closes a mark or builds or fills a container."""
        stack = self.stack
        if name == "MARK":
            # Each open mark holds the values of one container being filled, so a file dsac
            # writes never has more open than it nests; a run of MARKs would cost a list each.
            if len(self.marks) > MAX_DEPTH + 1:
                raise UnsafePickle(f"values nested deeper than {MAX_DEPTH} at byte {pos} (marks)", refused=True)
            self.marks.append(stack)
            self.stack = []
        elif name == "POP":
            if stack:
                stack.pop()
            else:
                self.stack = self.marks.pop()
        elif name == "POP_MARK":
            self.stack = self.marks.pop()
        elif name in _FROM_MARK:
            self.stack = self.marks.pop()
            if name == "DICT":
                self._add_keys(stack, pos)
                self.stack.append(self._new("dict", stack[1::2], pos))
            else:
                self.stack.append(self._new(_FROM_MARK[name], stack, pos))
        elif name in _TUPLE_N:
            n = _TUPLE_N[name]
            if len(stack) < n:
                raise IndexError
            items = stack[-n:]
            del stack[-n:]
            stack.append(self._new("tuple", items, pos))
        elif name in ("APPENDS", "SETITEMS"):
            self.stack = self.marks.pop()
            self._add(stack, name == "SETITEMS", pos)
        elif name in ("APPEND", "SETITEM"):
            n = 1 if name == "APPEND" else 2
            if len(stack) < n + 1:
                raise IndexError
            items = stack[-n:]
            del stack[-n:]
            self._add(items, n == 2, pos)

    def _add_keys(self, items: list, pos: int) -> None:
        """Refuse a key (every other item of ``items``) that is not a string."""
        if self.odd is None:
            for key in items[0::2]:
                if key[0] != "str":
                    self.odd = f"a dict key of kind {key[3]} at byte {pos} (dsac writes string keys only)"
                    break


def _named_globals(data: bytes) -> list[str]:
    """The ``module.name``s the GLOBAL and STACK_GLOBAL opcodes of ``data`` name (a second walk,
    for a file refused anyway: it follows the last strings pushed, and up to 10,000 memoized
    short strings, the way a STACK_GLOBAL's operands arrive)."""
    strings: list[str] = []
    memo_strings: dict[int, str] = {}
    memo_size = 0
    last_string_at = -1
    named: list[str] = []
    try:
        for count, (opcode, arg, _) in enumerate(pickletools.genops(io.BytesIO(data))):
            name = opcode.name
            if name in _STRING_OPCODES:
                strings = [*strings[-1:], arg]
            elif name in _GETS and arg in memo_strings:
                strings = [*strings[-1:], memo_strings[arg]]
            elif name in _PUTS and strings and count - 1 == last_string_at and len(memo_strings) < 10_000 \
                    and len(strings[-1]) <= MAX_SHARED_STR:
                memo_strings[memo_size if name == "MEMOIZE" else arg] = strings[-1]
            if name in _STRING_OPCODES or name in _GETS:
                last_string_at = count
            if name == "MEMOIZE":
                memo_size += 1
            elif name in ("BINPUT", "LONG_BINPUT"):
                memo_size = max(memo_size, arg + 1)
            if name == "GLOBAL":
                named.append(arg.replace(" ", "."))
            elif name == "STACK_GLOBAL" and len(strings) == 2:
                named.append(f"{strings[0]}.{strings[1]}")
            if count > MAX_OPCODES:
                break
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError, MemoryError):
        pass
    return named


def check_opcodes(data: bytes) -> None:
    """Raise :class:`UnsafePickle` unless ``data`` is a pickle of the shape :func:`encode`
    writes: builtins only, memo references and sizes within itself, memo references repeating
    short strings only, string keys, no tuple, nesting at most :data:`MAX_DEPTH` and at most
    one list or dict per :data:`CONTAINER_BYTES` bytes. Executes nothing; time linear in
    ``len(data)``, memory a pointer per opcode."""
    memo_size = 0
    count = 0
    refused = None
    globals_seen = False
    walk: _Walk | None = _Walk(len(data))  # None once an opcode refused anyway makes the stack unknown
    name, pos = "", 0
    try:
        for opcode, arg, pos in pickletools.genops(io.BytesIO(data)):
            count += 1
            if count > MAX_OPCODES:
                raise UnsafePickle(f"more than {MAX_OPCODES:,} pickle opcodes", refused=True)
            name = opcode.name
            if name in ("GLOBAL", "STACK_GLOBAL"):
                globals_seen = True
            if name not in _ALLOWED_OPCODES:
                refused = refused or name
                walk = None
                continue
            if name == "FRAME" and arg > len(data):  # the unpickler would raise OverflowError or MemoryError
                raise UnsafePickle(f"a frame of {arg:,} bytes at byte {pos}, in a file of {len(data):,}")
            index = memo_size if name == "MEMOIZE" else arg
            if name == "MEMOIZE":
                memo_size += 1
            elif name in ("BINPUT", "LONG_BINPUT"):
                if arg > memo_size:
                    raise UnsafePickle(f"memo index {arg} skips ahead of the {memo_size} objects stored")
                memo_size = max(memo_size, arg + 1)
            elif name in _GETS and arg >= memo_size:
                raise UnsafePickle(f"memo index {arg} refers to nothing stored")
            if walk is not None:
                walk.step(name, arg, pos, index)
    except UnsafePickle:
        if walk is not None and walk.shared:  # the first reason to name: a shared subtree
            raise UnsafePickle(walk.shared, refused=True) from None
        raise
    except IndexError:  # from the stack the walk follows: the unpickler would fail here too
        walk.odd = walk.odd or f"not a complete pickle (stack underflow at {name} at byte {pos})"
    except (ValueError, EOFError, UnicodeDecodeError, OverflowError, MemoryError) as exc:
        raise UnsafePickle(f"not a complete pickle ({type(exc).__name__}: {exc})") from None
    named = _named_globals(data) if globals_seen else []
    if named:
        raise UnsafePickle(f"refusing to load global {named[0]}", tuple(named))
    if refused:
        raise UnsafePickle(f"refusing pickle opcode {refused} (only builtins may be stored)")
    if walk is not None and walk.shared:
        raise UnsafePickle(walk.shared, refused=True)
    if walk is not None and walk.odd:
        raise UnsafePickle(walk.odd, refused=not walk.odd.startswith("not a complete"))
