"""An acting network, described once: layer ops from a batch of observations to the network's
outputs, and a head from those to actions. Each algorithm declares its own (``acting_net`` in
its ``policy.py``), and that one description drives every backend: numpy acting
(:func:`numpy_forward`: rollout workers and the evaluator, no TensorFlow), the SavedModel's
serving function (:func:`tf_serving`) and the ONNX graph (:func:`dsac.models.onnx_ops.onnx_policy`).

An op kind is one class (:class:`Op`): the weights it reads, by the names the Keras training
model gives them (``actor/hidden_0/kernel``), their shapes, its array form (numpy and
TensorFlow, through a :class:`Backend` of the few primitives that differ) and its ONNX form.
The Keras training models (``dsac/algorithms/*/networks.py``) are built apart and checked
against the descriptions to 1e-5 (tests/test_acting_net.py). An input transform is an op kind
here put in front of every description (:func:`with_obs_normalization`); the learner applies
the same op to its batches (:class:`dsac.algorithms.normalization.NormalizingLearner`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dsac.errors import DsacError
from dsac.models.backends import NUMPY, Backend, tf_backend
from dsac.models.normalization import COUNT, MEAN, VAR, check_normalizable
from dsac.models.vision import ObsInput, conv_layer_shapes, conv_output_shape, image_layout

# Bounds of the actor's log standard deviation (as in Stable-Baselines3).
LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0


class Op(Protocol):
    """A layer op: what every op kind below gives (a :class:`Custom` layer has no array form)."""

    def shapes(self, shape: tuple) -> tuple[dict, tuple]:
        """Its weights' shapes by name, and one observation's output shape, from its input's."""

    def arrays(self, w: dict, B: Backend) -> Callable:
        """The function of a batch it computes with weights ``w`` (by name) in backend ``B``."""

    def onnx(self, g, x: str) -> str:
        """Its output in ONNX graph ``g`` (:class:`dsac.models.onnx_ops.OnnxGraph`) from tensor ``x``."""


@dataclass(frozen=True)
class Dense:
    """x @ kernel + bias, then ``activation`` (weights ``<layer>/kernel``, ``<layer>/bias``)."""

    layer: str
    units: int
    activation: str = "linear"

    def shapes(self, shape):
        return {f"{self.layer}/kernel": (shape[-1], self.units), f"{self.layer}/bias": (self.units,)}, (self.units,)

    def arrays(self, w, B):
        kernel, bias = w[f"{self.layer}/kernel"], w[f"{self.layer}/bias"]
        if self.activation == "linear":
            return lambda x: x @ kernel + bias
        act = B.activation(self.activation)
        return lambda x: act(x @ kernel + bias)

    def onnx(self, g, x):
        x = g.op("Add", [g.op("MatMul", [x, g.weight(f"{self.layer}/kernel")], self.layer),
                         g.weight(f"{self.layer}/bias")], self.layer)
        return g.activation(x, self.activation)


@dataclass(frozen=True)
class Activation:
    """Keras' activation ``name`` alone."""

    name: str

    def shapes(self, shape):
        return {}, shape

    def arrays(self, w, B):
        return B.activation(self.name)

    def onnx(self, g, x):
        return g.activation(x, self.name)


@dataclass(frozen=True)
class LayerNorm:
    """Keras' LayerNormalization over the last axis (``<layer>/gamma``, ``<layer>/beta``)."""

    layer: str
    epsilon: float = 1e-3  # Keras' default

    def shapes(self, shape):
        return {f"{self.layer}/gamma": shape, f"{self.layer}/beta": shape}, shape

    def arrays(self, w, B):
        gamma, beta, epsilon = w[f"{self.layer}/gamma"], w[f"{self.layer}/beta"], self.epsilon

        def forward(x):
            mean, var = B.moments(x)
            return (x - mean) / B.sqrt(var + epsilon) * gamma + beta
        return forward

    def onnx(self, g, x):
        inputs = [x, g.weight(f"{self.layer}/gamma"), g.weight(f"{self.layer}/beta")]
        return g.op("LayerNormalization", inputs, self.layer, axis=-1, epsilon=float(self.epsilon))


