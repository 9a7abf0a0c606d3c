"""Frame-efficient replay of image observations (numpy only: no Ray, no TensorFlow).

A stacked Atari observation is 4 frames, and the next observation shares 3 of them; stored
naively, a transition's ``obs`` and ``next_obs`` take 8 frames (56 KB at 84x84). Here every
frame crosses the process boundary and sits in replay once, and transitions hold the frames'
numbers; stacks are rebuilt when a batch is sampled (as Dopamine and DQN Zoo do, but without
needing one sequential stream: dsac's shards interleave many workers' envs, n-step windows
and episode ends).

- :class:`FrameEncoder` (a rollout worker's side): replaces a chunk's ``obs``/``next_obs``
  stacks by per-frame ids and adds the frames the replay has not been sent yet. Frames are
  recognized by content (hash, then compared), so whatever an env stacks — padding at
  reset, a lost life, ring wrap, n-step windows — is rebuilt exactly.
- :class:`FrameStore` (the replay's side): a ring of frames; maps each writer's ids to ring
  serials; rebuilds stacks for a batch; says which transitions still have all their frames.
"""

from __future__ import annotations

import collections
import secrets
from typing import NamedTuple

import numpy as np

# Keys a frame-encoded chunk carries besides FIELDS (whose obs/next_obs then hold frame ids).
FRAMES, FRAME_IDS, STREAM = "frames", "frame_ids", "stream"
# Most ids an encoder reuses frames within; the replay maps this many per writer.
MAX_WINDOW = 4096


class FrameLayout(NamedTuple):
    """How an observation splits into frames: ``stack`` frames of ``frame_shape`` (uint8)."""

    stack: int
    frame_shape: tuple
    stacked: bool  # the observation has a leading stack axis (else it is one frame)

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frame_shape))

    def frames_of(self, obs: np.ndarray) -> np.ndarray:
        """(n, stack, *frame_shape) frames of a batch of observations."""
        return obs if self.stacked else obs[:, None]

    def observations(self, frames: np.ndarray) -> np.ndarray:
        """Observations back from (..., stack, *frame_shape) frames."""
        return frames if self.stacked else frames[..., 0, *([slice(None)] * len(self.frame_shape))]


def frame_layout(obs_shape, obs_dtype) -> FrameLayout | None:
    """The frames of a uint8 image observation (stack axis first, as gymnasium's
    ``FrameStackObservation`` stacks), or None for observations stored as they are."""
    from dsac.errors import DsacError
    from dsac.models.vision import image_layout, is_image_shape

    obs_shape = tuple(int(n) for n in obs_shape)
    if str(obs_dtype) != "uint8" or not is_image_shape(obs_shape):
        return None
    try:
        axes, _ = image_layout(obs_shape)
    except DsacError:
        return None
    if axes is None:  # one image per observation: each is one frame
        return FrameLayout(1, obs_shape, False)
    return FrameLayout(obs_shape[0], obs_shape[1:], True)


