"""The generated parts of the docs: the flag table (from ``dsac.config.Config``) and the result
tables (from the result files the benchmarks write), each between two markers in a page:

    <!-- generated: mujoco -->
    ...
    <!-- end generated: mujoco -->

    python -m benchmarks docs            # rewrite every generated block in README.md and docs/*.md, and its figures
    python -m benchmarks docs --check    # exit 1, naming them, if any block is stale (the tests run this)
    python -m benchmarks docs --print flags

A page holds a block by carrying its two markers; what is between them is never typed by hand.
A block may link figures drawn from the same file (the MuJoCo curves): ``docs`` draws them anew,
``--check`` reads only the text (the docs tests check that every link resolves).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def flags_table() -> str:
    """One Markdown row per flag: name, default (per algorithm where it differs), help."""
    from dsac.config import SECTIONS, section_fields
    from dsac.settings.registry import ALGOS, algorithm

    algo_defaults = {name: algorithm(name).defaults for name in ALGOS}
    rows = ["| flag | default | what |", "|---|---|---|"]
    for name, section in SECTIONS.items():
        rows.append(f"| **{name}** | | {section.__doc__.splitlines()[0]} |")
        rows.extend(_flag_rows(section_fields(name), algo_defaults))
    return "\n".join(rows)


def _flag_rows(fields, algo_defaults: dict) -> list[str]:
    rows = []
    for f in fields:
        if f.metadata.get("cli") is False:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if default is None and any(f.name in values for values in algo_defaults.values()):
            default = ", ".join(f"{algo} {values[f.name]}" for algo, values in algo_defaults.items()
                                if f.name in values)
        elif isinstance(default, list):
            default = " ".join(map(str, default))
        flag = f"--[no-]{f.name}" if f.type.startswith("bool") else f"--{f.name}"
        rows.append(f"| `{flag}` | `{default}` | {f.metadata['help']} |")
    return rows


def _from_file(path: str, render) -> str:
    full = os.path.join(REPO_ROOT, path)
    if not os.path.exists(full):
        return f"(no results yet: `{path}` does not exist)"
    return render(full)


MUJOCO_RESULTS = "benchmarks/results/mujoco/results.jsonl"
HER_RESULTS = "benchmarks/results/her/results.jsonl"
SPEED_RESULTS = "benchmarks/results/speed/2026-11-26.json"
ATARI_RESULTS = "benchmarks/results/atari/results.jsonl"
STABILITY_RESULTS = "benchmarks/results/stability/dqn-cartpole.jsonl"
XLA_AB = "benchmarks/results/mujoco/xla-ab.jsonl"


def _report_with_figures(path: str, report) -> str:
    """``report(results, figures=...)`` with its figures linked from docs/, where the page that
    holds the block lives."""
    return _from_file(path, lambda full: report(full, figures=f"../{os.path.dirname(path)}/"))


def _figures(path: str, plot) -> list[str]:
    """``plot``'s PNGs, drawn beside the result file ``path``."""
    full = os.path.join(REPO_ROOT, path)
    return plot(full, os.path.dirname(full)) if os.path.exists(full) else []


def mujoco_table() -> str:
    from benchmarks import mujoco

    return _report_with_figures(MUJOCO_RESULTS, mujoco.report)


def mujoco_headline() -> str:
    from benchmarks import mujoco

    return _from_file(MUJOCO_RESULTS, mujoco.headline)


def mujoco_choice() -> str:
    from benchmarks import mujoco

    return _from_file(MUJOCO_RESULTS, mujoco.choice_table)


def mujoco_figures() -> list[str]:
    """Each env's curves PNG, beside the MuJoCo result file."""
    from benchmarks import mujoco

    return _figures(MUJOCO_RESULTS, mujoco.plot)


def her_table() -> str:
    from benchmarks import her

    return _report_with_figures(HER_RESULTS, her.report)


def her_figures() -> list[str]:
    """Each goal-conditioned task's success-rate PNG, beside the HER result file."""
    from benchmarks import her

    return _figures(HER_RESULTS, her.plot)


def atari_table() -> str:
    from benchmarks import atari

    return _from_file("benchmarks/results/atari/results.jsonl", atari.games_report)


def stability_table() -> str:
    from benchmarks import stability

    return _from_file("benchmarks/results/stability/dqn-cartpole.jsonl", stability.report)


def parity_table() -> str:
    from benchmarks import parity

    return _from_file("benchmarks/results/parity/parity.json", lambda path: parity.markdown(json.load(open(path))))


def speed_table() -> str:
    from benchmarks import speed

    def render(path: str) -> str:
        report = json.load(open(path))
        return speed.markdown(report, report["machine"]["cpus"])

    return _from_file(SPEED_RESULTS, render)