@dataclass(frozen=True)
class Renorm:
    """Batch renormalization in inference mode, on its running statistics: the affine map
    (x − mean) · scale / sqrt(var + ε) + bias (``<layer>/scale|bias|mean|var``)."""

    layer: str
    epsilon: float

    def shapes(self, shape):
        return {f"{self.layer}/{name}": shape for name in ("scale", "bias", "mean", "var")}, shape

    def _affine(self, w):
        """(mean, factor, bias), the factor computed once in float32 for every backend."""
        p = self.layer
        return w[f"{p}/mean"], w[f"{p}/scale"] / np.sqrt(w[f"{p}/var"] + np.float32(self.epsilon)), w[f"{p}/bias"]

    def arrays(self, w, B):
        mean, factor, bias = self._affine(w)
        return lambda x: (x - mean) * factor + bias

    def onnx(self, g, x):
        mean, factor, bias = self._affine(g.weights)
        x = g.op("Sub", [x, g.const(mean, f"{self.layer}/mean")], self.layer)
        x = g.op("Mul", [x, g.const(factor, f"{self.layer}/factor")], self.layer)
        return g.op("Add", [x, g.const(bias, f"{self.layer}/bias")], self.layer)


@dataclass(frozen=True)
class Normalize:
    """Observation normalization (``--normalize_obs``, as rl-zoo's ``VecNormalize``): each feature
    as clip((x − mean) / sqrt(var + ε), ±``clip``), with the run's running statistics
    (``obs_norm/mean|var``; ``obs_norm/count`` lets a learner warm-started from them carry on)."""

    clip: float = 10.0
    epsilon: float = 1e-8

    def shapes(self, shape):
        return {COUNT: (1,), MEAN: shape, VAR: shape}, shape

    def _affine(self, w):
        """(mean, 1/std), computed once in float32 for every backend and the learner alike."""
        mean, var = np.asarray(w[MEAN], np.float32), np.asarray(w[VAR], np.float32)
        if np.any(var < 0) or np.any(np.asarray(w[COUNT]) < 0):
            raise ValueError("obs_norm/var or obs_norm/count holds negative values")
        return mean, (np.float32(1.0) / np.sqrt(var + np.float32(self.epsilon))).astype(np.float32)

    def arrays(self, w, B):
        mean, scale = self._affine(w)
        return lambda x: B.clip((B.float32(x) - mean) * scale, -self.clip, self.clip)

    def onnx(self, g, x):
        mean, scale = self._affine(g.weights)
        x = g.op("Mul", [g.op("Sub", [x, g.const(mean, "obs_norm/mean")], "obs_norm"),
                         g.const(scale, "obs_norm/scale")], "obs_norm")
        return g.op("Clip", [x, g.const(np.float32(-self.clip), "obs_norm/min"),
                             g.const(np.float32(self.clip), "obs_norm/max")], "obs_norm")


@dataclass(frozen=True)
class ConvEncoder:
    """The catalog's conv encoder (:func:`dsac.models.catalog.image_torso`): frames as floats
    (``scale``: uint8 ones /255), laid out channels-last (:func:`dsac.models.vision.image_layout`),
    'valid' convolutions ``<prefix>conv_<i>`` each followed by ``activation``, flattened in
    (height, width, channel) order."""

    prefix: str
    shape: tuple  # one observation's
    filters: tuple  # ([out_channels, kernel, stride], ...)
    activation: str
    scale: bool

    def shapes(self, shape):
        layers, shapes = conv_layer_shapes(self.shape, self.filters), {}
        for i, ((_, _, channels), (out, kernel, _)) in enumerate(zip(layers, self.filters, strict=False)):
            shapes[f"{self.prefix}conv_{i}/kernel"] = (kernel, kernel, channels, out)
            shapes[f"{self.prefix}conv_{i}/bias"] = (out,)
        return shapes, (math.prod(layers[-1]),)

    def arrays(self, w, B):
        axes, image = image_layout(self.shape)
        features = math.prod(conv_output_shape(self.shape, self.filters))
        convs = [(w[f"{self.prefix}conv_{i}/kernel"], w[f"{self.prefix}conv_{i}/bias"], stride)
                 for i, (_, _, stride) in enumerate(self.filters)]
        act = B.activation(self.activation)

        def forward(x):
            x = B.float32(x)
            if self.scale:
                x = x * np.float32(1 / 255)
            if axes is not None:
                x = B.transpose(x, axes)
            x = B.reshape(x, (-1, *image))
            for kernel, bias, stride in convs:
                x = act(B.conv2d(x, kernel, bias, stride))
            return B.reshape(x, (-1, features))
        return forward

    def onnx(self, g, x):
        """ONNX convolves channels-first: the frames are turned so, and back before flattening."""
        axes, image = image_layout(self.shape)
        if self.scale:
            x = g.op("Mul", [x, g.const(np.float32(1 / 255), "inv_255")], "scaled")
        if axes is not None:
            x = g.op("Transpose", [x], "channels_last", perm=list(axes))
        x = g.op("Reshape", [x, g.const([-1, *image], "image_shape")], "image")
        x = g.op("Transpose", [x], "channels_first", perm=[0, 3, 1, 2])
        for i, (_, size, stride) in enumerate(self.filters):
            layer = f"{self.prefix}conv_{i}"
            kernel = g.const(g.weights[f"{layer}/kernel"].transpose(3, 2, 0, 1), f"{layer}/kernel")
            x = g.op("Conv", [x, kernel, g.weight(f"{layer}/bias")], layer, kernel_shape=[size, size],
                     strides=[stride, stride])
            x = g.activation(x, self.activation)
        x = g.op("Transpose", [x], "features_hwc", perm=[0, 2, 3, 1])
        return g.op("Flatten", [x], "features", axis=1)


