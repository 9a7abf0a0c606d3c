"""Hostile weights files and run directories, made here, against every entry point that reads
them: ``load_policy``, ``Trainer.restore``, ``scripts/infer.py``, ``scripts/export.py``,
``launch.py --init_weights`` and ``launch.py --resume``. Each is refused with one line, runs no
code, does not crash, and stays within bounded memory (each entry point runs in a process of
its own, whose peak RSS the kernel reports through ``wait4``)."""

import json
import os
import pickle
import struct
import subprocess
import sys
import threading

import gymnasium as gym
import numpy as np
import pytest
from conftest import REPO_ROOT

from dsac.algorithms.sac.policy import SACPolicy
from dsac.artifacts import FORMAT_VERSION, save_weights
from dsac.config import Config
from dsac.envs import describe_space
from dsac.safe_pickle import dumps

PEAK_RSS_LIMIT_MB = 1024  # the attacks reached 7.8 GB; an honest refusal needs a few hundred MB
EVIL_MODULE = "import pathlib\npathlib.Path(__file__).with_name('PWNED').write_text('ran')\n"
NETWORK = [16]


def good_payload(**changes) -> dict:
    env = gym.make("Pendulum-v1")
    config = Config(fcnet_hiddens=NETWORK).validate()
    policy = SACPolicy(env.observation_space, env.action_space, config)
    weights = {name: np.zeros(shape, np.float32) for name, shape in policy.numpy_weight_shapes().items()}
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


def hostile_files() -> dict[str, bytes]:
    """name -> file content: each an attack found on the format-1 loader, or on the
    metadata any format carries."""
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


# Starts the measured process and reports its exit code and peak RSS (KB) as wait4 gives them.
# It runs in a small process of its own: a process started straight from pytest would report
# pytest's own peak RSS (Linux keeps the larger of the parent's high-water mark at exec and the
# child's), which grows with the tests that ran before.
TRAMPOLINE = """
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def run_measured(args, cwd, timeout=120) -> tuple[int, str, float]:
    """Run a process; (exit code, stderr, its own peak RSS in MB as wait4 reports it)."""
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "RAY_TMPDIR": os.path.join(str(cwd), "ray")}
    with open(os.path.join(str(cwd), "stderr.txt"), "w+b") as err:
        proc = subprocess.Popen([sys.executable, "-c", TRAMPOLINE, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, 9))
        timer.start()
        try:
            out, _ = proc.communicate()
        finally:
            timer.cancel()
        code, rss_kb = (int(x) for x in out.split()) if out.strip() else (-9, 0)
        err.seek(0)
        return code, err.read().decode(errors="replace"), rss_kb / 1024


IN_PROCESS = """
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


def entry_args(entry: str, path: str, run_dir: str, out: str) -> list[str]:
    py = sys.executable
    return {
        "load_policy": [py, "-c", IN_PROCESS, "load_policy", path, run_dir],
        "Trainer.restore": [py, "-c", IN_PROCESS, "restore", path, run_dir],
        "infer.py": [py, os.path.join(REPO_ROOT, "scripts", "infer.py"), path, "--episodes", "1"],
        "export.py": [py, os.path.join(REPO_ROOT, "scripts", "export.py"), path, "--savedmodel", out],
        "--init_weights": [py, os.path.join(REPO_ROOT, "launch.py"), "--init_weights", path,
                           "--fcnet_hiddens", *map(str, NETWORK), "--output_dir", out],
        "--resume": [py, os.path.join(REPO_ROOT, "launch.py"), "--resume", run_dir],
    }[entry]


ENTRIES = ["load_policy", "Trainer.restore", "infer.py", "export.py", "--init_weights", "--resume"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_hostile_file_is_refused_with_one_line(entry, tmp_path):
    for kind, content in hostile_files().items():
        cwd = tmp_path / kind
        cwd.mkdir()
        (cwd / "evilmod.py").write_text(EVIL_MODULE)  # what a file naming 'evilmod' would import
        path = cwd / "weights.pkl"
        path.write_bytes(content)
        run_dir = cwd / "run"
        # A run directory names code in its config.json; the weights in it are the hostile file.
        changes = {"module_in_cwd": {"env": "evilmod:Pendulum-v1"},
                   "policy_class_not_a_policy": {"policy_class": "collections:OrderedDict"}}.get(kind, {})
        write_run(run_dir, content, changes)
        code, stderr, rss = run_measured(entry_args(entry, str(path), str(run_dir), str(cwd / "out")), cwd)
        lines = [line for line in stderr.splitlines() if line.strip()]
        where = f"{entry} with {kind}: exit {code}, stderr {stderr[-1500:]!r}"
        assert code == 2, where
        assert "Traceback" not in stderr and "Segmentation" not in stderr, where
        if entry in ("load_policy", "Trainer.restore"):
            assert lines[0].startswith("refused: ") and len(lines) == 1, where
        else:
            assert len(lines) == 1 and ": error: " in lines[0], where
        assert not (cwd / "PWNED").exists(), f"{entry} ran the module named by {kind}"
        assert not (cwd / "ray").exists(), f"{entry} started Ray for {kind}"
        assert rss < PEAK_RSS_LIMIT_MB, f"{entry} with {kind}: peak RSS {rss:.0f} MB"
        if kind in ("module_in_cwd", "policy_class_not_a_policy"):
            assert "--trust_code" in lines[0], where
        if kind == "object_array":
            assert "old format 1" in lines[0] and "convert_weights.py" in lines[0], where


def test_a_policy_class_that_is_not_a_policy_is_refused_even_when_trusted(tmp_path):
    from dsac import load_policy
    from dsac.errors import DsacError

    path = tmp_path / "w.pkl"
    path.write_bytes(hostile_files()["policy_class_not_a_policy"])
    with pytest.raises(DsacError, match="not a dsac.Policy subclass"):
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
    from dsac.preparation import fitting_weights

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
