"""The weights decoder admits only what ``encode`` writes, within a stated bound (time linear
in the file's size, peak memory a constant times it), and dsac reads only regular files, at
most a limit's worth: the cases of issue 45, each in one process that runs them all (as
tests/test_hostile_files.py does) under ``ulimit -v 4000000``, and a seeded run of the fuzzer
(benchmarks/fuzz.py) in one subprocess."""

import json
import os
import random

import pytest
from conftest import REPO_ROOT, run_in_one_process

from benchmarks import fuzz
from dsac.formats import safe_pickle

GOLDEN_SAC = os.path.join(REPO_ROOT, "tests", "data", "golden", "sac_pendulum")
ADDRESS_SPACE = 4_000_000 * 1024  # ulimit -v 4000000
SECONDS = 20  # each case, on a machine shared with other work

# A program of the batch: call one reader on a path, under the address-space limit (set by the
# first program, kept by the process for the rest), and print what came of it as one JSON line.
CHECK = """
import json, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
if soft == resource.RLIM_INFINITY or soft > {limit}:
    resource.setrlimit(resource.RLIMIT_AS, ({limit}, hard))
from dsac.errors import DsacError
reader, path = sys.argv[1:]
began = time.perf_counter()
try:
    if reader == "load_weights":
        from dsac.formats.files import load_weights
        load_weights(path)
    elif reader == "load_policy":
        from dsac import load_policy
        load_policy(path)
    elif reader == "read_json":
        from dsac.formats.files import read_json
        read_json(path, "config " + path)
    elif reader == "config":
        from dsac.config import Config
        Config.load(path)
    outcome, message = "value", ""
except DsacError as exc:
    outcome, message = "refused", str(exc)
print(json.dumps({{"outcome": outcome, "message": message, "seconds": time.perf_counter() - began}}))
sys.exit(2 if outcome == "refused" else 0)
"""


def _files(tmp_path) -> dict[str, str]:
    """name -> path of each hostile file or path (the FIFO and the /dev/zero links made here)."""
    rng = random.Random(0)
    made = {
        "deep_tuple_key": fuzz.deep_tuple_key(rng, 300_000),
        "colliding_int_keys": fuzz.colliding_int_keys(rng, 20_000),
        "many_small_containers": fuzz.many_small_containers(rng, 2_000_000),
        "zero_by_2_62_shape": fuzz.huge_shape(rng, [0, 2**62]),
    }
    # the densest file the decoder admits, 2 MB: one-item dicts at one per 8 bytes, then padding
    unit = fuzz.OP["EMPTY_DICT"] + fuzz.OP["BINGET"] + b"\x00" + fuzz.OP["NONE"] + fuzz.OP["SETITEM"]
    body = fuzz._unicode("a") + fuzz.OP["MEMOIZE"] + fuzz.OP["EMPTY_LIST"] + fuzz.OP["MARK"] + unit * 250_000
    pad = 2_000_000 - len(body) - 64
    made["containers_at_the_bound"] = fuzz._wrap(body + fuzz.OP["APPENDS"] + fuzz.OP["BINBYTES"]
                                                 + pad.to_bytes(4, "little") + bytes(pad) + fuzz.OP["POP"])
    paths = {}
    for name, content in made.items():
        paths[name] = str(tmp_path / f"{name}.pkl")
        (tmp_path / f"{name}.pkl").write_bytes(content)
    run = tmp_path / "run"
    run.mkdir()
    (run / "weights.pkl").symlink_to("/dev/zero")
    (run / "config.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")
    paths.update({"dev_zero": "/dev/zero", "weights_link_to_dev_zero": str(run / "weights.pkl"),
                  "config_link_to_dev_zero": str(run / "config.json"), "fifo": str(tmp_path / "fifo")})
    return paths


