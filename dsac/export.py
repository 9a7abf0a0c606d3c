"""Export a weights file as a TensorFlow SavedModel with a serving signature obs -> action
(deterministic), loadable by ``tf.saved_model.load`` and TF Serving."""

from __future__ import annotations

import numpy as np

from dsac.artifacts import check_writable_dir
from dsac.errors import DsacError
from dsac.inference import load_policy


def export_savedmodel(weights_path: str, out_dir: str, trust_code: bool = False) -> str:
    """Write ``out_dir`` with signature ``serving_default(obs: float32[batch, obs_dim]) ->
    {"action": ...}``; returns ``out_dir``. The file is loaded and checked (see
    :func:`dsac.inference.load_policy`) before TensorFlow is imported."""
    loaded = load_policy(weights_path, trust_code=trust_code)
    check_writable_dir(out_dir, "--savedmodel")

    from dsac.tf_setup import import_tensorflow
    from dsac.weights import TensorFlowVariables

    tf = import_tensorflow()

    if loaded.payload.get("policy_class"):
        raise DsacError(f"weights file {weights_path} holds a user policy class: export it yourself")
    config, weights = loaded.config, loaded.payload["weights"]
    obs_dim = int(np.prod(loaded.observation_space.shape))
    if loaded.algo == "sac":
        from dsac.algorithms.sac.networks import build_actor

        act_dim = int(np.prod(loaded.action_space.shape))
        model = build_actor(obs_dim, act_dim, config)
        TensorFlowVariables(model, "actor").set_weights(weights)
        low = tf.constant(loaded.action_space.low, tf.float32)
        high = tf.constant(loaded.action_space.high, tf.float32)

        def act(obs):
            mean = model(obs)[:, :act_dim]
            return low + (tf.tanh(mean) + 1.0) * 0.5 * (high - low)
    else:
        from dsac.algorithms.dqn.networks import build_q_network
        from dsac.algorithms.dqn.numpy_q import c51_support

        model = build_q_network(obs_dim, int(loaded.action_space.n), config, "q")
        TensorFlowVariables(model, "q").set_weights(weights)
        support = c51_support(config)
        start = int(loaded.action_space.start)

        def act(obs):
            q = model(obs)
            if support is not None:
                q = tf.reduce_sum(tf.nn.softmax(q, axis=-1) * support, axis=-1)
            return tf.argmax(q, axis=1, output_type=tf.int64) + start

    module = tf.Module()
    module.model = model
    module.serve = tf.function(
        lambda obs: {"action": act(obs)}, input_signature=[tf.TensorSpec([None, obs_dim], tf.float32, name="obs")]
    )
    try:
        tf.saved_model.save(module, out_dir, signatures={"serving_default": module.serve})
    except (tf.errors.OpError, OSError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        raise DsacError(f"--savedmodel {out_dir}: cannot write it ({message.strip().splitlines()[0]})") from None
    return out_dir

