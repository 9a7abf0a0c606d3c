"""Where a run's CPU goes: each role counts its CPU by part (the learner's update, sampling and
pushes; the workers' and the evaluator's env steps and acting), and summary.json has them."""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT

from dsac.runtime import cpu


def test_a_meter_counts_each_part_and_the_process_total():
    meter = cpu.CpuMeter(time.thread_time)
    started = meter.now()
    sum(i * i for i in range(200_000))
    meter.add("work", started)
    seconds = meter.seconds()
    assert 0 < seconds["work"] <= seconds["total"] + 1e-3


def test_the_section_adds_each_roles_rest_sums_the_workers_and_counts_what_trains():
    section = cpu.section({"update": 6.0, "sample": 1.0, "push": 0.5, "total": 10.0},
                          [{"env_step": 2.0, "act": 1.0, "total": 4.0}, {"env_step": 3.0, "act": 1.0, "total": 5.0}],
                          {"env_step": 1.0, "act": 0.5, "total": 2.0}, driver=3.0)
    assert section["learner"] == {"update": 6.0, "sample": 1.0, "push": 0.5, "rest": 2.5, "total": 10.0}
    assert section["rollout_workers"] == {"env_step": 5.0, "act": 2.0, "rest": 2.0, "total": 9.0, "processes": 2}
    assert section["evaluator"]["rest"] == 0.5 and section["driver"] == {"total": 3.0}
    # The evaluator's env steps measure the policy; they do not train it.
    assert section["useful_s"] == 11.0
    # Parts timed on another clock than the total never make the rest negative.
    assert cpu.with_rest({"update": 2.0, "total": 1.9})["rest"] == 0.0


def test_a_serial_run_writes_its_cpu_by_part(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--local", "--env", "Pendulum-v1",
         "--fcnet_hiddens", "32", "32", "--total_env_steps", "500", "--learning_starts", "200", "--start_steps",
         "200", "--eval_every", "250", "--eval_episodes", "1", "--seed", "0", "--no-tensorboard",
         "--output_dir", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": REPO_ROOT},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    section = json.loads((out / "summary.json").read_text())["cpu"]
    learner, workers, evaluator = section["learner"], section["rollout_workers"], section["evaluator"]
    assert learner["update"] > 0 and learner["sample"] > 0 and learner["push"] > 0
    assert workers["env_step"] > 0 and workers["act"] > 0 and workers["processes"] == 1
    assert evaluator["env_step"] > 0 and evaluator["act"] > 0
    parts = sum(learner.values()) + workers["env_step"] + workers["act"] + evaluator["env_step"] + evaluator["act"]
    assert parts <= section["process"]["total"] + 0.05  # one process: its parts fit in its CPU
    assert section["useful_s"] == pytest.approx(learner["update"] + workers["env_step"], abs=2e-3)


def test_a_distributed_run_writes_every_roles_cpu_by_part(small_launch_run):
    out, _ = small_launch_run
    section = json.loads((out / "summary.json").read_text())["cpu"]
    learner, workers, evaluator = section["learner"], section["rollout_workers"], section["evaluator"]
    assert learner["update"] > 0 and learner["sample"] > 0 and learner["push"] > 0
    assert learner["total"] >= learner["update"] + learner["sample"] + learner["push"] - 0.05
    assert workers["processes"] == 3 and workers["env_step"] > 0 and workers["act"] > 0
    assert workers["total"] >= workers["env_step"] + workers["act"]
    assert evaluator["env_step"] > 0 and evaluator["total"] >= evaluator["env_step"]
    assert section["driver"]["total"] > 0
    assert section["useful_s"] == pytest.approx(learner["update"] + workers["env_step"], abs=2e-3)


def test_the_benchmark_names_each_process_of_a_run_by_its_role():
    from benchmarks.cpu_share import role_of

    site = "/venv/lib/python3.11/site-packages/ray"
    assert role_of(["/venv/bin/python", "launch.py", "--env", "Hopper-v5"], is_driver=True) == "driver"
    assert role_of(["ray::learner"]) == role_of(["ray::learner_1"]) == "learner"
    assert role_of(["ray::rollout_worker"]) == "rollout workers"
    assert role_of(["ray::evaluator"]) == "evaluator"
    assert role_of(["ray::ReplayBuffer.sample"]) == role_of(["ray::ReplayBuffer"]) == "ReplayBuffer"
    assert role_of(["ray::ParameterServer.push()"]) == "ParameterServer"
    assert role_of(["ray::dsac_parameter_server_8d158bf5a682:ParameterServer.__init__    "]) == "ParameterServer"
    assert role_of(["ray::RunMonitor"]) == "RunMonitor"
    assert role_of(["ray::IDLE"]) == role_of(["python", f"{site}/_private/workers/default_worker.py"]) == \
        "idle Ray workers"
    for daemon in ([f"{site}/core/src/ray/gcs/gcs_server", "--log_dir=x"], [f"{site}/core/src/ray/raylet/raylet"],
                   ["python", f"{site}/dashboard/dashboard.py"], ["python", "-u", f"{site}/_private/log_monitor.py"],
                   ["ray::DashboardAgent"], ["ray::RuntimeEnvAgent"]):
        assert role_of(daemon) == "Ray", daemon
    assert role_of(["ray::SomethingElse"]) == role_of(["bash"]) == role_of([]) == "other"


def test_the_benchmark_splits_roles_by_the_summarys_parts_and_computes_the_useful_share():
    from benchmarks.cpu_share import shares, table

    roles = {"learner": 50.0, "rollout workers": 30.0, "evaluator": 10.0, "Ray": 6.0, "driver": 4.0}
    inside = {"learner": {"update": 35.0, "sample": 3.0, "push": 5.0},
              "rollout_workers": {"env_step": 15.0, "act": 10.0}, "evaluator": {"env_step": 6.0, "act": 2.0}}
    result = shares(roles, inside, cores=2, wall_s=100.0)
    assert result["total_cpu_s"] == 100.0 and result["capacity_cpu_s"] == 200.0
    assert result["useful_share"] == 0.5  # (35 + 15) / 100: the evaluator's env steps do not train
    rows = {(r["role"], r["part"]): r for r in result["rows"]}
    assert rows[("learner", "rest")]["cpu_s"] == 7.0 and rows[("rollout workers", "rest")]["cpu_s"] == 5.0
    assert rows[("learner", "all")]["of_run"] == 0.5 and rows[("learner", "all")]["of_machine"] == 0.25
    assert [r["role"] for r in result["rows"] if r["part"] == "all"] == [
        "learner", "rollout workers", "evaluator", "driver", "Ray"]
    assert "= 50.0%" in table(result)
    assert shares(roles, None, 2, 100.0)["useful_share"] is None  # a run that wrote no cpu section


def test_the_cpu_share_tables_show_every_record_and_each_configurations_median(tmp_path):
    from benchmarks.cpu_share import records, roles_markdown, runs_markdown, shares

    def record(name, date, flags, learner, commit="c1", pace=None):
        inside = {"learner": {"update": learner - 10.0}, "rollout_workers": {"env_step": 5.0}}
        result = shares({"learner": learner, "rollout workers": 20.0, "Ray": 10.0}, inside, cores=2, wall_s=100.0)
        launch = f"launch.py --env HalfCheetah-v5 --num_workers 2 --max_seconds 180 --seed 0 {flags}".strip()
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"date": date, "commit": commit, "launch": launch, "wall_s": 100.0, "roles": {"learner": learner},
             "env_steps": 1000, "updates": 900, "pace_updates_per_s": pace, **result}))

    record("b-2", "2026-01-01T00:03", "--learner_xla", 70.0)
    record("a-1", "2026-01-01T00:00", "", 50.0)
    record("b-1", "2026-01-01T00:01", "--learner_xla", 60.0, pace=512.4)
    record("a-2", "2026-01-01T00:02", "", 40.0, commit="c2")  # another commit: another configuration
    found = records(str(tmp_path))
    assert [r["name"] for r in found] == ["a-1", "b-1", "a-2", "b-2"]  # the order run, not the file names'
    runs = runs_markdown(found)
    assert "| 1 | HalfCheetah-v5, 2 workers, 180 s at c1 | 1 |" in runs
    assert "| 2 | HalfCheetah-v5, 2 workers, 180 s, `--learner_xla` at c1 | 2 |" in runs
    rows = [line.split(" | ") for line in runs.splitlines() if line.startswith(("| a-", "| b-"))]
    assert [row[2] for row in rows] == ["1", "2", "3", "2"]  # every record a row, with its configuration's number
    assert [row[3] for row in rows] == ["—", "512", "—", "—"]  # the pace a record measured; older ones have none
    roles = roles_markdown(found)
    assert "| learner | 50.0 | 65.0 | 40.0 |" in roles  # the median of configuration 2's 60 and 70
    # Configuration 2's share is the median of its runs' (55/90 and 65/100), not one of medians.
    assert "| **useful share** | 56.2% | 63.1% | 50.0% |" in roles, roles