def headline_table() -> str:
    """The README's headline rows besides MuJoCo's, each from its result file: the time to
    solve against SB3 (the speed file), each Atari game's runs at the budget's mark, and how
    many DQN CartPole runs held what they learned."""
    from benchmarks import harness, stability

    rows = ["| what | result | reproduce | measured |", "|---|---|---|---|"]
    speed = json.load(open(os.path.join(REPO_ROOT, SPEED_RESULTS)))
    tasks = {"sac": "SAC Pendulum-v1 to −200", "dqn": "DQN CartPole-v1 to 475"}
    for algo, solved in speed["solve"].items():
        sb3 = speed["sb3"][algo]
        runs = " / ".join(f"{r['wall_s']:.1f}" for r in solved["runs"])
        peer = " / ".join(f"{r['wall_s']:.1f}" for r in sb3["runs"])
        rows.append(f"| {tasks[algo]}, seconds from process start, median of {len(solved['runs'])} seeds "
                    f"| dsac {speed['solve_settings']} {solved['median_wall_s']:.1f} s ({runs}), SB3 with rl-zoo's "
                    f"settings {sb3['median_wall_s']:.1f} s ({peer}): "
                    f"**{solved['median_wall_s'] / sb3['median_wall_s']:.2f}×** | `python -m benchmarks speed --quick "
                    "--skip collection naive learner sync equal --num_seeds 3` (with `requirements-bench.txt`) "
                    f"| `{SPEED_RESULTS}` |")
    by_game: dict = {}
    for rec in harness.read_records(os.path.join(REPO_ROOT, ATARI_RESULTS)):
        by_game.setdefault((rec["game"], rec["minutes"], rec["workers"]), []).append(rec)
    for (game, minutes, workers), recs in sorted(by_game.items()):
        marks = " / ".join(f"{m:g}" for m in sorted(float(m) for m in recs[0]["scores"]))
        scores = "; ".join(" / ".join(f"{sc['return']:,.1f}" for _, sc in sorted(
            rec["scores"].items(), key=lambda kv: float(kv[0]))) + f" (seed {rec['seed']})" for rec in recs)
        rows.append(f"| DQN on ALE/{game}-v5, {minutes:g} min, {workers} workers, every run | {scores} at {marks} min "
                    f"| `python -m benchmarks atari --games {game} --minutes {minutes:g}` "
                    f"| {', '.join(sorted({rec['date'][:10] + ' ' + rec['commit'] for rec in recs}))} |")
    runs = harness.read_records(os.path.join(REPO_ROOT, STABILITY_RESULTS))
    threshold = stability.TASK["threshold"]
    for variant in ("serial", "w2"):
        group = [r for r in runs if r["settings"] == "defaults" and r["variant"] == variant]
        held = sum((r["final"] or 0) >= threshold for r in group)
        rows.append(f"| DQN CartPole-v1 to {group[0]['budget']:,} env steps, defaults, {variant}: does it hold what "
                    f"it learned? | final return ≥ {threshold:g} on {held} of {len(group)} seeds "
                    f"| `python -m benchmarks stability --settings defaults --variants {variant} "
                    f"--num_seeds {len(group)}` "
                    f"| {', '.join(sorted({r['commit'] for r in group}))} |")
    return "\n".join(rows)


def sweep_dqn_table() -> str:
    from benchmarks import sweep

    return _from_file("benchmarks/results/sweep/dqn-2026-11-25.json",
                      lambda path: sweep.report(json.load(open(path))).strip())


def _scale(path: str, render) -> str:
    return _from_file(f"benchmarks/results/scale/{path}", lambda full: render(json.load(open(full))))


def scale_collection_table() -> str:
    from benchmarks import scale

    return _scale("quick.json", lambda report: scale.collection_markdown(report["collection"]))


def scale_capacity_table() -> str:
    from benchmarks import scale

    return _scale("quick.json", lambda report: scale.capacity_markdown(report["capacity"]))


def scale_board_table() -> str:
    from benchmarks import scale

    return _scale("board.json", scale.runs_markdown)


def scale_delivery_table() -> str:
    from benchmarks import scale

    return _scale("board.json", lambda runs: scale.capacity_markdown(runs["delivery alone"]["capacity"]))


def races_table() -> str:
    """Every sitting of races between commits (``benchmarks/results/speed/races-*/``), a table each."""
    from benchmarks import speed

    root = os.path.join(REPO_ROOT, "benchmarks", "results", "speed")
    parts = []
    for name in sorted(n for n in os.listdir(root) if n.startswith("races-")):
        parts.append(f"[{name}](../benchmarks/results/speed/{name}/README.md):\n\n"
                     + speed.races_markdown(os.path.join(root, name)))
    return "\n\n".join(parts)


def _runs_notes(render, path: str = MUJOCO_RESULTS):
    """A renderer of :mod:`benchmarks.runs_notes` bound to its result file."""
    def block() -> str:
        from benchmarks import runs_notes

        return _from_file(path, lambda full: render(runs_notes, full))

    return block


