"""Evaluation videos (--video_every): real runs write real mp4 files, read back with the same
library (imageio): one frame per step of evaluation episode 0 plus its reset, at the env's own
render size; an env that cannot render costs the video (one warning), not the run."""

import json
import os
import subprocess
import sys

import imageio.v2 as imageio
from conftest import REPO_ROOT, launch_here


def launch(args, tmp_path, capfd, caplog):
    """A serial run (the serial runner starts no Ray), in this process (conftest.launch_here)."""
    return launch_here([*args, "--output_dir", tmp_path / "run", "--no-tensorboard", "--no-progress_bar"],
                       capfd, caplog)


def frames_of(path):
    reader = imageio.get_reader(path)
    try:
        return [frame.shape for frame in reader]
    finally:
        reader.close()


def test_pendulum_evaluations_are_recorded_at_the_envs_render_size(tmp_path, capfd, caplog):
    """The serial runner; the distributed evaluator's videos: test_integration's Pendulum run."""
    proc = launch(["--local", "--env", "Pendulum-v1", "--total_env_steps", "1000", "--eval_every", "500",
                   "--eval_episodes", "1", "--video_every", "2", "--fcnet_hiddens", "16", "16"],
                  tmp_path, capfd, caplog)
    assert proc.returncode == 0, proc.stderr[-3000:]
    videos = tmp_path / "run" / "videos"
    names = sorted(os.listdir(videos))
    # The 2nd evaluation (1,000 env steps) and the final one when it is another; the best of them.
    assert "1000.mp4" in names and "best.mp4" in names and "500.mp4" not in names, names
    # Were the final evaluation (of weights updated after the last env step) to land on the 2nd
    # one's step, each would keep its own video, the later named by its weights version.
    lines = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    assert [line["env_steps"] for line in lines[1:]] in ([1000], [1000, 1000]), lines
    expected = {"best.mp4", "1000.mp4"} | {f"1000-v{line['weights_version']}.mp4" for line in lines[2:]}
    assert set(names) == expected, (names, [(line["env_steps"], line["weights_version"]) for line in lines])
    for name in names:
        shapes = frames_of(str(videos / name))
        assert len(shapes) == 201 and set(shapes) == {(500, 500, 3)}, (name, len(shapes), set(shapes))
    # dsac-infer --video: the saved policy's episode 0, the same way.
    out = tmp_path / "episode.mp4"
    proc = subprocess.run([sys.executable, "-m", "dsac.infer", str(tmp_path / "run" / "weights.pkl"),
                           "--episodes", "2", "--video", str(out)], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0 and f"video of episode 0 in {out}" in proc.stdout, proc.stderr[-2000:]
    shapes = frames_of(str(out))
    assert len(shapes) == 201 and set(shapes) == {(500, 500, 3)}, (len(shapes), set(shapes))


def test_an_env_that_cannot_render_costs_the_video_not_the_run(tmp_path, capfd, caplog):
    proc = launch(["--local", "--env", "examples.catch:Catch", "--algo", "dqn", "--total_env_steps", "600",
                   "--eval_every", "200", "--eval_episodes", "1", "--video_every", "1", "--learning_starts", "100"],
                  tmp_path, capfd, caplog)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in (proc.stdout + proc.stderr).splitlines() if "no evaluation video:" in line]
    assert len(warnings) == 1 and "examples.catch:Catch" in warnings[0], warnings
    assert not (tmp_path / "run" / "videos").exists()
    assert (tmp_path / "run" / "weights.pkl").exists()


def test_two_evaluations_at_one_env_step_keep_a_video_each(tmp_path):
    """A distributed run's final evaluation can land on the last periodic one's env step with
    weights the learner updated since: the later video is named by its weights version rather
    than written over the earlier one."""
    import time

    from dsac.config import Config
    from dsac.output.recorder import Recorder
    from dsac.runtime.messages import Evaluation

    config = Config(env="Pendulum-v1", video_every=1, tensorboard=False, output_dir=str(tmp_path)).validate()
    recorder = Recorder(config, str(tmp_path), None, None, time.time(), eval_seed=0)
    for version, score, video in ((7, -500.0, b"periodic"), (9, -300.0, b"final")):
        recorder.video(Evaluation(1000, 900, version, score, 0.0, [score], 1.0, {}, video=video))
    videos = tmp_path / "videos"
    assert sorted(os.listdir(videos)) == ["1000-v9.mp4", "1000.mp4", "best.mp4"]
    assert (videos / "1000.mp4").read_bytes() == b"periodic"
    assert (videos / "1000-v9.mp4").read_bytes() == (videos / "best.mp4").read_bytes() == b"final"
