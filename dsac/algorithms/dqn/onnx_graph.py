"""DQN's greedy policy as an ONNX graph, from the weights alone (no TensorFlow): obs -> the
greedy action and Q(s, ·) (C51: the expected value of each action's return distribution), as
:func:`dsac.algorithms.dqn.numpy_q.q_values` computes them."""

from __future__ import annotations

from dsac.algorithms.dqn.numpy_q import c51_support, q_layer_names
from dsac.models.onnx_ops import OnnxGraph


def q_from_heads(graph: OnnxGraph, heads: list[str], num_actions: int, support) -> str:
    """:func:`dsac.algorithms.dqn.numpy_q.q_from_head_outputs`: dueling V + A − mean_a A, per
    atom; C51 logits to expectations over ``support``."""
    atoms = 1 if support is None else len(support)
    shape = graph.const([-1, num_actions, atoms], "per_action")
    if len(heads) == 1:
        out = graph.op("Reshape", [heads[0], shape], "q_atoms")
    else:
        value = graph.op("Reshape", [heads[0], graph.const([-1, 1, atoms], "per_state")], "value")
        advantage = graph.op("Reshape", [heads[1], shape], "advantage")
        mean = graph.op("ReduceMean", [advantage], "mean_advantage", axes=[1], keepdims=1)
        out = graph.op("Sub", [graph.op("Add", [value, advantage]), mean], "q_atoms")
    if support is None:
        return graph.op("Reshape", [out, graph.const([-1, num_actions], "q_shape")], "q")
    probs = graph.op("Softmax", [out], "probs", axis=2)
    return graph.op("MatMul", [probs, graph.const(support, "support")], "q")


def onnx_graph(loaded):
    """The ModelProto of a :class:`dsac.inference.LoadedPolicy` of DQN: input ``obs`` (the env's
    shape and dtype, a free batch axis); outputs ``action`` int64[batch] (the greedy action in
    the env's numbering, its first maximum as numpy's argmax) and ``q_values`` float32[batch, n]."""
    algorithm, model = loaded.config.algorithm, loaded.config.model
    graph = OnnxGraph(loaded.payload["weights"])
    x, obs = graph.observations(loaded.observation_space, loaded.goal_spaces())
    if obs.is_image:
        x = graph.image_features(x, "q/", obs, model.conv_filters, model.conv_activation)
    torso, heads = q_layer_names(len(model.fcnet_hiddens), algorithm.dueling)
    if torso:  # the shared MLP, its last layer activated too: the heads read it
        x = graph.activation(graph.mlp(x, torso, model.fcnet_activation), model.fcnet_activation)
    num_actions = int(loaded.action_space.n)
    q = q_from_heads(graph, [graph.dense(x, head) for head in heads], num_actions, c51_support(algorithm))
    greedy = graph.op("ArgMax", [q], "greedy", axis=1, keepdims=0, select_last_index=0)
    action = graph.op("Add", [greedy, graph.const(int(loaded.action_space.start), "start")], "action")
    tensor = graph.onnx.TensorProto
    return graph.model([("action", action, tensor.INT64, ["batch"]),
                        ("q_values", q, tensor.FLOAT, ["batch", num_actions])],
                       "DQN greedy policy: the action and Q(s, a) of every action")
