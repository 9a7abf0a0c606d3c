"""A structure-aware fuzzer of the weights decoder (:func:`dsac.formats.safe_pickle.loads`, then the
payload checks of :func:`dsac.formats.files.check_payload`, then the policy rebuilt from the sizes the
payload names, as :func:`dsac.load_policy` does), over mutations of files dsac writes.

    python -m benchmarks fuzz --minutes 2            # as many cases as fit, seed 0
    python -m benchmarks fuzz --cases 500 --seed 7
    python -m benchmarks fuzz --cases 300 --only size_fields

Each case is a file made from the golden weights files (tests/data/golden): bytes flipped,
opcodes spliced, cut or repeated, a decoded payload grown with values ``encode`` never writes
(tuples, int keys, deep, wide or shared nesting), the fields a loader reads sizes from
(``model``, ``observation_space``, ``action_space``, ``atari``) given values within and past
:mod:`dsac.models.sizes`' bounds, or a hand-built hostile pickle (a tuple key
300,000 deep, int keys sharing one hash, huge length claims, a ``[0, 2**62]`` shape, millions
of small containers). For every case it asserts the outcome is a value or a one-line refusal
(``UnsafePickle`` or ``DsacError``), within the bound :mod:`dsac.formats.safe_pickle` states: time
``TIME_PER_BYTE * n + TIME_CONSTANT`` seconds and peak Python memory (tracemalloc, a second
run) ``PEAK_BYTES_PER_BYTE * n + PEAK_CONSTANT`` bytes for a file of ``n`` bytes. Cases run
many to a subprocess, so a crash (SIGSEGV) is caught, reported and the subprocess restarted
after the case that ended it. It prints the cases tried, the crashes and failures, and the
worst time and memory per byte (over cases of at least 4 KiB, where the constant does not
dominate).
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import math
import os
import pickle
import pickletools
import random
import signal
import struct
import subprocess
import sys
import threading
import time

from dsac.errors import OneLineParser

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(REPO_ROOT, "tests", "data", "golden")
TIME_PER_BYTE = 20e-6  # seconds per byte: ~25x the worst measured, for a machine shared with other work
TIME_CONSTANT = 0.25
ADDRESS_SPACE = 4_000_000 * 1024  # the case runner's RLIMIT_AS, as ``ulimit -v 4000000``
HANG_SECONDS = 60  # a case running longer than this is a hang: the runner is killed
PER_BYTE_FROM = 4096  # the smallest file whose figures count toward the worst per byte
OP = {op.name: op.code.encode("latin-1") for op in pickletools.opcodes}


def golden_files() -> list[bytes]:
    """The weights files dsac wrote, that the mutations start from."""
    return [open(path, "rb").read() for path in sorted(glob.glob(os.path.join(GOLDEN, "*", "weights.pkl")))]


def _unicode(text: str) -> bytes:
    data = text.encode("utf-8")
    return OP["SHORT_BINUNICODE"] + bytes([len(data)]) + data if len(data) < 256 else \
        OP["BINUNICODE"] + struct.pack("<I", len(data)) + data


def _int(value: int) -> bytes:
    return OP["BININT"] + struct.pack("<i", value) if -2**31 <= value < 2**31 else \
        OP["LONG1"] + bytes([len(pickle.encode_long(value))]) + pickle.encode_long(value)


def _wrap(body: bytes) -> bytes:
    return OP["PROTO"] + b"\x05" + body + OP["STOP"]


# Hand-built hostile pickles, each a function of (rng) -> bytes.
def deep_tuple_key(rng: random.Random, depth: int | None = None) -> bytes:
    """``{((((...),),),): 0}``: a dict key that is a tuple nested ``depth`` deep (the C unpickler
    recursed hashing it: SIGSEGV at ~300,000)."""
    depth = depth or rng.choice([40, 1000, 300_000])
    return _wrap(OP["EMPTY_DICT"] + OP["EMPTY_TUPLE"] + OP["TUPLE1"] * depth + _int(0) + OP["SETITEM"])


def colliding_int_keys(rng: random.Random, count: int | None = None) -> bytes:
    """A dict of ``count`` int keys that share one hash (``hash(k) == hash(k + 2**61 - 1)``):
    inserting them took quadratic time."""
    count = count or rng.choice([100, 5000, 20_000])
    keys = b"".join(_int(1 + i * (2**61 - 1)) + OP["NONE"] for i in range(count))
    return _wrap(OP["EMPTY_DICT"] + OP["MARK"] + keys + OP["SETITEMS"])


def many_small_containers(rng: random.Random, size: int | None = None) -> bytes:
    """``size`` bytes of empty lists and dicts in one list (320 MiB for 2 MB before the bound)."""
    size = size or rng.choice([20_000, 200_000, 2_000_000])
    unit = rng.choice([OP["EMPTY_LIST"], OP["EMPTY_DICT"], OP["EMPTY_LIST"] + OP["EMPTY_LIST"] + OP["APPEND"]])
    return _wrap(OP["EMPTY_LIST"] + OP["MARK"] + unit * (size // len(unit)) + OP["APPENDS"])


def containers_at_the_bound(rng: random.Random) -> bytes:
    """As many small lists and dicts (holding a few values each) as the decoder admits for
    the file's size, the rest of the size one bytes object: the densest admitted file."""
    keys = b"".join(_unicode(k) + OP["MEMOIZE"] + OP["POP"] for k in "abcdefg")
    units = [OP["EMPTY_LIST"], OP["EMPTY_DICT"], OP["EMPTY_LIST"] + OP["NONE"] + OP["APPEND"],
             OP["EMPTY_DICT"] + OP["BINGET"] + b"\x00" + OP["NONE"] + OP["SETITEM"]]
    units += [OP["EMPTY_DICT"] + OP["MARK"] + b"".join(OP["BINGET"] + bytes([k]) + OP["NONE"] for k in range(n))
              + OP["SETITEMS"] for n in (2, 5, 6, 7)]
    unit = rng.choice(units)
    count = rng.choice([1000, 20_000])
    body = keys + OP["EMPTY_LIST"] + OP["MARK"] + unit * count + OP["APPENDS"]
    pad = max(0, (count + 2) * 8 - len(body) - 64)  # the decoder admits 64 + size // 8 containers
    return _wrap(OP["EMPTY_LIST"] + OP["MARK"] + body + OP["BINBYTES"] + struct.pack("<I", pad) + bytes(pad)
                 + OP["APPENDS"])


