"""The conv encoder of image observations: the numpy forward rollout workers act with agrees
with the Keras network the learner trains, for every layout dsac reads."""

import keras
import numpy as np
import pytest

from dsac.config import Config
from dsac.errors import DsacError
from dsac.models.acting_net import ConvEncoder
from dsac.models.backends import NUMPY
from dsac.models.catalog import torso
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
    inputs, features = torso(ObsInput(shape, np.dtype(dtype).name), config.model)
    model = keras.Model(inputs, features, name="q")
    weights = TensorFlowVariables(model, prefix="q").get_weights()
    rng = np.random.default_rng(0)
    for name in weights:  # random biases too, so a misplaced bias shows
        weights[name] = rng.normal(0.0, 0.1, weights[name].shape).astype(np.float32)
    TensorFlowVariables(model, prefix="q").set_weights(weights)
    high = 256 if dtype == np.uint8 else 1
    obs = (rng.integers(0, high, size=(5, *shape)) if dtype == np.uint8 else rng.random((5, *shape))).astype(dtype)
    expected = model(obs).numpy()
    encoder = ConvEncoder("q/", shape, config.conv_filters or default_conv_filters(shape), config.conv_activation,
                          dtype == np.uint8)
    conv = encoder.arrays(weights, NUMPY)(obs)
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


def test_dqn_learns_an_image_env_through_the_conv_encoder(tmp_path, capfd, caplog):
    """Catch (examples/catch.py, 10x5 uint8 frames): from about -0.6 at random to catching
    (almost) every ball, with the default small encoder and frame-by-frame replay."""
    import json

    from conftest import launch_here

    out = tmp_path / "catch"
    run = launch_here(["--algo", "dqn", "--env", "examples.catch:Catch", "--local", "--total_env_steps", "3000",
                       "--eval_every", "1000", "--seed", "0", "--output_dir", out], capfd, caplog)
    assert run.returncode == 0, run.stderr[-2000:]
    evals = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    returns = [e["eval_return_mean"] for e in evals if "eval_return_mean" in e]
    assert returns[-1] >= 0.8, returns  # 10 balls, at least 9 caught


def test_sac_on_car_racing_runs_end_to_end_and_sizes_its_replay_to_the_machine(tmp_path, capfd, caplog):
    """SAC from pixels (CarRacing-v3, 96x96x3 frames, preprocessed as ALE's: 84x84 gray, 4
    stacked, stored frame by frame): the critics' shared encoder, the actor reading its
    features; the weights file rebuilds the preprocessed env and acts through load_policy
    without TensorFlow."""
    from conftest import act_without_tensorflow, launch_here

    out = tmp_path / "car"
    run = launch_here(["--algo", "sac", "--env", "CarRacing-v3", "--local", "--total_env_steps", "300",
                       "--learning_starts", "100", "--start_steps", "100", "--batch_size", "16", "--eval_episodes", "1",
                       "--env_kwargs", '{"max_episode_steps": 100}', "--output_dir", out], capfd, caplog)
    assert run.returncode == 0, run.stderr[-2000:]
    log = run.stderr + run.stdout
    assert "CarRacing-v3's 96x96x3 frames are preprocessed as ALE's: 84x84, gray, 4 stacked" in log, log[-2000:]
    act_without_tensorflow(out / "weights.pkl", """
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8, (obs.shape, obs.dtype)
        action = policy(obs)
        assert action.shape == (3,) and env.action_space.contains(action), action
    """)


