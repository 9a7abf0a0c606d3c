"""Replay ring, rate limiter, and the ReplayBuffer / ParameterServer actors on real Ray."""

import time

import numpy as np
import pytest

from dsac.errors import DsacError
from dsac.replay.buffer import RateLimiter, ReplayStorage, check_fits_in_memory, field_specs, storage_bytes
from dsac.runtime.messages import Chunk, LearnerOrders, LearnerReport

SPECS = field_specs((3,), np.float32, (1,), np.float32)
# A waiting call must be answered by the other side's move, not by its wait cap. An answer
# takes milliseconds on an idle machine; a 5 s cap and half of it as the bound keep the two
# apart on a loaded one (the 1 s default and 0.5 s left a loaded CI machine little room).
WAIT_CAP_S = 5.0
WOKEN_WITHIN_S = WAIT_CAP_S / 2


def chunk(start: int, n: int) -> dict:
    """Transitions whose every field encodes their index start..start+n-1."""
    i = np.arange(start, start + n, dtype=np.float32)
    return {
        "obs": np.repeat(i[:, None], 3, axis=1),
        "action": i[:, None],
        "reward": i,
        "next_obs": np.repeat(i[:, None] + 0.5, 3, axis=1),
        "terminated": (i % 2).astype(np.float32),
        "discount": np.full(n, 0.99, np.float32),
    }


def test_ring_wraps_around_and_keeps_the_newest():
    storage = ReplayStorage(SPECS, capacity=5)
    storage.add(chunk(0, 3))
    storage.add(chunk(3, 4))  # 3..6: 5 and 6 overwrite slots 0 and 1
    assert (storage.size, storage.added, storage.next_index) == (5, 7, 2)
    np.testing.assert_array_equal(storage.data["reward"], [5, 6, 2, 3, 4])
    np.testing.assert_array_equal(storage.data["next_obs"][:, 0], [5.5, 6.5, 2.5, 3.5, 4.5])
    storage.add(chunk(100, 12))  # longer than the ring: only the newest 5 survive
    assert sorted(storage.data["reward"].tolist()) == [107, 108, 109, 110, 111]
    assert storage.added == 19


def test_sample_shapes_and_consistency():
    storage = ReplayStorage(SPECS, capacity=100, seed=1)
    storage.add(chunk(0, 40))
    batches = storage.sample(batch_size=8, num_batches=3).batches
    assert batches["obs"].shape == (3, 8, 3) and batches["action"].shape == (3, 8, 1)
    assert batches["reward"].shape == (3, 8)
    # Fields of one transition stay together, and only stored transitions come out.
    np.testing.assert_array_equal(batches["obs"][..., 0], batches["reward"])
    np.testing.assert_array_equal(batches["next_obs"][..., 0], batches["reward"] + 0.5)
    assert batches["reward"].max() < 40 and storage.sampled_batches == 3
    draws = storage.sample(batch_size=1000, num_batches=8).batches["reward"]
    counts = np.bincount(draws.astype(int).ravel(), minlength=40)
    assert counts.min() > 100  # uniform: ~200 draws of each of the 40


def test_wide_float_observations_are_stored_as_the_float32_the_networks_read():
    """MuJoCo's float64 observations are kept as float32 (half the replay's gathers and sample
    bytes); the networks read float32 (``ObsInput.input_dtype``), so a sample equals the cast of
    what was added. Other dtypes are kept as they come."""
    from dsac.models.vision import ObsInput

    specs = field_specs((3,), np.float64, (1,), np.float32)
    assert specs["obs"][1] == specs["next_obs"][1] == np.float32
    assert ObsInput((3,), "float64").input_dtype == "float32"
    assert field_specs((3,), np.uint8, (1,), np.float32)["obs"][1] == np.uint8
    assert field_specs((3,), np.int64, (1,), np.float32)["obs"][1] == np.int64
    storage = ReplayStorage(specs, capacity=8)
    added = {**chunk(0, 8), "obs": np.random.default_rng(0).normal(size=(8, 3)) * 1e3}
    storage.add(added)
    sampled = storage.sample(4, 2).batches
    assert sampled["obs"].dtype == np.float32
    rows = sampled["reward"].astype(int)  # each transition's index
    np.testing.assert_array_equal(sampled["obs"], added["obs"][rows].astype(np.float32))
    assert storage_bytes(100, specs) == 100 * 4 * (3 + 1 + 1 + 3 + 1 + 1)


