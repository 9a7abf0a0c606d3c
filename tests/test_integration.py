"""The whole system on real Ray, TensorFlow and gymnasium: SAC learns Pendulum."""

import json
import os

import imageio.v2 as imageio
import pytest
from conftest import PENDULUM_RUN_STEPS

from dsac.config import Config
from dsac.formats.files import load_weights
from dsac.formats.inference import load_policy
from dsac.runtime.evaluation import evaluate
from dsac.runtime.runner import run


def test_distributed_sac_learns_pendulum(trained_pendulum_run):
    config, summary, out = trained_pendulum_run
    lines = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines()]
    returns = [line["eval_return_mean"] for line in lines]
    # The random policy scores about -1200; learning must reach -600 within the budget.
    assert min(returns[:1]) < -900, returns
    assert max(returns) >= -600, returns
    assert summary["env_steps"] == PENDULUM_RUN_STEPS
    # The rate limiter holds updates at updates_per_step (1) per env step after learning_starts,
    # give or take what collection may run ahead and the batches in flight.
    expected = summary["env_steps"] - config.learning_starts
    in_flight = config.batches_per_sample * (config.prefetch + 1)
    assert expected - config.max_steps_ahead - in_flight <= summary["updates"] <= expected + in_flight
    # Transitions travel in chunks: nowhere near one remote call per env step.
    assert summary["transitions_per_add"] >= 8, summary
    payload = load_weights(summary["weights_path"])
    assert payload["version"] == summary["weights_version"]
    # The saved best weights, loaded without Ray and evaluated on the evaluator's seeds,
    # score exactly what the evaluator reported for that version.
    best = load_weights(str(out / "best_weights.pkl"))
    policy = load_policy(str(out / "best_weights.pkl"))
    returns = evaluate(lambda obs: policy(obs), "Pendulum-v1", best["eval_episodes"], best["eval_seed"])
    assert returns.mean() == pytest.approx(best["eval_return_mean"], abs=1e-6)
    assert best["eval_return_mean"] == max(line["eval_return_mean"] for line in lines)
    # The evaluator recorded episode 0 of every 2nd evaluation (and the final one), read back
    # with the library that wrote them: a frame per step and the reset's, at Pendulum's 500x500.
    videos = sorted(os.listdir(out / "videos"))
    assert "best.mp4" in videos and len(videos) >= 2, videos
    steps = [int(name.removesuffix(".mp4").split("-v")[0]) for name in videos if name != "best.mp4"]
    assert set(steps) <= {line["env_steps"] for line in lines}, (videos, lines)
    reader = imageio.get_reader(str(out / "videos" / "best.mp4"))
    shapes = [frame.shape for frame in reader]
    reader.close()
    assert len(shapes) == 201 and set(shapes) == {(500, 500, 3)}, (len(shapes), set(shapes))
    # TensorBoard has each of them as a small animated GIF (its Images tab plays them).
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    board = EventAccumulator(str(out / "tb"), size_guidance={IMAGES: 0})
    board.Reload()
    gifs = board.Images("eval/video")
    assert sorted(g.step for g in gifs) == sorted(steps)
    frames = imageio.mimread(gifs[0].encoded_image_string, format="GIF")
    # Pillow merges identical consecutive frames, so up to its 201 (a pendulum at rest repeats).
    assert 2 <= len(frames) <= 201 and frames[0].shape[:2] == (gifs[0].height, gifs[0].width) == (125, 125)


def test_apex_dqn_with_prioritized_replay_learns_cartpole(ray_local, tmp_path):
    config = Config(
        algo="dqn", env="CartPole-v1", num_workers=3, seed=0, total_env_steps=30_000, stop_return=200.0,
        eval_every=1_000, eval_episodes=5, output_dir=str(tmp_path / "run"), log_every=30.0,
        num_replay_shards=2,
    )
    summary = run(config)
    lines = [json.loads(x) for x in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    returns = [line["eval_return_mean"] for line in lines]
    # Random CartPole lasts ~20 steps; DQN must reach 200 within 30,000 env steps.
    assert max(returns) >= 200, returns
    assert summary["transitions_per_add"] >= 8, summary
    best = load_weights(str(tmp_path / "run" / "best_weights.pkl"))
    assert best["eval_return_mean"] == max(returns)
    # a dueling head by default
    assert best["weights"]["q/advantage/kernel"].shape == (config.validate().fcnet_hiddens[-1], 2)


def test_two_data_parallel_learners_add_up(ray_local, tmp_path):
    """--num_learners 2 with --normalize_obs: every update averages both learners' gradients
    and every learner merges both shards' observation moments alike, so both replicas apply the
    same updates with the same statistics and end bit-identical (their weights, statistics
    included); each learner's count reaches the parameter server; and SAC still learns."""
    config = Config(
        env="Pendulum-v1", num_workers=2, num_learners=2, seed=0, total_env_steps=10_000, stop_return=-600.0,
        normalize_obs=True,
        eval_every=1_000, eval_episodes=5, fcnet_hiddens=[64, 64], batch_size=128, output_dir=str(tmp_path / "run"),
        log_every=30.0,
    ).validate()
    assert config.num_replay_shards == 2  # one shard per learner by default
    summary = run(config)
    learners = summary["learners"]
    assert set(learners) == {"learner_0", "learner_1"}
    assert learners["learner_0"]["updates"] == learners["learner_1"]["updates"] == summary["updates"] > 0
    assert learners["learner_0"]["weights_digest"] == learners["learner_1"]["weights_digest"]
    # Every applied update holds one gradient of each learner (a step cut short by the stop
    # may hold one more gradient that nobody applied).
    assert all(summary["updates"] <= g <= summary["updates"] + 1 for g in summary["gradients_per_learner"])
    lines = [json.loads(x) for x in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    assert set(lines[-1]["learner_updates"]) == {"learner_0", "learner_1"}
    assert all(v > 0 for v in lines[-1]["learner_updates"].values())
    assert max(line["eval_return_mean"] for line in lines) >= -600, [ln["eval_return_mean"] for ln in lines]
    payload = load_weights(summary["weights_path"])
    assert payload["version"] == summary["weights_version"]
    # The statistics hold both shards' observations: more than either shard's half.
    assert summary["env_steps"] / 2 < payload["weights"]["obs_norm/count"][0] <= summary["env_steps"]
