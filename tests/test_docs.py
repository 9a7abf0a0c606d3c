"""The docs document what the code does: the flag table of docs/guide.md and the result tables are the ones
``python -m benchmarks docs`` generates; the README's first lines are the two commands CI runs; every relative link and
``#anchor`` in README.md and docs/*.md resolves; and every command they show that runs a
program of this repository (``python launch.py``, ``python scripts/x.py``, ``python -m
<module of the repo> [subcommand]``, ``dsac-train``, ``dsac-tune``, ...) names a file or module
that exists and that answers ``--help``, listing every flag the docs give it."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import importlib
import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tomllib

import pytest
from conftest import REPO_ROOT

ROOT = pathlib.Path(REPO_ROOT)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GUIDE = ROOT / "docs" / "guide.md"
HELP_TIMEOUT_S = 120  # a --help takes ~1 s; generous for a machine busy with other work
HELP_THREADS = 4
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console", "zsh"}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
ENTRY_POINTS = PYPROJECT["project"].get("scripts", {})  # dsac-train -> dsac.cli:main


def test_generated_blocks_are_what_config_and_the_result_files_give():
    """The flag table (docs/guide.md) and the result tables (docs/benchmarks.md) are written by
    ``python -m benchmarks docs`` from Config and the result files, never by hand."""
    assert "<!-- generated: flags -->" in GUIDE.read_text()
    result = subprocess.run([sys.executable, "-m", "benchmarks", "docs", "--check"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_readme_test_command_is_what_ci_runs():
    """The README's second command is .ci/run's one command, word for word, and lints before it tests."""
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line.split("#")[0].strip() for line in readme[:6] if line.startswith("pip install")]
    assert len(commands) == 2 and commands[0].endswith("python launch.py")
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.lstrip().startswith("#")]
    assert ci[-1] == commands[1], f".ci/run runs {ci[-1]!r}, the README says {commands[1]!r}"
    steps = [step.strip() for step in commands[1].split("&&")]
    assert steps[0] == "pip install -r requirements-dev.txt"
    lint = next(i for i, step in enumerate(steps) if step.startswith("ruff check"))
    assert lint < next(i for i, step in enumerate(steps) if "pytest" in step), "ruff check runs before pytest"


# --- Markdown: code blocks, prose, headings, links ---------------------------------------------

def split_markdown(text: str) -> tuple[list[tuple[str, list[str]]], str]:
    """The fenced code blocks, as (info string, lines), and the prose with them blanked out."""
    blocks, prose, current, fence, info = [], [], None, "", ""
    for line in text.splitlines():
        opening = re.match(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)", line)
        if current is None and opening:
            current, fence, info = [], opening.group(1), opening.group(2).lower()
        elif current is not None and re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", line):
            blocks.append((info, current))
            current = None
        elif current is not None:
            current.append(line)
        else:
            prose.append(line)
            continue
        prose.append("")
    return blocks, "\n".join(prose)


INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: its text (a link's text, no markup) lowercased, punctuation
    but '-' and '_' dropped, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(page: pathlib.Path) -> frozenset[str]:
    """Every heading's anchor in ``page``, repeated headings numbered as GitHub numbers them."""
    _, prose = split_markdown(page.read_text())
    seen: dict[str, int] = {}
    found = set()
    for match in re.finditer(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", prose, re.MULTILINE):
        slug = github_anchor(match.group(1))
        found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return frozenset(found)


def link_problems(page: pathlib.Path) -> list[str]:
    _, prose = split_markdown(page.read_text())
    prose = INLINE_CODE.sub("", prose)
    problems = []
    for target in [*LINK.findall(prose), *REFERENCE.findall(prose)]:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        where = f"{page.relative_to(ROOT)}: ({target})"
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            shown = resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved
            problems.append(f"{where}: no file {shown}")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading with anchor #{anchor} in {resolved.relative_to(ROOT)}")
    return problems


def test_pages_exist():
    assert GUIDE in PAGES and len(PAGES) > 2


def test_links_and_anchors_resolve():
    problems = [problem for page in PAGES for problem in link_problems(page)]
    assert not problems, "\n".join(problems)



# --- docs/architecture.md: the map of the code, and the paths through it -------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"


def architecture_section(title: str) -> str:
    text = ARCHITECTURE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def test_the_code_map_lists_every_module_once_and_only_modules_that_exist():
    """A newcomer's map: every ``dsac/**/*.py`` has its one line, and no line names a module that is gone."""
    rows = re.findall(r"^\| `(dsac/[\w/]+\.py)` \| (.+) \|$", architecture_section("Code map"), re.MULTILINE)
    listed = [path for path, _ in rows]
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "dsac").rglob("*.py"))
    assert sorted(set(listed)) == sorted(listed), "a module is listed twice"
    assert not sorted(set(modules) - set(listed)), f"not in the code map: {sorted(set(modules) - set(listed))}"
    assert not sorted(set(listed) - set(modules)), f"in the code map but gone: {sorted(set(listed) - set(modules))}"
    assert all(job.strip() and "|" not in job for _, job in rows)


