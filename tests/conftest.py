"""Shared fixtures: one real local Ray for the tests that need actors, and small envs."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import gymnasium as gym  # noqa: E402
import pytest  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Real gymnasium envs with short time limits, to see truncation within a few steps.
if "ShortPendulum-v0" not in gym.envs.registry:
    gym.register(
        "ShortPendulum-v0",
        entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
        max_episode_steps=5,
    )


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray with 2 CPUs (like CI), shared by every test that needs one."""
    import ray

    pythonpath = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        runtime_env={"env_vars": {"PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "3"}},
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


SMALL_RUN_STEPS = 1500


@pytest.fixture(scope="session")
def small_launch_run(tmp_path_factory):
    """One short distributed SAC run through ``launch.py`` as a user types it (TensorFlow's log
    level not set), its output captured (so stdout is not a terminal): ``(output_dir, result)``.
    Shared by the tests that read what such a run leaves (test_cli, test_monitoring)."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("small_run") / "run"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--num_workers", "3", "--total_env_steps",
         str(SMALL_RUN_STEPS), "--eval_every", "500", "--eval_episodes", "2", "--fcnet_hiddens", "32", "32",
         "--learning_starts", "300", "--start_steps", "300", "--log_every", "1", "--seed", "3", "--output_dir", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result


def act_without_tensorflow(weights_path, steps: str) -> str:
    """Run ``steps`` (Python source, indented for a function body) in a fresh process after
    ``policy = load_policy(weights_path)``, ``env = policy.make_env()`` and ``obs, _ =
    env.reset(seed=0)``; assert TensorFlow was never imported there; return its stdout."""
    import subprocess
    import sys
    import textwrap

    code = "\n".join([
        "import sys",
        "import numpy as np",
        "from dsac.inference import load_policy",
        f"policy = load_policy({str(weights_path)!r})",
        "env = policy.make_env()",
        "obs, _ = env.reset(seed=0)",
        textwrap.dedent(steps),
        "assert 'tensorflow' not in sys.modules, 'acting imported TensorFlow'",
    ])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout
