"""Shared fixtures: one real local Ray for the tests that need actors, and small envs."""

import os
import resource
import subprocess
import sys
import threading

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import gymnasium as gym
import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Real gymnasium envs with short time limits, to see truncation within a few steps.
if "ShortPendulum-v0" not in gym.envs.registry:
    gym.register(
        "ShortPendulum-v0",
        entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
        max_episode_steps=5,
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The README's command runs the tests in two processes (pytest-xdist, ``-n 2 --dist
    loadgroup``): the tests that share one of this suite's module- or session-scoped fixtures
    (``ray_local``, a run, a batch of commands, a cluster) are sent to one process, which makes
    it once. So one local Ray serves them all, and no two of its runs share the 2 cores."""
    for item in items:
        shared = sorted((defs[-1].scope != "session", name) for name, defs in item._fixtureinfo.name2fixturedefs.items()
                        if defs[-1].baseid and defs[-1].scope in ("module", "session"))
        if shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(shared[0][1]))  # a session-scoped one first
    # The slow tests first: xdist hands out the rest as processes free up, so the processes
    # end together instead of one running a slow test alone at the end (a stable sort: the
    # order within each part is the files').
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray with 2 CPUs (like CI), shared by every test that needs one. The path
    travels in the environment the raylet inherits, as ``dsac.distributed.cluster.start_local_ray``
    passes it, not in a ``runtime_env``, so Ray's prestarted workers serve the tests.

    Its head node is started as ``ray start --head --include-log-monitor=false --no-monitor``
    starts one (``ray.cluster_utils.Cluster``, which also stops exactly its own processes): the
    tests read no worker's output through the driver, while a log monitor would poll the
    session's hundreds of worker log files every 0.1 s; an autoscaler has nothing to scale on
    one machine."""
    import ray
    from ray.cluster_utils import Cluster

    pythonpath = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath
    try:
        head = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "include_dashboard": False, "include_log_monitor": False, "no_monitor": True,
            "object_store_memory": 2 * 1024**3,
        })
        ray.init(address=head.address, log_to_driver=False)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    yield ray
    ray.shutdown()
    head.shutdown()


# The trained run's budget: SAC with its defaults reaches -600 on Pendulum in ~3,000-4,000 env
# steps, so the budget leaves room for a slower seed or schedule.
PENDULUM_RUN_STEPS = 4_500


@pytest.fixture(scope="session")
def trained_pendulum_run(ray_local, tmp_path_factory):
    """One distributed SAC run on Pendulum to a budget of :data:`PENDULUM_RUN_STEPS` (4 rollout
    workers, 10 evaluation episodes every 1,000 env steps, a video of every 2nd, its replay in
    the checkpoint): test_integration checks what it learned and wrote, test_checkpoint
    resumes a copy of it. ``(config, summary, output_dir)``. Named to sort after ``ray_local``,
    so that its tests stay in that fixture's xdist group."""
    from dsac.config import Config
    from dsac.runtime.runner import run

    out = tmp_path_factory.mktemp("pendulum") / "run"
    config = Config(
        env="Pendulum-v1", num_workers=4, seed=0, total_env_steps=PENDULUM_RUN_STEPS, eval_every=1_000,
        eval_episodes=10, output_dir=str(out), log_every=30.0, video_every=2, checkpoint_replay=True,
    ).validate()
    return config, run(config), out


SMALL_RUN_STEPS = 1500


@pytest.fixture(scope="session")
def small_launch_run(tmp_path_factory):
    """One short distributed SAC run through ``launch.py`` as a user types it (TensorFlow's log
    level not set), its output captured (so stdout is not a terminal): ``(output_dir, result)``.
    Shared by the tests that read what such a run leaves (test_cli, test_monitoring)."""
    out = tmp_path_factory.mktemp("small_run") / "run"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--num_workers", "3", "--total_env_steps",
         str(SMALL_RUN_STEPS), "--eval_every", "500", "--eval_episodes", "2", "--fcnet_hiddens", "32", "32",
         "--learning_starts", "300", "--start_steps", "300", "--log_every", "1", "--seed", "3",
         "--output_dir", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result


def act_without_tensorflow(weights_path, steps: str) -> str:
    """Run ``steps`` (Python source, indented for a function body) in a fresh process after
    ``policy = load_policy(weights_path)``, ``env = policy.make_env()`` and ``obs, _ =
    env.reset(seed=0)``; assert TensorFlow was never imported there; return its stdout."""
    import textwrap

    code = "\n".join([
        "import sys",
        "import numpy as np",
        "from dsac.formats.inference import load_policy",
        f"policy = load_policy({str(weights_path)!r})",
        "env = policy.make_env()",
        "obs, _ = env.reset(seed=0)",
        textwrap.dedent(steps),
        "assert 'tensorflow' not in sys.modules, 'acting imported TensorFlow'",
    ])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                         env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