@dataclass(frozen=True)
class Dueling:
    """Dueling heads (Wang et al. 2016) on the torso's features: V(s) + A(s, a) − mean_a A(s, a)
    per atom (``<prefix>value``: atoms outputs, ``<prefix>advantage``: actions x atoms)."""

    prefix: str
    num_actions: int
    atoms: int

    def _heads(self) -> tuple[Dense, Dense]:
        return Dense(f"{self.prefix}value", self.atoms), Dense(f"{self.prefix}advantage", self.num_actions * self.atoms)

    def shapes(self, shape):
        value, advantage = self._heads()
        return {**value.shapes(shape)[0], **advantage.shapes(shape)[0]}, (self.num_actions, self.atoms)

    def arrays(self, w, B):
        value, advantage = (head.arrays(w, B) for head in self._heads())
        per_state, per_action = (-1, 1, self.atoms), (-1, self.num_actions, self.atoms)

        def forward(x):
            a = B.reshape(advantage(x), per_action)
            return B.reshape(value(x), per_state) + a - B.mean(a, 1)
        return forward

    def onnx(self, g, x):
        value, advantage = (head.onnx(g, x) for head in self._heads())
        value = g.op("Reshape", [value, g.const([-1, 1, self.atoms], "per_state")], "value")
        advantage = g.op("Reshape", [advantage, g.const([-1, self.num_actions, self.atoms], "per_action")],
                         "advantage")
        mean = g.op("ReduceMean", [advantage], "mean_advantage", axes=[1], keepdims=1)
        return g.op("Sub", [g.op("Add", [value, advantage]), mean], "q_atoms")


@dataclass(frozen=True, eq=False)
class QValues:
    """Q(s, ·) from the Q-network's outputs (actions x atoms per observation): the outputs
    themselves, or with a C51 ``support`` (atoms z_i) the expectation Σ_i softmax(logits)_i z_i."""

    num_actions: int
    support: np.ndarray | None = None

    def shapes(self, shape):
        return {}, (self.num_actions,)

    def arrays(self, w, B):
        n, support = self.num_actions, self.support
        if support is None:
            return lambda x: B.reshape(x, (-1, n))
        return lambda x: B.expectation(B.reshape(x, (-1, n, len(support))), support)

    def onnx(self, g, x):
        if self.support is None:
            return g.op("Reshape", [x, g.const([-1, self.num_actions], "q_shape")], "q")
        x = g.op("Reshape", [x, g.const([-1, self.num_actions, len(self.support)], "per_action")], "q_atoms")
        return g.op("MatMul", [g.op("Softmax", [x], "probs", axis=2), g.const(self.support, "support")], "q")


@dataclass(frozen=True)
class Custom:
    """A user's Keras model (``--custom_model``) of ``units`` outputs: the interpreters call the
    one they are given; it has no ONNX form."""

    name: str
    units: int

    def shapes(self, shape):
        return {}, (self.units,)

    def onnx(self, g, x):
        raise DsacError(f"a custom model ({self.name}) has no ONNX form: export a SavedModel and convert it")


class Head(Protocol):
    """What turns the layers' outputs into actions."""

    def act(self, out: np.ndarray, explore: bool, rng: np.random.Generator) -> np.ndarray:
        """Actions in the env's space for a batch of outputs (numpy)."""

    def deterministic(self, out, B: Backend):
        """The deterministic actions in backend ``B``."""

    def onnx(self, g, out: str) -> list[tuple]:
        """The graph's outputs, ``(name, tensor, element type, shape)``."""


def to_env_action(unit, low, high):
    """Actions in [-1, 1] (the squashed Gaussian's range) scaled to the env's bounds. Plain
    arithmetic, the action first: numpy arrays and TensorFlow tensors alike."""
    return (unit + 1.0) * 0.5 * (high - low) + low


def to_unit_action(action, low, high):
    """The inverse of :func:`to_env_action`: env-space actions (as replay stores them) in [-1, 1]."""
    return (action - low) * 2.0 / (high - low) - 1.0


