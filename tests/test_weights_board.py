"""The node's shared-memory weights board: versions reach readers without a call, a torn or
outgrown write is never read as a version, the writer learns what each worker acts with, and
a parameter server publishes there (real files in the machine's shared-memory folder, a real
Ray actor)."""

from __future__ import annotations

import os
import time
import uuid

import numpy as np
import pytest
import ray

from dsac.distributed import weights_board as wb
from dsac.distributed.actors import ParameterServer
from dsac.distributed.tasks import WeightsClient
from dsac.messages import LearnerReport


@pytest.fixture
def name():
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    wb.remove_boards([name])


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
    assert writer.generation == first + 1
    assert not os.path.exists(f"{wb.board_path(name)}.{first}")  # the old one is unlinked
    version, got, _ = reader.newer(1)
    assert version == 2 and got["pi/w"].shape == (200_000,) and got["pi/w"][-1] == 2.0
    writer.close()


def test_a_write_in_progress_is_never_read(name):
    writer = wb.BoardWriter(name, num_slots=1)
    reader = wb.BoardReader.open(name)
    writer.publish(1, weights(1.0), None)
    writer.seq += 1  # as a writer that stopped half-way: the counter is odd
    wb.SEQ.pack_into(writer.board, wb.SEQ_AT, writer.seq)
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
    data = f"{wb.board_path(name)}.{writer.generation}"
    wb.BEAT.pack_into(writer.board, wb.BEAT_AT, time.monotonic() - 3600)  # killed an hour ago
    writer.close(unlink=False)
    wb.sweep_stale(max_age_s=600)
    assert not os.path.exists(wb.board_path(name)) and not os.path.exists(data)


def test_stop_flag_heartbeat_and_no_board_here(name):
    assert wb.BoardReader.open(f"absent-{name}") is None
    writer = wb.BoardWriter(name, num_slots=1)
    reader = wb.BoardReader.open(name, slot=0)
    assert reader.heartbeat_age() < 5 and not reader.stopped()
    wb.BEAT.pack_into(writer.board, wb.BEAT_AT, time.monotonic() - 60)  # a writer that died a minute ago
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
    while ray.get(ps.weights_lag.remote())["held"].get(1) != 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    lag = ray.get(ps.weights_lag.remote())
    assert lag["held"] == {1: 2} and lag["pulls_answered"] == 0  # the worker made no call
    assert ray.get(ps.sync_latencies.remote())  # push -> acting with it, read from the board
    ray.get(ps.stop.remote())
    client.poll()
    assert client.stop and not os.path.exists(wb.board_path(name))
    client.close()
    ray.kill(ps)


def test_a_reader_whose_board_stopped_beating_pulls_the_server(ray_local, name):
    ps = ParameterServer.options(num_cpus=0).remote(0)
    ray.get(ps.push.remote(weights(1.0)))
    writer = wb.BoardWriter(name, num_slots=1)  # a board nobody writes any more
    wb.BEAT.pack_into(writer.board, wb.BEAT_AT, time.monotonic() - 60)
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
