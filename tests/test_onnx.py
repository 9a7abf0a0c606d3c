"""ONNX export, checked by onnxruntime: ``dsac-export WEIGHTS --format onnx -o policy.onnx``
computes what :func:`dsac.load_policy` computes, on observations from the env (actions equal
for DQN, within 1e-5 for SAC and CrossQ), with no TensorFlow in the exporting process; bad
requests get one line and exit 2."""

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest
from conftest import REPO_ROOT
from test_inference import payload_for

from dsac import load_policy
from dsac.config import Config
from dsac.envs.make import describe_space
from dsac.errors import DsacError
from dsac.export import export_onnx
from dsac.formats.files import save_weights
from dsac.runtime.build import make_learner

OBSERVATIONS = 1000


def weights_file(tmp_path, algo, env_id, env=None, **model):
    """A weights file of a freshly initialized learner (random weights: every unit matters),
    its running statistics (CrossQ's batch renormalization, --normalize_obs) moved away from
    identity as training moves them."""
    env = env or gym.make(env_id)
    learner = make_learner(Config(algo=algo, env=env_id, **model).validate(), env.observation_space,
                           env.action_space)
    path = str(tmp_path / "weights.pkl")
    payload = payload_for(learner, algo, env_id, **model)
    rng = np.random.default_rng(7)
    for name, value in payload["weights"].items():
        if name.endswith("/mean"):
            payload["weights"][name] = rng.normal(0.0, 0.5, value.shape).astype(value.dtype)
        elif name.endswith("/var") or name.endswith("/count"):
            payload["weights"][name] = rng.uniform(0.3, 3.0, value.shape).astype(value.dtype)
    save_weights(path, payload)
    return path


def env_observations(env, n=OBSERVATIONS, seed=0) -> np.ndarray:
    """``n`` observations the env gives under random actions, across episodes."""
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    while len(out) < n:
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    return np.stack(out)


def export(weights, out, *extra):
    """``dsac-export WEIGHTS --format onnx -o OUT`` as a user types it (``python -m``)."""
    return subprocess.run([sys.executable, "-m", "dsac.export", weights, "--format", "onnx", "-o", out, *extra],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)


def check_against_load_policy(weights, onnx_path, obs, discrete, trust_code=False):
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    outputs = session.run(None, {"obs": obs})
    policy = load_policy(weights, trust_code=trust_code)
    expected = policy(obs)
    if discrete:
        np.testing.assert_array_equal(outputs[0], expected)
        assert outputs[0].dtype == np.int64
        np.testing.assert_allclose(outputs[1], policy.policy._q_values(obs), atol=1e-5)
    else:
        assert outputs[0].dtype == np.float32 and outputs[0].shape == expected.shape
        np.testing.assert_allclose(outputs[0], expected, atol=1e-5)
    return outputs


@pytest.mark.parametrize("algo, env_id, model", [
    ("sac", "Pendulum-v1", {"fcnet_hiddens": [32, 16], "fcnet_activation": "tanh"}),
    ("sac", "Pendulum-v1", {"fcnet_hiddens": [32, 16], "normalize_obs": True}),
    ("crossq", "MountainCarContinuous-v0", {"fcnet_hiddens": [16, 8], "critic_hiddens": [8]}),
    ("dqn", "CartPole-v1", {"fcnet_hiddens": [32, 16], "dueling": True}),
    ("dqn", "CartPole-v1", {"fcnet_hiddens": [16], "dueling": False, "num_atoms": 11, "v_min": 0.0, "v_max": 50.0}),
    ("dqn", "Acrobot-v1", {"fcnet_hiddens": [8], "fcnet_activation": "swish"}),
])
def test_onnx_export_acts_as_load_policy_on_the_envs_observations(algo, env_id, model, tmp_path):
    weights = weights_file(tmp_path, algo, env_id, **model)
    out = str(tmp_path / "policy.onnx")
    result = export(weights, out)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"ONNX in {out}: obs float32[batch, ") and "(opset 17)" in result.stdout
    obs = env_observations(gym.make(env_id))
    outputs = check_against_load_policy(weights, out, obs, discrete=algo == "dqn")
    assert len(np.unique(outputs[0], axis=0)) > 1  # the policy is not constant: the check can fail


def test_conv_dqn_on_an_image_env_exports_with_its_uint8_frames(tmp_path):
    """Catch's 10x5 uint8 frames: the graph scales them as the numpy policy does."""
    from examples.catch import Catch

    env = Catch()
    weights = weights_file(tmp_path, "dqn", "examples.catch:Catch", env=env, fcnet_hiddens=[32])
    out = str(tmp_path / "catch.onnx")
    result = export(weights, out, "--trust_code")  # the file names its env's module
    assert result.returncode == 0, result.stderr[-2000:]
    assert "obs uint8[batch, 10, 5]" in result.stdout
    obs = env_observations(env)
    assert obs.dtype == np.uint8
    check_against_load_policy(weights, out, obs, discrete=True, trust_code=True)


@pytest.mark.parametrize("shape, filters", [((3, 12, 10), [[4, 3, 2]]), ((2, 11, 11, 3), [[4, 3, 1], [8, 3, 2]])])
def test_sac_image_encoder_exports_with_its_layer_norm(shape, filters, tmp_path):
    """SAC's encoder (conv, Dense, LayerNorm, tanh) on stacked frames of two layouts; the
    frames are random (no small image env has Box actions)."""
    obs_space = gym.spaces.Box(0, 255, shape, np.uint8)
    action_space = gym.spaces.Box(-np.array([1.0, 3.0], np.float32), np.array([2.0, 3.0], np.float32))
    env = type("Spaces", (), {"observation_space": obs_space, "action_space": action_space})()
    weights = weights_file(tmp_path, "sac", "Pendulum-v1", env=env, fcnet_hiddens=[16], conv_filters=filters)
    out = str(tmp_path / "image.onnx")
    assert export(weights, out).returncode == 0
    obs = np.random.default_rng(0).integers(0, 256, (200, *shape)).astype(np.uint8)
    check_against_load_policy(weights, out, obs, discrete=False)