def test_a_default_replay_of_frames_is_sized_to_the_memory_there_is(caplog):
    """SAC's default 1M transitions of CarRacing's raw 96x96x3 frames (28 GiB) do not fit in
    half of 16 GiB: the replay takes what fits and the log says so; 84x84 gray frames (7 GB)
    fit, and the default stays."""
    import logging

    import gymnasium as gym

    from dsac.replay.buffer import replay_specs
    from dsac.runtime.preparation import image_buffer_size

    config = Config(algo="sac", env="CarRacing-v3").validate()
    actions = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    for frame, fits in (((96, 96, 3), False), ((4, 84, 84), True)):
        specs, frames = replay_specs(gym.spaces.Box(0, 255, frame, np.uint8), actions)
        with caplog.at_level(logging.INFO, logger="dsac"):
            caplog.clear()
            sized = image_buffer_size(config, specs, frames, 16 * 2**30)
        if fits:
            assert sized.buffer_size == 1_000_000 and not caplog.text
        else:
            assert 100_000 <= sized.buffer_size < 1_000_000, sized.buffer_size
            assert "transitions of 96x96x3 frames would need" in caplog.text, caplog.text


def test_image_preprocessing_of_other_envs_follows_the_flags_and_old_weights_files_keep_raw_frames():
    """Large uint8 frames of a non-ALE env are resized, grayed and stacked by the flags;
    ``--preprocess_images false`` keeps the raw frames; small images (Catch's 10x5) are left
    alone; a weights file from before the setting existed (no ``preprocess_images`` in its
    settings) rebuilds its env with raw frames, as its network was trained."""
    from dsac.envs.atari import FrameSettings
    from dsac.envs.make import make_env

    def shape(env_id="CarRacing-v3", **flags):
        config = Config(algo="sac", env=env_id, **flags).validate()
        env = make_env(config.env, config.env_kwargs, config.flatten_obs, config.frames)
        obs, _ = env.reset(seed=0)
        env.close()
        assert obs.shape == env.observation_space.shape and obs.dtype == np.uint8
        return obs.shape

    assert shape() == (4, 84, 84)
    assert shape(framestack=2, dim=64, grayscale=False) == (2, 64, 64, 3)
    assert shape(framestack=1, dim=96) == (96, 96)
    assert shape(preprocess_images=False) == (96, 96, 3)
    assert shape("examples.catch:Catch") == (10, 5)
    old = FrameSettings.from_dict({key: value for key, value in FrameSettings().as_dict().items()
                                   if key != "preprocess_images"})
    assert make_env("CarRacing-v3", atari=old).observation_space.shape == (96, 96, 3)


@pytest.mark.parametrize("algo", ["sac", "dqn"])
def test_large_images_get_the_algorithms_image_defaults_and_flags_override_them(tmp_path, algo, caplog):
    """Large frames (not an ALE game) get the algorithm's image defaults, which a CPU learner
    can keep up with, for the fields no flag set; small images and vector envs keep theirs."""
    import logging

    from dsac.runtime.preparation import prepare
    from dsac.settings.registry import algorithm

    kwargs = {} if algo == "sac" else {"continuous": False}  # CarRacing's discrete variant for DQN
    spec = algorithm(algo)
    with caplog.at_level(logging.INFO, logger="dsac"):
        config = prepare(Config(algo=algo, env="CarRacing-v3", env_kwargs=kwargs, batch_size=48,
                                output_dir=str(tmp_path / "a")), local=True).config
    assert config.batch_size == 48  # the flag wins
    for key, value in spec.image_defaults.items():
        if key != "batch_size":
            assert getattr(config, key) == value, key
    assert "defaults for large images" in caplog.text and "--batch_size" not in caplog.text.split("large images")[1]
    vector = Config(algo=algo, env="Pendulum-v1" if algo == "sac" else "CartPole-v1", output_dir=str(tmp_path / "b"))
    assert prepare(vector, local=True).config == vector.validate()


