"""dsac as an installable package: ``pip install -e .`` in a fresh virtual environment lets a
script in another directory ``import dsac`` and run ``dsac-train``; the package metadata
carries the same pins as the requirements files.

The venv is real but light: it sees the packages of the environment the tests run in (the one the
README's command installed into, through a ``.pth`` file naming its site-packages: not the base
interpreter's, which ``--system-site-packages`` would give) and installs dsac alone
(``--no-deps``) with pip's build isolation, as a user's ``pip install -e .`` does: the build
tools come from the package index, whatever setuptools or wheel this machine holds."""

import os
import re
import site
import subprocess
import sys
import tomllib

from conftest import REPO_ROOT


def _pins(path: str) -> set[str]:
    lines = open(os.path.join(REPO_ROOT, path)).read().splitlines()
    return {line.split("#")[0].strip() for line in lines if line.strip() and not line.startswith(("#", "-r"))}


def test_pyproject_pins_are_the_requirements_files():
    with open(os.path.join(REPO_ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.txt"]}
    extras = project["project"]["optional-dependencies"]
    assert set(extras["bench"]) == _pins("requirements-bench.txt")
    assert set(extras["dev"]) == _pins("requirements-dev.txt")
    assert set(extras["robotics"]) == _pins("requirements-robotics.txt")
    assert set(extras["wandb"]) | set(extras["mlflow"]) <= _pins("requirements-dev.txt")  # the tests use them
    assert set(extras["onnx"]) <= _pins("requirements-dev.txt") and {"onnx", "onnxruntime"} <= {
        pin.split("==")[0] for pin in _pins("requirements-dev.txt")}
    tensorflow = next(pin for pin in _pins("requirements.txt") if pin.startswith("tensorflow=="))
    assert extras["gpu"] == [tensorflow.replace("tensorflow==", "tensorflow[and-cuda]==")]  # the same TensorFlow
    assert project["project"]["scripts"]["dsac-train"] == "dsac.cli:main"
    assert project["project"]["scripts"]["dsac-doctor"] == "dsac.doctor:main"


def test_editable_install_imports_dsac_from_anywhere(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    venv_site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(venv_site, "outer-environment.pth"), "w") as f:  # what the README installed
        f.write("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    elsewhere = tmp_path / "notebook"
    elsewhere.mkdir()
    check = [python, "-c", "import dsac, sys; print(dsac.__file__); print(dsac.__version__)"]
    before = subprocess.run(check, cwd=elsewhere, env=env, capture_output=True, text=True)
    assert before.returncode != 0, "dsac was importable before it was installed: the test would prove nothing"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                              "-e", REPO_ROOT], env=env, capture_output=True, text=True,
                             timeout=300)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    after = subprocess.run(check, cwd=elsewhere, env=env, capture_output=True, text=True)
    assert after.returncode == 0, after.stderr[-2000:]
    assert after.stdout.splitlines()[0] == os.path.join(REPO_ROOT, "dsac", "__init__.py")
    for command in ([str(venv / "bin" / "dsac-train"), "--help"], [python, "-m", "dsac", "--help"]):
        result = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        assert re.search(r"--num_workers NUM_WORKERS", result.stdout) and "--trust_code" in result.stdout
    bad = subprocess.run([str(venv / "bin" / "dsac-train"), "--num_workers", "-1"], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == "dsac: error: --num_workers must be an integer >= 0, got -1"
