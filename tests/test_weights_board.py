"""The node's shared-memory weights board: versions reach readers without a call, a torn or
outgrown write is never read as a version, the writer learns what each worker acts with, and
a parameter server publishes there; and nothing another user (or root) leaves in the way is
ever opened for writing, decoded as a pickle, adopted or removed, nor crashes a reader:
planted data files, planted or foreign boards, a folder not ours, altered payloads (real
files in the machine's shared-memory folder or a test's own, real readers, a real Ray actor,
one real run)."""

from __future__ import annotations

import json
import logging
import os
import pickle
import secrets
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
import ray
from conftest import REPO_ROOT

from dsac.distributed import board_files
from dsac.distributed import board_format as fmt
from dsac.distributed import weights_board as wb
from dsac.distributed.actors import ParameterServer
from dsac.distributed.weights_client import BOARD_CHECK_EVERY, WeightsClient, open_board
from dsac.runtime.messages import LearnerReport


@pytest.fixture
def name():
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    wb.remove_boards([name])


def data_path(name: str, generation: int) -> str:
    return os.path.join(wb.board_dir(), board_files.data_file(name, generation))


def weights(value: float, size: int = 1000) -> dict:
    return {"pi/w": np.full((size,), value, np.float32), "pi/b": np.arange(3, dtype=np.float32) * value}


def test_a_reader_takes_each_newer_version_and_the_writer_learns_what_it_acts_with(name):
    writer = wb.BoardWriter(name, num_slots=3)
    reader = wb.BoardReader.open(name, slot=1)
    assert reader is not None and reader.newer(0) is None  # nothing published yet
    writer.publish(1, weights(1.0), LearnerReport(updates=10))
    version, got, report = reader.newer(0)
    assert version == 1 and report.updates == 10
    np.testing.assert_array_equal(got["pi/w"], weights(1.0)["pi/w"])
    assert reader.newer(1) is None  # nothing newer: one counter read
    reader.took(1, 0)
    writer.publish(3, weights(3.0), LearnerReport(updates=30))
    assert reader.newer(1)[0] == 3
    reader.took(3, 1)
    held, lags, age = writer.readers()
    assert held == {1: 3} and lags == [(1, 1)] and 0 <= age < 5  # the two takes read as one
    assert writer.readers()[1] == []  # no take since: nothing to report
    writer.close()


def test_a_payload_that_outgrows_the_data_file_moves_to_a_new_generation(name):
    writer = wb.BoardWriter(name, num_slots=1)
    reader = wb.BoardReader.open(name, slot=0)
    writer.publish(1, weights(1.0, size=10), None)
    assert reader.newer(0)[0] == 1
    first = writer.generation
    writer.publish(2, weights(2.0, size=200_000), None)  # 800 KB: past 2 x the first + 64 KiB
    assert writer.generation != first
    assert not os.path.exists(data_path(name, first))  # the old one is unlinked
    version, got, _ = reader.newer(1)
    assert version == 2 and got["pi/w"].shape == (200_000,) and got["pi/w"][-1] == 2.0
    writer.close()


def test_a_write_in_progress_is_never_read(name):
    writer = wb.BoardWriter(name, num_slots=1)
    reader = wb.BoardReader.open(name)
    writer.publish(1, weights(1.0), None)
    writer.seq += 1  # as a writer that stopped half-way: the counter is odd
    fmt.SEQ.pack_into(writer.board, fmt.SEQ_AT, writer.seq)
    assert reader.newer(0) is None
    restarted = wb.BoardWriter(name, num_slots=1)  # its restart: the counter goes on, even
    assert restarted.seq > writer.seq and restarted.seq % 2 == 0
    restarted.publish(2, weights(2.0), None)
    assert reader.newer(0)[0] == 2
    restarted.close()