# (name of the file, reader, what the one-line refusal says); "value": it loads.
CASES = [
    ("golden", "load_weights", "value"),  # first: the process's peak RSS before any hostile file
    ("many_small_containers", "load_weights", "lists and dicts at byte"),  # 320 MiB before the bound
    ("containers_at_the_bound", "load_weights", "no weights in it"),  # decoded, then not a weights payload
    ("deep_tuple_key", "load_weights", "values nested deeper than 32 at byte 36"),
    ("colliding_int_keys", "load_weights", "a dict key of kind int"),
    ("zero_by_2_62_shape", "load_weights", "claims more items than a file of"),
    ("zero_by_2_62_shape", "load_policy", "claims more items than a file of"),
    ("dev_zero", "load_weights", "is a character device, not a regular file"),
    ("weights_link_to_dev_zero", "load_policy", "is a character device, not a regular file"),
    ("config_link_to_dev_zero", "read_json", "is a character device, not a regular file"),
    ("config_link_to_dev_zero", "config", "is a character device, not a regular file"),
    ("fifo", "load_weights", "is a FIFO, not a regular file"),
    ("fifo", "read_json", "is a FIFO, not a regular file"),
]
# (name of the file, what dsac-infer's one line says): exit 2, ``infer: error: ...``
INFER = [
    ("zero_by_2_62_shape", "claims more items than a file of"),
    ("deep_tuple_key", "values nested deeper than 32"),
    ("weights_link_to_dev_zero", "is a character device"),
    ("fifo", "is a FIFO"),
]


def test_hostile_files_and_paths_are_refused_in_one_line_within_the_bound(tmp_path):
    paths = {"golden": os.path.join(GOLDEN_SAC, "weights.pkl"), **_files(tmp_path)}
    script = tmp_path / "check.py"
    script.write_text(CHECK.format(limit=ADDRESS_SPACE))
    programs = [{"program": str(script), "args": [reader, paths[name]]} for name, reader, _ in CASES]
    programs += [{"program": "-m dsac.infer", "args": [paths[name], "--episodes", "1"]} for name, _ in INFER]
    (tmp_path / "batch").mkdir()
    results = run_in_one_process(programs, tmp_path / "batch", timeout=300)
    baseline = results[0].peak_rss_mb
    for (name, reader, fact), result in zip(CASES, results, strict=False):
        where = f"{reader} of {name}: exit {result.returncode}, {result.stdout[-500:]!r} {result.stderr[-800:]!r}"
        row = json.loads(result.stdout.strip().splitlines()[-1])
        assert row["seconds"] < SECONDS, where
        if fact == "value":
            assert result.returncode == 0 and row["outcome"] == "value", where
            continue
        assert result.returncode == 2 and row["outcome"] == "refused", where
        assert fact in row["message"] and "\n" not in row["message"], where
        if name in ("containers_at_the_bound", "many_small_containers"):  # 2 MB each: at most the stated bound
            grown = (result.peak_rss_mb - baseline) * 2**20
            stated = safe_pickle.PEAK_BYTES_PER_BYTE * os.path.getsize(paths[name]) + safe_pickle.PEAK_CONSTANT
            assert grown < stated, f"{where}: peak RSS grew {grown / 2**20:.0f} MiB"
    for (name, fact), result in zip(INFER, results[len(CASES):], strict=True):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        where = f"dsac.infer {name}: exit {result.returncode}, {result.stderr[-800:]!r}"
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("infer: error: "), where
        assert fact in lines[0], where
    # the process never came near the address-space limit: the hostile files cost it little
    assert results[-1].peak_rss_mb < baseline + 200, f"peak RSS {results[-1].peak_rss_mb:.0f} MiB"


def test_the_walk_refuses_what_encode_never_writes_and_admits_what_it_does():
    op = fuzz.OP
    for data, fact in [
        (fuzz._wrap(op["EMPTY_DICT"] + op["EMPTY_TUPLE"] + op["NONE"] + op["SETITEM"]), "a tuple at byte 3"),
        (fuzz._wrap(op["EMPTY_DICT"] + fuzz._int(5) + op["NONE"] + op["SETITEM"]), "a dict key of kind int"),
        (fuzz._wrap(op["NONE"] + op["TUPLE1"]), "a tuple at byte 3"),
        (fuzz.deep_tuple_key(random.Random(0), 40), "nested deeper than 32"),
        (fuzz.shared_nesting(random.Random(0)), "memo reference to a shared list"),
        # the fuzzer's case 1833 of seed 0 (a flipped byte): pickle's OverflowError escaped
        (op["PROTO"] + b"\x05" + op["FRAME"] + b"\xff" * 8 + op["NONE"] + op["STOP"], "a frame of"),
    ]:
        with pytest.raises(safe_pickle.UnsafePickle, match=fact) as info:
            safe_pickle.loads(data)
        assert info.value.refused or fact == "a frame of"
    # the deepest nesting admitted: a value inside 32 containers; one more is refused
    ok = fuzz._wrap(fuzz.OP["EMPTY_LIST"] * 32 + fuzz.OP["NONE"] + fuzz.OP["APPEND"] * 32)
    assert safe_pickle.loads(ok) is not None
    with pytest.raises(safe_pickle.UnsafePickle, match="nested deeper than 32"):
        safe_pickle.loads(fuzz._wrap(fuzz.OP["EMPTY_LIST"] * 33 + fuzz.OP["NONE"] + fuzz.OP["APPEND"] * 33))
    # an empty array may have any shape whose other dimensions a file of its size could hold
    assert safe_pickle.decode({"__ndarray__": ["float32", [0, 5], b""]}, 100).shape == (0, 5)


