"""Each algorithm's acting network is described once (dsac/models/acting_net.py); the Keras
training model is built apart. Here the two meet: the description reads exactly the weights
the learner's acting model has (names and shapes), computes what that model computes (numpy,
to 1e-5), and its TensorFlow form (the SavedModel's serving function) acts as numpy does —
for SAC (flat and images), CrossQ and DQN (dueling, C51, conv), on random weights where every
unit and statistic matters."""

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from dsac.config import Config
from dsac.models.acting_net import tf_serving
from dsac.runtime.build import make_learner
from dsac.settings.registry import algorithm

PENDULUM = (gym.spaces.Box(-8.0, 8.0, (3,), np.float32), gym.spaces.Box(-2.0, 2.0, (1,), np.float32))
FRAMES = gym.spaces.Box(0, 255, (3, 16, 14), np.uint8)  # 3 stacked grayscale frames, stack axis first
ASYMMETRIC = gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([2.0, 4.0], np.float32))


def c51_expectation(logits, support):
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return probs / probs.sum(axis=-1, keepdims=True) @ support


# What the learner's Keras model computes, up to the head: SAC's and CrossQ's [mean, log_std]
# (CrossQ's renormalization in inference mode), DQN's Q(s, ·) (C51: the support's expectation).
KERAS = {
    "sac": lambda learner, obs: learner.acting(learner.obs.batch(obs)).numpy(),
    "crossq": lambda learner, obs: learner.actor(obs, training=False).numpy(),
    "dqn": lambda learner, obs: (lambda q: q if learner.support is None
                                 else c51_expectation(q, learner.support.numpy()))(learner.q_online(obs).numpy()),
}

CASES = {
    "sac": ("sac", *PENDULUM, {"fcnet_hiddens": [16, 8], "fcnet_activation": "swish"}),
    "sac-frames": ("sac", FRAMES, ASYMMETRIC, {"fcnet_hiddens": [8], "conv_filters": [[4, 3, 2], [6, 3, 1]]}),
    "sac-normalized": ("sac", *PENDULUM, {"fcnet_hiddens": [16, 8], "normalize_obs": True}),
    "crossq": ("crossq", *PENDULUM, {"fcnet_hiddens": [16, 8], "critic_hiddens": [8], "fcnet_activation": "tanh"}),
    "dqn-dueling-frames": ("dqn", FRAMES, gym.spaces.Discrete(3, start=1),
                           {"fcnet_hiddens": [16], "dueling": True, "conv_filters": [[4, 3, 2]]}),
    "dqn-c51": ("dqn", PENDULUM[0], gym.spaces.Discrete(4),
                {"fcnet_hiddens": [16, 8], "dueling": False, "num_atoms": 7, "v_min": -2.0, "v_max": 3.0}),
    "dqn-c51-dueling-image": ("dqn", gym.spaces.Box(0.0, 1.0, (7, 6, 2), np.float32), gym.spaces.Discrete(3),
                              {"fcnet_hiddens": [8], "num_atoms": 5, "conv_filters": [[4, 2, 1], [4, 3, 2]]}),
}


def observations(space, n, rng):
    if space.dtype == np.uint8:
        return rng.integers(0, 256, (n, *space.shape)).astype(np.uint8)
    return rng.uniform(-2.0, 2.0, (n, *space.shape)).astype(space.dtype)


@pytest.mark.parametrize("case", CASES)
def test_the_description_is_the_keras_acting_model_in_numpy_and_in_tensorflow(case):
    algo, obs_space, action_space, model = CASES[case]
    config = Config(algo=algo, **model).validate()
    learner = make_learner(config, obs_space, action_space, seed=0)
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(0.0, 0.3, w.shape).astype(np.float32) for name, w in learner.get_weights().items()}
    weights.update({name: np.abs(w) + 0.5 for name, w in weights.items() if name.endswith(("/var", "/count"))})
    learner.set_weights(weights)
    policy = algorithm(algo).policy_class(obs_space, action_space, config, seed=0)
    assert policy.weight_shapes() == {name: w.shape for name, w in weights.items()}
    policy.set_weights(weights)
    obs = observations(obs_space, 64, rng)

    # --normalize_obs: the learner normalizes its batches before its Keras networks read them.
    inputs = learner._normalized({"obs": obs, "next_obs": obs})["obs"] if config.model.normalize_obs else obs
    keras = KERAS[algo](learner, inputs)
    np.testing.assert_allclose(policy._forward(policy.obs.batch(obs)), keras, atol=1e-5)
    if algo == "dqn":  # the greedy action, in the env's numbering
        expected = np.argmax(keras, axis=1) + action_space.start
    else:  # tanh(mean) in the env's bounds
        low, high = action_space.low, action_space.high
        expected = low + (np.tanh(keras[:, : len(low)]) + 1.0) * 0.5 * (high - low)
    assert len(np.unique(expected, axis=0)) > 1  # the actions depend on the observation: the checks can fail
    served = tf_serving(policy.net, weights)(tf.constant(policy.obs.batch(obs))).numpy()
    for actions in (policy.compute_actions(obs, explore=False), served):
        if algo == "dqn":
            np.testing.assert_array_equal(actions, expected)
            assert actions.dtype == np.int64
        else:
            np.testing.assert_allclose(actions, expected, atol=1e-5)


def test_a_custom_actor_on_frames_reads_the_described_encoder_and_acts_through_keras():
    """SAC with a custom model on images: the encoder is described (numpy, TensorFlow), the
    actor is the user's Keras model (a Custom op each interpreter is handed)."""
    import keras

    import dsac

    def tiny(input_dim, output_dim, model_config, name):
        inputs = keras.Input((input_dim,))
        hidden = keras.layers.Dense(8, activation="tanh", name="my_hidden")(inputs)
        return keras.Model(inputs, keras.layers.Dense(output_dim, name="my_out")(hidden), name=name)

    dsac.register_custom_model("acting_net_tiny", tiny)
    config = Config(algo="sac", custom_model="acting_net_tiny", conv_filters=[[4, 3, 2]]).validate()
    learner = make_learner(config, FRAMES, ASYMMETRIC, seed=0)
    policy = algorithm("sac").policy_class(FRAMES, ASYMMETRIC, config, seed=0)
    weights = learner.get_weights()
    assert policy.weight_shapes() == {name: w.shape for name, w in weights.items()}
    assert any(name.startswith("encoder/") for name in weights) and any("my_out" in name for name in weights)
    policy.set_weights(weights)
    obs = observations(FRAMES, 16, np.random.default_rng(1))
    np.testing.assert_allclose(policy._forward(policy.obs.batch(obs)), KERAS["sac"](learner, obs), atol=1e-5)
    served = tf_serving(policy.net, weights, policy.keras_forward.model)(tf.constant(obs)).numpy()
    np.testing.assert_allclose(served, policy.compute_actions(obs, explore=False), atol=1e-5)