@dataclass(frozen=True, eq=False)
class SquashedGaussian:
    """[mean, log_std] of a Gaussian over pre-tanh actions -> tanh(mean + std·ε) (tanh(mean)
    when not exploring), scaled to the env's bounds ``[low, high]`` (float32 arrays)."""

    low: np.ndarray
    high: np.ndarray

    def act(self, out, explore, rng):
        mean = out[:, : len(self.low)]
        if explore:
            log_std = np.minimum(np.maximum(out[:, len(self.low):], LOG_STD_MIN), LOG_STD_MAX)  # np.clip's 1/3 cost
            mean = mean + np.exp(log_std) * rng.standard_normal(mean.shape).astype(mean.dtype)
        return to_env_action(np.tanh(mean), self.low, self.high)

    def deterministic(self, out, B):
        return to_env_action(B.tanh(out[:, : len(self.low)]), self.low, self.high)

    def onnx(self, g, out):
        n = len(self.low)
        mean = g.op("Slice", [out, g.const([0]), g.const([n]), g.const([1])], "mean")
        x = g.op("Add", [g.op("Tanh", [mean], "unit_action"), g.const(np.float32(1.0))])
        x = g.op("Mul", [g.op("Mul", [x, g.const(np.float32(0.5))]), g.const(self.high - self.low, "range")])
        action = g.op("Add", [x, g.const(self.low, "low")], "action")
        return [("action", action, g.onnx.TensorProto.FLOAT, ["batch", n])]


@dataclass(frozen=True)
class Greedy:
    """Q(s, ·) of ``num_actions`` -> the greedy action (the first maximum), numbered from
    ``start`` as the env's."""

    num_actions: int
    start: int

    def act(self, q, explore, rng):
        return np.argmax(q, axis=1) + self.start

    def deterministic(self, q, B):
        return B.argmax(q) + self.start

    def onnx(self, g, q):
        greedy = g.op("ArgMax", [q], "greedy", axis=1, keepdims=0, select_last_index=0)
        action = g.op("Add", [greedy, g.const(self.start, "start")], "action")
        tensor = g.onnx.TensorProto
        return [("action", action, tensor.INT64, ["batch"]), ("q_values", q, tensor.FLOAT, ["batch", self.num_actions])]


@dataclass(frozen=True, eq=False)
class ActingNet:
    """An algorithm's acting network: ``layers`` from a batch of observations (``obs``: what
    the network reads) to the outputs ``head`` turns into actions."""

    obs: ObsInput
    layers: tuple[Op, ...]
    head: Head

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """Name and shape of every weight the layers read (a custom model's are its own)."""
        shapes, shape = {}, self.obs.input_shape
        for op in self.layers:
            own, shape = op.shapes(shape)
            shapes.update(own)
        return shapes


def with_obs_normalization(net: ActingNet) -> ActingNet:
    """``net`` reading normalized observations (``--normalize_obs``; vector observations only)."""
    check_normalizable(net.obs)
    return ActingNet(net.obs, (Normalize(), *net.layers), net.head)


def mlp(prefix: str, hiddens, units: int, activation: str) -> list[Dense]:
    """The catalog's MLP (:func:`dsac.models.catalog.build_mlp`): ``<prefix>hidden_<i>``
    activated, then ``<prefix>out`` of ``units`` outputs."""
    hidden = [Dense(f"{prefix}hidden_{i}", int(n), activation) for i, n in enumerate(hiddens)]
    return [*hidden, Dense(f"{prefix}out", units)]


def _forward(net: ActingNet, weights: dict, backend: Backend, custom):
    functions = [custom if isinstance(op, Custom) else op.arrays(weights, backend) for op in net.layers]

    def forward(x):
        for function in functions:
            x = function(x)
        return x
    return forward


def numpy_forward(net: ActingNet, weights: dict[str, np.ndarray], custom=None):
    """The network's numpy forward pass with ``weights`` (float32, by name) bound once: a batch
    of observations as :meth:`ObsInput.batch` gives them -> the outputs the head reads.
    ``custom``: what computes a :class:`Custom` layer (a custom model's Keras forward pass)."""
    return _forward(net, weights, NUMPY, custom)


def tf_serving(net: ActingNet, weights: dict[str, np.ndarray], custom=None):
    """``act(obs) -> deterministic actions`` in TensorFlow, the weights held as constants, for
    a SavedModel's serving function. ``custom``: the custom model's Keras model, if any."""
    backend = tf_backend()
    forward = _forward(net, weights, backend, custom)
    return lambda obs: net.head.deterministic(forward(obs), backend)
