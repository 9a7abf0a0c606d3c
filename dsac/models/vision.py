"""What the conv encoder of image observations looks like, decided from the observation's shape
(no TensorFlow): the layout turning an observation channels-last, and default filters.

Layouts (a stack axis first is how ``gymnasium.wrappers.FrameStackObservation`` stacks):

- ``(H, W)``: one grayscale frame, one channel;
- ``(H, W, C)`` with ``C <= 4``: an image, channels last already (RGB, RGBA, gray);
- ``(k, H, W)`` with ``k <= 16`` and ``W > 4``: ``k`` stacked grayscale frames, moved last;
- ``(k, H, W, C)``: ``k`` stacked images, their ``k * C`` channels last.

TensorFlow's CPU convolutions take channels-last (NHWC) input only, so the encoder transposes
each batch once, inside the network, and the numpy forward the same way.

``conv_filters`` (RLlib's model key) is a list of ``[out_channels, kernel, stride]``, each layer
'valid'-padded and followed by ``conv_activation``. The defaults:

- frames of side >= 72 (Atari's 84): the Nature DQN encoder (Mnih et al. 2015), as in SB3's
  ``NatureCNN``: ``[[32, 8, 4], [64, 4, 2], [64, 3, 1]]``;
- side 36-71 (e.g. 42 or 64): ``[[32, 4, 2], [64, 3, 2], [64, 3, 1]]``;
- smaller (e.g. MinAtar's 10x10): ``[[16, 3, 1], [32, 3, 1]]``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dsac.errors import DsacError

NATURE_FILTERS = [[32, 8, 4], [64, 4, 2], [64, 3, 1]]


def is_image_shape(shape) -> bool:
    """Whether an observation of ``shape`` goes through the conv encoder (2 to 4 axes)."""
    return 2 <= len(shape) <= 4


def image_layout(shape) -> tuple[tuple[int, ...] | None, tuple[int, int, int]]:
    """(axes to transpose a batch of observations by, or None; the channels-last (H, W, C) shape)."""
    shape = tuple(int(n) for n in shape)
    if len(shape) == 2:
        return None, (shape[0], shape[1], 1)
    if len(shape) == 3 and shape[2] <= 4:
        return None, shape
    if len(shape) == 3 and shape[0] <= 16:
        return (0, 2, 3, 1), (shape[1], shape[2], shape[0])
    if len(shape) == 4:
        return (0, 2, 3, 1, 4), (shape[1], shape[2], shape[0] * shape[3])
    raise DsacError(
        f"cannot read observations of shape {shape} as images: dsac reads (H, W), (H, W, C<=4), "
        "(frames<=16, H, W) or (frames, H, W, C); add --flatten_obs for an MLP instead"
    )


# Frames at least this many pixels on their shorter side get the Nature encoder by default,
# and an algorithm's ``image_defaults`` (dsac.algorithms.Algorithm): a learner update on them
# costs tens of milliseconds on a CPU.
LARGE_IMAGE_SIDE = 72


def is_large_image(shape) -> bool:
    """Whether observations of ``shape`` (an image layout) are large frames (see above)."""
    height, width, _ = image_layout(shape)[1]
    return min(height, width) >= LARGE_IMAGE_SIDE


def default_conv_filters(shape) -> list[list[int]]:
    """The filters for observations of ``shape`` when ``conv_filters`` is not given."""
    height, width, _ = image_layout(shape)[1]
    side = min(height, width)
    if side >= LARGE_IMAGE_SIDE:
        return [list(f) for f in NATURE_FILTERS]
    if side >= 36:
        return [[32, 4, 2], [64, 3, 2], [64, 3, 1]]
    return [[16, 3, 1], [32, 3, 1]]


def conv_layer_shapes(shape, filters=None) -> list[tuple[int, int, int]]:
    """(H, W, C) of the input channels-last, then after each 'valid' conv layer (``filters``, or
    by default :func:`default_conv_filters`); a one-line error if a layer does not fit."""
    shapes = [image_layout(shape)[1]]
    for i, (out, kernel, stride) in enumerate(filters or default_conv_filters(shape)):
        height, width, _ = shapes[-1]
        if kernel > height or kernel > width:
            raise DsacError(
                f"conv_filters layer {i} ({out} channels, kernel {kernel}, stride {stride}) does not fit its "
                f"{height}x{width} input (observations {tuple(shape)}): use smaller kernels or fewer layers"
            )
        shapes.append(((height - kernel) // stride + 1, (width - kernel) // stride + 1, out))
    return shapes


def conv_output_shape(shape, filters=None) -> tuple[int, int, int]:
    """(H, W, C) after the 'valid' conv layers (the last of :func:`conv_layer_shapes`)."""
    return conv_layer_shapes(shape, filters)[-1]


def check_conv_filters(filters) -> list[list[int]]:
    """``conv_filters`` as a list of ``[out_channels, kernel, stride]`` of positive integers."""
    if not isinstance(filters, list | tuple) or not filters:
        raise DsacError(f"conv_filters must be a list of [out_channels, kernel, stride], got {filters!r}")
    out = []
    for layer in filters:
        if not (isinstance(layer, list | tuple) and len(layer) == 3
                and all(isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 4096 for n in layer)):
            raise DsacError(f"conv_filters: each layer is [out_channels, kernel, stride] of positive integers, "
                            f"got {layer!r}")
        out.append([int(n) for n in layer])
    return out


class ObsInput(NamedTuple):
    """What a network reads: observations of ``shape`` and ``dtype``, as images (through the
    conv encoder, uint8 kept to the network) or flat vectors (float32)."""

    shape: tuple
    dtype: str

    @property
    def is_image(self) -> bool:
        return len(self.shape) > 1

    @property
    def flat_dim(self) -> int:
        return math.prod(self.shape)  # not np.prod: this runs at every action

    @property
    def input_shape(self) -> tuple:
        """One observation's shape at the network's input."""
        return tuple(self.shape) if self.is_image else (self.flat_dim,)

    @property
    def input_dtype(self) -> str:
        return self.dtype if self.is_image and self.dtype == "uint8" else "float32"

    def batch(self, obs) -> np.ndarray:
        """A batch of observations as the network takes it."""
        return np.asarray(obs, self.input_dtype).reshape(-1, *self.input_shape)


def obs_input(observation_space) -> ObsInput:
    """The network input of a Box observation space: images (2 to 4 axes in a layout
    :func:`image_layout` reads) or flat vectors."""
    shape = tuple(int(n) for n in observation_space.shape)
    if is_image_shape(shape):
        image_layout(shape)  # a one-line error for shapes that are not images
        return ObsInput(shape, str(observation_space.dtype))
    return ObsInput((int(np.prod(shape)),), str(observation_space.dtype))