def test_rate_limiter_keeps_the_ratio():
    limiter = RateLimiter(updates_per_step=0.5, learning_starts=100, max_steps_ahead=50)
    assert not limiter.can_sample(inserted=99, sampled=0, num_batches=4)
    assert limiter.can_sample(inserted=100, sampled=0, num_batches=4)
    assert not limiter.can_sample(inserted=100, sampled=4, num_batches=4)
    assert limiter.can_sample(inserted=108, sampled=4, num_batches=4)  # 0.5 * 8 = 4 allowed
    assert limiter.insert_headroom(inserted=0, sampled=0, outstanding=0) == 150
    assert limiter.insert_headroom(inserted=150, sampled=0, outstanding=0) == 0
    assert limiter.insert_headroom(inserted=150, sampled=10, outstanding=5) == 15
    # Collection may also run one learner call ahead (4 batches = 8 steps at 0.5), as the
    # learner may: writers keep collecting while the call's window closes.
    ahead = RateLimiter(updates_per_step=0.5, learning_starts=100, max_steps_ahead=50, batches_per_call=4)
    assert ahead.insert_headroom(inserted=150, sampled=0, outstanding=0) == 8
    assert ahead.insert_headroom(inserted=150, sampled=10, outstanding=5) == 23
    assert ahead.can_sample(inserted=108, sampled=4, num_batches=4) and not ahead.can_sample(
        inserted=107, sampled=4, num_batches=4)  # the learner's side is unchanged


def test_memory_check_refuses_what_cannot_fit():
    nbytes = storage_bytes(10**6, SPECS)
    assert nbytes == 10**6 * 4 * (3 + 1 + 1 + 3 + 1 + 1)  # obs, action, reward, next_obs, terminated, discount
    check_fits_in_memory(nbytes, available=10**9, where="here")
    with pytest.raises(DsacError, match="lower --buffer_size"):
        check_fits_in_memory(nbytes, available=10**7, where="here")


def test_replay_actor_grants_budgets_and_throttles(ray_local):
    ray = ray_local
    from dsac.distributed.actors import ReplayBuffer

    replay = ReplayBuffer.remote(
        SPECS, 1000, updates_per_step=1.0, learning_starts=20, max_steps_ahead=10, num_writers=2,
        max_chunk=64,
    )
    status = ray.get(replay.add.remote(0, None))
    assert status.grant > 0 and status.added == 0
    assert ray.get(replay.sample.remote(4, 2)) is None  # fewer than learning_starts
    ray.get(replay.add.remote(0, Chunk(chunk(0, 15))))
    status = ray.get(replay.add.remote(1, Chunk(chunk(15, 15))))
    assert status.added == 30
    sampled = ray.get(replay.sample.remote(4, 2))
    assert sampled.batches["obs"].shape == (2, 4, 3) and sampled.env_steps == 30 and sampled.indices is None
    # 30 inserted, 20 to start, 1 update per step: 10 batches, plus one call of slack.
    ray.get(replay.sample.remote(4, 8))
    assert ray.get(replay.sample.remote(4, 2)) is not None  # 12 sampled: the one call of slack
    started = time.monotonic()
    assert ray.get(replay.sample.remote(4, 2)) is None  # ahead of the ratio: waits, then gives up
    assert time.monotonic() - started >= 0.5
    # 40 inserted against a limit of 20 + 12 + 10: 2 steps of budget left. Writer 1 has been
    # waiting in line since its last call, so writer 0, which just delivered, does not get them.
    assert ray.get(replay.add.remote(0, Chunk(chunk(30, 10)))).grant == 0
    assert ray.get(replay.add.remote(1, None)).grant == 2
    # Collection is now ahead by max_steps_ahead: nobody gets budget.
    assert ray.get(replay.add.remote(0, None)).grant == 0
    stats = ray.get(replay.stats.remote())
    assert (stats.added, stats.sampled_batches, stats.size) == (40, 12, 40)
    # stop() releases a waiting caller at once.
    waiting = replay.add.remote(1, None)
    ray.get(replay.stop.remote())
    assert ray.get(waiting).stop is True


