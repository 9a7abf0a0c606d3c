"""A checkpoint is crash-safe at every instant (docs/guide.md#output): a process killed anywhere
in ``write_checkpoint`` — while the new folder is written, after it is whole, after each rename,
in the middle of a removal — leaves a run whose newest whole checkpoint is read, never a
half-written one, and whose next checkpoints are written as if nothing had happened."""

import json
import os
import pathlib
import shutil
import tempfile

import gymnasium as gym
import numpy as np
import pytest
from conftest import REPO_ROOT, run_in_one_process

from dsac.envs.make import describe_space
from dsac.formats import checkpoints
from dsac.formats.checkpoints import read_checkpoint, write_checkpoint
from dsac.formats.files import CHECKPOINT_SLOTS

GOLDEN_RUN = os.path.join(REPO_ROOT, "tests", "data", "golden", "sac_pendulum")  # a serial SAC run, 300 env steps
ENV = gym.make("Pendulum-v1")
# What the writer does to the file system, one call a step: each is where a kill can land.
STEPS = ("open", "mkdir", "replace", "rename", "unlink", "rmdir", "fsync")


class Killed(BaseException):
    """The process died here (a BaseException, as nothing in dsac may catch a SIGKILL)."""


class Killer:
    """Counts the writer's file-system steps; from step ``at`` on, each raises :class:`Killed`
    before it happens, as a dead process does nothing more (no clean-up either)."""

    def __init__(self, monkeypatch, at: int | None):
        self.at, self.steps, self.whole = at, 0, False
        for name in STEPS:
            monkeypatch.setattr(os, name, self.wrap(getattr(os, name)))

    def wrap(self, real):
        def step(*args, **kwargs):
            if self.at is not None and self.steps >= self.at:
                raise Killed
            self.steps += 1
            result = real(*args, **kwargs)
            if real is REAL_REPLACE and os.path.basename(args[1]) == "meta.json":
                self.whole = True  # meta.json is written last: from here on the new checkpoint is whole
            return result
        return step


REAL_REPLACE = os.replace


def generation(run, g: int, monkeypatch=None, at: int | None = None) -> Killer | None:
    """Checkpoint number ``g`` (its counters, state, replay and weights all say ``g``), written
    into ``run``; with ``at``, killed at that step. Returns the killer (None without one)."""
    payload = {"algo": "sac", "env": "Pendulum-v1", "observation_space": describe_space(ENV.observation_space),
               "action_space": describe_space(ENV.action_space), "weights": {"w": np.full(3, g, np.float32)}}
    args = (str(run), {"updates": np.array(g), "x": np.full(50, g, np.float64)},
            {"env_steps": 10 * g, "updates": g, "version": g}, payload, [{"data/reward": np.full(g, g, np.float32)}])
    if monkeypatch is None:
        write_checkpoint(*args)
        return None
    with monkeypatch.context() as patch:
        killer = Killer(patch, at)
        try:
            write_checkpoint(*args)
        except Killed:
            pass
    return killer


def read_generation(run) -> int:
    """The generation ``read_checkpoint`` gives, checked to be one checkpoint's files, not a mix."""
    checkpoint = read_checkpoint(str(run))
    g = checkpoint["meta"]["updates"]
    assert checkpoint["meta"]["env_steps"] == 10 * g and int(checkpoint["state"]["updates"]) == g
    assert (checkpoint["state"]["x"] == g).all() and (checkpoint["weights"]["w"] == g).all()
    assert len(checkpoint["replay"][0]["data/reward"]) == g
    return g


