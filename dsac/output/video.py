"""Evaluation videos: one episode's frames, rendered by the evaluator (never by the learner or
the rollout workers), encoded as mp4 with imageio and the ffmpeg that imageio-ffmpeg ships.

    frames = Frames()                          # given to dsac.runtime.evaluation.evaluate(...)
    data = encode_mp4(frames.images, frames.fps)

An env that cannot render (no ``rgb_array`` mode, a headless MuJoCo without a GL backend) leaves
``Frames.error`` set to one line saying why; the evaluation itself goes on.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np


def prepare_headless_rendering() -> None:
    """MuJoCo renders off-screen through EGL where no display is named (its default, GLFW,
    needs one); set before the first MuJoCo env of the process is made."""
    if not os.environ.get("DISPLAY"):
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])


def check_output_path(path: str, flag: str) -> None:
    """Refuse, before any episode is played, an mp4 path that could not be written: a folder,
    or a place where this user cannot create a file (root passes ``os.access`` even in
    ``/proc``, so a fresh name is created there, ``O_CREAT | O_EXCL | O_NOFOLLOW``, and removed)."""
    from dsac.errors import DsacError

    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise DsacError(f"{flag} {path} is a folder, not a file path")
    probe = os.path.join(folder, f".write-test-{os.getpid()}-{os.urandom(6).hex()}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError as exc:
        raise DsacError(f"{flag} {path}: a file cannot be written in {folder} ({exc.strerror or exc})") from None


class Frames:
    """The frames of one episode, taken with ``env.render()`` after its reset and each step."""

    def __init__(self):
        self.images: list[np.ndarray] = []
        self.fps: float = 30.0
        self.error: str | None = None

    def take(self, env) -> None:
        if self.error is not None:
            return
        try:
            image = env.render()
        except Exception as exc:  # any renderer failure: no video, one line
            self.fail(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
            return
        if not (isinstance(image, np.ndarray) and image.ndim == 3 and image.shape[2] in (3, 4)):
            self.fail(f"render() gave {type(image).__name__}, not an RGB image")
            return
        if not self.images:
            self.fps = float(getattr(env, "metadata", {}).get("render_fps") or 30.0)
        self.images.append(np.ascontiguousarray(image[..., :3], dtype=np.uint8))

    def fail(self, reason: str) -> None:
        self.error, self.images = reason, []


def encode_mp4(images: list[np.ndarray], fps: float) -> bytes:
    """H.264 in mp4, every frame at its own size (no padding to a macro block; 4:4:4 chroma
    when a side is odd, which 4:2:0 cannot hold)."""
    import imageio.v2 as imageio

    height, width = images[0].shape[:2]
    pixels = "yuv420p" if height % 2 == 0 and width % 2 == 0 else "yuv444p"
    with tempfile.TemporaryDirectory(prefix="dsac-video-") as folder:
        path = os.path.join(folder, "episode.mp4")
        writer = imageio.get_writer(path, fps=fps, codec="libx264", macro_block_size=1, pixelformat=pixels,
                                    ffmpeg_log_level="error")
        try:
            for image in images:
                writer.append_data(image)
        finally:
            writer.close()
        with open(path, "rb") as f:
            return f.read()


def small_gif(images: list[np.ndarray], fps: float, max_side: int = 160,
              max_frames: int = 250) -> tuple[bytes, int, int]:
    """A small animated GIF of an episode for TensorBoard (its Images tab plays GIFs, as
    tensorboardX's ``add_video`` writes them): at most ``max_frames`` frames, evenly picked, of
    at most ``max_side`` pixels. Returns (gif, height, width)."""
    import imageio.v3 as iio

    step = max(1, -(-len(images) // max_frames))
    height, width = images[0].shape[:2]
    shrink = max(1, -(-max(height, width) // max_side))
    frames = np.stack([image[::shrink, ::shrink] for image in images[::step]])
    gif = iio.imwrite("<bytes>", frames, extension=".gif", duration=1000 * step / fps, loop=0)
    return gif, frames.shape[1], frames.shape[2]


def wanted(video_every: int, number: int, final: bool = False) -> bool:
    """Whether evaluation ``number`` (counted from 1) records a video: every ``video_every``-th
    and the final one (``--video_every``; 0: none)."""
    return bool(video_every) and (final or number % video_every == 0)


def finish(frames: Frames | None, gif: bool = False) -> tuple[bytes | None, str | None, tuple | None]:
    """``(mp4 bytes, None, gif)``, or ``(None, why not, None)``, or ``(None, None, None)`` when
    nothing was asked; ``gif``: also :func:`small_gif`'s (gif, height, width) for TensorBoard."""
    if frames is None:
        return None, None, None
    if frames.error is None and not frames.images:
        frames.fail("the episode gave no frames")
    if frames.error is not None:
        return None, frames.error, None
    try:
        return (encode_mp4(frames.images, frames.fps), None,
                small_gif(frames.images, frames.fps) if gif else None)
    except Exception as exc:  # an encoder failure costs the video, not the run
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return None, f"encoding failed: {type(exc).__name__}: {first}", None
