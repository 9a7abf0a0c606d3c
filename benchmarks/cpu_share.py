"""Where a run's CPU goes, per role, and its useful share: CPU in the learner's updates plus the
rollout workers' env steps, over all the CPU the run used.

    python -m benchmarks cpu-share                           # HalfCheetah-v5, 2 workers, 300 s
    python -m benchmarks cpu-share --seconds 60 --flags="--eval_every 20000"

It runs ``launch.py`` as a user types it (``--env``, ``--num_workers``, ``--max_seconds``,
``--seed``, and ``--flags``; the run directory is temporary) and reads every process of the
run from ``/proc`` once a second: the driver and everything under it (the Ray it starts: GCS,
raylet, dashboard, agents, and the worker processes of the tasks and actors). Each process's
last user+system CPU is kept, so processes that exit still count. A process's CPU between two
samples goes to the role its title names then (``ray::learner``, ``ray::ReplayBuffer``,
``ray::IDLE`` ...). The run's ``summary.json`` ``cpu`` section splits the learner, the rollout
workers and the evaluator inside (update, sampling, pushing; env steps, acting); their
``rest`` is what their processes used beyond those parts (start-up included). The table and a
JSON record go to ``benchmarks/results/cpu_share/<name>.json``, with the machine's pace measured
just before the run (``python -m benchmarks learner-update``'s plain row, as the MuJoCo records).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from benchmarks import harness

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO_ROOT, "benchmarks", "results", "cpu_share")

# Roles in the order the table shows them. Actors and tasks by their Ray title; "Ray" is Ray's
# own processes (GCS, raylet, dashboard, agents, monitors); "idle Ray workers" are worker
# processes waiting for a task (or starting up).
ROLES = ("learner", "rollout workers", "evaluator", "ReplayBuffer", "ParameterServer", "RunMonitor",
         "WeightsCache", "GradientAverager", "driver", "Ray", "idle Ray workers", "other")
TITLED = {"rollout_worker": "rollout workers", "evaluator": "evaluator", "IDLE": "idle Ray workers",
          "DashboardAgent": "Ray", "RuntimeEnvAgent": "Ray"}
# The parts of a role that summary.json's cpu section splits out: (its key there, part keys).
INSIDE = {"learner": ("learner", ("update", "sample", "push")),
          "rollout workers": ("rollout_workers", ("env_step", "act")),
          "evaluator": ("evaluator", ("env_step", "act"))}


def role_of(cmdline: list[str], is_driver: bool = False) -> str:
    """The role of a process of the run, from its command line (Ray sets a worker's to its
    title: ``ray::learner``, ``ray::ReplayBuffer.sample``, ``ray::IDLE``; a named actor's
    ``ray::<name>:ParameterServer.push``)."""
    if is_driver:
        return "driver"
    first = cmdline[0].strip() if cmdline else ""
    if first.startswith("ray::"):
        title = first[len("ray::"):].split()
        name = title[0].split(":")[-1].split(".")[0] if title else ""
        if name == "learner" or name.startswith("learner_"):
            return "learner"
        if name in TITLED:
            return TITLED[name]
        return name if name in ROLES else "other"
    words = " ".join(cmdline)
    if "default_worker.py" in words:  # a worker process before it sets its title
        return "idle Ray workers"
    base = os.path.basename(first.split()[0]) if first else ""
    if base in ("gcs_server", "raylet") or f"{os.sep}ray{os.sep}" in words:
        return "Ray"
    return "other"


class RunSampler:
    """The CPU of a process tree by role: :meth:`sample` reads every process under ``root``
    (and any seen before that is still alive, wherever it moved) and adds each one's CPU since
    its last sample to the role it has now."""

    def __init__(self, root: int):
        self.root = psutil.Process(root)
        self.known: dict[tuple[int, float], psutil.Process] = {}
        self.last: dict[tuple[int, float], float] = {}  # user+system seconds at the last sample
        self.roles: dict[str, float] = {}
        self.processes: dict[str, set] = {}
        self.unknown: set[str] = set()  # what the processes classed "other" were

    def _tree(self) -> list[psutil.Process]:
        try:
            found = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            found = []
        return found + list(self.known.values())

    def sample(self) -> None:
        """One reading of every process of the run."""
        seen = set()
        for proc in self._tree():
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    if key in seen:
                        continue
                    times, cmdline = proc.cpu_times(), proc.cmdline()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            seen.add(key)
            self.known[key] = proc
            now = times.user + times.system
            role = role_of(cmdline, is_driver=proc.pid == self.root.pid)
            self.roles[role] = self.roles.get(role, 0.0) + now - self.last.get(key, 0.0)
            self.processes.setdefault(role, set()).add(key)
            if role == "other":
                self.unknown.add(" ".join(cmdline)[:120])
            self.last[key] = now
        for key in set(self.known) - seen:  # exited: its last reading stays counted
            del self.known[key]


def shares(roles: dict[str, float], inside: dict | None, cores: int, wall_s: float) -> dict:
    """The table's rows and the useful share: each role's CPU (``roles``, from /proc) with the
    parts ``inside`` (summary.json's ``cpu`` section) splits out of it, as seconds, % of the
    run's CPU and % of the machine (``cores`` × ``wall_s``)."""
    total = sum(roles.values())
    capacity = cores * wall_s
    rows = []

    def row(role: str, part: str, seconds: float) -> None:
        rows.append({"role": role, "part": part, "cpu_s": round(seconds, 2),
                     "of_run": round(seconds / total, 4) if total else None,
                     "of_machine": round(seconds / capacity, 4) if capacity else None})

    for role in [*ROLES, *sorted(set(roles) - set(ROLES))]:
        if role not in roles:
            continue
        row(role, "all", roles[role])
        key, parts = INSIDE.get(role, (None, ()))
        split = (inside or {}).get(key) if key else None
        if split:
            for part in parts:
                row(role, part, split.get(part, 0.0))
            row(role, "rest", max(0.0, roles[role] - sum(split.get(p, 0.0) for p in parts)))
    useful = useful_seconds(inside)
    return {"rows": rows, "total_cpu_s": round(total, 2), "capacity_cpu_s": round(capacity, 2),
            "useful_cpu_s": None if useful is None else round(useful, 2),
            "useful_share": None if useful is None or not total else round(useful / total, 4)}


def useful_seconds(inside: dict | None) -> float | None:
    """The learner's updates plus the rollout workers' env steps, from the ``cpu`` section;
    None without one (a run that failed before writing it)."""
    if not inside or "learner" not in inside or "rollout_workers" not in inside:
        return None
    return float(inside["learner"].get("update", 0.0) + inside["rollout_workers"].get("env_step", 0.0))


def table(result: dict) -> str:
    """The rows as a markdown table, with the useful share under it."""
    lines = ["| role | part | CPU s | % of run CPU | % of machine |", "|---|---|---:|---:|---:|"]
    def pct(x: float | None) -> str:
        return "" if x is None else f"{100 * x:.1f}"

    for r in result["rows"]:
        name = r["role"] if r["part"] == "all" else ""
        part = "" if r["part"] == "all" else r["part"].replace("_", " ")
        lines.append(f"| {name} | {part} | {r['cpu_s']:.1f} | {pct(r['of_run'])} | {pct(r['of_machine'])} |")
    lines.append(f"| **all** | | {result['total_cpu_s']:.1f} | 100.0 | "
                 f"{100 * result['total_cpu_s'] / max(result['capacity_cpu_s'], 1e-9):.1f} |")
    share = result["useful_share"]
    lines.append("")
    lines.append("useful share (learner updates + rollout workers' env steps) / all CPU of the run: "
                 + ("n/a (no cpu section in summary.json)" if share is None
                    else f"{result['useful_cpu_s']:.1f} / {result['total_cpu_s']:.1f} s = {100 * share:.1f}%"))
    return "\n".join(lines)


def records(directory: str = RESULTS) -> list[dict]:
    """Every record in ``directory``, in the order they were run, each with its ``name``."""
    found = []
    for entry in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if entry.endswith(".json"):
            with open(os.path.join(directory, entry)) as f:
                found.append({**json.load(f), "name": entry[: -len(".json")]})
    return sorted(found, key=lambda r: r["date"])


def _flags(record: dict) -> str:
    """What a record's command added to ``launch.py``'s own (env, workers, seconds, seed)."""
    words, kept, own = iter(shlex.split(record["launch"])[1:]), [], {}
    for word in words:
        if word in ("--env", "--num_workers", "--max_seconds", "--seed"):
            own[word] = next(words, "?")
        else:
            kept.append(word)
    return (f"{own.get('--env', '?')}, {own.get('--num_workers', '?')} workers, {own.get('--max_seconds', '?')} s"
            + (f", `{' '.join(kept)}`" if kept else ""))


def configurations(found: list[dict]) -> dict[str, list[dict]]:
    """The records by configuration (their flags at their commit), in the order first run."""
    groups: dict[str, list[dict]] = {}
    for r in found:
        groups.setdefault(f"{_flags(r)} at {r['commit']}", []).append(r)
    return groups


def runs_markdown(found: list[dict]) -> str:
    """The configurations (numbered), then one row per record in the order run: its
    configuration's number, its counts and its useful share."""
    groups = configurations(found)
    number = {id(r): i for i, rs in enumerate(groups.values(), 1) for r in rs}
    lines = ["| # | configuration | runs |", "|---:|---|---:|"]
    lines += [f"| {i} | {name} | {len(rs)} |" for i, (name, rs) in enumerate(groups.items(), 1)]
    lines += ["", "| record | run at (UTC) | # | machine pace | env steps | updates | updates/s | learner CPU s "
              "| all CPU s | useful share |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in found:
        share = "n/a" if r.get("useful_share") is None else f"{100 * r['useful_share']:.1f}%"
        per_s = "" if r.get("updates") is None else f"{r['updates'] / r['wall_s']:.0f}"
        pace = "—" if r.get("pace_updates_per_s") is None else f"{r['pace_updates_per_s']:,.0f}"
        lines.append(f"| {r['name']} | {r['date'][:16].replace('T', ' ')} | {number[id(r)]} | {pace} | "
                     f"{r.get('env_steps') or 0:,} | {r.get('updates') or 0:,} | {per_s} | "
                     f"{r['roles'].get('learner', 0.0):.1f} | {r['total_cpu_s']:.1f} | {share} |")
    return "\n".join(lines)


def roles_markdown(found: list[dict]) -> str:
    """CPU seconds by role and part (rows), the median of each configuration's records (columns,
    numbered as in :func:`runs_markdown`)."""
    groups = list(configurations(found).values())
    parts = [(role, part) for role in ROLES for part in ("all", *INSIDE.get(role, (None, ()))[1], "rest")
             if part != "rest" or role in INSIDE]

    def median_of(rs: list[dict], role: str, part: str) -> str:
        values = [row["cpu_s"] for r in rs for row in r["rows"] if (row["role"], row["part"]) == (role, part)]
        return f"{statistics.median(values):.1f}" if values else ""

    lines = ["| role | " + " | ".join(str(i) for i in range(1, len(groups) + 1)) + " |",
             "|---|" + "---:|" * len(groups)]
    for role, part in parts:
        cells = [median_of(rs, role, part) for rs in groups]
        if any(c not in ("", "0.0") for c in cells):
            label = role if part == "all" else f"&nbsp;&nbsp;{part.replace('_', ' ')}"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"{statistics.median(r['total_cpu_s'] for r in rs):.1f}"
                                           for rs in groups) + " |")
    useful = [[r["useful_share"] for r in rs if r.get("useful_share") is not None] for rs in groups]
    lines.append("| **useful share** | " + " | ".join(f"{100 * statistics.median(u):.1f}%" if u else "n/a"
                                                     for u in useful) + " |")
    return "\n".join(lines)