def huge_shape(rng: random.Random, shape: list | None = None) -> bytes:
    """A real weights file one of whose arrays claims ``shape`` (``[0, 2**62]`` escaped the
    format's refusal as numpy's ValueError)."""
    payload = _decoded(rng)
    name = rng.choice(sorted(payload["weights"]))
    shape = shape or rng.choice([[0, 2**62], [2**62, 0], [0, 2**40, 2**40], [2**31, 2**31, 0, 5], [2**70, 0]])
    payload["weights"][name] = {"__ndarray__": ["float32", shape, b""]}
    return pickle.dumps(payload, protocol=5)


def huge_length(rng: random.Random) -> bytes:
    """An opcode claiming far more bytes than follow."""
    op, fmt = rng.choice([("BINBYTES8", "<Q"), ("BINUNICODE8", "<Q"), ("BYTEARRAY8", "<Q"), ("BINBYTES", "<I"),
                          ("BINUNICODE", "<I")])
    claims = [2**31 - 1, 2**32 - 1] if fmt == "<I" else [2**32, 2**40, 2**63]
    return b"\x80\x05" + OP[op] + struct.pack(fmt, rng.choice(claims)) + b"abcd"


def deep_nesting(rng: random.Random) -> bytes:
    """Lists or dicts nested far deeper than dsac writes."""
    depth = rng.choice([33, 34, 200, 100_000])
    if rng.random() < 0.5:
        return _wrap(OP["EMPTY_LIST"] * depth + OP["APPEND"] * (depth - 1))
    return _wrap((OP["EMPTY_DICT"] + _unicode("k")) * depth + OP["NONE"] + OP["SETITEM"] * depth)


