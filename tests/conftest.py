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