def test_a_reader_that_leaves_clears_its_slot_and_a_restarted_one_counts_on(name):
    writer = wb.BoardWriter(name, num_slots=2)
    writer.publish(1, weights(1.0), None)
    reader = wb.BoardReader.open(name, slot=0)
    reader.took(reader.newer(0)[0], 0)
    assert writer.readers()[0] == {0: 1}
    reader.close()  # e.g. it pulls the server from now on: no stale version reported for it
    assert writer.readers()[0] == {}
    again = wb.BoardReader.open(name, slot=0)  # the worker restarted in the same slot
    writer.publish(2, weights(2.0), None)
    again.took(again.newer(1)[0], 0)
    held, lags, _ = writer.readers()
    assert held == {0: 2} and lags == [(0, 0)]  # its take is seen, though its process is new
    writer.close()


def test_boards_whose_writer_died_long_ago_are_swept(name):
    writer = wb.BoardWriter(name, num_slots=1)
    writer.publish(1, weights(1.0), None)
    data = data_path(name, writer.generation)
    fmt.BEAT.pack_into(writer.board, fmt.BEAT_AT, time.monotonic() - 3600)  # killed an hour ago
    writer.close(unlink=False)
    wb.sweep_stale(max_age_s=600)
    assert not os.path.exists(wb.board_path(name)) and not os.path.exists(data)


def test_stop_flag_heartbeat_and_no_board_here(name):
    assert wb.BoardReader.open(f"absent-{name}") is None
    writer = wb.BoardWriter(name, num_slots=1)
    reader = wb.BoardReader.open(name, slot=0)
    assert reader.heartbeat_age() < 5 and not reader.stopped()
    fmt.BEAT.pack_into(writer.board, fmt.BEAT_AT, time.monotonic() - 60)  # a writer that died a minute ago
    assert reader.heartbeat_age() > wb.STALE_S
    writer.stop()
    writer.close(unlink=True)  # unlinked: the reader's mapping still says stop
    assert reader.stopped() and not os.path.exists(wb.board_path(name))


class _Policy:
    def __init__(self):
        self.weights, self.has_weights = None, False

    def set_weights(self, weights):
        self.weights, self.has_weights = weights, True


def test_a_parameter_server_publishes_on_its_board_and_reads_its_workers_there(ray_local, name):
    ps = ParameterServer.options(num_cpus=0).remote(0, board=name, num_workers=2)
    ray.get(ps.push.remote(weights(1.0), LearnerReport(updates=5)))
    client = WeightsClient(ps, _Policy(), worker=1, board=name).start()
    assert client.board is not None and client._thread is None  # no receiver thread: the board
    client.poll()
    assert client.version == 1 and client.report.updates == 5
    ray.get(ps.push.remote(weights(2.0), LearnerReport(updates=6)))
    client.poll()
    assert client.version == 2 and client.policy.weights["pi/b"][1] == 2.0
    deadline = time.monotonic() + 10
    while ray.get(ps.status.remote())["held"].get(1) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    lag = ray.get(ps.status.remote())
    assert lag["held"] == {1: 2} and lag["pulls_answered"] == 0  # the worker made no call
    assert ray.get(ps.status.remote(drain_synced=True))["synced"]  # push -> acting with it, read from the board
    ray.get(ps.stop.remote())
    client.poll()
    assert client.stop and not os.path.exists(wb.board_path(name))
    client.close()
    ray.kill(ps)


def test_a_reader_whose_board_stopped_beating_pulls_the_server(ray_local, name):
    ps = ParameterServer.options(num_cpus=0).remote(0)
    ray.get(ps.push.remote(weights(1.0)))
    writer = wb.BoardWriter(name, num_slots=1)  # a board nobody writes any more
    fmt.BEAT.pack_into(writer.board, fmt.BEAT_AT, time.monotonic() - 60)
    client = WeightsClient(ps, _Policy(), worker=0, board=name).start()
    client._board_checked -= 2  # its next check looks at the heartbeat
    client.poll()
    assert client.board is None and client._thread is not None  # the receiver thread pulls the server
    deadline = time.monotonic() + 10
    while client.version < 1 and time.monotonic() < deadline:
        client.poll()
        time.sleep(0.02)
    assert client.version == 1
    ray.get(ps.stop.remote())
    client.close()
    writer.close()
    ray.kill(ps)


# A pickle that creates ``path`` when unpickled: what a planted file would run in a reader
# that decoded it with pickle.
class _Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def planted(path, content: bytes, mode: int, uid: int | None = None) -> None:
    with open(path, "wb") as f:
        f.write(content)
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, -1)


def refusals(caplog) -> list[str]:
    messages = [r.getMessage() for r in caplog.records]
    return [m for m in messages if "not used" in m or "pulls the parameter" in m]


FOREIGN_UID = 65534  # nobody


def test_a_data_file_planted_under_its_name_is_never_opened_and_never_unpickled(name, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    bait = pickle.dumps({"weights": _Marker(marker)}) + b"\0" * 4096
    writer = wb.BoardWriter(name, num_slots=1)
    ids = iter([0x1234, 0x5678])  # the writer's next data file ids: the first guessed by whoever planted it
    monkeypatch.setattr(secrets, "randbits", lambda bits: next(ids) - 1)
    trap = data_path(name, 0x1234)
    planted(trap, bait, 0o666)  # world-writable, there before the writer makes its data file
    writer.publish(1, weights(1.0), LearnerReport(updates=1, stats={"loss": 0.5}))
    assert writer.generation == 0x5678  # the name was taken: a fresh one, made O_EXCL
    assert open(trap, "rb").read() == bait and os.stat(trap).st_mode & 0o777 == 0o666  # never written
    reader = wb.BoardReader.open(name, slot=0)
    version, got, report = reader.newer(0)
    assert version == 1 and report.stats == {"loss": 0.5} and got["pi/w"][0] == 1.0
    # A header that names the planted file: a reader refuses it (world-writable) without decoding it.
    fmt.FIELDS.pack_into(writer.board, fmt.FIELDS_AT, 2, 0x1234, len(bait))
    writer.seq += 2
    fmt.SEQ.pack_into(writer.board, fmt.SEQ_AT, writer.seq)
    assert reader.newer(1) is None and "lets others in" in reader.refused
    # Even a file of ours, 0600, holding a pickle: decoded without pickle, refused.
    os.chmod(trap, 0o600)
    second = wb.BoardReader.open(name)
    assert second.newer(1) is None and second.newer(1) is None and "changed by something else" in second.refused
    assert not marker.exists()  # no code ran
    writer.close()
    assert os.path.exists(trap)  # not the writer's to remove
    os.unlink(trap)


@pytest.mark.parametrize("how", ["world-writable", "group-readable", "foreign", "symlink", "fifo"])
def test_a_planted_or_foreign_board_is_skipped_with_one_line_then_replaced_by_its_writer(name, how, caplog, tmp_path):
    path = wb.board_path(name)
    os.makedirs(wb.board_dir(), mode=0o700, exist_ok=True)
    header = fmt.HEADER.pack(fmt.MAGIC, 2, 5, 0x1234, 64, time.monotonic(), 0) + b"\xff" * fmt.SLOT.size
    if how == "symlink":
        target = tmp_path / "elsewhere"
        planted(target, header, 0o600)
        os.symlink(target, path)
    elif how == "fifo":
        os.mkfifo(path, 0o600)  # an open for reading would block on it
    else:
        modes = {"world-writable": (0o666, None), "group-readable": (0o640, None), "foreign": (0o600, FOREIGN_UID)}
        mode, uid = modes[how]
        planted(path, header, mode, uid)
    with caplog.at_level(logging.WARNING, logger="dsac"):
        assert all(wb.BoardReader.open(name, slot=0) is None for _ in range(3))
        assert open_board(name, 0, wait_s=0.2) is None  # its caller pulls the parameter server
        assert len(refusals(caplog)) == 1, refusals(caplog)  # once, not per check
        caplog.clear()
        before = os.lstat(path)
        writer = wb.BoardWriter(name, num_slots=1)  # the name is ours: a new board replaces the entry
    assert "not used" in caplog.text and os.lstat(path).st_ino != before.st_ino
    if how == "symlink":
        assert open(target, "rb").read() == header  # never written through
    writer.publish(1, weights(1.0), None)
    reader = wb.BoardReader.open(name, slot=0)
    assert reader.newer(0)[0] == 1
    reader.close()
    writer.close()


@pytest.mark.parametrize("how", ["foreign", "group-writable", "symlink", "file"])
def test_a_folder_not_ours_turns_boards_off_for_the_run_and_nothing_in_it_is_touched(name, how, tmp_path, monkeypatch,
                                                                                     caplog):
    monkeypatch.setenv("DSAC_WEIGHTS_BOARD_DIR", str(tmp_path))
    folder = wb.board_dir()
    assert os.path.dirname(folder) == str(tmp_path)
    if how == "file":
        planted(folder, b"", 0o600)
    elif how == "symlink":
        os.mkdir(tmp_path / "theirs", 0o700)
        os.symlink(tmp_path / "theirs", folder)
    else:
        os.mkdir(folder)
        os.chmod(folder, 0o700 if how == "foreign" else 0o770)
        stale = os.path.join(folder, f"wb-{name}")  # a long-dead board: a sweep would remove one of ours
        planted(stale, fmt.HEADER.pack(fmt.MAGIC, 2, 1, 0, 0, time.monotonic() - 3600, 0), 0o600)
        if how == "foreign":
            os.chown(folder, FOREIGN_UID, -1)
    with caplog.at_level(logging.WARNING, logger="dsac"):
        loop = wb.BoardLoop(name, 1, report=lambda *a: None)
        assert loop.writer is None
        loop.publish(1, weights(1.0), None)  # a no-op: the readers pull the parameter server
        assert wb.BoardReader.open(name) is None and wb.BoardReader.open(name) is None
        started = time.monotonic()
        assert open_board(name, 0, wait_s=30.0) is None  # no board will come: no waiting for one
        assert time.monotonic() - started < 10.0
    lines = caplog.text.splitlines()
    assert len([x for x in lines if "not made" in x]) == 1 and len(refusals(caplog)) == 1, lines
    wb.sweep_stale(max_age_s=1)
    wb.remove_boards([name])
    if how in ("foreign", "group-writable"):
        assert os.path.exists(stale)


def test_sweeps_touch_only_our_own_files_in_our_own_folder(name, tmp_path):
    folder = wb.board_dir()
    os.makedirs(folder, mode=0o700, exist_ok=True)
    dead = fmt.HEADER.pack(fmt.MAGIC, 2, 1, 0x1234, 0, time.monotonic() - 3600, 0)
    theirs = os.path.join(folder, f"wb-{name}")
    planted(theirs, dead, 0o600, FOREIGN_UID)  # a dead board, but not ours
    their_data = data_path(name, 0x1234)
    planted(their_data, b"x", 0o600, FOREIGN_UID)
    os.utime(their_data, (time.time() - 3600,) * 2)
    outside = tmp_path / "outside"
    planted(outside, dead, 0o600)
    linked = os.path.join(folder, f"wb-{name}x")
    os.symlink(outside, linked)  # a dead board's header, through a link to a file elsewhere
    wb.sweep_stale(max_age_s=600)
    wb.remove_boards([name, f"{name}x"])
    assert os.path.exists(theirs) and os.path.exists(their_data) and os.path.lexists(linked) and outside.exists()
    for path in (theirs, their_data, linked):
        os.unlink(path)


def test_an_altered_payload_is_refused_and_a_torn_copy_is_read_again(name, caplog):
    writer = wb.BoardWriter(name, num_slots=1)
    reader = wb.BoardReader.open(name, slot=0)
    writer.publish(1, weights(1.0), None)
    assert reader.newer(0)[0] == 1
    writer.publish(2, weights(2.0), None)
    length = fmt.FIELDS.unpack_from(writer.board, fmt.FIELDS_AT)[2]
    writer.data[length - 4] ^= 0xFF  # as a copy that mixed two writes: not the bytes the checksum is of
    assert reader.newer(1) is None and reader.refused is None  # a torn copy: read again at the next check
    writer.publish(3, weights(3.0), None)  # the next write: read as it is
    version, got, _ = reader.newer(1)
    assert version == 3 and got["pi/w"][-1] == 3.0 and got["pi/w"].flags.writeable
    at = fmt.DATA_HEAD.size + 40  # inside the JSON header
    writer.publish(4, weights(4.0), None)
    with open(data_path(name, writer.generation), "r+b") as f:  # changed in the file, after the writer published
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x01]))
    with caplog.at_level(logging.WARNING, logger="dsac"):
        assert reader.newer(3) is None and reader.refused is None
        assert reader.newer(3) is None and "checksum mismatch" in reader.refused  # nothing written between: refused
        assert reader.newer(3) is None and len(refusals(caplog)) == 1
    writer.close()