def test_a_writer_that_keeps_budget_is_answered_at_once_and_its_budget_counts(ray_local):
    """A writer goes on collecting with the budget it kept while its add call is in flight: the
    shard answers it at once, tops it up to at most ``max_chunk`` from headroom nobody waits for,
    and counts what it kept as outstanding, so the ratio holds over all writers."""
    ray = ray_local
    from dsac.distributed.actors import ReplayBuffer

    # 100 to start, 20 ahead: 120 steps of headroom before the first sample; min grant 5.
    # A long wait cap, so that "answered at once" below is told from a timeout by a wide margin.
    replay = ReplayBuffer.remote(
        SPECS, 1000, updates_per_step=1.0, learning_starts=100, max_steps_ahead=20, num_writers=2,
        max_chunk=64, max_wait_s=WAIT_CAP_S,
    )
    assert ray.get(replay.add.remote(0, None)).grant == 60  # half the headroom
    status = ray.get(replay.add.remote(0, Chunk(chunk(0, 10)), 50))  # keeps 50: topped up to 64
    assert (status.added, status.grant) == (10, 14)
    assert ray.get(replay.add.remote(1, None)).grant == 23  # 120 - 10 in - 64 held: half of 46
    assert ray.get(replay.add.remote(1, Chunk(chunk(10, 23)))).grant == 11  # 120 - 33 - 64 = 23
    assert ray.get(replay.add.remote(0, Chunk(chunk(33, 60)), 4)).grant == 6  # 120 - 93 - 4 - 11 = 12
    assert ray.get(replay.add.remote(1, Chunk(chunk(93, 11)))).grant == 5  # 120 - 104 - 10 = 6
    blocked = replay.add.remote(1, Chunk(chunk(104, 5)))  # 120 - 109 - 10 = 1: waits in line
    time.sleep(0.2)
    started = time.monotonic()
    assert ray.get(replay.add.remote(0, Chunk(chunk(109, 4)), 6)).grant == 0  # someone waits: no top-up
    assert time.monotonic() - started < WOKEN_WITHIN_S  # answered at once: it still collects with its 6
    ray.get(replay.sample.remote(4, 13))  # 113 in: 13 batches, 13 more steps of headroom
    assert ray.get(blocked).grant == 7  # 133 - 113 - 6 held = 14, half of it
    assert ray.get(replay.stats.remote()).added == 113


def test_parameter_server_versions_and_pull_newer_than(ray_local):
    ray = ray_local
    from dsac.distributed.actors import ParameterServer

    ps = ParameterServer.remote()
    assert ray.get(ps.pull.remote(0)).weights is None
    w1 = {"a": np.zeros(3, np.float32)}
    w2 = {"a": np.ones(3, np.float32)}
    assert ray.get(ps.push.remote(w1, LearnerReport(updates=10))).version == 1
    assert ray.get(ps.push.remote(w2, LearnerReport(updates=20))).version == 2
    reply = ray.get(ps.pull.remote(0))
    assert reply.version == 2 and reply.report.updates == 20
    assert isinstance(reply.weights, ray.ObjectRef)  # one copy per version in the object store
    np.testing.assert_array_equal(ray.get(reply.weights)["a"], w2["a"])
    by_value = ParameterServer.remote(by_reference=False)
    ray.get(by_value.push.remote(w2))
    np.testing.assert_array_equal(ray.get(by_value.pull.remote(0)).weights["a"], w2["a"])
    assert ray.get(ps.pull.remote(2)).weights is None  # nothing newer: cheap reply
    assert ray.get(ps.pull.remote(1)).weights is not None
    assert ray.get(ps.status.remote(telemetry=False))["version"] == 2
    ray.get(ps.stop.remote("test"))
    assert ray.get(ps.pull.remote(2)).stop is True  # what an idle learner polls
    # Versions keep increasing; a push's reply carries the stop flag.
    assert ray.get(ps.push.remote(w1)) == LearnerOrders(version=3, stop=True, state_wanted=False)


def test_the_run_monitor_relays_the_learners_state_and_keeps_the_env_rebuild_budget(ray_local):
    ray = ray_local
    from dsac.distributed.monitor import RunMonitor

    monitor = RunMonitor.remote(2)
    assert ray.get(monitor.report_learner.remote(0)) is False
    assert ray.get(monitor.learner_state.remote(wanted=True)) is None  # none yet: asked for
    assert ray.get(monitor.report_learner.remote(0)) is True  # the learner hands its state over
    ray.get(monitor.put_state.remote({"s": 1}, LearnerReport(updates=7)))
    assert ray.get(monitor.report_learner.remote(1, 5)) is False
    taken = ray.get(monitor.learner_state.remote(wanted=True))  # one came: taken, no other asked for
    assert taken.state == {"s": 1} and taken.report.updates == 7 and ray.get(monitor.learner_state.remote()) is None
    assert ray.get(monitor.report_learner.remote(0)) is False
    # one call at a time: an async actor need not run one caller's calls in the order sent
    assert [ray.get(monitor.env_crashed.remote("rollout_worker_0", "boom")) for _ in range(3)] == [True, True, False]
    reports = ray.get(monitor.drain_reports.remote())
    assert reports["env_restarts"] == [("rollout_worker_0", "boom")] * 2 and reports["learner_updates"] == {1: 5}
    assert ray.get(monitor.drain_reports.remote())["env_restarts"] == []  # drained
    restarted = RunMonitor.remote(2)
    ray.get(restarted.restore.remote(1))  # a restarted monitor: the run used one already
    assert [ray.get(restarted.env_crashed.remote("evaluator", "boom")) for _ in range(2)] == [True, False]