def shared_nesting(rng: random.Random) -> bytes:
    """``a = []; b = [a, a]; ...`` through the memo: a tree exponential in the file's size."""
    out = [OP["EMPTY_LIST"], OP["BINPUT"] + b"\x00"]
    for _ in range(rng.choice([3, 29, 60])):
        out += [OP["MARK"], OP["BINGET"] + b"\x00", OP["BINGET"] + b"\x00", OP["LIST"], OP["BINPUT"] + b"\x00"]
    return _wrap(b"".join(out))


def wide(rng: random.Random) -> bytes:
    """One list or dict of very many small values."""
    count = rng.choice([1000, 20_000, 200_000])
    if rng.random() < 0.5:
        return _wrap(OP["EMPTY_LIST"] + OP["MARK"] + rng.choice([OP["NONE"], _int(7), _int(300)]) * count
                     + OP["APPENDS"])
    keys = b"".join(_unicode(f"{i:x}") + OP["NONE"] for i in range(count // 4))
    return _wrap(OP["EMPTY_DICT"] + OP["MARK"] + keys + OP["SETITEMS"])


def bad_keys(rng: random.Random) -> bytes:
    """A dict keyed by what ``encode`` never writes: ints, floats, None, bytes, tuples."""
    key = rng.choice([_int(5), OP["BINFLOAT"] + struct.pack(">d", 1.5), OP["NONE"], OP["SHORT_BINBYTES"] + b"\x01k",
                      OP["EMPTY_TUPLE"], _unicode("a") + OP["TUPLE1"], OP["NEWTRUE"]])
    return _wrap(OP["EMPTY_DICT"] + key + OP["NONE"] + OP["SETITEM"])


HOSTILE = [deep_tuple_key, colliding_int_keys, many_small_containers, containers_at_the_bound, huge_shape, huge_length,
           deep_nesting, shared_nesting, wide, bad_keys]


# Mutations of a golden file.
def _ops(data: bytes) -> list[bytes]:
    """``data`` cut at its opcodes' boundaries (the pieces join back to it)."""
    cuts = [pos for _, _, pos in pickletools.genops(data)] + [len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts) if b > a]


def flip_bytes(rng: random.Random, data: bytes) -> bytes:
    """A few bytes set to random values (lengths, opcodes, memo indices among them)."""
    out = bytearray(data)
    for _ in range(rng.choice([1, 2, 4, 16])):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def splice_opcodes(rng: random.Random, data: bytes, other: bytes) -> bytes:
    """Opcodes deleted, repeated, moved, or taken from another golden file."""
    ops, donor = _ops(data), _ops(other)
    for _ in range(rng.choice([1, 2, 5, 20])):
        i = rng.randrange(len(ops))
        action = rng.randrange(4)
        if action == 0 and len(ops) > 2:
            del ops[i]
        elif action == 1:
            ops[i:i] = [ops[i]] * rng.choice([1, 2, 100])
        elif action == 2:
            ops.insert(rng.randrange(len(ops)), ops.pop(i))
        else:
            j = rng.randrange(len(donor))
            ops[i:i] = donor[j:j + rng.choice([1, 3, 10])]
    return b"".join(ops)


def truncate(rng: random.Random, data: bytes) -> bytes:
    """The file cut short (or with trailing garbage)."""
    cut = rng.randrange(len(data))
    return data[:cut] if rng.random() < 0.7 else data + bytes(rng.randrange(256) for _ in range(16))


def _decoded(rng: random.Random) -> dict:
    """A golden file's payload as builtins (arrays as ``__ndarray__`` dicts), to grow."""
    return pickle.loads(rng.choice(golden_files()))


def _odd_value(rng: random.Random, depth: int = 0):
    """A value of a shape ``encode`` may or may not write."""
    kind = rng.randrange(9 if depth < 3 else 4)
    if kind == 0:
        return rng.choice([None, True, 0, -1, 2**63, 1.5e308, float("nan"), "", "x" * 300, b"", b"\x00" * 10])
    if kind == 1:
        return rng.randrange(-2**40, 2**40)
    if kind == 2:
        return "k" * rng.randrange(0, 600)
    if kind == 3:
        return bytes(rng.randrange(0, 50))
    if kind == 4:
        return [_odd_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    if kind == 5:
        return tuple(_odd_value(rng, depth + 1) for _ in range(rng.randrange(0, 4)))
    if kind == 6:
        return {rng.choice(["a", "b", "__ndarray__", 1, (1, 2), None, b"k"]): _odd_value(rng, depth + 1)
                for _ in range(rng.randrange(0, 4))}
    if kind == 7:
        return {"__ndarray__": [rng.choice(["float32", "int8", "object", "V8", 5]),
                                rng.choice([[2], [0], [-1], [2**62, 0], [True], [2, 2], "ab"]),
                                rng.choice([b"\x00" * 8, b"", bytearray(16), "bytes"])]}
    shared = [1, 2]
    return [shared, shared]


def grow_payload(rng: random.Random, data: bytes) -> bytes:
    """The golden payload with a few values replaced or added: tuples, int or tuple keys,
    shared or odd arrays, as ``pickle`` (not ``encode``) writes them."""
    payload = _decoded(rng)
    for _ in range(rng.choice([1, 2, 5])):
        target = payload
        for _ in range(rng.randrange(3)):
            children = [v for v in target.values() if isinstance(v, dict)] if isinstance(target, dict) else []
            if not children:
                break
            target = rng.choice(children)
        key = rng.choice([*list(target)[:5], "new", 7, ("t",)])
        target[key] = _odd_value(rng)
    return pickle.dumps(payload, protocol=5)


def _box(shape: list, dtype: str = "float32", low=0, high=1) -> dict:
    """A Box space's description as dsac writes it (bounds of ``shape``, no list shared)."""
    def fill(dims, value):
        return [fill(dims[1:], value) for _ in range(dims[0])] if dims else value
    return {"type": "Box", "shape": list(shape), "dtype": dtype, "low": fill(shape, low), "high": fill(shape, high)}


# Values of the fields a loader reads sizes from (model, observation_space, action_space, atari):
# within and past dsac.models.sizes' bounds, of wrong types, or claiming more than they hold.
HUGE = [0, -1, 2**31 - 1, 2**31, 2**40, 2**63, 2**70, True, None, 1.5, float("nan"), "64"]
SIZE_FIELDS = {
    "model": {
        "num_atoms": [2, 51, 1_000, 1_001, 2**26, *HUGE, [51]],
        "fcnet_hiddens": [[10**9], [2**31], [2**63], [20_000, 20_000], [10_000_000], [10_000_001], [5_000, 5_000],
                          [], [0], [-1], [64.5], [True], "64", None, [8] * 200, [[8]]],
        "critic_hiddens": [[10**9], [30_000, 30_000], [], [0]],
        "conv_filters": [[[4096, 1, 1]], [[2**40, 1, 1]], [[32, 2**40, 1]], [[32, 3, 2**40]], [[32, 3]], [],
                         [[4, 3, 2]] * 100, [[4, 1, 1]] * 40, [[True, 3, 2]], "x", None, [[4, 11, 1]], [[4, 3, 0]]],
        "v_min": [float("nan"), float("inf"), -1e308, 10.0],
        "dueling": [True, False, 2, None],
    },
    "observation_space": [
        _box([4]), _box([3]), _box([0, 2**62]), _box([0] * 32), _box([0] * 33), _box([84, 84], "uint8", 0, 255),
        _box([16, 12, 12], "uint8", 0, 255), _box([10, 5]), _box([3, 3, 3, 3]), _box([5, 4, 3, 2, 1]),
        {**_box([4]), "shape": [2**40]}, {**_box([2]), "dtype": "object"}, {**_box([2]), "low": "x"},
        {"type": "Discrete", "n": 2**31 - 1}, {"type": "Dict", "spaces": {}}, {"type": "Box"}, [], "Box", None,
    ],
    "action_space": [
        {"type": "Discrete", "n": n, "start": 0} for n in (0, 1, 2, 10_001, 2**31 - 1, 2**31, 2**63, -1, True)
    ] + [_box([1], "float32", -2, 2), _box([6], "float32", -1, 1), _box([0]), _box([2, 3]),
         {**_box([1]), "shape": [10**7]}, {"type": "MultiDiscrete", "nvec": [2**31] * 4}, None, 5],
    "atari": {
        "framestack": [0, 1, 16, 17, 10**9, 2**63, True, 4.0],
        "dim": [7, 8, 512, 513, 2**40, -84],
        "frame_skip": [0, 64, 65, 2**40],
        "noop_max": [10_000, 10_001, 2**63],
        "grayscale": [False, 1],
        "lives": [3],  # a key dsac never writes
    },
}


def _plain_env(data: bytes) -> dict:
    """The payload of golden file ``data``, its env a plain id if the file names it as code."""
    payload = pickle.loads(data)
    if ":" in payload["env"]:
        payload["env"] = "Catch-v0"
    return payload


def size_fields(rng: random.Random, data: bytes) -> bytes:
    """A golden payload with one to four of the fields a loader reads sizes from replaced (the
    loader then builds the policy those fields describe); an env named as code becomes a plain
    id, so the sizes are read rather than the code refused."""
    payload = _plain_env(data)
    for _ in range(rng.choice([1, 1, 2, 4])):
        field = rng.choice(sorted(SIZE_FIELDS))
        choices = SIZE_FIELDS[field]
        if isinstance(choices, list):
            payload[field] = rng.choice(choices)
        elif rng.random() < 0.05:
            payload[field] = rng.choice([None, [], "x", 5])
        else:
            key = rng.choice(sorted(choices))
            section = payload.get(field)
            payload[field] = {**(section if isinstance(section, dict) else {}), key: rng.choice(choices[key])}
    return pickle.dumps(payload, protocol=5)


def make_case(seed: int, index: int, only: str | None = None) -> tuple[str, bytes]:
    """Case ``index`` of run ``seed``: (what it is, the file's bytes); with ``only``, a case of
    that mutation (``size_fields``, ``flip_bytes``, ...). Deterministic."""
    rng = random.Random(seed * 1_000_003 + index)
    files = golden_files()
    data = rng.choice(files)
    if only is not None:
        return only, MUTATIONS[only](rng, data)
    roll = rng.random()
    if roll < 0.2:
        make = rng.choice(HOSTILE)
        return make.__name__, make(rng)
    if roll < 0.35:
        return "flip_bytes", flip_bytes(rng, data)
    if roll < 0.5:
        return "splice_opcodes", splice_opcodes(rng, data, rng.choice(files))
    if roll < 0.6:
        return "truncate", truncate(rng, data)
    if roll < 0.75:
        return "grow_payload", grow_payload(rng, data)
    if roll < 0.95:
        return "size_fields", size_fields(rng, data)
    return "golden", data


# The mutations ``--only`` may name, each (rng, a golden file's bytes) -> bytes.
MUTATIONS = {
    "flip_bytes": flip_bytes, "truncate": truncate, "grow_payload": grow_payload, "size_fields": size_fields,
    "splice_opcodes": lambda rng, data: splice_opcodes(rng, data, rng.choice(golden_files())),
    **{make.__name__: lambda rng, _, make=make: make(rng) for make in HOSTILE},
}


def decode_once(data: bytes) -> tuple[str, str]:
    """(outcome, detail) of reading ``data`` as :func:`dsac.load_policy` does after the read:
    decoded and checked as :func:`dsac.formats.files.load_weights` does, then, for a weights payload,
    its policy rebuilt from the sizes it names (no code imported). ``value``, ``refused``
    (UnsafePickle or DsacError; detail: the message) or ``error`` (anything else: the
    exception)."""
    from dsac.errors import DsacError
    from dsac.formats.files import check_payload
    from dsac.formats.inference import LoadedPolicy
    from dsac.formats.safe_pickle import UnsafePickle, loads

    try:
        payload = loads(data)
        if isinstance(payload, dict) and "weights" in payload:
            check_payload(payload, "fuzz.pkl")
            LoadedPolicy(payload, "fuzz.pkl")
        return "value", ""
    except (UnsafePickle, DsacError) as exc:
        return "refused", str(exc)
    except BaseException as exc:  # every other outcome is what the fuzzer is for
        return "error", f"{type(exc).__name__}: {exc}"[:500]


def child(seed: int, start: int, stop: int, only: str | None = None) -> None:
    """Run cases ``start..stop-1`` of ``seed``, one JSON line each on stdout, a ``start`` line
    before each (so the parent knows which case ended the process, should one)."""
    import resource
    import tracemalloc

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    for data in golden_files():  # imports done before the first measurement, every algorithm's
        decode_once(pickle.dumps(_plain_env(data), protocol=5))
    out = sys.stdout
    for index in range(start, stop):
        kind, data = make_case(seed, index, only)
        out.write(json.dumps({"start": index}) + "\n")
        out.flush()
        began = time.perf_counter()
        outcome, detail = decode_once(data)
        seconds = time.perf_counter() - began
        tracemalloc.start()
        tracemalloc.reset_peak()
        decode_once(data)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out.write(json.dumps({"index": index, "kind": kind, "size": len(data), "outcome": outcome, "detail": detail,
                              "seconds": seconds, "peak": peak}) + "\n")
        out.flush()


def _bounds() -> tuple[int, int]:
    from dsac.formats.safe_pickle import PEAK_BYTES_PER_BYTE, PEAK_CONSTANT

    return PEAK_BYTES_PER_BYTE, PEAK_CONSTANT


def run(seed: int = 0, cases: int | None = None, minutes: float | None = None, log=None,
        only: str | None = None) -> dict:
    """Run cases of ``seed`` in subprocesses until ``cases`` are done or ``minutes`` pass;
    restart the subprocess after a case that ended it. Returns the summary: ``cases``,
    ``crashes`` and ``failures`` (lists of dicts), ``worst_seconds_per_byte`` and
    ``worst_bytes_per_byte`` (over cases of at least 4 KiB), ``by_kind``."""
    if (cases is not None and cases <= 0) or (minutes is not None and not (math.isfinite(minutes) and minutes > 0)):
        raise ValueError(f"cases and minutes must be positive (and finite), got {cases!r} and {minutes!r}")
    per_byte, constant = _bounds()
    deadline = None if minutes is None else time.monotonic() + 60 * minutes
    total = cases if cases is not None else 10**9
    summary = {"cases": 0, "crashes": [], "failures": [], "worst_seconds_per_byte": 0.0, "worst_bytes_per_byte": 0.0,
               "worst_seconds": 0.0, "worst_peak": 0, "by_kind": {}, "seed": seed}
    index = 0
    while index < total and (deadline is None or time.monotonic() < deadline):
        batch_end = total if deadline is None else min(total, index + 200)
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.fuzz", "--child", str(seed), str(index),
                                 str(batch_end), *([only] if only else [])], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": REPO_ROOT})
        stalled = threading.Event()
        watchdog = _watchdog(proc, stalled)
        started = None
        for line in proc.stdout:
            row = json.loads(line)
            watchdog.cancel()
            watchdog = _watchdog(proc, stalled)
            if "start" in row:
                started = row["start"]
                continue
            started = None
            index = row["index"] + 1
            _count(summary, row, per_byte, constant)
            if deadline is not None and time.monotonic() >= deadline:
                proc.kill()
                break
        watchdog.cancel()
        stderr = proc.stderr.read()
        code = proc.wait()
        if started is not None:  # a case began and gave no result: it ended the runner (the deadline's kill
            # comes after a result)
            kind, data = make_case(seed, started, only)
            why = f"hung past {HANG_SECONDS} s" if stalled.is_set() else \
                f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            summary["crashes"].append({"index": started, "kind": kind, "size": len(data), "why": why,
                                       "stderr": stderr[-300:]})
            summary["cases"] += 1
            if log:
                log(f"case {started} ({kind}, {len(data):,} bytes) ended the runner: {why}")
            index = started + 1
        elif code not in (0, -9) and started is None and index < batch_end:
            raise RuntimeError(f"the case runner failed: exit {code}: {stderr[-2000:]}")
    return summary


def _watchdog(proc: subprocess.Popen, stalled: threading.Event) -> threading.Timer:
    """A started timer that kills ``proc`` (and sets ``stalled``) after :data:`HANG_SECONDS`."""

    def kill() -> None:
        stalled.set()
        proc.kill()

    timer = threading.Timer(HANG_SECONDS, kill)
    timer.daemon = True
    timer.start()
    return timer


def _count(summary: dict, row: dict, per_byte: int, constant: int) -> None:
    """Add one case's row to ``summary``; a failure is an outcome neither a value nor a one-line
    refusal, or a breach of the time or memory bound."""
    summary["cases"] += 1
    kinds = summary["by_kind"].setdefault(row["kind"], {"cases": 0, "value": 0, "refused": 0, "error": 0})
    kinds["cases"] += 1
    kinds[row["outcome"]] += 1
    size = max(row["size"], 1)
    problems = []
    if row["outcome"] == "error":
        problems.append(f"raised {row['detail']}")
    if "\n" in row["detail"]:
        problems.append("a refusal of more than one line")
    if row["seconds"] > TIME_PER_BYTE * size + TIME_CONSTANT:
        problems.append(f"took {row['seconds']:.2f} s")
    if row["peak"] > per_byte * size + constant:
        problems.append(f"peaked at {row['peak']:,} bytes")
    if problems:
        summary["failures"].append({**row, "problems": problems})
    summary["worst_seconds"] = max(summary["worst_seconds"], row["seconds"])
    summary["worst_peak"] = max(summary["worst_peak"], row["peak"])
    if size >= PER_BYTE_FROM:
        summary["worst_seconds_per_byte"] = max(summary["worst_seconds_per_byte"], row["seconds"] / size)
        summary["worst_bytes_per_byte"] = max(summary["worst_bytes_per_byte"], row["peak"] / size)


def report(summary: dict) -> str:
    """The figures, as printed."""
    per_byte, constant = _bounds()
    lines = [f"fuzz seed {summary['seed']}: {summary['cases']:,} cases, {len(summary['crashes'])} crashes, "
             f"{len(summary['failures'])} failures",
             f"worst per byte (files >= {PER_BYTE_FROM} bytes): {summary['worst_seconds_per_byte'] * 1e6:.2f} us/byte, "
             f"{summary['worst_bytes_per_byte']:.1f} bytes of peak memory per byte",
             f"worst of any case: {summary['worst_seconds']:.3f} s, {summary['worst_peak'] / 2**20:.1f} MiB",
             f"bound checked: {TIME_PER_BYTE * 1e6:.0f} us/byte + {TIME_CONSTANT} s, {per_byte} bytes/byte + "
             f"{constant / 2**20:.0f} MiB", "cases by kind (value / refused / error):"]
    for kind, row in sorted(summary["by_kind"].items()):
        lines.append(f"  {kind:<24} {row['cases']:>6}  {row['value']:>5} / {row['refused']:>5} / {row['error']}")
    for crash in summary["crashes"][:10]:
        lines.append(f"CRASH case {crash['index']} ({crash['kind']}, {crash['size']:,} bytes): {crash['why']}")
    for failure in summary["failures"][:10]:
        lines.append(f"FAIL case {failure['index']} ({failure['kind']}, {failure['size']:,} bytes): "
                     f"{'; '.join(failure['problems'])}")
    return "\n".join(lines)


def _positive_cases(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _positive_minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):  # nan or 0 ran no case and reported success; inf never ends
        raise argparse.ArgumentTypeError(f"must be a positive finite number of minutes, got {text!r}")
    return value


def main(argv=None) -> int:
    if argv and argv[0] == "--child":
        child(*map(int, argv[1:4]), *argv[4:5])
        return 0
    parser = OneLineParser("fuzz", description=__doc__)
    parser.add_argument("--minutes", type=_positive_minutes, default=None,
                        help="run for this long (default: 2 unless --cases)")
    parser.add_argument("--cases", type=_positive_cases, default=None, help="stop after this many cases")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=sorted(MUTATIONS), default=None,
                        help="cases of this mutation only (size_fields: the sizes a loader reads)")
    args = parser.parse_args(argv)
    minutes = args.minutes if args.minutes is not None or args.cases is not None else 2.0
    summary = run(args.seed, args.cases, minutes, log=lambda text: print(text, flush=True), only=args.only)
    print(report(summary))
    return 1 if summary["crashes"] or summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
