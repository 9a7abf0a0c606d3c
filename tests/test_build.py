"""Both runners take a run's parts from :mod:`dsac.build`: the serial runner's parts are the
objects the builder made, and nothing else in ``dsac/`` constructs a collector, a learner
loop, a replay storage, a frame encoder, a chunk or an evaluation of its own."""

import ast
import pathlib
import time

import pytest
from conftest import REPO_ROOT

from dsac import build
from dsac.config import Config
from dsac.runner import start

ROOT = pathlib.Path(REPO_ROOT)

# A part, and how it is made: a class constructed or a function/classmethod called.
PART_CONSTRUCTORS = {
    "EnvCollector", "UpdateLoop", "Replay", "ReplayStorage", "PrioritizedReplayStorage", "FrameEncoder",
    "Evaluation", "play_episodes", "from_batch",
}
# Where a part may be made besides the builder: its own module (a classmethod or a helper of
# its class), and evaluation.evaluate, the benchmarks' entry point into play_episodes.
OWN_MODULES = {"dsac/build.py", "dsac/rollout.py", "dsac/learning.py", "dsac/replay.py", "dsac/frames.py",
               "dsac/messages.py", "dsac/evaluation.py"}


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def test_no_module_but_the_builder_makes_a_runs_parts():
    found = []
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in OWN_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _called_name(node) in PART_CONSTRUCTORS:
                found.append(f"{rel}:{node.lineno} {_called_name(node)}(...)")
    assert not found, "made outside dsac/build.py:\n" + "\n".join(found)


@pytest.fixture
def built(monkeypatch):
    ids: set[int] = set()
    monkeypatch.setattr(build, "BUILT", ids)
    return ids


@pytest.mark.parametrize(("algo", "env"), [("sac", "Pendulum-v1"), ("crossq", "Pendulum-v1"), ("dqn", "CartPole-v1")])
def test_the_serial_runner_acts_learns_stores_and_evaluates_with_the_builders_parts(built, tmp_path, algo, env):
    config = Config(algo=algo, env=env, local=True, output_dir=str(tmp_path / "run"), total_env_steps=400,
                    learning_starts=100, start_steps=100, eval_every=200, eval_episodes=1, fcnet_hiddens=[16, 16],
                    tensorboard=False).validate()
    run, started_ray = start(config, time.time())
    try:
        assert not started_ray
        parts = {"collector": run.collect.collector, "acting policy": run.collect.policy,
                 "evaluating policy": run.evaluate.policy, "learner loop": run.loop, "replay": run.replay,
                 "replay storage": run.replay.storage}
        assert all(id(part) in built for part in parts.values()), [n for n, p in parts.items() if id(p) not in built]
        while run.counters["env_steps"] < 400:
            run.step()
        assert run.counters["updates"] > 0 and run.recorder.last_eval, run.counters
    finally:
        run.stop("test")