# Starts the measured process and reports its exit code and peak RSS (KB) as wait4 gives them.
# It runs in a small process of its own: a process started straight from pytest would report
# pytest's own peak RSS (Linux keeps the larger of the parent's high-water mark at exec and the
# child's), which grows with the tests that ran before.
TRAMPOLINE = """
import os, sys
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ,
                     file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def run_measured(args, cwd, timeout=120, address_space: int | None = None) -> tuple[int, str, float]:
    """Run a process; (exit code, stderr, its own peak RSS in MB as wait4 reports it). With
    ``address_space`` (bytes), it runs under that RLIMIT_AS, like ``ulimit -v``."""
    env = {**os.environ, "PYTHONPATH": REPO_ROOT, "RAY_TMPDIR": os.path.join(str(cwd), "ray")}
    with open(os.path.join(str(cwd), "stderr.txt"), "w+b") as err:
        limit = None if address_space is None else (
            lambda: resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space)))
        proc = subprocess.Popen([sys.executable, "-c", TRAMPOLINE, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=err, start_new_session=True, preexec_fn=limit)
        timer = threading.Timer(timeout, lambda: os.killpg(proc.pid, 9))
        timer.start()
        try:
            out, _ = proc.communicate()
        finally:
            timer.cancel()
        code, rss_kb = (int(x) for x in out.split()) if out.strip() else (-9, 0)
        err.seek(0)
        return code, err.read().decode(errors="replace"), rss_kb / 1024


# Runs programs one after another in one Python process, each as ``python <script> args`` or
# ``python -m <module> args`` would (argv, sys.path[0], working dir and environment as given),
# with its stdout and stderr in files of its own; one JSON line {"code", "rss_kb": the
# process's peak RSS so far} per program. What a program imports from a user's directory
# (``purge_root``), adds to sys.path or registers with gymnasium goes with it.
BATCH_RUNNER = """
import importlib, json, os, resource, runpy, sys
import gymnasium
jobs_path, results_path, purge_root = sys.argv[1:]
base_path, base_modules, base_environ = list(sys.path[1:]), set(sys.modules), dict(os.environ)
base_envs = set(gymnasium.envs.registry)
for job in json.load(open(jobs_path)):
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update({k: v for k, v in {**base_environ, **job["env"]}.items() if v is not None})
    module = job["program"][3:] if job["program"].startswith("-m ") else None
    sys.path[:] = [job["cwd"] if module else os.path.dirname(job["program"]), *base_path]
    importlib.invalidate_caches()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = os.dup(1), os.dup(2)
    with open(job["stdout"], "wb") as out, open(job["stderr"], "wb") as err:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
    try:
        sys.argv = [job["program"], *job["args"]]
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(job["program"], run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    purged = set()
    for name in set(sys.modules) - base_modules:
        if (getattr(sys.modules[name], "__file__", None) or "").startswith(purge_root):
            del sys.modules[name]
            purged.add(name)
    for env_id in set(gymnasium.envs.registry) - base_envs:  # what those modules registered
        entry = gymnasium.envs.registry[env_id].entry_point
        module = entry.split(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
        if module in purged:
            del gymnasium.envs.registry[env_id]
    with open(results_path, "a") as results:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        results.write(json.dumps({"code": code, "rss_kb": peak}) + "\\n")
"""


def run_in_one_process(programs, workdir, purge_root=None, timeout=600):
    """Run ``programs`` — dicts of ``program`` (a script's path, or ``-m module``), ``args``,
    and optionally ``cwd`` (default: the repository) and ``env`` (added to this environment;
    None removes a variable) — one after another in one fresh Python process (started
    through :func:`run_measured`), each as its own ``python ...`` command would run (it saves
    a Python start and dsac's imports per program). Returns one
    :class:`subprocess.CompletedProcess` per program, in order, with ``peak_rss_mb``: the
    process's peak RSS when that program ended. A program that ends the process fails here,
    naming it."""
    import json

    jobs = []
    for i, p in enumerate(programs):
        jobs.append({"program": p["program"], "args": list(p["args"]), "cwd": str(p.get("cwd", REPO_ROOT)),
                     "env": p.get("env", {}), "stdout": str(workdir / f"{i}.out"), "stderr": str(workdir / f"{i}.err")})
    (workdir / "jobs.json").write_text(json.dumps(jobs))
    results_path = workdir / "results.jsonl"
    code, stderr, _ = run_measured([sys.executable, "-c", BATCH_RUNNER, str(workdir / "jobs.json"), str(results_path),
                                    str(purge_root or workdir)], workdir, timeout=timeout)
    rows = [json.loads(line) for line in results_path.read_text().splitlines()] if results_path.exists() else []
    if len(rows) < len(jobs) or code != 0:
        job = jobs[min(len(rows), len(jobs) - 1)]  # the one running when the process ended
        err = open(job["stderr"], errors="replace").read()[-1500:] if os.path.exists(job["stderr"]) else ""
        raise AssertionError(f"{job['program']} {job['args']} ended the process (exit {code}): {err}{stderr[-1500:]}")
    results = []
    for job, row in zip(jobs, rows, strict=True):
        result = subprocess.CompletedProcess([job["program"], *job["args"]], row["code"],
                                             open(job["stdout"], errors="replace").read(),
                                             open(job["stderr"], errors="replace").read())
        result.peak_rss_mb = row["rss_kb"] / 1024
        results.append(result)
    return results


def launch_here(args, capfd, caplog):
    """``python launch.py <args>`` for a run whose process is not what the test looks at (a
    serial run's files, its log): ``dsac.cli.main`` in this process, where TensorFlow is
    already imported. Returns a :class:`subprocess.CompletedProcess` whose stdout holds the
    log lines (at INFO, as launch.py prints them) and what was printed."""
    import logging

    from dsac.cli import main

    capfd.readouterr()
    with caplog.at_level(logging.INFO):
        code = main([str(arg) for arg in args])
    out, err = capfd.readouterr()
    log = "".join(f"{record.getMessage()}\n" for record in caplog.records)
    caplog.clear()
    return subprocess.CompletedProcess(args, code, out + log, err)
