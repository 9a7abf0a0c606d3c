"""``scripts/`` holds one runnable entry point per user tool, each a file that starts the tool's
module in ``dsac/``: ``python scripts/<tool>.py --help`` answers from any directory without dsac
installed, the tool is also a console script and ``python -m dsac.<tool>``, and the guide lists
it the three ways."""

import os
import pathlib
import subprocess
import sys
import tomllib

import pytest
from conftest import REPO_ROOT

ROOT = pathlib.Path(REPO_ROOT)
TOOLS = {"infer": "dsac-infer", "export": "dsac-export", "submit": "dsac-submit", "plot": "dsac-plot",
         "convert_weights": "dsac-convert-weights", "doctor": "dsac-doctor"}
SCRIPTS = ROOT / "scripts"


def test_scripts_holds_one_file_per_tool_and_nothing_else():
    files = sorted(p.name for p in SCRIPTS.iterdir() if p.name != "__pycache__")
    assert files == sorted(f"{tool}.py" for tool in TOOLS)


def test_each_tool_is_a_console_script_of_its_module():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for tool, command in TOOLS.items():
        assert scripts[command] == f"dsac.{tool}:main"
        assert (ROOT / "dsac" / f"{tool}.py").is_file()


def test_the_guide_lists_each_tool_three_ways():
    guide = (ROOT / "docs" / "guide.md").read_text()
    for tool, command in TOOLS.items():
        row = next((line for line in guide.splitlines() if f"`python scripts/{tool}.py`" in line), "")
        assert f"`{command}`" in row and f"`python -m dsac.{tool}`" in row, f"no row for {tool} in the guide's tools"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_script_answers_help_from_elsewhere_without_dsac_installed(tool, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    gone = subprocess.run([sys.executable, "-c", "import dsac"], cwd=tmp_path, env=env, capture_output=True)
    if gone.returncode == 0:
        pytest.skip("dsac is installed in this Python: the script's own path would go untested")
    result = subprocess.run([sys.executable, str(SCRIPTS / f"{tool}.py"), "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"usage: {TOOLS[tool]}"), result.stdout[:200]
