"""Typed messages cost no copies: their arrays travel out of band, as the plain dicts' did."""

import pickle

import numpy as np

from dsac.replay.buffer import FIELDS
from dsac.runtime.messages import Chunk, LearnerReport, PullReply, SampledBatches


def _stacked(num_batches=4, batch_size=256, obs_dim=17):
    rng = np.random.default_rng(0)
    shapes = {"obs": (obs_dim,), "action": (6,), "reward": (), "next_obs": (obs_dim,), "terminated": (),
              "discount": ()}
    return {k: rng.standard_normal((num_batches, batch_size, *shapes[k])).astype(np.float32) for k in FIELDS}


def _out_of_band(obj):
    """(in-band pickle bytes, out-of-band buffers) under pickle protocol 5, as Ray serializes."""
    buffers = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return data, buffers


def test_every_array_of_a_typed_message_travels_out_of_band():
    batches = _stacked()
    typed = SampledBatches(batches, 1234, np.arange(1024).reshape(4, 256), np.zeros((4, 256), np.int64))
    data, buffers = _out_of_band(typed)
    array_bytes = sum(a.nbytes for a in batches.values()) + typed.indices.nbytes + typed.generations.nbytes
    assert sum(memoryview(b).nbytes for b in buffers) == array_bytes  # every array byte, once
    assert len(data) < 2_000  # in band: names and headers only
    plain_data, _ = _out_of_band({"batches": batches, "env_steps": 1234})
    assert len(data) - len(plain_data) < 600  # the type's name and two more array headers
    back = pickle.loads(data, buffers=buffers)
    assert isinstance(back, SampledBatches) and back.env_steps == 1234
    np.testing.assert_array_equal(back.batches["obs"], batches["obs"])


def test_chunk_splits_priorities_from_transitions_without_copying():
    batch = {k: v[0] for k, v in _stacked(1, 64).items()}
    batch["priority"] = np.ones(64, np.float32)
    chunk = Chunk.from_batch(batch)
    assert chunk.size == 64 and set(chunk.transitions) == set(FIELDS)
    assert chunk.priorities is batch["priority"] and chunk.transitions["obs"] is batch["obs"]
    assert "priority" in batch  # the caller's batch is left as it was


def test_ray_hands_the_receiver_views_of_the_object_store(ray_local):
    ray = ray_local
    weights = {"w": np.ones((512, 512), np.float32)}
    reply = ray.get(ray.put(PullReply(False, 3, weights, LearnerReport(updates=7))))
    # Read-only: a zero-copy view of the shared-memory object, not a deserialized copy.
    assert not reply.weights["w"].flags.writeable and reply.report.updates == 7
    sampled = ray.get(ray.put(SampledBatches(_stacked(), 10)))
    assert all(not a.flags.writeable for a in sampled.batches.values())