def machine_busy() -> float:
    """CPU seconds every process of the machine has used (all cores), from /proc/stat."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def run_and_sample(command: list[str], interval: float, log_path: str, nice: int) -> dict:
    """Run ``command`` and sample its processes every ``interval`` s until it exits."""
    busy_before, started = machine_busy(), time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                preexec_fn=(lambda: os.nice(nice)) if nice else None)
    sampler = RunSampler(proc.pid)
    try:
        while proc.poll() is None:
            sampler.sample()
            time.sleep(interval)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
    code = proc.wait()
    sampler.sample()  # what is still up after the driver (nothing, normally)
    wall = time.monotonic() - started
    return {"exit_code": code, "wall_s": round(wall, 1), "roles": sampler.roles,
            "processes": {role: len(keys) for role, keys in sampler.processes.items()},
            "other_processes": sorted(sampler.unknown),
            "machine_busy_cpu_s": round(machine_busy() - busy_before, 1)}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=300.0, help="the run's --max_seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--flags", default="", help="more launch.py flags, as one string")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between readings of /proc")
    parser.add_argument("--nice", type=int, default=0, help="run launch.py at this niceness")
    parser.add_argument("--name", default=None, help="the record's name (default: <env>-<workers>w-<date>)")
    parser.add_argument("--no-record", action="store_true", help="print the table only")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from benchmarks.learner_update import sitting_pace

    pace = sitting_pace()  # before the run, which the measurement would otherwise share the cores with
    tmp = tempfile.mkdtemp(prefix="dsac-cpu-share-")
    run_dir = os.path.join(tmp, "run")
    command = [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--env", args.env, "--num_workers",
               str(args.num_workers), "--max_seconds", f"{args.seconds:g}", "--seed", str(args.seed),
               *shlex.split(args.flags), "--output_dir", run_dir]
    print(f"cpu-share: {shlex.join(command[1:])}", flush=True)
    try:
        measured = run_and_sample(command, args.interval, os.path.join(tmp, "launch.log"), args.nice)
        summary_path = os.path.join(run_dir, "summary.json")
        summary = {}
        if os.path.exists(summary_path):
            with open(summary_path) as f:
                summary = json.load(f)
        if measured["exit_code"] != 0:
            with open(os.path.join(tmp, "launch.log")) as f:
                print(f.read()[-3000:], file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    cores = len(os.sched_getaffinity(0))
    result = shares(measured["roles"], summary.get("cpu"), cores, measured["wall_s"])
    print(table(result))
    print(f"wall {measured['wall_s']:.0f} s on {cores} cores; the whole machine was busy "
          f"{measured['machine_busy_cpu_s']:.0f} CPU s meanwhile (this run: {result['total_cpu_s']:.0f})")
    if summary.get("updates") is not None:
        print(f"{summary['updates']:,} updates and {summary.get('env_steps', 0):,} env steps in "
              f"{measured['wall_s']:.0f} s: {summary['updates'] / measured['wall_s']:.0f} updates/s")
    typed = ["python", "-m", "benchmarks", "cpu-share", *(sys.argv[1:] if argv is None else argv)]
    record = {**harness.provenance(typed),
              "launch": shlex.join(command[1:-2]), **measured, **result, "inside": summary.get("cpu"),
              "env_steps": summary.get("env_steps"), "updates": summary.get("updates"),
              "best_eval_return": summary.get("best_eval_return"), "cores": cores, "pace_updates_per_s": pace}
    if not args.no_record:
        name = args.name or f"{args.env}-{args.num_workers}w-{datetime.date.today().isoformat()}"
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, f"{name}.json")
        with open(path, "w") as f:
            json.dump(record, f, indent=1)
        print(f"cpu-share: wrote {os.path.relpath(path, REPO_ROOT)}")
    return 0 if measured["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