def test_sac_image_encoder_is_trained_by_the_critics_only_and_acts_the_same_in_numpy():
    import gymnasium as gym
    import tensorflow as tf

    from dsac.algorithms.sac.learner import sac_losses
    from dsac.algorithms.sac.policy import SACPolicy
    from dsac.policy import check_weights
    from dsac.runtime.build import make_learner

    config = Config(algo="sac", fcnet_hiddens=[16], conv_filters=[[8, 4, 2], [8, 3, 2]]).validate()
    observations = gym.spaces.Box(0, 255, (3, 32, 32, 3), np.uint8)  # 3 stacked RGB frames
    actions = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    sac = make_learner(config, observations, actions)
    rng = np.random.default_rng(0)
    weights = {k: rng.normal(0, 0.1, v.shape).astype(np.float32) for k, v in sac.get_weights().items()}
    assert any(k.startswith("encoder/conv_") for k in weights) and "encoder_target/head/kernel" not in weights
    sac.set_weights(weights)
    actor = SACPolicy(observations, actions, config)
    check_weights(weights, actor.weight_shapes())
    actor.set_weights(weights)
    obs = rng.integers(0, 256, (4, 3, 32, 32, 3)).astype(np.uint8)
    np.testing.assert_allclose(actor._forward(actor.obs.batch(obs)), sac.acting(sac.obs.batch(obs)).numpy(),
                               atol=1e-4)

    batch = sac._to_tensors({"obs": obs, "action": rng.uniform(-1, 1, (4, 2)), "reward": np.ones(4),
                            "next_obs": obs[::-1], "terminated": np.zeros(4), "discount": np.full(4, 0.99)})
    with tf.GradientTape(persistent=True) as tape:
        stats = sac_losses(sac.actor, sac.q1, sac.q2, sac.q1_target, sac.q2_target, sac.log_alpha, batch,
                           sac.target_entropy, tf.random.normal((4, 2)), tf.random.normal((4, 2)), sac.encoder,
                           sac.encoder_target)
    encoder = sac.encoder.trainable_variables
    assert all(g is None for g in tape.gradient(stats["actor_loss"], encoder))
    assert all(g is not None and np.any(g.numpy()) for g in tape.gradient(stats["qf_loss"], encoder))
    before = [v.numpy().copy() for v in sac.encoder_target.weights]
    sac.learn_on_batch({"obs": obs, "action": rng.uniform(-1, 1, (4, 2)).astype(np.float32),
                        "reward": np.ones(4, np.float32), "next_obs": obs,
                        "terminated": np.zeros(4, np.float32), "discount": np.full(4, 0.99, np.float32)})
    assert any(not np.allclose(b, a.numpy()) for b, a in zip(before, sac.encoder_target.weights, strict=True))


def test_dqn_priorities_reuse_the_q_values_computed_while_acting():
    """Image observations: a worker's initial priorities use the Q-values it computed while
    acting (looked up by the observation's content) and forward only the distinct observations
    it never acted on; they equal the priorities computed from scratch under the same weights."""
    from dsac.algorithms.dqn.policy import DQNPolicy, content_key
    from dsac.envs.rollout import EnvCollector

    collector = EnvCollector("examples.catch:Catch", num_envs=2, seed=0, n_step=3)
    config = Config(algo="dqn", fcnet_hiddens=[16]).validate()

    def policy():
        return DQNPolicy(collector.observation_space, collector.action_space, config, seed=0, worker_index=0,
                         num_workers=2)

    actor, fresh = policy(), policy()
    rng = np.random.default_rng(0)
    weights = {name: rng.normal(0.0, 0.3, shape).astype(np.float32) for name, shape in actor.weight_shapes().items()}
    actor.set_weights(weights)
    fresh.set_weights(weights)
    acted, forwarded = set(), []

    def act(obs):
        acted.update(map(content_key, obs))
        return actor.compute_actions(obs, explore=True)

    batch = collector.collect(act, 200)
    own_forward = actor._q_values
    actor._q_values = lambda obs: (forwarded.append(len(obs)), own_forward(obs))[1]
    got = actor.postprocess_trajectory(batch)["priority"]
    expected = fresh.postprocess_trajectory(batch)["priority"]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    never_acted = {content_key(o) for o in np.concatenate([batch["obs"], batch["next_obs"]])} - acted
    assert 0 < sum(forwarded) == len(never_acted) < len(batch["reward"]) / 4, (forwarded, len(never_acted))
    assert not actor.acted_q  # nothing kept past its chunk
