"""House rules that keep roles apart: algorithms know nothing of Ray, the Ray wiring knows
nothing of an algorithm's math, rollout processes need no TensorFlow; and ruff is clean."""

import ast
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import REPO_ROOT

ROOT = pathlib.Path(REPO_ROOT)


def imports_of(path: pathlib.Path) -> set[str]:
    """Every module ``path`` imports, at module level or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # may name submodules
    return names


RAY_FREE = [
    *(p for folder in ("algorithms", "models", "replay", "envs") for p in sorted((ROOT / "dsac" / folder).rglob("*.py"))
      ),
    *(ROOT / "dsac" / name for name in ("policy.py", "weights.py", "output/recorder.py")),
    *(ROOT / "dsac" / "runtime" / f"{name}.py" for name in ("evaluation", "messages", "learning", "run_loop", "serial")
      ),
    *sorted((ROOT / "dsac" / "runtime").glob("roles*.py")),
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
    for rel in ("dsac/algorithms/sac/policy.py", "dsac/models/acting_net.py", "dsac/envs/rollout.py"):
        tree = ast.parse((ROOT / rel).read_text())
        top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
        assert not {n for n in names if n.startswith(("tensorflow", "keras", "dsac.algorithms.sac.learner"))}


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    assert ruff, "ruff is in requirements-dev.txt"
    result = subprocess.run([ruff, "check", "dsac", "launch.py", "benchmarks", "scripts", "tests", "examples"],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rollout_side_never_imports_tensorflow():
    code = (
        "import sys, gymnasium as gym\n"
        "from dsac.settings.registry import algorithm\n"
        "from dsac.config import Config\n"
        "import dsac.distributed.tasks, dsac.distributed.driver\n"
        "for algo, env in (('sac', 'Pendulum-v1'), ('dqn', 'CartPole-v1')):\n"
        "    e = gym.make(env)\n"
        "    p = algorithm(algo).policy_class(e.observation_space, e.action_space, Config(algo=algo).validate())\n"
        "    p.random_actions(3)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]\n"
        "assert not bad, bad[:5]\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_cycle_among_dsac_modules():
    """Imports inside functions count: a cycle is a knot however late it is tied."""
    modules = {_module_name(p): p for p in (ROOT / "dsac").rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for imported in imports_of(path):
            # ``from dsac.x import y`` may name a submodule y or an attribute of dsac.x.
            if imported in modules:
                targets.add(imported)
        graph[name] = targets - {name}
    # A package imports its parent's __init__ implicitly; that is not a cycle of ours.
    state: dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = [*trail[trail.index(nxt):], nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def _algorithm_words() -> set[str]:
    """Algorithm names and the config keys only one algorithm reads (their help says which)."""

    from dsac.config import config_fields
    from dsac.settings.registry import ALGOS, algorithm

    words = set(ALGOS)
    for f in config_fields():
        if re.search(r"\((sac|dqn)[;)]", f.metadata.get("help", "")):
            words.add(f.name)
    for name in ALGOS:
        words.update(algorithm(name).model_keys)
    return words


ALGORITHM_FREE = sorted((ROOT / "dsac" / "distributed").glob("*.py")) + [
    ROOT / "dsac" / name for name in ("envs/make.py", "export.py", "formats/inference.py")
]


@pytest.mark.parametrize("path", ALGORITHM_FREE, ids=lambda p: str(p.relative_to(ROOT)))
def test_wiring_env_inference_and_export_name_no_algorithm(path):
    text = path.read_text()
    found = sorted(w for w in _algorithm_words() if re.search(rf"(?<![\w.-]){re.escape(w)}(?![\w-])", text))
    assert not found, f"{path.name} names {found}: ask the algorithm (dsac.settings.registry.algorithm) instead"


MAX_FUNCTION_LINES, MAX_CLASS_LINES, MAX_MODULE_LINES = 60, 300, 450


def test_no_long_function_or_class_in_dsac():
    """A function fits on a screen and a class does one job: past these sizes, split by role."""
    too_long = []
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines > {limit})")
    assert not too_long, "\n".join(too_long)


def test_no_long_module_in_dsac_and_the_ray_tasks_keep_to_their_transport():
    """A module has one job; the Ray tasks' module holds the three tasks and what only their
    transport needs (the parts come from dsac/runtime/build.py, the clients from their own modules)."""
    limits = {"dsac/distributed/tasks.py": 180, "dsac/runtime/serial.py": 150}
    too_long = []
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > limits.get(rel, MAX_MODULE_LINES):
            too_long.append(f"{rel}: {lines} lines > {limits.get(rel, MAX_MODULE_LINES)}")
    assert not too_long, "\n".join(too_long)


# The narrow roles (Acme's actor, learner, variable source): each does one job in a few calls.
NARROW_ROLES = [
    ("dsac/distributed/actors.py", "ParameterServer"),
    ("dsac/policy.py", "ActingPolicy"),
    ("dsac/algorithms/sac/policy.py", "SACPolicy"),
    ("dsac/algorithms/dqn/policy.py", "DQNPolicy"),
    ("dsac/algorithms/learner.py", "Learner"),
    ("dsac/algorithms/sac/learner.py", "SACLearner"),
    ("dsac/algorithms/dqn/learner.py", "DQNLearner"),
]
MAX_PUBLIC_METHODS = 8


def public_methods(path: pathlib.Path, name: str) -> list[str]:
    """The public methods and properties ``name`` defines in ``path`` and inherits from classes
    of the same module or of the dsac modules it imports them from."""
    found, todo = set(), [(path, name)]
    while todo:
        path, name = todo.pop()
        tree = ast.parse(path.read_text())
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        imported = {alias.asname or alias.name: node.module for node in tree.body
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dsac.")
                    for alias in node.names}
        node = classes[name]
        found |= {f.name for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                  and not f.name.startswith("_")}
        for base in (b.id for b in node.bases if isinstance(b, ast.Name)):
            if base in classes:
                todo.append((path, base))
            elif base in imported:
                module = ROOT / imported[base].replace(".", "/")
                todo.append((module / "__init__.py" if module.is_dir() else module.with_suffix(".py"), base))
    return sorted(found)


@pytest.mark.parametrize(("rel", "name"), NARROW_ROLES, ids=[n for _, n in NARROW_ROLES])
def test_the_narrow_roles_have_a_few_public_methods(rel, name):
    methods = public_methods(ROOT / rel, name)
    assert len(methods) <= MAX_PUBLIC_METHODS, f"{name}: {len(methods)} public methods {methods}"


def test_dsac_never_imports_the_benchmarks_and_neither_edits_sys_path():
    """``benchmarks/`` measures dsac from outside: nothing in ``dsac`` imports it, and both are
    plain packages (run from the repository's root) with no ``sys.path`` edits."""
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        assert not {n for n in imports_of(path) if n.split(".")[0] == "benchmarks"}, path
    for path in [*sorted((ROOT / "dsac").rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]:
        assert "sys.path.insert" not in path.read_text(), path


def test_every_benchmark_command_answers_help_without_sb3_torch_or_mujoco_imported():
    """``python -m benchmarks --help`` and each command's ``--help`` run in the venv of
    requirements.txt: SB3, torch and MuJoCo are imported by the commands that run them."""
    import json

    from benchmarks.__main__ import COMMANDS

    # One process answers them all, one after another: a heavy import by any command stays in
    # sys.modules, so "none after each" is what a process of its own per command would show.
    probe = ("import contextlib, io, json, runpy, sys\n"
             "for args in json.loads(sys.argv[1]):\n"
             "    sys.argv, out = ['benchmarks', *args], io.StringIO()\n"
             "    try:\n"
             "        with contextlib.redirect_stdout(out):\n"
             "            runpy.run_module('benchmarks', run_name='__main__')\n"
             "        code = 0\n"
             "    except SystemExit as e:\n"
             "        code = e.code or 0\n"
             "    heavy = sorted(m for m in ('stable_baselines3', 'torch', 'mujoco') if m in sys.modules)\n"
             "    print(json.dumps([args, code, heavy, 'usage' in out.getvalue().lower()]), flush=True)\n")
    commands = [["--help"], *([name, "--help"] for name in COMMANDS)]
    result = subprocess.run([sys.executable, "-c", probe, json.dumps(commands)], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("[")]
    assert result.returncode == 0 and len(rows) == len(commands), result.stderr[-2000:]
    for args, code, heavy, usage in rows:
        assert code == 0, (args, result.stderr[-2000:])
        assert heavy == [], (args, heavy)
        assert usage, args


# What sees only sections of the configuration, never the whole Config: the algorithms'
# learners and networks, the model builders, the learner's loop.
SECTION_ONLY = [*sorted((ROOT / "dsac" / "algorithms").rglob("learner.py")),
                *sorted((ROOT / "dsac" / "algorithms").rglob("networks.py")),
                *sorted((ROOT / "dsac" / "models").glob("*.py")), ROOT / "dsac" / "runtime" / "learning.py"]


@pytest.mark.parametrize("path", SECTION_ONLY, ids=lambda p: str(p.relative_to(ROOT)))
def test_learners_models_and_the_loop_take_sections_not_the_whole_config(path):
    """Configuration by concern: these take the section they need (``model``, ``algorithm``) or
    plain numbers, so a reader sees what they depend on (python -m benchmarks config-reach
    lists every module that still receives the whole Config)."""
    tree = ast.parse(path.read_text())
    names = {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    names |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "config" not in names, f"{path.relative_to(ROOT)} takes the whole config"
    assert "dsac.config" not in imports_of(path)


# Issue 57's house: folders by purpose, a top level of public API and user commands, one set of
# loops (the module limits above keep the runners and the Ray tasks to wiring), narrow classes.
MAX_TOP_LEVEL_MODULES, MAX_CLASS_PUBLIC_METHODS = 15, 12


def test_the_top_level_holds_the_public_api_and_the_commands():
    top = sorted(p.name for p in (ROOT / "dsac").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_no_class_in_dsac_has_more_than_twelve_public_methods():
    wide = []
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                methods = public_methods(path, node.name)
                if len(methods) > MAX_CLASS_PUBLIC_METHODS:
                    wide.append(f"{path.relative_to(ROOT)} {node.name}: {len(methods)} {methods}")
    assert not wide, "\n".join(wide)


def test_every_command_starts_or_joins_ray_through_one_function():
    """``connect_ray`` is where a local Ray that did not come up is started again and where
    Ray's start and join errors become one line; a second ``ray.init`` would miss both. The
    doctor's timed join probe is the one exception: what it raises is its finding."""
    calls = {}
    for path in sorted((ROOT / "dsac").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "ray.init":
                calls.setdefault(str(path.relative_to(ROOT)), []).append(ast.unparse(node))
    assert set(calls) == {"dsac/distributed/cluster.py", "dsac/doctor.py"}, calls
    assert all("address=address" in call and "local" not in call for call in calls["dsac/doctor.py"]), calls