def test_a_reader_whose_board_is_refused_pulls_the_server(ray_local, name):
    ps = ParameterServer.options(num_cpus=0).remote(0, board=name, num_workers=1)
    ray.get(ps.push.remote(weights(1.0), LearnerReport(updates=5)))
    (data,) = [e for e in os.listdir(wb.board_dir()) if e.startswith(f"wb-{name}.")]
    with open(os.path.join(wb.board_dir(), data), "r+b") as f:  # its payload altered after it was published
        f.seek(fmt.DATA_HEAD.size + 200)
        f.write(b"\0" * 8)
    client = WeightsClient(ps, _Policy(), worker=0, board=name).start()
    assert client.board is not None
    deadline = time.monotonic() + 10
    while client.board is not None and time.monotonic() < deadline:
        client._board_checked -= 2
        for _ in range(2 * BOARD_CHECK_EVERY):  # the first check's copy, then the one after it
            client.poll()
    assert client.board is None and client._thread is not None and client.version == 0
    while client.version < 1 and time.monotonic() < deadline:
        client.poll()
        time.sleep(0.02)
    assert client.version == 1 and client.report.updates == 5
    assert ray.get(ps.status.remote())["pulls_answered"] >= 1
    ray.get(ps.stop.remote())
    client.close()
    ray.kill(ps)


