"""The conv encoder of image observations: the numpy forward rollout workers act with agrees
with the Keras network the learner trains, for every layout dsac reads."""

import keras
import numpy as np
import pytest

from dsac.config import Config
from dsac.errors import DsacError
from dsac.models.catalog import torso
from dsac.models.numpy_ops import image_features
from dsac.models.vision import NATURE_FILTERS, ObsInput, conv_output_shape, default_conv_filters, image_layout
from dsac.weights import TensorFlowVariables


@pytest.mark.parametrize(
    "shape, dtype, filters",
    [
        ((4, 84, 84), np.uint8, None),  # Atari: 4 stacked grayscale frames, stack axis first -> Nature encoder
        ((2, 42, 42, 3), np.uint8, [[8, 4, 2], [16, 3, 2]]),  # stacked RGB frames
        ((10, 10, 4), np.float32, None),  # a small image, channels last (MinAtar's layout)
        ((12, 9), np.uint8, [[4, 3, 2]]),  # one grayscale frame, non-square, stride that does not divide
    ],
)
def test_numpy_conv_forward_matches_keras(shape, dtype, filters):
    config = Config(conv_filters=filters, fcnet_hiddens=[32]).validate()
    inputs, features = torso(ObsInput(shape, np.dtype(dtype).name), config)
    model = keras.Model(inputs, features, name="q")
    weights = TensorFlowVariables(model, prefix="q").get_weights()
    rng = np.random.default_rng(0)
    for name in weights:  # random biases too, so a misplaced bias shows
        weights[name] = rng.normal(0.0, 0.1, weights[name].shape).astype(np.float32)
    TensorFlowVariables(model, prefix="q").set_weights(weights)
    high = 256 if dtype == np.uint8 else 1
    obs = (rng.integers(0, high, size=(5, *shape)) if dtype == np.uint8 else rng.random((5, *shape))).astype(dtype)
    expected = model(obs).numpy()
    conv = image_features(weights, "q/", obs, shape, config.conv_filters, config.conv_activation)
    got = np.maximum(conv @ weights["q/hidden_0/kernel"] + weights["q/hidden_0/bias"], 0.0)
    np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-4)


def test_layouts_and_default_filters():
    assert image_layout((4, 84, 84)) == ((0, 2, 3, 1), (84, 84, 4))
    assert image_layout((96, 96, 3)) == (None, (96, 96, 3))
    assert image_layout((3, 64, 64, 3)) == ((0, 2, 3, 1, 4), (64, 64, 9))
    assert default_conv_filters((4, 84, 84)) == NATURE_FILTERS
    assert conv_output_shape((4, 84, 84), NATURE_FILTERS) == (7, 7, 64)  # 3136 features, as in the paper
    assert conv_output_shape((10, 10, 4), default_conv_filters((10, 10, 4))) == (6, 6, 32)
    with pytest.raises(DsacError, match="does not fit its 3x3 input"):
        conv_output_shape((4, 84, 84), [[32, 8, 4], [64, 4, 2], [64, 4, 2], [64, 4, 2]])
    with pytest.raises(DsacError, match="cannot read observations of shape"):
        image_layout((32, 32, 32))


def test_dqn_learns_an_image_env_through_the_conv_encoder(tmp_path):
    """Catch (examples/catch.py, 10x5 uint8 frames): from about -0.6 at random to catching
    (almost) every ball, with the default small encoder and frame-by-frame replay."""
    import json
    import os
    import subprocess
    import sys

    from conftest import REPO_ROOT

    out = tmp_path / "catch"
    run = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--algo", "dqn", "--env", "examples.catch:Catch",
         "--local", "--total_env_steps", "3000", "--eval_every", "1000", "--seed", "0", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, cwd=REPO_ROOT,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    evals = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    returns = [e["eval_return_mean"] for e in evals if "eval_return_mean" in e]
    assert returns[-1] >= 0.8, returns  # 10 balls, at least 9 caught
