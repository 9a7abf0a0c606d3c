"""CrossQ's deterministic policy as an ONNX graph, from the weights alone (no TensorFlow):
its batch-renormalized actor in inference mode, then tanh(mean) in the env's bounds, as
:class:`dsac.algorithms.crossq.policy.CrossQPolicy` acts with ``explore=False``."""

from __future__ import annotations

import numpy as np

from dsac.algorithms.crossq.policy import EPSILON
from dsac.algorithms.sac.onnx_graph import deterministic_action
from dsac.models.onnx_ops import OnnxGraph


def renorm(graph: OnnxGraph, x: str, layer: str) -> str:
    """Batch renormalization with its running statistics: (x − mean) · scale / sqrt(var + ε) + bias,
    the factor computed in float32 as the numpy actor computes it."""
    w = graph.weights
    factor = w[f"{layer}/scale"] / np.sqrt(w[f"{layer}/var"] + np.float32(EPSILON))
    x = graph.op("Sub", [x, graph.const(w[f"{layer}/mean"], f"{layer}/mean")], layer)
    x = graph.op("Mul", [x, graph.const(factor, f"{layer}/factor")], layer)
    return graph.op("Add", [x, graph.const(w[f"{layer}/bias"], f"{layer}/bias")], layer)


def onnx_graph(loaded):
    """The ModelProto of a :class:`dsac.inference.LoadedPolicy` of CrossQ: input ``obs`` (the
    env's shape and dtype, a free batch axis), output ``action`` float32[batch, act_dim]."""
    model = loaded.config.model
    graph = OnnxGraph(loaded.payload["weights"])
    x, _ = graph.observations(loaded.observation_space, loaded.goal_spaces())
    x = renorm(graph, x, "actor/norm_0")
    for i in range(len(model.fcnet_hiddens)):
        x = graph.activation(graph.dense(x, f"actor/hidden_{i}"), model.fcnet_activation)
        x = renorm(graph, x, f"actor/norm_{i + 1}")
    x = graph.dense(x, "actor/out")
    act_dim = int(np.prod(loaded.action_space.shape))
    action = deterministic_action(graph, x, loaded.action_space)
    return graph.model([("action", action, graph.onnx.TensorProto.FLOAT, ["batch", act_dim])],
                       "CrossQ deterministic policy: tanh(mean) of the renormalized actor, in the env's action bounds")