def test_waiting_calls_wake_as_soon_as_the_other_side_moves(ray_local):
    ray = ray_local
    from dsac.distributed.actors import ReplayBuffer

    replay = ReplayBuffer.remote(
        SPECS, 1000, updates_per_step=1.0, learning_starts=10, max_steps_ahead=4, num_writers=1,
        max_chunk=64, max_wait_s=WAIT_CAP_S,
    )
    ray.get(replay.add.remote(0, Chunk(chunk(0, 9))))
    waiting_sample = replay.sample.remote(2, 1)  # 9 < 10 inserted: must wait
    time.sleep(0.2)
    started = time.monotonic()
    ray.get(replay.add.remote(0, Chunk(chunk(9, 3))))
    assert ray.get(waiting_sample) is not None
    assert time.monotonic() - started < WOKEN_WITHIN_S  # woken by the add, not by the wait cap
    # Writers: 15 inserted, 1 sampled -> at the limit 10 + 1 + 4 = 15: no budget (after the wait cap).
    status = ray.get(replay.add.remote(0, Chunk(chunk(12, 3))))
    assert (status.added, status.grant) == (15, 0)
    blocked = replay.add.remote(0, Chunk(chunk(15, 5)))  # now past the limit: waits for samples
    time.sleep(0.2)
    started = time.monotonic()
    ray.get(replay.sample.remote(2, 8))
    assert ray.get(blocked).grant > 0
    assert time.monotonic() - started < WOKEN_WITHIN_S


def test_a_waiting_pull_answers_on_the_next_push_or_the_stop_flag(ray_local):
    """Weights by notice: a pull that finds nothing newer waits on the parameter server and
    answers as soon as a version is pushed (not at its timeout); the stop flag wakes it too."""
    ray = ray_local
    from dsac.distributed.actors import ParameterServer

    ps = ParameterServer.remote()
    ray.get(ps.push.remote({"a": np.zeros(3, np.float32)}))
    assert ray.get(ps.pull.remote(0, 0, 5.0)).version == 1  # something newer: at once
    waiting = ps.pull.remote(1, 0, 60.0)
    ready, _ = ray.wait([waiting], timeout=0.3)
    assert not ready  # nothing newer: it waits
    started = time.monotonic()
    ray.get(ps.push.remote({"a": np.ones(3, np.float32)}))
    reply = ray.get(waiting, timeout=10)
    assert time.monotonic() - started < WOKEN_WITHIN_S  # woken by the push, not by its 60 s wait
    assert reply.version == 2 and ray.get(reply.weights)["a"][0] == 1.0
    others = [ps.pull.remote(2, w, 60.0) for w in range(1, 50)]  # many waiting at once
    ready, _ = ray.wait(others, num_returns=len(others), timeout=0.3)
    assert not ready
    started = time.monotonic()
    ray.get(ps.stop.remote("test"))
    assert all(r.stop and r.weights is None for r in ray.get(others, timeout=10))
    assert time.monotonic() - started < WOKEN_WITHIN_S
    assert ray.get(ps.pull.remote(2, 0, 60.0), timeout=10).stop  # stopped: no waiting at all


def test_parameter_server_times_a_push_until_every_worker_acts_with_it(ray_local):
    ray = ray_local
    from dsac.distributed.actors import ParameterServer

    ps = ParameterServer.remote()
    weights = {"a": np.zeros(3, np.float32)}
    ray.get([ps.pull.remote(0, 0), ps.pull.remote(0, 1)])  # two workers, holding nothing yet
    ray.get(ps.push.remote(weights))
    assert ray.get(ps.pull.remote(0, 0)).version == 1  # worker 0 gets v1 ...
    ray.get(ps.pull.remote(1, 0))  # ... and says it acts with it
    assert ray.get(ps.status.remote(drain_synced=True))["synced"] == []  # worker 1 has not caught up
    time.sleep(0.05)
    ray.get(ps.pull.remote(0, 1))
    ray.get(ps.pull.remote(1, 1))
    (latency,) = ray.get(ps.status.remote(drain_synced=True))["synced"]
    assert 0.05 <= latency < 5.0
    assert ray.get(ps.status.remote(drain_synced=True))["synced"] == []  # drained