def test_the_sampler_keeps_the_cpu_of_processes_that_exited(tmp_path):
    from benchmarks.cpu_share import RunSampler

    burn = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
    code = f"import subprocess, sys, time\nsubprocess.run([sys.executable, '-c', {burn!r}])\ntime.sleep(1.5)\n"
    proc = subprocess.Popen([sys.executable, "-c", code])
    sampler = RunSampler(proc.pid)
    while proc.poll() is None:
        sampler.sample()
        time.sleep(0.05)
    assert sampler.roles.get("other", 0.0) >= 0.4, sampler.roles  # the child's, read before it exited
    assert sampler.processes["driver"] and len(sampler.processes["other"]) == 1


def test_a_process_that_is_dsacs_alone_imports_keras_without_its_unused_extras():
    """A learner's, a trial's or a command's process imports TensorFlow without the modules
    Keras imports only for wrappers dsac never calls (a quarter of the import's CPU, ~140 MB);
    they still import afterwards."""
    code = "\n".join([
        "import sys",
        "from dsac.runtime.tf_setup import KERAS_EXTRAS, import_tensorflow, own_this_process",
        "own_this_process()",
        "import_tensorflow()",
        "print(sorted(name for name in KERAS_EXTRAS if name in sys.modules))",
        "import importlib.util",
        "print(sorted(name for name in KERAS_EXTRAS if importlib.util.find_spec(name) is not None",
        "             and importlib.import_module(name) is not None))",
    ])
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                         env={**os.environ, "PYTHONPATH": REPO_ROOT})
    assert run.returncode == 0, run.stderr[-2000:]
    before, after = run.stdout.splitlines()
    assert before == "[]", run.stdout
    assert after != "[]", run.stdout  # at least one of them is installed here (mlflow brings two): it imports
