"""Ray's private API is used in one module, ``dsac/distributed/ray_private.py``: its functions
answer on the pinned Ray (through the private names, not their fallbacks), fall back when a
private name is gone, and no other file of ``dsac/`` touches ``ray._private``."""

import ast
import math
import os
import sys

import pytest
from conftest import REPO_ROOT

from dsac.distributed import ray_private

DSAC = os.path.join(REPO_ROOT, "dsac")
ALLOWED = os.path.join(DSAC, "distributed", "ray_private.py")


def private_ray_uses(path: str) -> list[int]:
    """Lines of ``path`` that import or name ``ray._private`` (in code or a string of code)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ray._private"):
            lines.append(node.lineno)
        elif isinstance(node, ast.Import) and any(a.name.startswith("ray._private") for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "_private" and \
                isinstance(node.value, ast.Name) and node.value.id == "ray":
            lines.append(node.lineno)
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                                and a.value.startswith("ray._private") for a in node.args):
            lines.append(node.lineno)  # importlib.import_module("ray._private...")
    return lines


def test_no_other_module_of_dsac_touches_ray_private():
    found = [f"{os.path.relpath(os.path.join(root, name), REPO_ROOT)}:{line}"
             for root, _, names in os.walk(DSAC) for name in names if name.endswith(".py")
             if os.path.join(root, name) != ALLOWED for line in private_ray_uses(os.path.join(root, name))]
    assert not found, "ray._private outside dsac/distributed/ray_private.py:\n" + "\n".join(found)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import ray\nfrom ray._private import worker\nx = ray._private.utils\n")
    assert private_ray_uses(str(sample)) == [2, 3]


def test_counts_come_from_rays_private_api_on_the_pinned_ray():
    from ray._private.accelerators import get_accelerator_manager_for_resource
    from ray._private.utils import get_num_cpus

    assert ray_private.num_cpus() == get_num_cpus() >= 1
    assert ray_private.num_gpus() == get_accelerator_manager_for_resource("GPU").get_current_node_num_accelerators()


def test_counts_fall_back_when_the_private_names_are_gone(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray._private.utils", None)  # import fails
    monkeypatch.setitem(sys.modules, "ray._private.accelerators", None)
    assert ray_private.num_cpus() >= 1
    assert ray_private.num_gpus() == math.inf


def test_the_console_printer_is_wrapped_once_and_still_prints(monkeypatch):
    from ray._private import worker

    printed = []
    monkeypatch.setattr(worker, "print_to_stdstream", lambda data, *a, **k: printed.append(data))
    calls = []

    def wrap(original):
        calls.append(original)
        return lambda data, *a, **k: original({**data, "seen": True}, *a, **k)

    assert ray_private.wrap_console_printer(wrap) and ray_private.wrap_console_printer(wrap)
    assert len(calls) == 1, "wrapped twice"
    worker.print_to_stdstream({"lines": ["x"]})
    assert printed == [{"lines": ["x"], "seen": True}]


def test_without_the_printer_nothing_is_wrapped(monkeypatch):
    from ray._private import worker

    monkeypatch.delattr(worker, "print_to_stdstream")
    assert ray_private.wrap_console_printer(lambda original: pytest.fail("wrapped a missing printer")) is False


def test_quiet_ray_death_notices_uses_the_wrapper(monkeypatch):
    from ray._private import worker

    from dsac.distributed.cluster import quiet_ray_death_notices

    printed = []
    monkeypatch.setattr(worker, "print_to_stdstream", lambda data, *a, **k: printed.append(data))
    quiet_ray_death_notices()
    worker.print_to_stdstream({"pid": "raylet", "lines": ["hello"]})
    assert printed and printed[0]["lines"] == ["hello"]
