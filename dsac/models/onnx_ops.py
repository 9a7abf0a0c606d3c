"""An acting network's description (:class:`dsac.models.acting_net.ActingNet`) as an ONNX
graph, built from weights by name with the ``onnx`` package alone (no TensorFlow): what
``dsac-export --format onnx`` writes for the built-in networks. Each op kind gives its own
nodes (its ``onnx`` method) from the description numpy acting runs, so an exported graph
computes what :func:`dsac.load_policy` computes (tests/test_onnx.py compares them with
onnxruntime).

Opset 17 and IR version 8 keep the files loadable by onnxruntime 1.12 and newer, and by other
runtimes of that age; LayerNormalization (SAC's image encoder) is the newest operator used.
"""

from __future__ import annotations

import numpy as np

from dsac.errors import DsacError
from dsac.models.vision import obs_input

OPSET = 17
IR_VERSION = 8
# The graph's input: a batch of observations as the env gives them (its shape and dtype).
OBS_INPUT = "obs"


def import_onnx():
    """The ``onnx`` package, or a one-line error naming the extra that brings it."""
    try:
        import onnx
    except ImportError:
        raise DsacError("ONNX export needs the onnx package: pip install 'dsac[onnx]'") from None
    return onnx


class OnnxGraph:
    """A graph under construction: nodes, and the weights they read as initializers.

    Args:
        weights: the policy's weights by name (``name/kernel``, ``name/bias``, ...), as a
            weights file holds them.
    """

    def __init__(self, weights: dict[str, np.ndarray]):
        self.onnx = import_onnx()
        self.weights = weights
        self.nodes: list = []
        self.initializers: list = []
        self.inputs: list = []
        self.count = 0

    def fresh(self, base: str) -> str:
        """A tensor name not used yet, readable in a graph viewer."""
        self.count += 1
        return f"{base.replace('/', '_')}_{self.count}"

    def const(self, value, base: str = "const") -> str:
        """An initializer holding ``value`` (float32 unless it is an integer array)."""
        array = np.asarray(value)
        array = array.astype(np.int64 if array.dtype.kind in "iu" else np.float32)
        name = self.fresh(base)
        self.initializers.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def weight(self, name: str) -> str:
        """An initializer holding the weight ``name``."""
        return self.const(self.weights[name], name)

    def op(self, op_type: str, inputs: list[str], base: str | None = None, **attributes) -> str:
        """One node with one output; returns the output's name."""
        out = self.fresh(base or op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, [out], **attributes))
        return out

    def observations(self, observation_space, goal_spaces: dict | None = None) -> tuple[str, object]:
        """The graph's input, of the env's observation shape and dtype with a free batch axis,
        as float32 ``[batch, *input_shape]`` (:class:`dsac.models.vision.ObsInput`: flat for
        vectors, the env's shape for images; uint8 frames not yet scaled). ``goal_spaces`` (a
        ``--her`` policy's goal Dict): one input per key, as the env gives them, and the
        networks' ``observation ++ desired_goal`` made of them (``achieved_goal`` is unused)."""
        obs = obs_input(observation_space)
        if goal_spaces is not None:
            parts = [self.input(key, goal_spaces[key]) for key in ("observation", "achieved_goal", "desired_goal")]
            flat = [self.op("Reshape", [self.op("Cast", [part], to=self.onnx.TensorProto.FLOAT),
                                        self.const([-1, int(np.prod(goal_spaces[key].shape))])], key)
                    for part, key in ((parts[0], "observation"), (parts[2], "desired_goal"))]
            return self.op("Concat", flat, "obs_batch", axis=1), obs
        x = self.op("Cast", [self.input(OBS_INPUT, observation_space)], "obs_float", to=self.onnx.TensorProto.FLOAT)
        return self.op("Reshape", [x, self.const([-1, *obs.input_shape], "obs_shape")], "obs_batch"), obs

    def input(self, name: str, space) -> str:
        """A graph input ``name`` of ``space``'s shape and dtype with a free batch axis."""
        shape, dtype = tuple(space.shape), np.dtype(space.dtype)
        try:
            elem = self.onnx.helper.np_dtype_to_tensor_dtype(dtype)
        except (KeyError, ValueError, TypeError):
            raise DsacError(f"ONNX has no tensor type for observations of dtype {dtype}") from None
        self.inputs.append(self.onnx.helper.make_tensor_value_info(name, elem, ["batch", *shape]))
        return name

    def activation(self, x: str, name: str) -> str:
        """Keras' activation ``name`` (those of :data:`dsac.models.backends.ACTIVATIONS`)."""
        if name == "relu":
            return self.op("Relu", [x])
        if name == "tanh":
            return self.op("Tanh", [x])
        if name == "swish":
            return self.op("Mul", [x, self.op("Sigmoid", [x])], "swish")
        if name == "linear":
            return x
        raise DsacError(f"activation {name!r} has no ONNX export")

    def model(self, outputs: list[tuple[str, str, int, list]], doc: str):
        """The checked ModelProto; ``outputs``: (graph output name, tensor, element type, shape)."""
        onnx = self.onnx
        values = []
        for name, tensor, elem, shape in outputs:
            self.nodes.append(onnx.helper.make_node("Identity", [tensor], [name]))
            values.append(onnx.helper.make_tensor_value_info(name, elem, shape))
        graph = onnx.helper.make_graph(self.nodes, "dsac_policy", self.inputs, values, self.initializers)
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                       producer_name="dsac", doc_string=doc)
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model, full_check=True)
        return model


def onnx_policy(net, weights: dict[str, np.ndarray], observation_space, goal_spaces: dict | None = None):
    """The checked ModelProto of ``net`` (an :class:`dsac.models.acting_net.ActingNet`) with
    ``weights``: input ``obs`` (the env's shape and dtype, a free batch axis; a ``--her``
    policy's goal Dict: one input per key), outputs the head's deterministic action (and DQN's
    ``q_values``)."""
    graph = OnnxGraph(weights)
    x, _ = graph.observations(observation_space, goal_spaces)
    for op in net.layers:
        x = op.onnx(graph, x)
    return graph.model(net.head.onnx(graph, x), f"dsac deterministic policy: {type(net.head).__name__} head")