def frame_capacity(capacity: int) -> int:
    """Frames the replay keeps for ``capacity`` transitions: one each, plus room for the first
    frame of every episode and for frames that arrive before their transitions."""
    return int(capacity + capacity // 10 + 1024)


class FrameEncoder:
    """A rollout worker's side: chunks of stacked observations become frame ids plus the frames
    not sent before.

    Args:
        layout: the observations' :class:`FrameLayout`.
        num_envs: envs whose stacks interleave in the chunks.
        n_step: transitions' n-step window.

    A frame is reused only while it is recent (within ``4 * (stack + n_step + 1) * num_envs``
    ids): enough for the frames consecutive stacks and n-step windows share, and short, so the
    replay still holds the frames a transition names (an older identical frame — the same
    start screen in another episode — is sent again).
    """

    def __init__(self, layout: FrameLayout, num_envs: int = 1, n_step: int = 1):
        self.layout = layout
        self.window = min(MAX_WINDOW, 4 * (layout.stack + int(n_step) + 1) * int(num_envs))
        self.stream = secrets.randbits(62)  # a new one per process: a restarted worker is a new stream
        self.next_id = 0
        self.known: collections.OrderedDict[bytes, tuple[int, np.ndarray]] = collections.OrderedDict()

    def _frame_id(self, frame: np.ndarray, new: list) -> int:
        key = frame.tobytes()
        hit = self.known.get(key)
        if hit is not None and hit[0] >= self.next_id - self.window:
            return hit[0]
        frame_id = self.next_id
        self.next_id += 1
        self.known[key] = (frame_id, frame)
        self.known.move_to_end(key)
        new.append(frame)
        while len(self.known) > self.window:
            self.known.popitem(last=False)
        return frame_id

    def encode(self, transitions: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A copy of ``transitions`` with ``obs``/``next_obs`` as (n, stack) int64 frame ids and
        the new frames, their ids and this worker's stream."""
        new: list[np.ndarray] = []
        first = self.next_id
        out = dict(transitions)
        stacks = [self.layout.frames_of(transitions[key]) for key in ("obs", "next_obs")]
        ids = [np.empty(frames.shape[:2], dtype=np.int64) for frames in stacks]
        for i in range(len(transitions["reward"])):  # in the order they were stepped: neighbours share frames
            for frames, out_ids in zip(stacks, ids, strict=True):
                for j in range(self.layout.stack):
                    out_ids[i, j] = self._frame_id(frames[i, j], new)
        out["obs"], out["next_obs"] = ids
        shape = (len(new), *self.layout.frame_shape)
        out[FRAMES] = np.stack(new) if new else np.empty(shape, np.uint8)
        out[FRAME_IDS] = np.arange(first, self.next_id, dtype=np.int64)
        out[STREAM] = np.array([self.stream], dtype=np.int64)
        return out


class FrameStore:
    """The replay's side: a ring of ``capacity`` frames, numbered by serials (the ring slot is
    ``serial % capacity``; a serial older than ``added - capacity`` is gone).

    Args:
        layout: the observations' :class:`FrameLayout`.
        capacity: frames kept (see :func:`frame_capacity`).
        window: ids remembered per writer stream (at least the encoders' window).
        max_streams: writer streams remembered (the least recently heard of are forgotten).
    """

    def __init__(self, layout: FrameLayout, capacity: int, window: int = MAX_WINDOW, max_streams: int = 1024):
        self.layout = layout
        self.capacity = int(capacity)
        self.frames = np.zeros((self.capacity, *layout.frame_shape), dtype=np.uint8)
        self.added = 0
        self.window = int(window)
        self.max_streams = int(max_streams)
        # stream -> (ids, serials) rings indexed by id % window
        self.streams: collections.OrderedDict[int, tuple[np.ndarray, np.ndarray]] = collections.OrderedDict()
        self.dropped = 0  # transitions refused: a frame they need is unknown or already overwritten

    @property
    def nbytes(self) -> int:
        return self.frames.nbytes

    @property
    def size(self) -> int:
        return min(self.added, self.capacity)

    def _stream(self, stream: int) -> tuple[np.ndarray, np.ndarray]:
        if stream not in self.streams:
            self.streams[stream] = (np.full(self.window, -1, np.int64), np.zeros(self.window, np.int64))
            while len(self.streams) > self.max_streams:
                self.streams.popitem(last=False)
        self.streams.move_to_end(stream)
        return self.streams[stream]

    def ingest(self, chunk: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Store a chunk's new frames; return its transitions with ``obs``/``next_obs`` as frame
        serials, keeping only those whose frames are all here, and the mask of those kept."""
        ids_ring, serials_ring = self._stream(int(chunk[STREAM][0]))
        frames, frame_ids = chunk[FRAMES], chunk[FRAME_IDS]
        if len(frames) > self.capacity:  # only the newest could be kept anyway
            frames, frame_ids = frames[-self.capacity:], frame_ids[-self.capacity:]
        serials = self.added + np.arange(len(frames))
        self.frames[serials % self.capacity] = frames
        self.added += len(frames)
        ids_ring[frame_ids % self.window] = frame_ids
        serials_ring[frame_ids % self.window] = serials
        out = {k: v for k, v in chunk.items() if k not in (FRAMES, FRAME_IDS, STREAM)}
        keep = np.ones(len(chunk["reward"]), dtype=bool)
        for key in ("obs", "next_obs"):
            ids = chunk[key]
            known = ids_ring[ids % self.window] == ids
            out[key] = np.where(known, serials_ring[ids % self.window], -1)
            keep &= known.all(axis=1)
        keep &= self.alive(out["obs"], out["next_obs"])
        self.dropped += int((~keep).sum())
        return {k: v[keep] for k, v in out.items()}, keep

    def alive(self, obs_serials: np.ndarray, next_serials: np.ndarray) -> np.ndarray:
        """Per transition (leading axes), whether every frame it needs is still in the ring."""
        oldest = self.added - self.capacity
        return (obs_serials.min(axis=-1) >= oldest) & (next_serials.min(axis=-1) >= oldest)

    def observations(self, serials: np.ndarray) -> np.ndarray:
        """Observations rebuilt from frame serials of shape (..., stack)."""
        return self.layout.observations(self.frames[serials % self.capacity])

    def state_dict(self) -> dict[str, np.ndarray]:
        """The frames (oldest first) and the counter; the writers' id maps are not kept (a
        worker's next chunks refer to frames it sent before and are dropped until it sends
        new ones)."""
        order = (self.added - self.size + np.arange(self.size)) % self.capacity
        return {"frames/data": self.frames[order], "frames/added": np.array(self.added)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        data, added = state["frames/data"], int(state["frames/added"])
        data = data[-self.capacity:]
        serials = added - len(data) + np.arange(len(data))
        self.frames[serials % self.capacity] = data
        self.added = added
