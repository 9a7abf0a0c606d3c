"""Where a run's configuration travels: the dsac modules whose functions receive the whole
:class:`dsac.config.Config`, and those that receive only one of its sections, in a short serial
run (``launch.py --local``: the command line, the trainer, the serial runner with the same
rollout, replay, learner loop, policy and learner the distributed run uses, the recorder).

Before the run, a static count from the source (``--static``: only that, no run): per file of
``dsac/`` outside the :data:`BOUNDARY` modules, the reads of a Config field by its flat name
(``config.buffer_size``, ``getattr(config, "lr")``, not ``config.replay.buffer_size``), and the
modules with a function taking the whole Config (a parameter annotated ``Config`` or named
``config``).

    python -m benchmarks config-reach                      # this checkout
    python -m benchmarks config-reach --static --json      # the source count only
    cd <an older checkout> && PYTHONPATH=. python <this checkout>/benchmarks/config_reach.py

A call counts when one of its arguments *is* the Config (or a section); ``dsac.config`` and
``dsac.settings.sections`` themselves are left out (their methods take the config as ``self``). The script
imports nothing else of ``benchmarks``, so the same file measures an older checkout, where
Config was one flat dataclass and had no sections.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import re
import sys
import tempfile

RUN = ["--local", "--algo", "dqn", "--env", "CartPole-v1", "--total_env_steps", "1500", "--learning_starts", "500",
       "--eval_every", "1000", "--eval_episodes", "2", "--no-tensorboard", "--no-progress_bar", "--seed", "0"]
OWN = ("dsac.config", "dsac.settings.sections")
# Where flat names are dsac's interface, not its own reads: the translation of flat names to
# sections and the public flat attributes (config.py), the sections themselves (settings.py,
# the algorithms' config.py), and the command line, whose flags are the flat names (cli.py).
BOUNDARY = ("dsac/config.py", "dsac/settings/sections.py", "dsac/cli.py", "dsac/algorithms/sac/config.py",
            "dsac/algorithms/dqn/config.py")
# An expression that holds a whole Config: ``config``, ``self.config``, ``prepared.config``, ``cfg``.
CONFIG_NAME = re.compile(r"^(_?config|cfg|_config)$")


def field_names() -> tuple[set[str], set[str]]:
    """The flat field names of Config and the names of its sections (none before sections)."""
    import dataclasses

    import dsac.config

    sections = set(getattr(dsac.config, "SECTIONS", {}))
    if hasattr(dsac.config, "config_fields"):
        return {f.name for f in dsac.config.config_fields()}, sections
    return {f.name for f in dataclasses.fields(dsac.config.Config)}, sections


def _holds_config(node: ast.expr, aliases: frozenset = frozenset()) -> bool:
    """Whether ``node`` names a whole Config: by its name, or a name a module assigns one to
    (``c = self.config``)."""
    if isinstance(node, ast.Name):
        return bool(CONFIG_NAME.match(node.id)) or node.id in aliases
    return isinstance(node, ast.Attribute) and bool(CONFIG_NAME.match(node.attr))


def _aliases(tree: ast.AST) -> frozenset:
    return frozenset(target.id for node in ast.walk(tree) if isinstance(node, ast.Assign) and _holds_config(node.value)
                     for target in node.targets if isinstance(target, ast.Name))


def _takes_config(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    for arg in arguments:
        note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
        if re.search(r"\bConfig\b", note) or (arg.arg == "config" and not note):
            return True
    return False


def static_count(root: str = ".") -> dict:
    """Per file of dsac/ outside :data:`BOUNDARY`: flat reads of Config fields; and the files with
    a function that takes the whole Config."""
    fields, sections = field_names()
    flat: dict[str, int] = {}
    takers: list[str] = []
    for folder, _, files in sorted(os.walk(os.path.join(root, "dsac"))):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.relpath(os.path.join(folder, name), root)
            tree = ast.parse(open(os.path.join(root, path), encoding="utf-8").read(), path)
            if any(_takes_config(node) for node in ast.walk(tree)
                   if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)):
                takers.append(path)
            if path in BOUNDARY:
                continue
            reads, aliases = 0, _aliases(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in fields \
                        and node.attr not in sections and _holds_config(node.value, aliases):
                    reads += 1
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                        and len(node.args) >= 2 and _holds_config(node.args[0], aliases) \
                        and isinstance(node.args[1], ast.Constant) and node.args[1].value in fields:
                    reads += 1
            if reads:
                flat[path] = reads
    return {"boundary": list(BOUNDARY), "flat_reads": sum(flat.values()), "flat_reads_per_file": flat,
            "modules_taking_config": len(takers), "modules": takers}


def trace(argv: list[str]) -> dict:
    """Run ``launch.py argv`` in this process and return, per module, the functions that received
    the whole config and those that received a section."""
    import dsac.config
    from dsac import cli

    config_type = dsac.config.Config
    section_types = tuple(getattr(dsac.config, "SECTIONS", {}).values())
    whole: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    part: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def profile(frame, event, arg):
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("dsac") or module in OWN:
            return
        code = frame.f_code
        values = [frame.f_locals.get(name) for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
        name = getattr(code, "co_qualname", code.co_name)
        if any(isinstance(value, config_type) for value in values):
            whole[module][name] += 1
        elif section_types and any(isinstance(value, section_types) for value in values):
            part[module][name] += 1

    sys.setprofile(profile)
    try:
        status = cli.main(argv)
    finally:
        sys.setprofile(None)
    return {"status": status, "whole": {m: dict(c) for m, c in sorted(whole.items())},
            "section_only": {m: dict(c) for m, c in sorted(part.items()) if m not in whole}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    parser.add_argument("--static", action="store_true", help="only the count from the source (no run)")
    args = parser.parse_args(argv)
    static = static_count()
    if args.static:
        print(json.dumps(static, indent=1) if args.json else static_text(static))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        result = trace([*RUN, "--output_dir", f"{tmp}/run"])
    if args.json:
        print(json.dumps({**result, "static": static}, indent=1))
        return 0
    print(static_text(static))
    whole, part = result["whole"], result["section_only"]
    print(f"run: launch.py {' '.join(RUN)} (exit {result['status']})")
    print(f"modules receiving the whole Config: {len(whole)} ({sum(len(f) for f in whole.values())} functions, "
          f"{sum(sum(f.values()) for f in whole.values())} calls)")
    for module, functions in whole.items():
        print(f"  {module}: {', '.join(sorted(functions))}")
    print(f"modules receiving only a section: {len(part)}")
    for module, functions in part.items():
        print(f"  {module}: {', '.join(sorted(functions))}")
    return 0


def static_text(static: dict) -> str:
    """The source count, one line per file."""
    lines = [f"flat reads of Config fields in dsac/ outside {', '.join(static['boundary'])}: {static['flat_reads']}"]
    lines += [f"  {path}: {reads}" for path, reads in sorted(static["flat_reads_per_file"].items(),
                                                            key=lambda item: -item[1])]
    lines.append(f"modules with a function taking the whole Config: {static['modules_taking_config']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
