"""A run directory is read, never followed (docs/safety.md#a-run-directory-is-data): nothing dsac
writes into one goes through a symlink someone planted there. The write primitives never follow
a link; ``launch.py --resume`` (one line, exit 2, before Ray) and ``Trainer.restore``
(``DsacError``) refuse a directory where a file or folder dsac writes or reads is a symlink, and
the files and folders the links point at stay as they were; a normal directory resumes."""

import errno
import json
import os
import re
import shutil

import numpy as np
import pytest
from conftest import REPO_ROOT, run_in_one_process

from dsac.errors import DsacError
from dsac.formats.checkpoints import write_checkpoint
from dsac.formats.files import (
    RUN_FILES,
    RUN_FOLDERS,
    append_jsonl,
    atomic_write_bytes,
    check_writable_dir,
    real_dir,
)

GOLDEN_RUN = os.path.join(REPO_ROOT, "tests", "data", "golden", "sac_pendulum")  # a serial SAC run, 300 env steps


def outside(tmp_path):
    """A file and a folder (holding a file) outside any run directory: what planted links point at."""
    target = tmp_path / "outside"
    (target / "folder").mkdir(parents=True)
    (target / "notes.txt").write_text("my notes\n")
    (target / "folder" / "kept.txt").write_text("kept\n")
    return target


def snapshot(folder) -> dict:
    """Every path under ``folder`` -> (content, mtime): what must not change."""
    return {str(p): (p.read_bytes() if p.is_file() else None, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))} | {str(folder): (None, folder.stat().st_mtime_ns)}


def test_the_write_primitives_never_follow_a_symlink(tmp_path):
    target = outside(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    before = snapshot(target)
    # A rename replaces the link itself: the temp file is a fresh O_EXCL | O_NOFOLLOW name.
    (run / "weights.pkl").symlink_to(target / "notes.txt")
    atomic_write_bytes(str(run / "weights.pkl"), b"new")
    assert not (run / "weights.pkl").is_symlink() and (run / "weights.pkl").read_bytes() == b"new"
    # Appending opens with O_NOFOLLOW: a link is an error, never a way to write elsewhere.
    (run / "progress.jsonl").symlink_to(target / "notes.txt")
    with pytest.raises(OSError) as info:
        append_jsonl(str(run / "progress.jsonl"), {"env_steps": 1})
    assert info.value.errno == errno.ELOOP
    # The writability probe is a fresh name, made with O_EXCL | O_NOFOLLOW and removed: a link
    # planted under the name it once had is not opened.
    (run / ".write-test").symlink_to(target / "notes.txt")
    check_writable_dir(str(run), "--output_dir")
    assert sorted(p.name for p in run.iterdir()) == [".write-test", "progress.jsonl", "weights.pkl"]
    # A folder dsac writes into is made by dsac, never a link's target.
    (run / "tb").symlink_to(target / "folder")
    with pytest.raises(DsacError, match="is a symlink"):
        real_dir(str(run / "tb"))
    from dsac.output.tensorboard_log import TensorBoardLog

    with pytest.raises(DsacError, match="tb is a symlink"):
        TensorBoardLog(str(run / "tb"))
    # A checkpoint swap renames a linked checkpoint/ away (rename moves the link, not its target).
    (run / "checkpoint").symlink_to(target / "folder")
    write_checkpoint(str(run), {"updates": np.array(1)}, {"env_steps": 1, "updates": 1, "version": 1},
                     {"weights": {}})
    assert (run / "checkpoint").is_dir() and not (run / "checkpoint").is_symlink()
    assert snapshot(target) == before


# Names dsac writes or reads in a run directory, each planted as a link: a file name -> the
# outside file, a folder name -> the outside folder (checkpoint/state.npz: inside the checkpoint).
PLANTED = [*RUN_FILES, *RUN_FOLDERS, "checkpoint/state.npz"]


def _planted_run(tmp_path, k: int, name: str) -> str:
    run = tmp_path / f"run{k}"
    shutil.copytree(GOLDEN_RUN, run)
    target = tmp_path / "outside"
    if name in RUN_FOLDERS and (run / name).exists():
        shutil.rmtree(run / name)
    elif (run / name).exists():
        (run / name).unlink()
    (run / name).symlink_to(target / "folder" if name in RUN_FOLDERS else target / "notes.txt")
    return str(run)


def test_resume_and_restore_refuse_a_run_directory_with_a_planted_symlink_and_a_normal_one_resumes(tmp_path):
    """Every name, as ``--resume`` (one process for all) and as ``Trainer.restore``; an
    ``--output_dir`` with a linked ``tb/``; and the real run resumed, a link planted under the
    probe's old name ``.write-test`` left untouched."""
    target = outside(tmp_path)
    runs = {name: _planted_run(tmp_path, k, name) for k, name in enumerate(PLANTED)}
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "tb").symlink_to(target / "folder")
    normal = tmp_path / "normal"
    shutil.copytree(GOLDEN_RUN, normal)
    (normal / ".write-test").symlink_to(target / "notes.txt")
    before = snapshot(target)
    ray_dir = tmp_path / "ray"
    launch_py = os.path.join(REPO_ROOT, "launch.py")
    cases = [["--resume", run] for run in runs.values()]
    cases.append(["--local", "--output_dir", str(fresh), "--total_env_steps", "200"])
    cases.append(["--resume", str(normal), "--total_env_steps", "400", "--no-progress_bar"])
    (tmp_path / "batch").mkdir()
    results = run_in_one_process([{"program": launch_py, "args": args, "cwd": tmp_path,
                                   "env": {"RAY_TMPDIR": str(ray_dir), "TF_CPP_MIN_LOG_LEVEL": "3"}}
                                  for args in cases], tmp_path / "batch")
    *refused, resumed = results
    for name, result in zip([*PLANTED, "tb"], refused, strict=True):
        lines = result.stderr.strip().splitlines()
        where = f"{name}: exit {result.returncode}, stderr {result.stderr[-1500:]!r}"
        assert result.returncode == 2 and len(lines) == 1, where
        assert lines[0].startswith("dsac: error: --") and f"{name} is a symlink" in lines[0], where
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((normal / "progress.jsonl").read_text().splitlines()[-1])["env_steps"] == 400
    assert json.loads((normal / "config.json").read_text())["dsac_record"] == 1
    assert (normal / ".write-test").is_symlink()
    assert not ray_dir.exists()

    from dsac import Trainer

    for name, run in runs.items():
        with pytest.raises(DsacError, match=f"^Trainer.restore {run}: {name} is a symlink") as info:
            Trainer.restore(run, trust_code=True)
        assert "\n" not in str(info.value)
    assert snapshot(target) == before


