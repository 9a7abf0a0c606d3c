"""What an operator sees: the periodic progress line when stdout is not a terminal, the bar
on a terminal, TensorBoard event files with every listed tag, and learning-curve plots."""

import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO_ROOT, SMALL_RUN_STEPS

from dsac.output.curves import Run, average, curves, group_label
from dsac.output.progress import ProgressDisplay, RateMeter, format_duration, status_line

TOTAL = SMALL_RUN_STEPS


@pytest.fixture(scope="module")
def short_run(small_launch_run):
    """One short SAC run through launch.py, stdout captured (so: not a terminal)."""
    out, result = small_launch_run
    return out, result.stdout


def test_periodic_progress_line_when_not_a_terminal(short_run):
    _, stdout = short_run
    pattern = re.compile(
        rf"[\d,]+/{TOTAL:,} env steps \(\d+%\), [\d,]+ updates \| [\d,]+ steps/s \| [\d,]+ updates/s \| "
        r"eval \S+ \| episode \S+ \| weights v\d+ lag \S+ \| replay \S+ \| \S+ elapsed, ETA \S+"
    )
    lines = [line for line in stdout.splitlines() if pattern.search(line)]
    assert len(lines) >= 3, stdout[-3000:]  # every --log_every 1 s over a run of > 10 s
    assert "\r" not in stdout  # no progress bar redraws in a log
    assert any(not re.search(r"eval - ", line) for line in lines)  # the last eval return shows up


def test_tensorboard_events_hold_every_listed_tag(short_run):
    import tensorflow as tf

    out, _ = short_run
    files = glob.glob(str(out / "tb" / "events.out.tfevents.*"))
    assert files
    tags: dict[str, list[tuple[int, float]]] = {}
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append((event.step, value.simple_value))
    expected = {
        "eval/return_mean", "eval/return_std", "eval/length_mean", "eval/truncated", "rollout/episode_return_mean",
        "learner/qf_loss",
        "learner/actor_loss", "learner/alpha_loss", "learner/alpha", "learner/entropy", "learner/td_error_mean",
        "learner/td_error_max", "throughput/updates_per_s", "throughput/env_steps_per_s", "replay/fill",
        "weights/version_lag", "learner/wait_fraction",
    }
    assert expected <= set(tags), expected - set(tags)
    evals = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    # TensorBoard stores float32: compare at its precision, not by rounding (rounding can split at a .xxx5).
    assert [v for _, v in tags["eval/return_mean"]] == pytest.approx([e["eval_return_mean"] for e in evals], rel=1e-6)
    assert [s for s, _ in tags["eval/return_mean"]] == [e["env_steps"] for e in evals]
    assert [v for _, v in tags["eval/length_mean"]] == [e["eval_length_mean"] for e in evals] == [200.0] * len(evals)
    assert [v for _, v in tags["eval/truncated"]] == [e["eval_truncated"] for e in evals]  # Pendulum: all, at 200
    assert all(e["eval_truncated"] == e["eval_episodes"] for e in evals)
    assert all(0.0 <= v <= 1.0 for _, v in tags["replay/fill"])
    assert all(v > 0 for _, v in tags["learner/alpha"])


def test_plot_writes_a_png_of_real_and_grouped_runs(short_run, tmp_path):
    import matplotlib.image

    out, _ = short_run
    # The same experiment "with two more seeds": copies whose returns are shifted.
    seeds = []
    for seed, shift in ((1, 50.0), (2, -50.0)):
        copy = tmp_path / f"sac-s{seed}"
        shutil.copytree(out, copy, ignore=shutil.ignore_patterns("tb", "checkpoint", "*.pkl"))
        config = json.loads((copy / "config.json").read_text())
        (copy / "config.json").write_text(json.dumps({**config, "seed": seed, "output_dir": str(copy)}))
        lines = [json.loads(line) for line in (copy / "progress.jsonl").read_text().splitlines()]
        (copy / "progress.jsonl").write_text(
            "".join(json.dumps({**ln, "eval_return_mean": ln["eval_return_mean"] + shift}) + "\n" for ln in lines)
        )
        seeds.append(str(copy))
    image = tmp_path / "curves.png"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "plot.py"), str(out), *seeds, "--out", str(image)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(str(image))
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400 and pixels.std() > 0  # not blank
    grouped = curves([str(out), *seeds], "env_steps")
    assert len(grouped) == 1 and grouped[0].runs == 3  # one experiment, three seeds
    assert len(curves([str(out), *seeds], "env_steps", group=False)) == 3
    bad = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "scripts", "plot.py"), str(tmp_path / "nothing"), "--out",
         str(tmp_path / "x.png")], capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 2 and "no progress.jsonl" in bad.stderr and "Traceback" not in bad.stderr


def test_average_interpolates_on_the_common_range():
    a = Run("a-s0", {}, np.array([0.0, 10.0]), np.array([0.0, 1.0]), np.array([0.0, 10.0]))
    b = Run("a-s1", {}, np.array([5.0, 20.0]), np.array([0.0, 1.0]), np.array([15.0, 30.0]))
    x, mean, std = average([a, b], "env_steps", points=3)
    assert x.tolist() == [5.0, 7.5, 10.0]  # where both runs have data
    # a: 5, 7.5, 10; b: 15, 17.5, 20
    assert np.allclose(mean, [10.0, 12.5, 15.0]) and np.allclose(std, [5.0, 5.0, 5.0])
    assert group_label(["sac-s0", "sac-s1"]) == "sac (2 seeds)"


def test_rates_eta_and_the_bar_on_a_terminal():
    meter = RateMeter(window_s=10.0)
    meter.update(0.0, {"env_steps": 0, "updates": 0})
    rates = meter.update(2.0, {"env_steps": 400, "updates": 100})
    assert rates["env_steps"] == 200.0 and rates["updates"] == 50.0
    status = {"env_steps": 400, "total_env_steps": 1000, "updates": 100, "version": 10, "version_lag": 2,
              "replay_fill": 0.4, "wall_s": 2.0, "last_eval_return": -300.0, "recent_episode_return": None}
    line = status_line(status, rates)
    assert "400/1,000 env steps (40%)" in line and "ETA 3s" in line and "lag 2" in line and "eval -300.0" in line
    assert format_duration(3725) == "1h02m"

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    display = ProgressDisplay(1000, log_every=10.0, log=lambda line: None, stream=screen)
    display.update(status)
    display.close()
    shown = screen.getvalue()
    assert display.use_bar and "400/1" in shown and "updates/s" in shown and "\r" in shown