@pytest.mark.parametrize("title", ["A transition's path", "A weights version's path"])
def test_the_paths_name_each_function_once_and_each_exists(title):
    """The numbered steps of a transition's and a weights version's path each name one function,
    ``dsac.<module>.<qualified name>``, that exists; none is named twice."""
    steps = re.findall(r"^\d+\. `(dsac(?:\.\w+)+)`", architecture_section(title), re.MULTILINE)
    assert len(steps) >= 6, steps
    assert len(set(steps)) == len(steps), f"named twice: {[s for s in steps if steps.count(s) > 1]}"
    for dotted in steps:
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
            assert obj is not None, f"{title}: {dotted} does not exist"
        assert callable(obj), f"{title}: {dotted} is not a function"


# --- Commands: which programs of the repository the docs run ---------------------------------

def shell_segments(line: str) -> list[str]:
    """``line`` without its comment, split at ``&&``, ``||``, ``;``, ``|`` and ``&`` outside quotes."""
    segments, current, quote, i = [], [], None, 0
    while i < len(line):
        char = line[i]
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            break
        elif char in ";|&":
            segments.append("".join(current))
            current = []
            i += 2 if line[i:i + 2] in ("&&", "||") else 1
            continue
        current.append(char)
        i += 1
    segments.append("".join(current))
    return [s.strip() for s in segments if s.strip()]


def repo_module_file(module: str) -> pathlib.Path | None:
    """The file ``python -m module`` runs, when ``module`` is this repository's."""
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def in_repo(module: str) -> bool:
    top = module.split(".")[0]
    return (ROOT / top / "__init__.py").is_file() or (ROOT / f"{top}.py").is_file()


@dataclasses.dataclass(frozen=True, order=True)
class Program:
    """A program of this repository as the docs run it: a script, a module (with the
    subcommand a docs command gives it, if any) or an entry point of pyproject.toml."""

    kind: str  # "script", "module" or "entry"
    name: str
    sub: str = ""

    def __str__(self) -> str:
        typed = {"script": f"python {self.name}", "module": f"python -m {self.name}", "entry": self.name}[self.kind]
        return f"{typed} {self.sub}".strip()

    def missing(self) -> str | None:
        """What does not exist, or None."""
        if self.kind == "script" and not (ROOT / self.name).is_file():
            return f"no file {self.name}"
        if self.kind == "module" and repo_module_file(self.name) is None:
            return f"no module {self.name} with a file to run ({self.name.replace('.', '/')}.py or __main__.py)"
        if self.kind == "entry":
            module = ENTRY_POINTS[self.name].split(":")[0]
            if repo_module_file(module) is None:
                return f"pyproject.toml's {self.name} = {ENTRY_POINTS[self.name]!r}: no module {module}"
        return None

    def help_argv(self) -> list[str]:
        sub = [self.sub] if self.sub else []
        if self.kind == "script":
            return [sys.executable, self.name, *sub, "--help"]
        if self.kind == "module":
            return [sys.executable, "-m", self.name, *sub, "--help"]
        module, _, function = ENTRY_POINTS[self.name].partition(":")
        code = f"import sys; from {module} import {function}; sys.argv[0] = {self.name!r}; sys.exit({function}())"
        return [sys.executable, "-c", code, "--help"]


@dataclasses.dataclass(frozen=True)
class Command:
    page: str
    text: str
    program: Program | None  # None: a module that is not this repository's (pip, pytest)
    flags: tuple[str, ...]  # the --flags it gives the program (up to a bare --)
    problem: str | None = None