def test_observations_are_taken_in_the_envs_own_dtype(tmp_path):
    """A float64 Box (MuJoCo's) is the graph's input type: observations go in as the env gives them."""
    env = gym.make("Pendulum-v1")
    weights = weights_file(tmp_path, "sac", "Pendulum-v1", fcnet_hiddens=[8])
    payload = load_policy(weights).payload
    payload["observation_space"] = describe_space(gym.spaces.Box(-np.inf, np.inf, (3,), np.float64))
    save_weights(weights, payload)
    out = str(tmp_path / "f64.onnx")
    result = export(weights, out)
    assert result.returncode == 0 and "obs float64[batch, 3]" in result.stdout, result.stderr
    obs = env_observations(env, 100).astype(np.float64)
    check_against_load_policy(weights, out, obs, discrete=False)


def test_onnx_export_needs_no_tensorflow(tmp_path):
    weights = weights_file(tmp_path, "dqn", "CartPole-v1", fcnet_hiddens=[8])
    code = ("import sys; from dsac.export import main; code = main([sys.argv[1], '--format', 'onnx', '-o', "
            "sys.argv[2]]); assert 'tensorflow' not in sys.modules, 'TensorFlow was imported'; sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", code, weights, str(tmp_path / "p.onnx")], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_bad_export_requests_get_one_line_and_exit_2(tmp_path, monkeypatch):
    weights = weights_file(tmp_path, "sac", "Pendulum-v1", fcnet_hiddens=[8])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    cases = [
        ([weights, "--format", "onnx", "-o", str(tmp_path)], "is a directory"),
        ([weights, "--format", "onnx"], "no output"),
        ([weights, "--format", "onnx", "--savedmodel", str(tmp_path / "s")], "not --format onnx"),
        ([weights, "-o", str(tmp_path / "p.onnx"), "--savedmodel", str(tmp_path / "s")], "give the output once"),
        ([str(tmp_path / "missing.pkl"), "-o", str(tmp_path / "p.onnx")], "does not exist"),
    ]
    if os.geteuid() != 0:  # root writes anywhere
        cases.append(([weights, "-o", str(locked / "p.onnx")], "is not writable"))
    for argv, message in cases:
        result = subprocess.run([sys.executable, "-m", "dsac.export", *argv], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr, (argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "p.onnx")
    from dsac import export as export_module

    monkeypatch.setitem(sys.modules, "onnx", None)  # as if dsac[onnx] were not installed
    with pytest.raises(DsacError, match=r"pip install 'dsac\[onnx\]'"):
        export_module.export_onnx(weights, str(tmp_path / "p.onnx"))


def test_a_custom_model_is_refused_in_one_line(tmp_path):
    import keras

    import dsac

    def tiny(input_dim, output_dim, model_config, name):
        inputs = keras.Input((input_dim,))
        return keras.Model(inputs, keras.layers.Dense(output_dim, name="my_out")(inputs), name=name)

    dsac.register_custom_model("onnx_tiny", tiny)
    weights = weights_file(tmp_path, "sac", "Pendulum-v1", custom_model="onnx_tiny")
    with pytest.raises(DsacError, match=r"custom model .*onnx_tiny.*tf2onnx"):
        export_onnx(weights, str(tmp_path / "p.onnx"))


def test_a_her_file_whose_env_has_no_goal_dict_is_refused_in_one_line(tmp_path):
    """Issue 56: ``her: true`` on a file whose env observes no goal Dict (an AttributeError from
    dsac/formats/inference.py), or one whose goal Dict holds more values than the network reads; both in
    one process."""
    from conftest import run_in_one_process

    from dsac.formats.files import load_weights

    (tmp_path / "p").mkdir()
    (tmp_path / "b").mkdir()
    pendulum = weights_file(tmp_path / "p", "sac", "Pendulum-v1", fcnet_hiddens=[8])
    bits = weights_file(tmp_path / "b", "dqn", "CartPole-v1", fcnet_hiddens=[8])  # a network of 4 values in
    for path, changes in ((pendulum, {}), (bits, {"env": "examples.bit_flipping:BitFlipping", "env_kwargs": {"n": 3}})):
        save_weights(path, {**load_weights(path), **changes, "her": True})
    cases = [([pendulum], "has her: true, which its env does not bear out: --her needs a Dict observation"),
             ([bits, "--trust_code"], "'examples.bit_flipping:BitFlipping''s observation and desired_goal hold 6 "
                                      "values, not the 4 its network reads")]
    programs = [{"program": "-m dsac.export", "args": [*args, "--format", "onnx", "-o", str(tmp_path / f"{i}.onnx")]}
                for i, (args, _) in enumerate(cases)]
    (tmp_path / "batch").mkdir()
    for (args, fact), result in zip(cases, run_in_one_process(programs, tmp_path / "batch"), strict=True):
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        where = f"{args}: exit {result.returncode}, {result.stderr[-1500:]!r}"
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("export: error: "), where
        assert fact in lines[0], where
    assert not list(tmp_path.glob("*.onnx"))
