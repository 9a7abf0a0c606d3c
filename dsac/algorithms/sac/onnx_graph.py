"""SAC's deterministic policy as an ONNX graph, from the weights alone (no TensorFlow):
obs -> tanh(mean) scaled to the env's bounds, as :class:`dsac.algorithms.sac.policy.SACPolicy`
acts with ``explore=False``."""

from __future__ import annotations

import numpy as np

from dsac.algorithms.sac.numpy_actor import actor_layer_names
from dsac.models.onnx_ops import OnnxGraph


def deterministic_action(graph: OnnxGraph, actor_outputs: str, action_space) -> str:
    """tanh of the mean (the first half of the actor's outputs), in the env's bounds:
    :func:`dsac.algorithms.sac.numpy_actor.to_env_action`, step by step in float32."""
    act_dim = int(np.prod(action_space.shape))
    low = np.asarray(action_space.low, np.float32)
    high = np.asarray(action_space.high, np.float32)
    mean = graph.op("Slice", [actor_outputs, graph.const([0]), graph.const([act_dim]), graph.const([1])], "mean")
    unit = graph.op("Tanh", [mean], "unit_action")
    x = graph.op("Add", [unit, graph.const(np.float32(1.0))])
    x = graph.op("Mul", [x, graph.const(np.float32(0.5))])
    x = graph.op("Mul", [x, graph.const(high - low, "range")])
    return graph.op("Add", [graph.const(low, "low"), x], "action")


def onnx_graph(loaded):
    """The ModelProto of a :class:`dsac.inference.LoadedPolicy` of SAC: input ``obs`` (the
    env's shape and dtype, a free batch axis), output ``action`` float32[batch, act_dim]."""
    model = loaded.config.model
    graph = OnnxGraph(loaded.payload["weights"])
    x, obs = graph.observations(loaded.observation_space, loaded.goal_spaces())
    if obs.is_image:  # φ(s): conv encoder, Dense, LayerNorm (Keras' epsilon 1e-3), tanh
        x = graph.image_features(x, "encoder/", obs, model.conv_filters, model.conv_activation)
        x = graph.op("Tanh", [graph.layer_norm(graph.dense(x, "encoder/head"), "encoder/norm", 1e-3)], "phi")
    x = graph.mlp(x, actor_layer_names(len(model.fcnet_hiddens)), model.fcnet_activation)
    act_dim = int(np.prod(loaded.action_space.shape))
    action = deterministic_action(graph, x, loaded.action_space)
    return graph.model([("action", action, graph.onnx.TensorProto.FLOAT, ["batch", act_dim])],
                       "SAC deterministic policy: tanh(mean) in the env's action bounds")
