"""Both runners take a run's parts from :mod:`dsac.runtime.build`: the serial runner's parts are the
objects the builder made, and nothing else in ``dsac/`` constructs a collector, a learner
loop, a replay storage, a frame encoder, a chunk or an evaluation of its own."""

import ast
import pathlib
import time

import pytest
from conftest import REPO_ROOT

from dsac.config import Config
from dsac.runtime import build
from dsac.runtime.runner import start

ROOT = pathlib.Path(REPO_ROOT)

# A part, and how it is made: a class constructed or a function/classmethod called.
PART_CONSTRUCTORS = {
    "EnvCollector", "UpdateLoop", "Replay", "ReplayStorage", "PrioritizedReplayStorage", "FrameEncoder",
    "Evaluation", "play_episodes", "from_batch",
}
# Where a part may be made besides the builder: its own module (a classmethod or a helper of
# its class), and evaluation.evaluate, the benchmarks' entry point into play_episodes.
OWN_MODULES = {"dsac/runtime/build.py", "dsac/envs/rollout.py", "dsac/runtime/learning.py", "dsac/replay/buffer.py",
               "dsac/replay/frames.py", "dsac/runtime/messages.py", "dsac/runtime/evaluation.py"}


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _makes_an_acting_policy(node: ast.Call) -> bool:
    """``SACPolicy(...)``, ``spec.policy_class(...)`` or ``policy_class_for(run)(...)`` (a
    ``LoadedPolicy`` is a weights file's wrapper around the policy the builder made)."""
    name = _called_name(node) or ""
    return ((name.endswith("Policy") and name != "LoadedPolicy") or name == "policy_class"
            or (isinstance(node.func, ast.Call) and _called_name(node.func) == "policy_class_for"))


def test_no_module_but_the_builder_makes_a_runs_parts():
    found = []
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in OWN_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _called_name(node) in PART_CONSTRUCTORS:
                found.append(f"{rel}:{node.lineno} {_called_name(node)}(...)")
            elif isinstance(node, ast.Call) and _makes_an_acting_policy(node) and rel != "dsac/runtime/build.py":
                found.append(f"{rel}:{node.lineno} an acting policy")
    assert not found, "made outside dsac/runtime/build.py:\n" + "\n".join(found)


@pytest.fixture
def built(monkeypatch):
    ids: set[int] = set()
    monkeypatch.setattr(build, "BUILT", ids)
    return ids


@pytest.mark.parametrize(("algo", "env"), [("sac", "Pendulum-v1"), ("crossq", "Pendulum-v1"), ("dqn", "CartPole-v1")])
def test_the_serial_runner_acts_learns_stores_and_evaluates_with_the_builders_parts(built, tmp_path, algo, env):
    config = Config(algo=algo, env=env, local=True, output_dir=str(tmp_path / "run"), total_env_steps=400,
                    learning_starts=100, start_steps=100, eval_every=200, eval_episodes=1, fcnet_hiddens=[16, 16],
                    tensorboard=False, learner_xla=False).validate()  # the parts, not CrossQ's compile (test_crossq)
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


# The role each Ray task runs; the serial runner runs all three.
TASK_ROLES = {"rollout_worker": "Collect", "learner": "Learn", "evaluator": "Evaluate"}
# What only the roles' loops decide (dsac/runtime/roles.py): random actions before --start_steps, when the
# next evaluation is due, TensorFlow's set-up before the learner's model, how long a chunk collects.
LOOP_DECISIONS = {"start_steps", "random_actions", "eval_every", "configure_tensorflow", "next_chunk_seconds"}


def _names(tree: ast.AST) -> set[str]:
    return ({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)})


def test_both_runners_run_the_same_role_loops():
    """Each Ray task makes its role of :mod:`dsac.runtime.roles` and steps it; the serial runner makes
    all three and steps them; neither makes a loop's decisions itself."""
    tasks = {n.name: n for n in ast.parse((ROOT / "dsac/distributed/tasks.py").read_text()).body
             if isinstance(n, ast.FunctionDef)}
    for task, role in TASK_ROLES.items():
        calls = {_called_name(n) for n in ast.walk(tasks[task]) if isinstance(n, ast.Call)}
        assert {role, "step"} <= calls, f"the {task} task does not run dsac.runtime.roles.{role}"
    serial = ast.parse((ROOT / "dsac/runtime/serial.py").read_text())
    assert set(TASK_ROLES.values()) <= {_called_name(n) for n in ast.walk(serial) if isinstance(n, ast.Call)}
    stepped = {n.value.attr for n in ast.walk(serial)
               if isinstance(n, ast.Attribute) and n.attr == "step" and isinstance(n.value, ast.Attribute)}
    assert {"collect", "learn", "evaluate"} <= stepped, stepped
    for path in [ROOT / "dsac/runtime/serial.py", *sorted((ROOT / "dsac/distributed").glob("*.py"))]:
        decided = _names(ast.parse(path.read_text())) & LOOP_DECISIONS
        assert not decided, f"{path.relative_to(ROOT)} decides {sorted(decided)}: dsac/runtime/roles.py does"


def test_only_the_replay_branches_on_prioritization_and_builds_a_rate_limiter():
    found = []
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            chooses_storage = rel == "dsac/runtime/build.py"
            if isinstance(node, ast.If | ast.IfExp) and "prioritized" in _names(node.test) and not chooses_storage:
                found.append(f"{rel}:{node.lineno} branches on prioritized")
            if isinstance(node, ast.Call) and _called_name(node) == "RateLimiter":
                found.append(f"{rel}:{node.lineno} RateLimiter(...)")
    assert all(line.startswith("dsac/replay/buffer.py:") for line in found), "\n".join(found)