@pytest.mark.slow
def test_a_run_whose_board_folder_is_not_ours_pulls_the_server_and_finishes(tmp_path):
    """launch.py, CartPole DQN, with this user's folder of boards pre-created by another user:
    the server says it made no board, each reader says once that it uses none (at once: no
    board will appear in a refused folder), and the run finishes on pulls."""
    base = tmp_path / "shm"
    base.mkdir()
    folder = base / f"dsac-{os.geteuid()}"
    folder.mkdir(mode=0o700)
    os.chown(folder, FOREIGN_UID, -1)  # another user's, under our name
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["DSAC_WEIGHTS_BOARD_DIR"] = str(base)
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--algo", "dqn", "--env", "CartPole-v1",
         "--num_workers", "2", "--total_env_steps", "1500", "--learning_starts", "300", "--eval_every", "1500",
         "--eval_episodes", "1", "--fcnet_hiddens", "16", "--log_every", "1", "--seed", "1", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=240, cwd=REPO_ROOT, env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "total_env_steps" and summary["env_steps"] >= 1500, summary
    assert summary["failure"] is None and "Traceback" not in output, output[-6000:]
    assert "not made" in output and "owned by uid 65534" in output  # said by the server, and by its readers
    assert os.listdir(folder) == []  # nothing written in another user's folder


def test_a_coherent_payload_with_a_malformed_header_is_refused_not_raised():
    """A payload whose checksum matches but whose header names a dtype that is not a string is
    refused as not a writer's (it raised TypeError, which nothing caught in the worker)."""
    import zlib

    header = json.dumps({"version": 1, "arrays": [["a", ["x"], [1]]], "report": None}).encode()
    payload = bytearray(fmt.DATA_HEAD.size) + header
    fmt.DATA_HEAD.pack_into(payload, 0, fmt.DATA_MAGIC, len(header), zlib.crc32(payload[fmt.DATA_HEAD.size:]), 0)
    with pytest.raises(wb.BoardRefused, match="is not \\[new name, numeric dtype, shape\\]"):
        fmt.decode(payload, 1)