def test_the_fuzzer_finds_no_crash_and_every_case_within_the_bound():
    """300 seeded cases in one subprocess (benchmarks/fuzz.py): each a value or a one-line
    refusal, within the time and memory bound safe_pickle states; no crash."""
    summary = fuzz.run(seed=0, cases=300)
    assert summary["cases"] == 300 and not summary["crashes"], fuzz.report(summary)
    assert not summary["failures"], fuzz.report(summary)
    outcomes = {outcome for row in summary["by_kind"].values() for outcome in ("value", "refused") if row[outcome]}
    assert outcomes == {"value", "refused"}  # the mutations reach both sides of the checks


def test_the_fuzzer_mutates_the_fields_loaders_read_sizes_from(tmp_path):
    """Issue 56: the fuzzer also replaces ``model``, ``observation_space``, ``action_space`` and
    ``atari`` values (within and past the bounds, wrong types) and rebuilds the policy they
    describe, as load_policy does: 300 seeded cases of that mutation in one subprocess, each a
    value or a one-line refusal within the bound (before dsac.models.sizes, a MemoryError and an
    IndexError). A run that would try no case is refused in one line (it said "0 cases, 0
    crashes" and exit 0)."""
    summary = fuzz.run(seed=0, cases=300, only="size_fields")
    assert summary["cases"] == 300 and not summary["crashes"] and not summary["failures"], fuzz.report(summary)
    row = summary["by_kind"]["size_fields"]
    assert row["value"] and row["refused"], row
    bad = [["--cases", "-5"], ["--cases", "0"], ["--minutes", "-1"], ["--minutes", "0"], ["--minutes", "nan"],
           ["--minutes", "inf"], ["--only", "nothing"]]
    (tmp_path / "batch").mkdir()
    results = run_in_one_process([{"program": "-m benchmarks", "args": ["fuzz", *args]} for args in bad],
                                 tmp_path / "batch")
    for args, result in zip(bad, results, strict=True):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        where = f"fuzz {args}: exit {result.returncode}, {result.stdout[-300:]!r} {result.stderr[-500:]!r}"
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("fuzz: error: "), where
        assert f"argument {args[0]}: " in lines[0] and not result.stdout, where


