"""Hostile weights files and run directories, made here, against every entry point that reads
them: ``load_policy``, ``Trainer.restore``, ``scripts/infer.py``, ``scripts/export.py``,
``launch.py --init_weights`` and ``launch.py --resume``. Each is refused with one line, runs no
code, does not crash, and stays within bounded memory (each entry point reads every file in a
process of its own, whose peak RSS is read after each file)."""

import functools
import json
import math
import os
import pickle
import pickletools
import re
import struct
import sys

import gymnasium as gym
import numpy as np
import pytest
from conftest import REPO_ROOT, run_in_one_process, run_measured

from dsac.algorithms.sac.policy import SACPolicy
from dsac.config import Config
from dsac.envs.make import describe_space
from dsac.formats import safe_pickle
from dsac.formats.files import FORMAT_VERSION, save_weights
from dsac.formats.safe_pickle import dumps, encode

PEAK_RSS_LIMIT_MB = 1024  # the attacks reached 7.8 GB; an honest refusal needs a few hundred MB
EVIL_MODULE = "import pathlib\npathlib.Path(__file__).with_name('PWNED').write_text('ran')\n"
NETWORK = [16]


def good_payload(**changes) -> dict:
    env = gym.make("Pendulum-v1")
    config = Config(fcnet_hiddens=NETWORK).validate()
    policy = SACPolicy(env.observation_space, env.action_space, config)
    weights = {name: np.zeros(shape, np.float32) for name, shape in policy.weight_shapes().items()}
    return {
        "algo": "sac", "env": "Pendulum-v1", "env_kwargs": {}, "flatten_obs": False,
        "observation_space": describe_space(env.observation_space), "action_space": describe_space(env.action_space),
        "model": {"fcnet_hiddens": NETWORK, "fcnet_activation": "relu", "custom_model": None},
        "policy_class": None, "weights": weights, "version": 3, "env_steps": 10, "updates": 5, **changes,
    }


class _Reduce:
    """An object that pickles as ``func(*args)`` followed by BUILD with ``state``."""

    def __init__(self, func, args, state=None):
        self.value = (func, args) if state is None else (func, args, state)

    def __reduce__(self):
        return self.value


def _old_format(array_object) -> bytes:
    """A file as dsac's format 1 wrote them (numpy objects pickled), holding a crafted array."""
    payload = {"format_version": 1, "algo": "sac", "env": "Pendulum-v1", "weights": {"w": array_object}}
    return pickle.dumps(payload, protocol=4)


def _crafted_array(dtype_object, shape, data):
    from numpy._core.multiarray import _reconstruct

    return _Reduce(_reconstruct, (np.ndarray, (0,), b"b"), (1, shape, dtype_object, False, data))


def _forged_dtype(fields_offset: int, flags: int):
    return _Reduce(np.dtype, ("V8", False, True),
                   (3, "|", None, ("a",), {"a": (np.dtype("f8"), fields_offset)}, 8, 1, flags))


DOUBLINGS = 29  # levels of shared halves: the deepest value sits at depth 32, the most decode admitted
FILE_SIZE = 20_000  # about the size of the file issue 29 reported


def _doubling(kind: str):
    """A value whose two halves are one object, 29 times over: 2^29 leaves from one memo
    reference per level (what decode and the payload checks used to walk at every reference)."""
    value = {"list": [], "dict": {}, "tuple": (0,)}[kind]
    for _ in range(DOUBLINGS):
        value = [value, value] if kind == "list" else {"a": value, "b": value} if kind == "dict" else (value, value)
    return value