@pytest.fixture
def scratch(tmp_path):
    """Where the runs go: a tmpfs folder when there is one (the writer's steps are the same, and
    its fsyncs cost nothing there, so every pair of kills fits in a few seconds)."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    path = tempfile.mkdtemp(dir="/dev/shm", prefix="checkpoint-crash-")
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


def whole(tmp_path, g: int):
    """A whole checkpoint folder of generation ``g``, as the writer leaves it (made once)."""
    scratch = tmp_path / f"generation-{g}"
    if not scratch.exists():
        scratch.mkdir()
        (scratch / "config.json").write_text(json.dumps({"buffer_size": 100}))
        generation(scratch, g)
    return scratch / "checkpoint"


def test_a_write_killed_at_any_step_leaves_the_newest_whole_checkpoint_and_the_next_writes_go_on(
        scratch, monkeypatch):
    """Every step of a write killed in turn (after generation 1), and after each, every step of
    the next write killed in turn (two kills in a row), each followed by a read and a clean
    write: the read gives the newest generation whose write got its meta.json in (never a
    half-written one), and the clean write leaves checkpoint/ alone in the run directory."""
    template = whole(scratch, 1).parent
    total = generation(whole(scratch, 2).parent, 3, monkeypatch).steps  # a whole write over one, none killed
    assert total > 10
    tried = 0
    for first in range(total + 1):
        for second in [None, *range(total + 1)]:
            run = scratch / "run"
            shutil.copytree(template, run)
            expected = 2 if generation(run, 2, monkeypatch, at=first).whole else 1
            if second is not None and generation(run, 3, monkeypatch, at=second).whole:
                expected = 3
            where = f"killed at step {first}, then {second}: {sorted(os.listdir(run))}"
            assert read_generation(run) == expected, where
            generation(run, 4)
            assert read_generation(run) == 4, where
            assert sorted(os.listdir(run)) == ["checkpoint", "config.json"], where
            shutil.rmtree(run)
            tried += 1
    assert tried == (total + 1) * (total + 2)


def test_a_folder_missing_any_file_is_passed_over_for_the_older_whole_one(tmp_path):
    """A folder being removed loses its files in whatever order the file system lists them: a
    checkpoint.new/ or checkpoint/ without any one of its files is passed over for the next
    whole one; and a leftover that is no whole checkpoint (the issue's checkpoint.old/ holding
    a meta.json) is not read and does not stop the next write."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"buffer_size": 100}))
    names = sorted(os.listdir(whole(tmp_path, 3)))
    assert names == ["meta.json", "replay_0.npz", "state.npz", "weights.pkl"]
    for cut, expected in [("checkpoint.new", 2), ("checkpoint", 1)]:
        for name in names:
            for slot, g in zip(CHECKPOINT_SLOTS, (3, 2, 1), strict=True):
                shutil.rmtree(run / slot, ignore_errors=True)
                if slot != "checkpoint.new" or cut == slot:
                    shutil.copytree(whole(tmp_path, g), run / slot)
            os.unlink(run / cut / name)
            assert checkpoints.newest_checkpoint(str(run)) != cut, (cut, name)
            assert read_generation(run) == expected, (cut, name)
    for slot in CHECKPOINT_SLOTS:
        shutil.rmtree(run / slot, ignore_errors=True)
    shutil.copytree(whole(tmp_path, 2), run / "checkpoint")
    (run / "checkpoint.old").mkdir()
    shutil.copy(run / "checkpoint" / "meta.json", run / "checkpoint.old")
    assert read_generation(run) == 2
    generation(run, 5)
    assert read_generation(run) == 5 and sorted(os.listdir(run)) == ["checkpoint", "config.json"]


def test_resume_of_a_run_killed_mid_checkpoint_exits_0_with_its_checkpoint_saved(tmp_path):
    """``launch.py --resume`` of a run a kill left mid-write, in one process: (a) a non-empty
    checkpoint.old/ beside checkpoint/ (the kill during the removal: the issue's reproduction,
    which lost the resumed segment's checkpoint and summary.json with a traceback, exit 1), and
    (b) checkpoint/ renamed to checkpoint.old/ beside a whole checkpoint.new/ (the kill between
    the renames). Each resumes from the checkpoint, exits 0, and leaves its new checkpoint
    (400 env steps), summary.json and nothing else of the swap."""
    leftover, between = tmp_path / "leftover", tmp_path / "between"
    shutil.copytree(GOLDEN_RUN, leftover)
    (leftover / "checkpoint.old").mkdir()
    for name in ("meta.json", "weights.pkl"):
        shutil.copy(leftover / "checkpoint" / name, leftover / "checkpoint.old")
    shutil.copytree(GOLDEN_RUN, between)
    shutil.copytree(between / "checkpoint", between / "checkpoint.new")
    os.rename(between / "checkpoint", between / "checkpoint.old")
    programs = [{"program": os.path.join(REPO_ROOT, "launch.py"), "env": {"TF_CPP_MIN_LOG_LEVEL": "3"},
                 "args": ["--resume", str(run), "--local", "--total_env_steps", "400", "--eval_every", "100",
                          "--eval_episodes", "1", "--progress_bar", "false"]} for run in (leftover, between)]
    (tmp_path / "batch").mkdir()
    for run, result in zip((leftover, between), run_in_one_process(programs, tmp_path / "batch"), strict=True):
        assert result.returncode == 0, (run.name, result.stderr[-2000:])
        assert read_checkpoint(str(run))["meta"]["env_steps"] == 400, run.name
        assert json.loads((run / "summary.json").read_text())["env_steps"] == 400, run.name
        assert not {"checkpoint.old", "checkpoint.new"} & set(os.listdir(run)), run.name
