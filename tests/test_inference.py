"""Weight files: safe loading, one-line errors, and load_policy acting like the TF networks."""

import os
import pickle
import re
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from conftest import REPO_ROOT

from dsac import load_policy
from dsac.config import Config
from dsac.envs.make import describe_space
from dsac.errors import DsacError
from dsac.formats.files import FORMAT_VERSION, load_weights, save_weights
from dsac.runtime.build import make_learner


def payload_for(policy, algo, env_id, **model):
    return {
        "algo": algo, "env": env_id,
        "observation_space": describe_space(policy.observation_space),
        "action_space": describe_space(policy.action_space),
        "model": model, "weights": policy.get_weights(), "version": 7, "env_steps": 123, "updates": 45,
    }


@pytest.mark.parametrize("algo, env_id, model", [
    ("sac", "Pendulum-v1", {"fcnet_hiddens": [32, 16], "fcnet_activation": "tanh"}),
    ("crossq", "Pendulum-v1", {"fcnet_hiddens": [32, 16], "critic_hiddens": [8]}),
    ("dqn", "CartPole-v1", {"fcnet_hiddens": [32], "dueling": True}),
    ("dqn", "CartPole-v1", {"fcnet_hiddens": [16], "dueling": False, "num_atoms": 11, "v_min": 0.0, "v_max": 50.0}),
])
def test_load_policy_matches_the_tf_networks(algo, env_id, model, tmp_path):
    env = gym.make(env_id)
    config = Config(algo=algo, env=env_id, **model).validate()
    trained = make_learner(config, env.observation_space, env.action_space)
    path = str(tmp_path / "weights.pkl")
    save_weights(path, payload_for(trained, algo, env_id, **model))
    policy = load_policy(path)
    obs = np.random.default_rng(0).normal(size=(50, *env.observation_space.shape)).astype(np.float32)
    if algo in ("sac", "crossq"):
        mean = trained.actor(obs).numpy()[:, :1]  # CrossQ's: batch renormalization's inference mode
        np.testing.assert_allclose(policy(obs), 2.0 * np.tanh(mean), atol=1e-5)  # Pendulum bounds: ±2
        assert policy(obs[0]).shape == (1,)  # one observation -> one action
        assert not np.allclose(policy(obs, explore=True), policy(obs))
    else:
        q_tf = trained.q_online(obs).numpy()
        if q_tf.ndim == 3:  # C51 logits -> expected Q
            probs = np.exp(q_tf) / np.exp(q_tf).sum(-1, keepdims=True)
            q_tf = probs @ np.linspace(0.0, 50.0, 11)
        np.testing.assert_allclose(policy.policy._q_values(obs), q_tf, atol=1e-5)
        np.testing.assert_array_equal(policy(obs), q_tf.argmax(1))
        assert isinstance(policy(obs[0]), np.integer)


class Exploit:
    """A pickle whose loading would run a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "weights.pkl"
    path.write_bytes(pickle.dumps({"format_version": FORMAT_VERSION, "weights": Exploit(marker)}))
    with pytest.raises(DsacError, match=r"refusing to load global (posix|os)\.system"):
        load_weights(str(path))
    assert not marker.exists()
    for name in ("eval", "exec"):
        path.write_bytes(b"cbuiltins\n" + name.encode() + b"\n(S'1'\ntR.")
        with pytest.raises(DsacError, match=f"builtins.{name}"):
            load_weights(str(path))


def test_corrupt_truncated_foreign_and_old_files_give_one_line_errors(tmp_path):
    env = gym.make("Pendulum-v1")
    policy = make_learner(Config().validate(), env.observation_space, env.action_space)
    good = tmp_path / "good.pkl"
    save_weights(str(good), payload_for(policy, "sac", "Pendulum-v1", fcnet_hiddens=Config().fcnet_hiddens))
    data = good.read_bytes()
    cases = {
        "truncated.pkl": (data[: len(data) // 2], "truncated or corrupt"),
        "garbage.pkl": (b"\x00\x01not a pickle at all", "not a dsac weights file|truncated or corrupt"),
        "old.pkl": (pickle.dumps({**pickle.loads(data), "format_version": 99}, protocol=5), "format_version 99"),
        "other.pkl": (pickle.dumps({**pickle.loads(data), "algo": "ppo"}, protocol=5), "algorithm 'ppo'"),
        "list.pkl": (pickle.dumps([1, 2, 3]), "no weights in it"),
        # an env id with a line break and a terminal escape, and an action space SAC refuses: shown with repr
        "escapes.pkl": (pickle.dumps({**pickle.loads(data), "env": "Pend\n\x1b[31mulum",
                                      "action_space": {"type": "Discrete", "n": 2, "start": 0}}, protocol=5),
                        re.escape("but 'Pend\\n\\x1b[31mulum' has Discrete(2)")),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(DsacError, match=message) as err:
            load_policy(str(path))
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(DsacError, match="not 'dqn'"):
        load_policy(str(good), algo="dqn")


def test_infer_script_runs_episodes(tmp_path):
    env = gym.make("CartPole-v1")
    policy = make_learner(Config(algo="dqn", fcnet_hiddens=[8]).validate(), env.observation_space, env.action_space)
    path = tmp_path / "w.pkl"
    save_weights(str(path), payload_for(policy, "dqn", "CartPole-v1", fcnet_hiddens=[8]))
    result = subprocess.run([sys.executable, "-m", "dsac.infer", str(path), "--episodes", "3"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("episode ") == 3 and "mean return over 3 episodes" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "dsac.infer", str(tmp_path / "missing.pkl")], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("algo, env_id, model", [
    ("sac", "Pendulum-v1", {"fcnet_hiddens": [16]}),
    ("crossq", "Pendulum-v1", {"fcnet_hiddens": [16], "critic_hiddens": [8]}),
    ("dqn", "CartPole-v1", {"fcnet_hiddens": [16], "num_atoms": 5, "v_min": 0.0, "v_max": 10.0}),
])
@pytest.mark.slow
def test_savedmodel_export_matches_the_numpy_policy(algo, env_id, model, tmp_path):
    import tensorflow as tf

    env = gym.make(env_id)
    trained = make_learner(Config(algo=algo, env=env_id, **model).validate(), env.observation_space, env.action_space)
    path = str(tmp_path / "w.pkl")
    save_weights(path, payload_for(trained, algo, env_id, **model))
    out = str(tmp_path / "saved")
    result = subprocess.run([sys.executable, "-m", "dsac.export", path, "--savedmodel", out], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    serve = tf.saved_model.load(out).signatures["serving_default"]
    obs = np.random.default_rng(1).normal(size=(20, *env.observation_space.shape)).astype(np.float32)
    exported = serve(obs=tf.constant(obs))["action"].numpy()
    expected = load_policy(path)(obs)
    if algo in ("sac", "crossq"):
        np.testing.assert_allclose(exported, expected, atol=1e-5)
    else:
        np.testing.assert_array_equal(exported, expected)
