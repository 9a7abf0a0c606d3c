"""The README documents what the code does: its flag table is the one Config generates, and
its first lines are the two commands CI runs."""

import pathlib
import subprocess
import sys

from conftest import REPO_ROOT

ROOT = pathlib.Path(REPO_ROOT)


def test_readme_flag_table_matches_config():
    table = subprocess.run([sys.executable, "scripts/flags_table.py"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    assert table in (ROOT / "README.md").read_text(), "regenerate with: python scripts/flags_table.py"


def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line.split("#")[0].strip() for line in readme[:6] if line.startswith("pip install")]
    assert len(commands) == 2 and commands[0].endswith("python launch.py")
    assert commands[1] in (ROOT / ".ci" / "run").read_text()
