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
from dsac import safe_pickle

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
        from dsac.files import load_weights
        load_weights(path)
    elif reader == "load_policy":
        from dsac import load_policy
        load_policy(path)
    elif reader == "read_json":
        from dsac.files import read_json
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


def test_a_replay_snapshot_is_read_against_its_runs_buffer_size(tmp_path):
    """A checkpoint's replay member that declares more rows than the run's buffer keeps (its
    config.json's buffer_size, or the env steps it collected when more) is refused in one line
    before it is decompressed: a 20 KB member of zeros that would expand to 64 MB. The golden
    snapshot (300 rows, buffer_size 1,000) reads."""
    import shutil
    import zipfile

    import numpy as np

    from dsac.errors import DsacError
    from dsac.files import read_checkpoint
    from dsac.frames import frame_capacity

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
    from dsac.files import read_json, read_npz

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
