"""House rules that keep roles apart: algorithms know nothing of Ray, the Ray wiring knows
nothing of an algorithm's math, rollout processes need no TensorFlow; and ruff is clean."""

import ast
import pathlib
import shutil
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

ROOT = pathlib.Path(REPO_ROOT)


def imports_of(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


RAY_FREE = [*sorted((ROOT / "dsac" / "algorithms").rglob("*.py"))] + [
    ROOT / "dsac" / name for name in ("replay.py", "rollout.py", "evaluation.py", "policy.py", "envs.py", "weights.py")
]


@pytest.mark.parametrize("path", RAY_FREE, ids=lambda p: str(p.relative_to(ROOT)))
def test_algorithms_and_data_code_do_not_import_ray(path):
    assert not {n for n in imports_of(path) if n == "ray" or n.startswith("ray.")}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "dsac" / "distributed").glob("*.py")), ids=lambda p: p.name
)
def test_ray_wiring_does_not_import_algorithm_math_or_tensorflow(path):
    for name in imports_of(path):
        assert not name.startswith("dsac.algorithms."), name  # only the registry, dsac.algorithms
        assert not name.startswith(("tensorflow", "keras")), name


def test_acting_code_does_not_import_tensorflow_at_module_level():
    for rel in ("dsac/algorithms/sac/policy.py", "dsac/algorithms/sac/numpy_actor.py", "dsac/rollout.py"):
        tree = ast.parse((ROOT / rel).read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
        assert not {n for n in names if n.startswith(("tensorflow", "keras", "dsac.algorithms.sac.learner"))}


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is in requirements-dev.txt"
    result = subprocess.run([ruff, "check", "dsac", "launch.py", "scripts", "tests", "examples"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rollout_side_never_imports_tensorflow():
    code = (
        "import sys, gymnasium as gym\n"
        "from dsac.algorithms import get_policy_class\n"
        "from dsac.config import Config\n"
        "import dsac.distributed.tasks, dsac.distributed.driver\n"
        "for algo, env in (('sac', 'Pendulum-v1'), ('dqn', 'CartPole-v1')):\n"
        "    e = gym.make(env)\n"
        "    p = get_policy_class(algo)(e.observation_space, e.action_space, Config(algo=algo).validate())\n"
        "    p.random_actions(3)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]\n"
        "assert not bad, bad[:5]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