mujoco_runs = _runs_notes(lambda notes, full: notes.notes(full, "mujoco-runs"))
mujoco_10min = _runs_notes(lambda notes, full: notes.notes(full, "mujoco-10min"))
crossq_widths = _runs_notes(lambda notes, full: notes.widths_table(full))
pong_2026_11_24 = _runs_notes(lambda notes, full: notes.pong_table(full),
                              "benchmarks/results/atari/pong60-progress.jsonl")
evaluator_duty = _runs_notes(lambda notes, full: notes.ab_table(full, "evaluator-duty"),
                             "benchmarks/results/mujoco/evaluator-duty.jsonl")
xla_ab_5min = _runs_notes(lambda notes, full: notes.ab_table(full, "xla-ab-5min"), XLA_AB)
xla_ab_10min = _runs_notes(lambda notes, full: notes.ab_table(full, "xla-ab-10min"), XLA_AB)
normalization = _runs_notes(lambda notes, full: notes.normalization_table(full),
                            "benchmarks/results/normalization/results.jsonl")
parity_lunar_seconds = _runs_notes(lambda notes, full: notes.parity_seconds(full, "sac-lunar"),
                                   "benchmarks/results/parity/parity.json")
scale_board_roles = _runs_notes(lambda notes, full: notes.board_roles(full, ("pulls", "board", "board, again")),
                                "benchmarks/results/scale/board.json")


def cpu_share_runs_table() -> str:
    from benchmarks import cpu_share

    return cpu_share.runs_markdown(cpu_share.records())


def cpu_share_roles_table() -> str:
    from benchmarks import cpu_share

    return cpu_share.roles_markdown(cpu_share.records())


# block name -> what renders it
BLOCKS = {"flags": flags_table, "headline": headline_table, "mujoco": mujoco_table,
          "mujoco-headline": mujoco_headline, "mujoco-choice": mujoco_choice, "her": her_table,
          "atari": atari_table, "stability": stability_table, "parity": parity_table, "speed": speed_table,
          "sweep-dqn": sweep_dqn_table, "scale-collection": scale_collection_table,
          "scale-capacity": scale_capacity_table, "scale-board": scale_board_table,
          "scale-delivery": scale_delivery_table, "races": races_table, "cpu-share-runs": cpu_share_runs_table,
          "cpu-share-roles": cpu_share_roles_table, "mujoco-runs": mujoco_runs, "mujoco-10min": mujoco_10min,
          "crossq-widths": crossq_widths, "pong-2026-11-24": pong_2026_11_24, "evaluator-duty": evaluator_duty,
          "xla-ab-5min": xla_ab_5min, "xla-ab-10min": xla_ab_10min,
          "normalization": normalization, "parity-lunar-seconds": parity_lunar_seconds,
          "scale-board-roles": scale_board_roles}
# block name -> what draws the figures it links (rewritten by ``docs``, not read by ``--check``)
FIGURES = {"mujoco": mujoco_figures, "her": her_figures}
MARKERS = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
                     re.S)


def pages() -> list[str]:
    docs = os.path.join(REPO_ROOT, "docs")
    return [os.path.join(REPO_ROOT, "README.md"), *sorted(
        os.path.join(root, name) for root, _, names in os.walk(docs) for name in names if name.endswith(".md"))]


def regenerate(text: str, cache: dict) -> tuple[str, list[str]]:
    """``text`` with every generated block rendered anew, and the names of the blocks that changed."""
    changed = []

    def render(match: re.Match) -> str:
        name = match["name"]
        if name not in BLOCKS:
            raise SystemExit(f"error: unknown generated block {name!r} (known: {', '.join(BLOCKS)})")
        if name not in cache:
            cache[name] = BLOCKS[name]().rstrip("\n") + "\n"
        if match["body"] != cache[name]:
            changed.append(name)
        return match.group(1) + cache[name] + match.group(4)

    return MARKERS.sub(render, text), changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    parser.add_argument("--print", dest="show", choices=sorted(BLOCKS), help="print one block's content and stop")
    args = parser.parse_args(argv)
    if args.show:
        print(BLOCKS[args.show]())
        return 0
    cache: dict = {}
    stale = []
    for page in pages():
        text = open(page, encoding="utf-8").read()
        new, changed = regenerate(text, cache)
        for name in changed:
            stale.append(f"{os.path.relpath(page, REPO_ROOT)}: {name}")
        if changed and not args.check:
            with open(page, "w", encoding="utf-8") as f:
                f.write(new)
    if args.check and stale:
        print("stale generated blocks (python -m benchmarks docs rewrites them):\n  " + "\n  ".join(stale),
              file=sys.stderr)
        return 1
    if not args.check:
        drawn = [os.path.relpath(png, REPO_ROOT) for draw in FIGURES.values() for png in draw()]
        print("\n".join(f"rewrote {s}" for s in stale) or "every generated block is up to date")
        print("\n".join(f"drew {png}" for png in drawn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