def parse_command(page: str, segment: str) -> Command | None:
    """The command ``segment`` runs, if it starts a Python program or an entry point."""
    try:
        tokens = shlex.split(segment)
    except ValueError:  # an unbalanced quote in an example
        tokens = segment.split()
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):  # VAR=value python ...
        tokens = tokens[1:]
    if tokens and tokens[0] == "$":
        tokens = tokens[1:]
    if not tokens:
        return None
    if tokens[0] in ENTRY_POINTS:
        program, args = Program("entry", tokens[0]), tokens[1:]
    elif tokens[0] in ("python", "python3") and len(tokens) > 1 and tokens[1].endswith(".py"):
        program, args = Program("script", os.path.normpath(tokens[1])), tokens[2:]
    elif tokens[0] in ("python", "python3") and len(tokens) > 2 and tokens[1] == "-m":
        module, args = tokens[2], tokens[3:]
        if not in_repo(module):
            found = importlib.util.find_spec(module.split(".")[0]) is not None
            return Command(page, segment, None, (), None if found else f"no module {module} in the repo or installed")
        sub = args[0] if args and re.match(r"^[A-Za-z][\w-]*$", args[0]) else ""  # python -m benchmarks speed
        program, args = Program("module", module, sub), args[1:] if sub else args
    else:
        return None
    args = args[:args.index("--")] if "--" in args else args
    flags = tuple(a.split("=")[0] for a in args if a.startswith("--") and len(a) > 2)
    return Command(page, segment, program, flags, program.missing())


GENERATED = re.compile(r"<!-- generated: ([\w-]+) -->\n.*?<!-- end generated: \1 -->", re.S)


def page_commands(page: pathlib.Path) -> list[Command]:
    """The commands of ``page``'s shell code blocks (fenced, or indented by 4 spaces), lines
    continued with a backslash joined, and of its inline code; not those of generated blocks,
    which record what ran at the commit each row names (``python -m benchmarks docs --check``
    keeps those blocks true to their result files)."""
    blocks, prose = split_markdown(GENERATED.sub("", page.read_text()))
    shell = [line for info, block in blocks if info in SHELL_BLOCKS for line in block]
    shell += [line for line in prose.splitlines() if re.match(r"^ {4,}\S", line)]
    lines = [line.strip() for line in re.sub(r"\\\n", " ", "\n".join(shell)).splitlines()]
    lines += [" ".join(span.split()) for _, span in INLINE_CODE.findall(prose)]
    name = str(page.relative_to(ROOT))
    return [c for line in lines for segment in shell_segments(line) if (c := parse_command(name, segment))]


COMMANDS = [command for page in PAGES for command in page_commands(page)]
PROGRAMS = sorted({c.program for c in COMMANDS if c.program is not None and c.problem is None})


def test_docs_show_commands():
    assert Program("script", "launch.py") in PROGRAMS


def test_commands_name_programs_that_exist():
    problems = [f"{c.page}: `{c.text}`: {c.problem}" for c in COMMANDS if c.problem]
    assert not problems, "\n".join(problems)


def optional_modules() -> set[str]:
    """Import names of the optional packages: pyproject's extras and requirements-bench.txt."""
    names = [req for extra in PYPROJECT["project"].get("optional-dependencies", {}).values() for req in extra]
    names += (ROOT / "requirements-bench.txt").read_text().splitlines()
    return {re.split(r"[<>=!~\[; ]", n.strip())[0].lower().replace("-", "_") for n in names
            if n.strip() and not n.strip().startswith(("#", "-"))}


def run_help(program: Program) -> subprocess.CompletedProcess | str:
    try:
        return subprocess.run(program.help_argv(), cwd=ROOT, capture_output=True, text=True,
                              timeout=HELP_TIMEOUT_S, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    except subprocess.TimeoutExpired:
        return f"--help did not answer within {HELP_TIMEOUT_S} s"


@pytest.fixture(scope="module")
def help_results() -> dict[Program, subprocess.CompletedProcess | str]:
    """Every program's --help, once each, a few at a time (one fixture: under pytest-xdist its
    tests go to one process, see conftest)."""
    with concurrent.futures.ThreadPoolExecutor(HELP_THREADS) as pool:
        return dict(zip(PROGRAMS, pool.map(run_help, PROGRAMS), strict=True))


@pytest.mark.parametrize("program", PROGRAMS, ids=str)
def test_program_answers_help_with_the_flags_the_docs_give_it(program, help_results):
    result = help_results[program]
    assert not isinstance(result, str), f"{program}: {result}"
    if result.returncode != 0:
        missing = re.search(r"No module named '([\w.]+)'", result.stderr)
        if missing and missing.group(1).split(".")[0].lower() in optional_modules():
            pytest.skip(f"{program} --help needs the optional package {missing.group(1)} (not installed)")
    assert result.returncode == 0, f"{program} --help exited {result.returncode}:\n{result.stderr[-2000:]}"
    text = result.stdout + result.stderr
    unknown = sorted({f"{flag} ({c.page}: `{c.text}`)" for c in COMMANDS if c.program == program for flag in c.flags
                      if not re.search(re.escape(flag) + r"(?![\w-])", text)})
    assert not unknown, f"{program} --help lists none of:\n" + "\n".join(unknown)