def _shared(make, size: int = FILE_SIZE) -> bytes:
    """A real weights payload (as dumps writes it) whose env_kwargs also hold ``make()``'s
    values, as many as make the file about ``size`` bytes: pickled with pickle's own memo, so
    what ``make`` shares is written once and referenced."""
    payload = encode({"format_version": FORMAT_VERSION, **good_payload()})
    values = [make()]
    payload["env_kwargs"] = {"x": values}
    one = len(pickle.dumps(payload, protocol=5))
    values.append(make())
    for _ in range(2):  # extrapolate from the cost per value so far (memo indices grow from 1 to 4 bytes)
        per_value = (len(pickle.dumps(payload, protocol=5)) - one) / (len(values) - 1)
        count = 1 + max(1, math.ceil((size - one) / per_value))
        del values[count:]
        values += [make() for _ in range(count - len(values))]
    return pickle.dumps(payload, protocol=5)


def _doubling_raw_opcodes() -> bytes:
    """The doubling list in raw opcodes, with one memo slot: index 0 first holds a short
    string (a value references may repeat), then BINPUT 0 overwrites it with each level's list."""
    op = pickletools.opcodes
    code = {o.name: o.code.encode("latin-1") for o in op}
    out = [code["PROTO"] + b"\x04", code["SHORT_BINUNICODE"] + b"\x01k", code["BINPUT"] + b"\x00", code["POP"],
           code["EMPTY_LIST"], code["BINPUT"] + b"\x00", code["POP"]]
    for _ in range(DOUBLINGS):
        out += [code["MARK"], code["BINGET"] + b"\x00", code["BINGET"] + b"\x00", code["LIST"],
                code["BINPUT"] + b"\x00", code["POP"]]
    out += [code["BINGET"] + b"\x00", code["STOP"]]
    return b"".join(out)


def _shared_bytes_arrays() -> bytes:
    """One 4 KiB bytes object as the data of hundreds of float32 arrays of the weights."""
    payload = encode({"format_version": FORMAT_VERSION, **good_payload()})
    data = bytes(4096)
    i = 0
    while len(pickle.dumps(payload, protocol=5)) < FILE_SIZE:
        payload["weights"][f"actor/shared_{i}"] = {"__ndarray__": ["float32", [1024], data]}
        i += 1
    return pickle.dumps(payload, protocol=5)


def exponential_files() -> dict[str, bytes]:
    """name -> a ~20 KB file of admitted builtins only, whose memo references make a tree far
    larger than the file (issue 29: >60 s and >5 GB for scripts/infer.py)."""
    long_key = "k" * 1000
    one_list = list(range(1000))
    return {
        "shared_lists_doubling": _shared(lambda: _doubling("list")),
        "shared_dicts_doubling": _shared(lambda: _doubling("dict")),
        "shared_tuples_doubling": _shared(lambda: _doubling("tuple")),
        "shared_lists_raw_opcodes": _doubling_raw_opcodes(),
        # one list of 1,000 ints referenced ~8,000 times
        "shared_list_wide_fan": _shared(lambda: one_list),
        # a 1,000-character string referenced thousands of times, as keys and values
        "shared_long_string": _shared(lambda: [{long_key: long_key} for _ in range(100)]),
        "shared_bytes_arrays": _shared_bytes_arrays(),
    }