def test_a_replay_snapshot_is_read_against_its_runs_buffer_size(tmp_path):
    """A checkpoint's replay member that declares more rows than the run's buffer keeps (its
    config.json's buffer_size, or the env steps it collected when more) is refused in one line
    before it is decompressed: a 20 KB member of zeros that would expand to 64 MB. The golden
    snapshot (300 rows, buffer_size 1,000) reads."""
    import shutil
    import zipfile

    import numpy as np

    from dsac.errors import DsacError
    from dsac.formats.checkpoints import read_checkpoint
    from dsac.replay.frames import frame_capacity

    run = tmp_path / "run"
    shutil.copytree(GOLDEN_SAC, run)
    assert len(read_checkpoint(str(run))["replay"][0]["data/reward"]) == 300
    rows = frame_capacity(1_000) + 1  # buffer_size 1,000 > the 300 env steps its meta.json counts
    with zipfile.ZipFile(run / "checkpoint" / "replay_0.npz", "a", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("data/bomb.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array(member, np.zeros((rows, 8_000), np.float32))
    assert (run / "checkpoint" / "replay_0.npz").stat().st_size < 2**20
    with pytest.raises(DsacError, match=f"declares {rows:,} rows, more than the {rows - 1:,} its run's replay"):
        read_checkpoint(str(run))


def test_inputs_a_review_found_are_refused_in_one_line(tmp_path):
    """A bzip2 member in an .npz (zipfile inflates a whole bzip2 chunk before cutting it to the
    declared length), a JSON file nested 100,000 deep, and a run of MARKs (each costs the walk
    a list): each a one-line refusal, not memory, a traceback or a bound exceeded."""
    import io
    import zipfile

    import numpy as np

    from dsac.errors import DsacError
    from dsac.formats.checkpoints import read_npz
    from dsac.formats.files import read_json

    member = io.BytesIO()
    np.lib.format.write_array(member, np.zeros(4, np.float32))
    with zipfile.ZipFile(tmp_path / "state.npz", "w", zipfile.ZIP_BZIP2) as archive:
        archive.writestr("x.npy", member.getvalue())
    with pytest.raises(DsacError, match="compressed with method 12, not as numpy writes it"):
        read_npz(str(tmp_path / "state.npz"), "checkpoint/state.npz")
    (tmp_path / "meta.json").write_text("[" * 100_000)
    with pytest.raises(DsacError, match="nested too deeply"):
        read_json(str(tmp_path / "meta.json"), "checkpoint/meta.json")
    marks = fuzz._wrap(fuzz.OP["MARK"] * 100_000)
    with pytest.raises(safe_pickle.UnsafePickle, match=r"nested deeper than 32 at byte \d+ \(marks\)"):
        safe_pickle.loads(marks)


def _sized_file(path, algo: str, env_id: str, model: dict, observation_space=None, action_space=None) -> str:
    """A weights file of ``env_id``'s spaces (or those given) whose ``model`` names the sizes a
    loader reads; its arrays are those of a small network (a few KB, as an attacker's would be)."""
    import gymnasium as gym
    import numpy as np

    from dsac.config import Config
    from dsac.envs.make import describe_space
    from dsac.formats.files import save_weights
    from dsac.settings.registry import algorithm

    env = gym.make(env_id)
    small = algorithm(algo).policy_class(env.observation_space, env.action_space,
                                         Config(algo=algo, env=env_id, fcnet_hiddens=[8]).validate())
    observation_space, action_space = observation_space or env.observation_space, action_space or env.action_space
    save_weights(str(path), {
        "algo": algo, "env": env_id, "env_kwargs": {}, "flatten_obs": False,
        "observation_space": describe_space(observation_space), "action_space": describe_space(action_space),
        "model": {"fcnet_hiddens": [8], "fcnet_activation": "relu", "custom_model": None, **model},
        "policy_class": None, "version": 3, "env_steps": 10, "updates": 5,
        "weights": {name: np.zeros(shape, np.float32) for name, shape in small.weight_shapes().items()},
    })
    return str(path)


def test_sizes_a_file_or_a_flag_names_are_refused_before_anything_is_allocated(tmp_path):
    """Issue 56: a 2.9 KB DQN file whose num_atoms was 2**26 took load_policy to 830 MB before
    its refusal, and with 2**40 a MemoryError escaped load_policy, dsac-infer and dsac-export;
    ``--num_atoms 2**40`` and ``--fcnet_hiddens 1e9`` were tracebacks. Every size a file or flag
    names (atoms, widths, conv filters on the observation's shape, actions x atoms) is checked
    against dsac.models.sizes' bounds first: one line, exit 2, all in one process under
    ``ulimit -v 4000000`` whose peak RSS stays near a golden file's load."""
    import time

    import gymnasium as gym
    import numpy as np

    dqn = {"dueling": True, "v_min": -10.0, "v_max": 10.0}
    frames = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    made = {
        "atoms_2_26": _sized_file(tmp_path / "a26.pkl", "dqn", "CartPole-v1", {**dqn, "num_atoms": 2**26}),
        "atoms_2_40": _sized_file(tmp_path / "a40.pkl", "dqn", "CartPole-v1", {**dqn, "num_atoms": 2**40}),
        "width_1e9": _sized_file(tmp_path / "w.pkl", "sac", "Pendulum-v1", {"fcnet_hiddens": [10**9]}),
        "params_4e8": _sized_file(tmp_path / "p.pkl", "sac", "Pendulum-v1", {"fcnet_hiddens": [20_000, 20_000]}),
        "actions_x_atoms": _sized_file(tmp_path / "n.pkl", "dqn", "CartPole-v1", {**dqn, "num_atoms": 1_000},
                                       action_space=gym.spaces.Discrete(2**31 - 1)),
        "conv_4096_1x1": _sized_file(tmp_path / "c.pkl", "dqn", "CartPole-v1",
                                     {**dqn, "num_atoms": 1, "conv_filters": [[4096, 1, 1]]}, observation_space=frames),
    }
    assert os.path.getsize(made["atoms_2_40"]) < 4_000
    files = [
        ("atoms_2_26", "--num_atoms must be an integer in [1, 1,000], got 67108864"),
        ("atoms_2_40", "--num_atoms must be an integer in [1, 1,000], got 1099511627776"),
        ("width_1e9", "--fcnet_hiddens must be positive layer sizes of at most 10,000,000"),
        ("params_4e8", "has 400,140,002 parameters, more than the 100,000,000 dsac builds"),
        ("actions_x_atoms", "2,147,483,647 actions x 1,000 atoms make"),
        ("conv_4096_1x1", "conv_filters layer 0 [4096, 1, 1] makes 84x84x4096 values per observation"),
    ]
    tools = [("-m dsac.infer", "infer", ["--episodes", "1"]),
             ("-m dsac.export", "export", ["--format", "onnx", "-o", str(tmp_path / "p.onnx")])]
    launch = os.path.join(REPO_ROOT, "launch.py")
    flags = [
        (["--algo", "dqn", "--env", "CartPole-v1", "--num_atoms", str(2**40)], "--num_atoms must be an integer in"),
        (["--fcnet_hiddens", str(10**9)], "--fcnet_hiddens must be positive layer sizes of at most 10,000,000"),
        (["--fcnet_hiddens", "20000", "20000"], "has 400,140,002 parameters, more than the 100,000,000"),
        (["--algo", "dqn", "--env", "ALE/Pong-v5", "--conv_filters", "[[4096, 1, 1]]"], "makes 84x84x4096 values"),
    ]
    script = tmp_path / "check.py"
    script.write_text(CHECK.format(limit=ADDRESS_SPACE))
    golden = os.path.join(GOLDEN_SAC, "weights.pkl")
    programs = [{"program": str(script), "args": ["load_policy", golden]}]
    programs += [{"program": str(script), "args": ["load_policy", made[name]]} for name, _ in files]
    programs += [{"program": program, "args": [made[name], *args]} for program, _, args in tools for name, _ in files]
    programs += [{"program": launch, "args": [*args, "--local", "--output_dir", str(tmp_path / f"run{i}")]}
                 for i, (args, _) in enumerate(flags)]
    (tmp_path / "batch").mkdir()
    began = time.perf_counter()
    results = run_in_one_process(programs, tmp_path / "batch", timeout=300)
    assert time.perf_counter() - began < 40 * len(programs)
    baseline = results[0].peak_rss_mb
    expected = [(f"load_policy {name}", None, fact) for name, fact in files]
    expected += [(f"{tool} {name}", tool, fact) for _, tool, _ in tools for name, fact in files]
    expected += [(f"launch.py {' '.join(args)}", "dsac", fact) for args, fact in flags]
    for (what, prefix, fact), result in zip(expected, results[1:], strict=True):
        where = f"{what}: exit {result.returncode}, {result.stdout[-500:]!r} {result.stderr[-800:]!r}"
        assert result.returncode == 2, where
        if prefix is None:
            row = json.loads(result.stdout.strip().splitlines()[-1])
            assert row["outcome"] == "refused" and row["seconds"] < SECONDS, where
            assert fact in row["message"] and "\n" not in row["message"], where
        else:
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith(f"{prefix}: error: ") and fact in lines[0], where
    # the files' sizes were refused before anything of those sizes was allocated
    after_files = results[len(files) * (1 + len(tools))].peak_rss_mb
    assert after_files < baseline + 100, f"peak RSS {baseline:.0f} MiB -> {after_files:.0f} MiB"
    assert not any((tmp_path / f"run{i}").exists() for i in range(len(flags)))
