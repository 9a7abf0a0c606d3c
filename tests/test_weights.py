"""TensorFlowVariables: round trip, stable names, clear errors."""

import numpy as np
import pytest
import tensorflow as tf

from dsac.models.catalog import build_mlp
from dsac.weights import TensorFlowVariables


def _auto_named_mlp():
    inputs = tf.keras.Input((3,))
    x = tf.keras.layers.Dense(8, activation="relu")(inputs)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(2)(x))


def test_round_trip_copies_a_model_exactly():
    a, b = build_mlp(3, [16, 16], 2, "actor"), build_mlp(3, [16, 16], 2, "actor")
    obs = np.random.default_rng(0).normal(size=(7, 3)).astype(np.float32)
    assert not np.allclose(a(obs), b(obs))
    TensorFlowVariables(b, "actor").set_weights(TensorFlowVariables(a, "actor").get_weights())
    np.testing.assert_array_equal(a(obs).numpy(), b(obs).numpy())


def test_names_do_not_depend_on_keras_auto_numbering():
    first = TensorFlowVariables(_auto_named_mlp()).names
    for _ in range(3):  # more models in the process bump Keras' counters (dense_7, ...)
        _auto_named_mlp()
    again = TensorFlowVariables(_auto_named_mlp()).names
    assert first == again == ["01_dense/kernel", "01_dense/bias", "02_dense/kernel", "02_dense/bias"]
    assert TensorFlowVariables(build_mlp(4, [4], 1, "q1"), "q1").names == [
        "q1/hidden_0/kernel", "q1/hidden_0/bias", "q1/out/kernel", "q1/out/bias",
    ]


def test_tf_module_dict_and_list_sources():
    class Affine(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones((2, 2)))
            self.b = tf.Variable(tf.zeros(2))

    assert TensorFlowVariables(Affine()).names == ["b", "w"]
    v = tf.Variable(3.0, name="scale")
    assert TensorFlowVariables({"log_alpha": v}).get_weights() == {"log_alpha": np.float32(3.0)}
    assert TensorFlowVariables([v], prefix="x").names == ["x/000_scale"]


def test_set_weights_names_missing_extra_and_misshaped_variables():
    tfv = TensorFlowVariables(build_mlp(3, [4], 2, "actor"), "actor")
    weights = tfv.get_weights()
    del weights["actor/out/bias"]
    weights["actor/extra"] = np.zeros(1)
    weights["actor/hidden_0/kernel"] = np.zeros((5, 4))
    with pytest.raises(ValueError) as err:
        tfv.set_weights(weights)
    message = str(err.value)
    assert "missing: actor/out/bias" in message
    assert "extra: actor/extra" in message
    assert "actor/hidden_0/kernel (5, 4) != (3, 4)" in message


def test_flat_round_trip_and_length_check():
    a, b = TensorFlowVariables(build_mlp(3, [5], 4, "a"), "a"), TensorFlowVariables(build_mlp(3, [5], 4, "a"), "a")
    flat = a.get_flat()
    assert flat.shape == (3 * 5 + 5 + 5 * 4 + 4,)
    b.set_flat(flat)
    for name, value in a.get_weights().items():
        np.testing.assert_array_equal(b.get_weights()[name], value)
    with pytest.raises(ValueError, match="expected"):
        b.set_flat(flat[:-1])