@functools.cache
def hostile_files() -> dict[str, bytes]:
    """name -> file content: each an attack found on the format-1 loader, or on the
    metadata any format carries, or a tree of shared references (:func:`exponential_files`)."""
    huge = good_payload()
    huge["weights"] = {"actor/hidden_0/kernel": {"__ndarray__": ["float32", [10**6, 10**6], bytearray(16)]}}
    return {
        # an object array whose __setstate__ list is shorter than its shape: segfaulted
        "object_array": _old_format(_crafted_array(np.dtype(object), (1000,), [1, 2])),
        # a structured dtype whose flags word says it holds object pointers
        "forged_dtype_flags": _old_format(_crafted_array(_forged_dtype(0, 0x3F), (4,), b"\x41" * 32)),
        # a field offset past the item size: reads heap memory into the weights
        "field_offset_out_of_bounds": _old_format(_crafted_array(_forged_dtype(4096, 0), (4,), b"\x00" * 32)),
        # the old format asking for 10^12 float32s
        "huge_array_old_format": _old_format(_crafted_array(np.dtype("f4"), (10**12,), b"")),
        # the new format asking for 10^12 float32s with 16 bytes of data
        "huge_array_shape": pickle.dumps({"format_version": FORMAT_VERSION, **huge}, protocol=5),
        # 14 bytes that claim 2^40 bytes follow, and a memo index of 2^31
        "huge_bytes_length": b"\x80\x05\x8e" + struct.pack("<Q", 2**40) + b"abcd",
        "huge_memo_index": b"\x80\x04N" + b"r" + struct.pack("<I", 2**31) + b".",
        # metadata naming code: an env module in the current directory, a policy class that is not a Policy
        "module_in_cwd": dumps({"format_version": FORMAT_VERSION, **good_payload(env="evilmod:Pendulum-v1")}),
        "policy_class_not_a_policy": dumps(
            {"format_version": FORMAT_VERSION, **good_payload(policy_class="collections:OrderedDict")}
        ),
        # Atari preprocessing settings a loader would build an env from: a 10^9-frame stack
        "atari_framestack_out_of_range": dumps(
            {"format_version": FORMAT_VERSION, **good_payload(atari={"framestack": 10**9})}
        ),
        **exponential_files(),
    }


def write_run(directory, weights_bytes: bytes, config_changes: dict) -> None:
    """A run directory as --resume and Trainer.restore read it, with the given weights file."""
    directory.mkdir(parents=True, exist_ok=True)
    config = Config(fcnet_hiddens=NETWORK, total_env_steps=2000).to_dict()
    config.pop("custom_models")
    (directory / "config.json").write_text(json.dumps({**config, **config_changes}))
    (directory / "weights.pkl").write_bytes(weights_bytes)
    checkpoint = directory / "checkpoint"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "meta.json").write_text(json.dumps({"env_steps": 1000, "updates": 500, "version": 5,
                                                      "replay_shards": 0}))
    np.savez(checkpoint / "state.npz", updates=np.array(500))
    (checkpoint / "weights.pkl").write_bytes(weights_bytes)


