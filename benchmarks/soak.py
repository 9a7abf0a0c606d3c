"""A long run that watches for leaks: RSS of every process of the run and the Ray object
store, sampled every 30 s, and their growth reported at the end. Not part of CI.

    python -m benchmarks soak                                  # 30 minutes, 8 workers, SAC Pendulum
    python -m benchmarks soak --minutes 5 -- --algo dqn --env CartPole-v1

Flags after ``--`` go to launch.py. The run's processes are the driver and everything under it
(the embedded Ray's daemons and its worker processes); the object store is read from that Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import psutil

from dsac.output.curves import read_progress

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLASMA = re.compile(r"Plasma memory usage (\d+) MiB, (\d+) objects")


def role_of(proc: psutil.Process) -> str:
    """A process's role: its Ray title (ray::learner, ray::ReplayBuffer, ...) or its name."""
    try:
        cmdline = proc.cmdline()
        name = cmdline[0] if cmdline else proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "?"
    if name.startswith("ray::"):
        return name.split()[0].split(".")[0]  # ray::ParameterServer.push -> ray::ParameterServer
    if "launch.py" in " ".join(cmdline):
        return "driver"
    scripts = [os.path.basename(arg) for arg in cmdline[1:] if arg.endswith(".py")]  # python -u log_monitor.py
    return scripts[0] if scripts else os.path.basename(name.split()[0])


def rss_by_role(driver: psutil.Process) -> dict[str, float]:
    """MiB of resident memory per role, summed over its processes (idle Ray workers included)."""
    out: dict[str, float] = {}
    for proc in [driver, *driver.children(recursive=True)]:
        try:
            mib = proc.memory_info().rss / 2**20
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        role = role_of(proc)
        out[role] = out.get(role, 0.0) + mib
    return out


def object_store() -> tuple[float, int] | None:
    """(MiB used, objects) in the run's Ray object store, or None before it is reachable."""
    import ray
    from ray._private.internal_api import memory_summary

    try:
        if not ray.is_initialized():
            ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
        match = PLASMA.search(memory_summary(stats_only=True))
    except Exception:  # Ray not up yet, or going down
        return None
    return (float(match.group(1)), int(match.group(2))) if match else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run")
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--out", default="soak.json", help="JSON report")
    parser.add_argument("launch_args", nargs="*", help="flags for launch.py (after --)")
    args = parser.parse_args(argv)
    out_dir = tempfile.mkdtemp(prefix="dsac-soak-")
    command = [
        sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--num_workers", "8", "--total_env_steps", str(10**9),
        "--max_seconds", str(args.minutes * 60), "--output_dir", os.path.join(out_dir, "run"), "--log_every", "60",
        *args.launch_args,
    ]
    log_path = os.path.join(out_dir, "launch.log")
    print(f"soak: {' '.join(command[1:])}\nsoak: log in {log_path}", flush=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    driver = psutil.Process(proc.pid)
    samples = []
    started = time.monotonic()
    try:
        while proc.poll() is None:
            rss = rss_by_role(driver)
            store = object_store()
            rows = read_progress(os.path.join(out_dir, "run"))
            env_steps = rows[-1]["env_steps"] if rows else None
            sample = {
                "t_s": round(time.monotonic() - started, 1),
                "rss_mib": {k: round(v, 1) for k, v in sorted(rss.items())},
                "rss_total_mib": round(sum(rss.values()), 1),
                "object_store_mib": store[0] if store else None, "object_store_objects": store[1] if store else None,
                "env_steps": env_steps,
            }
            samples.append(sample)
            print(f"soak: {sample['t_s']:7.0f} s  rss {sample['rss_total_mib']:8.1f} MiB  object store "
                  f"{sample['object_store_mib']} MiB / {sample['object_store_objects']} objects  env steps {env_steps}",
                  flush=True)
            deadline = time.monotonic() + args.interval
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
    code = proc.wait()
    report = summarize(samples)
    report.update(exit_code=code, command=command[1:], log=log_path, samples=samples)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(markdown(report))
    return 0 if code == 0 else 1


def summarize(samples: list[dict]) -> dict:
    """Start (the first sample after start-up: the second) vs end (the last one while the run
    was up, i.e. its object store answered), per role and in total."""
    live = [s for s in samples[1:] if s["object_store_mib"] is not None]
    if len(live) < 2:
        return {"growth": None}
    first, last = live[0], live[-1]
    roles = sorted(set(first["rss_mib"]) | set(last["rss_mib"]))
    hours = max(1e-9, (last["t_s"] - first["t_s"]) / 3600)
    per_role = {
        r: {"start_mib": first["rss_mib"].get(r), "end_mib": last["rss_mib"].get(r),
            "growth_mib_per_hour": round((last["rss_mib"].get(r, 0) - first["rss_mib"].get(r, 0)) / hours, 1)}
        for r in roles
    }
    return {
        "from_s": first["t_s"], "to_s": last["t_s"], "per_role": per_role,
        "rss_total_mib": [first["rss_total_mib"], last["rss_total_mib"]],
        "object_store_mib": [first["object_store_mib"], last["object_store_mib"]],
        "object_store_objects": [first["object_store_objects"], last["object_store_objects"]],
        "object_store_max_mib": max((s["object_store_mib"] or 0) for s in samples),
    }


def markdown(report: dict) -> str:
    if not report.get("per_role"):
        return "too few samples for a report"
    rows = [f"| process | RSS at {report['from_s']:.0f} s (MiB) | RSS at {report['to_s']:.0f} s (MiB) "
            "| growth (MiB/h) |",
            "|---|---|---|---|"]
    for role, r in report["per_role"].items():
        rows.append(f"| {role} | {r['start_mib']} | {r['end_mib']} | {r['growth_mib_per_hour']} |")
    total, store, objects = report["rss_total_mib"], report["object_store_mib"], report["object_store_objects"]
    rows.append(f"| **all** | {total[0]} | {total[1]} | |")
    rows.append(f"| object store (MiB / objects) | {store[0]} / {objects[0]} | {store[1]} / {objects[1]} | "
                f"max {report['object_store_max_mib']} MiB |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