def test_a_fifo_planted_for_a_file_dsac_writes_is_refused_not_waited_on(tmp_path):
    """A FIFO under a name dsac appends to (progress.jsonl) would block the first write for good:
    the run directory is refused in one line, and the write itself fails at once."""
    from dsac.formats.files import check_run_dir, open_for_writing

    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / "progress.jsonl")
    with pytest.raises(DsacError, match=re.escape("progress.jsonl is not a regular file")):
        check_run_dir(str(run), "--resume")
    with pytest.raises(OSError):  # ENXIO: no reader, and O_NONBLOCK does not wait for one
        open_for_writing(str(run / "progress.jsonl"), append=True)


def _filled(prefix: str, unit: str, suffix: str, size: int) -> str:
    """A document of ``size`` bytes at most: ``prefix``, as many ``unit`` as fit, ``suffix``."""
    return (prefix + unit * ((size - len(prefix) - len(suffix)) // len(unit))).rstrip(",") + suffix


def test_a_json_or_yaml_file_dsac_parses_takes_a_bounded_memory(tmp_path):
    """A parser builds an object per bracket, so a document's memory is a multiple of its size:
    the issue's 16 MiB config.json of empty lists (475 MB before its refusal), as --config, as
    a run's config.json and as a checkpoint's meta.json, is refused unread; the densest
    documents within the limits (JSON_LIMIT of empty lists or dicts, YAML_LIMIT of flow lists,
    scalars or one-pair mappings) are parsed, then refused as flags, within the bound
    docs/safety.md states. One process for all; the first program (a small file) is the baseline."""
    from dsac.formats.files import JSON_LIMIT, YAML_LIMIT

    documents = {
        "small.json": '{"nonsense_flag": 1}',
        "issue.json": _filled("[", "[],", "]", 16 * 2**20),
        "lists.json": _filled("[", "[],", "]", JSON_LIMIT),
        "dicts.json": _filled('{"a": [', "{},", "]}", JSON_LIMIT),
        "lists.yaml": _filled("a: [", "[],", "]", YAML_LIMIT),
        "scalars.yaml": _filled("a: [", "a,", "]", YAML_LIMIT),
        "pairs.yaml": _filled("a: [", "?,", "]", YAML_LIMIT),  # a one-pair mapping per 2 bytes
    }
    for name, text in documents.items():
        (tmp_path / name).write_text(text)
    record, meta = tmp_path / "record", tmp_path / "meta"
    for run, inside in ((record, "config.json"), (meta, "checkpoint/meta.json")):
        shutil.copytree(GOLDEN_RUN, run)
        shutil.copy(tmp_path / "issue.json", run / inside)
    launch_py = os.path.join(REPO_ROOT, "launch.py")
    cases = [(["--config", str(tmp_path / name)], fact) for name, fact in [
        ("small.json", "unknown config key 'nonsense_flag'"),
        ("issue.json", "issue.json is 16 MiB, more than the 1 MiB"),
        ("lists.json", "must hold a mapping"),
        ("dicts.json", "unknown config key 'a'"),
        ("lists.yaml", "unknown config key 'a'"),
        ("scalars.yaml", "unknown config key 'a'"),
        ("pairs.yaml", "unknown config key 'a'"),
    ]]
    cases += [(["--resume", str(record)], "config.json is 16 MiB, more than the 1 MiB"),
              (["--resume", str(meta)], "checkpoint/meta.json is 16 MiB, more than the 1 MiB")]
    (tmp_path / "batch").mkdir()
    results = run_in_one_process([{"program": launch_py, "args": args} for args, _ in cases], tmp_path / "batch")
    for (args, fact), result in zip(cases, results, strict=True):
        lines = result.stderr.strip().splitlines()
        where = f"{args}: exit {result.returncode}, peak {result.peak_rss_mb:.0f} MB, {result.stderr[-800:]!r}"
        assert result.returncode == 2 and len(lines) == 1 and fact in lines[0], where
        assert result.peak_rss_mb - results[0].peak_rss_mb < 64, where  # docs/safety.md: at most 64 MiB