# ``python -c`` of this in the file's directory was the entry point of the two API calls: the
# directory is first on sys.path, where a file naming 'evilmod' would find it.
API_ENTRY = """
import sys
from dsac import Trainer, load_policy
from dsac.errors import DsacError
kind, path, run_dir = sys.argv[1:]
try:
    if kind == "load_policy":
        load_policy(path)
    else:
        Trainer.restore(run_dir)
    print("accepted", file=sys.stderr)
    sys.exit(0)
except DsacError as exc:
    print(f"refused: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def entry_program(entry: str, cwd, path: str, run_dir: str, out: str) -> tuple[str, list[str]]:
    """(program, args) of an entry point, as ``python <program> <args>`` runs it in ``cwd``."""
    if entry in ("load_policy", "Trainer.restore"):
        (cwd / "api_entry.py").write_text(API_ENTRY)
        return str(cwd / "api_entry.py"), [entry, path, run_dir]
    return {
        "infer.py": (os.path.join(REPO_ROOT, "scripts", "infer.py"), [path, "--episodes", "1"]),
        "export.py": (os.path.join(REPO_ROOT, "scripts", "export.py"), [path, "--savedmodel", out]),
        "--init_weights": (os.path.join(REPO_ROOT, "launch.py"),
                           ["--init_weights", path, "--fcnet_hiddens", *map(str, NETWORK), "--output_dir", out]),
        "--resume": (os.path.join(REPO_ROOT, "launch.py"), ["--resume", run_dir]),
    }[entry]


ENTRIES = ["load_policy", "Trainer.restore", "infer.py", "export.py", "--init_weights", "--resume"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_hostile_file_is_refused_with_one_line(entry, tmp_path):
    # Every file in turn, in one process (conftest.run_in_one_process), which reports its peak
    # RSS after each: the peak only grows, so a bound on it after file k bounds every file to k.
    kinds, programs = [], []
    for kind, content in hostile_files().items():
        cwd = tmp_path / "files" / kind
        cwd.mkdir(parents=True)
        (cwd / "evilmod.py").write_text(EVIL_MODULE)  # what a file naming 'evilmod' would import
        path = cwd / "weights.pkl"
        path.write_bytes(content)
        run_dir = cwd / "run"
        # A run directory names code in its config.json; the weights in it are the hostile file.
        changes = {"module_in_cwd": {"env": "evilmod:Pendulum-v1"},
                   "policy_class_not_a_policy": {"policy_class": "collections:OrderedDict"}}.get(kind, {})
        write_run(run_dir, content, changes)
        program, args = entry_program(entry, cwd, str(path), str(run_dir), str(cwd / "out"))
        kinds.append(kind)
        programs.append({"program": program, "args": args, "cwd": cwd, "env": {"RAY_TMPDIR": str(cwd / "ray")}})
    (tmp_path / "batch").mkdir()
    results = run_in_one_process(programs, tmp_path / "batch", purge_root=str(tmp_path / "files"), timeout=900)
    for kind, result in zip(kinds, results, strict=True):
        cwd, stderr = tmp_path / "files" / kind, result.stderr
        lines = [line for line in stderr.splitlines() if line.strip()]
        where = f"{entry} with {kind}: exit {result.returncode}, stderr {stderr[-1500:]!r}"
        assert result.returncode == 2, where
        assert "Traceback" not in stderr and "Segmentation" not in stderr, where
        if entry in ("load_policy", "Trainer.restore"):
            assert lines[0].startswith("refused: ") and len(lines) == 1, where
        else:
            assert len(lines) == 1 and ": error: " in lines[0], where
        assert not (cwd / "ray").exists(), f"{entry} started Ray for {kind}"
        assert result.peak_rss_mb < PEAK_RSS_LIMIT_MB, f"{entry} with {kind}: peak RSS {result.peak_rss_mb:.0f} MB"
        if kind in ("module_in_cwd", "policy_class_not_a_policy"):
            assert "--trust_code" in lines[0], where
        if kind == "object_array":
            assert "old format 1" in lines[0] and "dsac.convert_weights" in lines[0], where
        if kind.startswith("shared_"):  # refused by the opcode walk, before anything is unpickled
            assert "memo reference to a shared " in lines[0], where
    ran = sorted(p.parent.name for p in tmp_path.rglob("PWNED"))
    assert not ran, f"{entry} ran the module named by {ran}"


def test_an_exponential_file_is_refused_at_once_under_a_4_gb_address_space(tmp_path):
    """Issue 29: ~20 KB of shared lists made infer.py run past 60 s and 5 GB (MemoryError
    under ``ulimit -v 4000000``); the opcode walk refuses the first memo reference to a list."""
    from dsac import load_policy
    from dsac.errors import DsacError

    content = exponential_files()["shared_lists_doubling"]
    assert 15_000 < len(content) < 25_000
    path = tmp_path / "weights.pkl"
    path.write_bytes(content)
    code, stderr, rss = run_measured([sys.executable, os.path.join(REPO_ROOT, "scripts", "infer.py"), str(path)],
                                     tmp_path, timeout=60, address_space=4_000_000 * 1024)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in stderr, f"exit {code}, stderr {stderr[-1500:]!r}"
    assert lines[0].startswith("infer: error: ") and "memo reference to a shared list" in lines[0], lines[0]
    assert rss < PEAK_RSS_LIMIT_MB, f"peak RSS {rss:.0f} MB"
    with pytest.raises(DsacError, match="memo reference to a shared list"):
        load_policy(str(path))


def test_dumps_writes_a_tree_that_loads_even_when_the_payload_shares_values():
    """What dsac writes must load: encode builds every list and dict anew and copies a bytes
    object or a long string met twice, so the memo references left repeat short strings."""
    long, data, inner = "s" * 1000, b"\x01" * 1000, [1, 2]
    payload = {"a": long, "b": long, long: [long, {long: long}], "c": data, "d": data, "e": b"", "f": b"",
               "g": inner, "h": (inner, inner), "w": np.arange(3, dtype=np.float32)}
    loaded = safe_pickle.loads(dumps(payload))
    assert loaded["b"] == long and loaded[long][1] == {long: long} and loaded["d"] == data and loaded["f"] == b""
    assert loaded["h"] == [[1, 2], [1, 2]] and loaded["w"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(safe_pickle.UnsafePickle, match="memo reference to a shared string of 1,000 characters"):
        safe_pickle.loads(pickle.dumps({"a": long, "b": long}, protocol=5))  # pickle's own memo shares it


def test_decode_visits_at_most_the_values_the_file_can_hold_and_names_a_path_only_on_error():
    nested = {"k" * 5000: [0, 1, 2]}
    with pytest.raises(safe_pickle.UnsafePickle, match="more than the 4 values allowed"):
        safe_pickle.decode(nested, max_values=4)
    assert safe_pickle.decode(nested, max_values=5) == nested
    odd_key = {"line\nbreak" * 1000: {"__ndarray__": ["float32", [2], b"\x00" * 4]}}
    with pytest.raises(safe_pickle.UnsafePickle) as info:
        safe_pickle.decode(odd_key)
    message = str(info.value)
    assert "\n" not in message and len(message) < 300 and message.startswith("payload.'line"), message


def test_a_policy_class_that_is_not_a_policy_is_refused_even_when_trusted(tmp_path):
    from dsac import load_policy
    from dsac.errors import DsacError

    path = tmp_path / "w.pkl"
    path.write_bytes(hostile_files()["policy_class_not_a_policy"])
    with pytest.raises(DsacError, match=re.escape("not a dsac.Policy subclass")):
        load_policy(str(path), trust_code=True)


def test_a_weights_file_is_a_plain_pickle_and_round_trips(tmp_path):
    path = tmp_path / "w.pkl"
    payload = good_payload()
    payload["weights"]["actor/out/bias"] = np.arange(2, dtype=np.float32)
    save_weights(str(path), payload)
    with open(path, "rb") as f:
        plain = pickle.load(f)  # any Python reads it: only builtins inside
    assert plain["format_version"] == FORMAT_VERSION and plain["algo"] == "sac"
    dtype, shape, data = plain["weights"]["actor/out/bias"]["__ndarray__"]
    assert (dtype, shape) == ("float32", [2]) and bytes(data) == np.arange(2, dtype="<f4").tobytes()
    from dsac import load_policy

    loaded = load_policy(str(path))
    np.testing.assert_array_equal(loaded.payload["weights"]["actor/out/bias"], [0.0, 1.0])
    assert loaded(np.zeros(3, np.float32)).shape == (1,)


@pytest.mark.parametrize("change, fact", [
    ({"actor/out/kernel": np.zeros((16, 3), np.float32)}, "actor/out/kernel has shape (16, 3)"),
    ({"actor/out/kernel": np.full((16, 2), np.nan, np.float32)}, "NaN"),
    ({"actor/out/kernel": np.zeros((16, 2), np.int32)}, "not a floating-point type"),
    ({"actor/extra": np.zeros(1, np.float32)}, "'actor/extra' is not in the network"),
    ({"actor/out/kernel": [[0.0, 0.0]] * 16}, "is not a named numpy array"),
])
def test_load_policy_and_init_weights_check_every_array(change, fact, tmp_path):
    from dsac import load_policy
    from dsac.errors import DsacError
    from dsac.runtime.preparation import fitting_weights

    payload = good_payload()
    payload["weights"].update(change)
    path = str(tmp_path / "w.pkl")
    save_weights(path, payload)
    with pytest.raises(DsacError, match=fact.replace("(", r"\(").replace(")", r"\)")):
        load_policy(path)
    env = gym.make("Pendulum-v1")
    with pytest.raises(DsacError, match=fact.replace("(", r"\(").replace(")", r"\)")):
        fitting_weights(Config(fcnet_hiddens=NETWORK, init_weights=path).validate(), path,
                        env.observation_space, env.action_space)
