"""Frame-efficient replay against naively stored transitions, on real Atari frames: every
stack the workers saw (n-step windows, lost lives, resets, several writers interleaved, both
rings wrapping) comes back exactly, at about one frame per transition."""

import numpy as np
import pytest

from dsac.envs.atari import FrameSettings
from dsac.envs.rollout import EnvCollector
from dsac.replay.buffer import FIELDS, PrioritizedReplayStorage, ReplayStorage, field_specs, storage_bytes
from dsac.replay.frames import FrameEncoder, FrameStore, frame_layout

ATARI = FrameSettings(noop_max=3)


def _collectors(num_writers, n_step=3):
    collectors = [EnvCollector("ALE/Breakout-v5", num_envs=2, seed=10 * w, n_step=n_step, atari=ATARI)
                  for w in range(num_writers)]
    layout = frame_layout(collectors[0].observation_space.shape, collectors[0].observation_space.dtype)
    return collectors, layout


def _storages(collector, layout, capacity, cls=ReplayStorage):
    space, actions = collector.observation_space, collector.action_space
    naive = cls(field_specs(space.shape, space.dtype, actions.shape, actions.dtype), capacity, seed=0)
    framed = cls(field_specs(space.shape, space.dtype, actions.shape, actions.dtype, layout), capacity, seed=0,
                 frames=layout)
    return naive, framed


@pytest.mark.parametrize("cls", [ReplayStorage, PrioritizedReplayStorage])
def test_rebuilt_stacks_equal_naively_stored_transitions(cls):
    collectors, layout = _collectors(num_writers=2)
    assert layout.stack == 4 and layout.frame_shape == (84, 84)
    encoders = [FrameEncoder(layout, num_envs=2, n_step=3) for _ in collectors]
    naive, framed = _storages(collectors[0], layout, capacity=600, cls=cls)
    rng = np.random.default_rng(0)
    for _ in range(14):  # 2 writers x 14 chunks x ~128 transitions: both rings wrap
        for collector, encoder in zip(collectors, encoders, strict=True):
            chunk = collector.collect(lambda obs: rng.integers(4, size=len(obs)), 128)
            naive.add(chunk)
            framed.add(encoder.encode(chunk))
    store = framed.frame_store
    assert store.added > store.capacity and naive.added > naive.capacity  # both wrapped
    assert store.dropped == 0 and framed.size == naive.size == 600
    every = np.arange(framed.size)[None]
    for key in FIELDS:
        np.testing.assert_array_equal(framed._gather(every)[key], naive._gather(every)[key], err_msg=key)
    terminated = naive.data["terminated"]
    assert terminated.sum() > 0  # lost lives and n-step windows cut short are in there
    assert store.added / naive.added < 1.1  # about one frame per transition
    million = {"naive": storage_bytes(10**6, naive.specs), "framed": storage_bytes(10**6, framed.specs, layout)}
    assert million["framed"] <= 8e9 < 56e9 <= million["naive"]  # 1M Atari transitions fit in 8 GB


@pytest.mark.parametrize("cls", [ReplayStorage, PrioritizedReplayStorage])
def test_transitions_whose_frames_are_overwritten_are_never_sampled(cls):
    collectors, layout = _collectors(num_writers=1, n_step=1)
    encoder = FrameEncoder(layout, num_envs=2, n_step=1)
    naive, framed = _storages(collectors[0], layout, capacity=400, cls=cls)
    framed.frame_store = FrameStore(layout, capacity=300)  # fewer frames than transitions
    rng = np.random.default_rng(1)
    for _ in range(5):
        chunk = collectors[0].collect(lambda obs: rng.integers(4, size=len(obs)), 128)
        naive.add(chunk)
        framed.add(encoder.encode(chunk))
    alive = framed._alive(np.arange(framed.size))
    assert 0 < alive.sum() < framed.size  # the oldest transitions lost frames
    batch = framed.sample(64, 4)
    assert batch.batches["obs"].shape == (4, 64, 4, 84, 84) and batch.batches["obs"].dtype == np.uint8
    if batch.indices is not None:  # prioritized: the slots drawn are known
        assert alive[batch.indices].all()
        np.testing.assert_array_equal(batch.batches["next_obs"], naive.data["next_obs"][batch.indices])
    else:  # uniform: every observation drawn is one a live transition holds
        live = {o.tobytes() for o in naive.data["obs"][np.flatnonzero(alive)]}
        assert all(o.tobytes() in live for o in batch.batches["obs"].reshape(-1, 4, 84, 84))


def test_checkpointed_frames_restore_the_same_batches():
    collectors, layout = _collectors(num_writers=1)
    encoder = FrameEncoder(layout, num_envs=2, n_step=3)
    _, framed = _storages(collectors[0], layout, capacity=300)
    rng = np.random.default_rng(2)
    for _ in range(3):
        framed.add(encoder.encode(collectors[0].collect(lambda obs: rng.integers(4, size=len(obs)), 128)))
    restored = ReplayStorage(framed.specs, 300, seed=5, frames=layout)
    restored.load_state_dict(framed.state_dict())
    every = np.arange(framed.size)[None]
    np.testing.assert_array_equal(restored._gather(every)["obs"], framed._gather(every)["obs"])
    np.testing.assert_array_equal(restored._gather(every)["next_obs"], framed._gather(every)["next_obs"])


def test_car_racing_frames_are_preprocessed_and_stored_about_once_per_transition():
    """Another image env (CarRacing-v3, not ALE) gets the same preprocessing (84x84 gray, 4
    stacked) and its replay holds about one frame per transition, stacks rebuilt exactly."""
    collector = EnvCollector("CarRacing-v3", num_envs=2, seed=0, n_step=1, atari=FrameSettings())
    layout = frame_layout(collector.observation_space.shape, collector.observation_space.dtype)
    assert layout.stack == 4 and layout.frame_shape == (84, 84)
    encoder = FrameEncoder(layout, num_envs=2, n_step=1)
    naive, framed = _storages(collector, layout, capacity=1000)
    rng = np.random.default_rng(0)
    for _ in range(3):
        chunk = collector.collect(lambda obs: rng.uniform(-1, 1, (len(obs), 3)).astype(np.float32), 100)
        naive.add(chunk)
        framed.add(encoder.encode(chunk))
    every = np.arange(framed.size)[None]
    for key in FIELDS:
        np.testing.assert_array_equal(framed._gather(every)[key], naive._gather(every)[key], err_msg=key)
    assert naive.added >= 300 and framed.frame_store.added / naive.added < 1.1
