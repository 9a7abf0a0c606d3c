"""dsac as Ray Tune trials: a real Tune experiment of DQN trials on a real local Ray,
through the ``python -m dsac.tune`` command; and its one-line errors."""

import json
import os
import subprocess
import sys

import pytest
import yaml
from conftest import REPO_ROOT, run_in_one_process


def tune_command(args, tmp_path, timeout=600, **extra_env):
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **extra_env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "dsac.tune", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(tmp_path))


@pytest.mark.slow
def test_a_grid_of_distributed_trials_waits_for_room_reports_and_names_its_best_config_and_weights(tmp_path):
    """A grid of distributed DQN trials on CartPole (1 rollout worker each) on a local Ray of 4
    logical CPUs. Each asks Tune for its driver, learner, worker and evaluator at once (3.1
    CPUs), so the second waits for the first instead of oversubscribing, and each run places
    its roles inside its trial's placement group. Every trial reports results with the metric
    in each; the best config is a file launch.py --config takes; the best weights load with
    dsac.load_policy. A grid point dsac refuses (a negative learning rate) fails its trials
    alone, each with dsac's one-line message. A trial larger than the cluster is one line,
    exit 2."""
    space = tmp_path / "space.yaml"
    flags = {"env": "CartPole-v1", "algo": "dqn", "num_workers": 1, "lr": {"grid": [1e-3, -1.0]},
             "seed": {"grid": [0, 1]}, "steps_per_iteration": 500, "eval_every": 500, "eval_episodes": 2,
             "learning_starts": 200, "fcnet_hiddens": [32, 32], "updates_per_step": 0.25}  # Tune's wiring, not learning
    space.write_text(yaml.safe_dump(flags))
    mlflow_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = tune_command(["--space", str(space), "--total_env_steps", "500", "--num_cpus", "4",
                         "--storage_path", str(tmp_path / "tr"), "--mlflow", mlflow_uri, "--wandb", "dsac-test"],
                        tmp_path, WANDB_MODE="offline")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "each trial asks for 3.1 CPU(s) (a distributed trial, 4 bundles)" in out, out[-3000:]
    assert "so 1 at once" in out, out[-3000:]
    last = proc.stdout.strip().splitlines()[-2:]
    assert last[0].startswith("best config: /") and last[1].startswith("best weights: /"), last
    config_path, weights_path = (line.split(": ", 1)[1] for line in last)
    failed = [line for line in proc.stdout.splitlines() if " failed: " in line]
    refused = "failed: --lr must be a positive number (a schedule: start > 0, end >= 0), got -1.0"
    assert len(failed) == 2 and all(line.endswith(refused) for line in failed)
    trials = [d for d in (tmp_path / "tr" / "dsac_tune").glob("DsacTrainable*") if (d / "result.json").exists()]
    assert len(trials) == 2
    seen, spans = set(), []
    for trial in trials:
        rows = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
        assert rows and all("eval_return_mean" in r and r["timesteps_total"] == r["env_steps"] for r in rows)
        assert rows[-1]["env_steps"] >= 500 and rows[-1]["done"] is True
        assert (trial / "dsac" / "weights.pkl").exists()  # the trial's dsac output inside its directory
        seen.add((rows[-1]["config"]["lr"], rows[-1]["config"]["seed"]))
        # Its run placed everything in the trial's group (outside it, the learner's CPU would
        # not fit in the 0.9 left beside the group: the trial would never end).
        summary = json.loads((trial / "dsac" / "summary.json").read_text())
        assert summary["placement"].startswith("Tune trial's placement group of 3.1 CPUs"), summary["placement"]
        spans.append((rows[0]["timestamp"] - rows[0]["time_total_s"], rows[-1]["timestamp"]))
    assert seen == {(1e-3, 0), (1e-3, 1)}
    (_, first_end), (second_start, _) = sorted(spans)
    assert second_start >= first_end - 1, spans  # one after the other (timestamps in s)
    # Every trial is a run of the trackers (Tune's logger callbacks), with its results.
    import mlflow

    mlflow.set_tracking_uri(mlflow_uri)
    runs = mlflow.search_runs(experiment_names=["dsac"])
    finished = runs[runs.status == "FINISHED"]
    assert len(finished) == 2 and (finished["metrics.env_steps"] >= 500).all(), runs
    logged = zip(finished["params.lr"].astype(float), finished["params.seed"].astype(int), strict=True)
    assert sorted(logged) == sorted(seen)
    assert len(list((tmp_path / "tr" / "dsac_tune").glob("DsacTrainable*/wandb/offline-run-*/run-*.wandb"))) >= 2
    best = yaml.safe_load(open(config_path))
    assert best["lr"] == 1e-3 and best["seed"] in (0, 1) and best["env"] == "CartPole-v1"

    from dsac import load_policy
    from dsac.config import Config

    Config.load(config_path, {}, source="--config").validate()  # what launch.py --config reads
    policy = load_policy(weights_path)
    action = policy(policy.make_env().reset(seed=0)[0])
    assert int(action) in (0, 1)

    space.write_text(yaml.safe_dump({**flags, "lr": 1e-3, "num_workers": 3}))  # 5.1 CPUs: never fits 4
    proc = tune_command(["--space", str(space), "--num_cpus", "4", "--storage_path", str(tmp_path / "tr2")], tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (proc.stdout[-2000:], proc.stderr)
    assert "one trial asks for 5.1 CPUs, more than the cluster has (4 CPUs)" in proc.stderr  # before Ray starts


BAD_SPACES = [
    ({"env": "CartPole-v1", "lrr": {"grid": [1e-3]}}, [], "lrr"),
    ({"env": "CartPole-v1", "lr": {"between": [1, 2]}}, [], "unknown kind 'between'"),
    ({"env": "CartPole-v1", "lr": {"loguniform": [0, 1]}}, [], "low > 0"),
    ({"env": "CartPole-v1", "lr": "linear(1e-3, 0, 2)"}, [], "its fraction must be in (0, 1]"),
    ({"env": "NoSuchEnv-v9", "lr": {"grid": [1e-3]}}, [], "NoSuchEnv-v9"),
    ({"env": "CartPole-v1", "max_seconds": 100}, ["--scheduler", "asha", "--time_attr", "time_total_s",
                                                 "--grace_period", "100"], "is not below the trials' budget 100"),
    ({"env": "CartPole-v1"}, ["--address", "127.0.0.1:9"], "nothing answers at Ray address 127.0.0.1:9"),
    # dsac-tune's own numbers: each checked before the space is read or Ray starts
    ({"env": "CartPole-v1"}, ["--scheduler", "asha", "--grace_period", "nan"],
     "--grace_period must be a positive number, got nan"),
    ({"env": "CartPole-v1"}, ["--scheduler", "asha", "--reduction_factor", "nan"],
     "--reduction_factor must be a positive number, got nan"),
    ({"env": "CartPole-v1"}, ["--scheduler", "asha", "--reduction_factor", "1"], "--reduction_factor must be a number "
     "above 1"),
    ({"env": "CartPole-v1"}, ["--scheduler", "pbt", "--perturbation_interval", "nan"],
     "--perturbation_interval must be a positive number, got nan"),
    ({"env": "CartPole-v1"}, ["--num_samples", "-1"], "--num_samples must be a positive integer, got -1"),
    ({"env": "CartPole-v1"}, ["--scheduler", "asha", "--grace_period", "inf"],
     "--grace_period must be a positive number, got inf"),
    ({"env": "CartPole-v1"}, ["--scheduler", "asha", "--grace_period", "1e13"],
     "is not below the trials' budget 1e+12 (dsac-tune's last rung in training_iteration)"),
    ({"env": "CartPole-v1"}, ["--num_cpus", "nan"], "--num_cpus must be a positive number, got nan"),
    ({"env": "CartPole-v1"}, ["--storage_path", "/proc/no;token=Sup3rS3cret"],
     "--storage_path /proc/no;token=*** is not writable"),
]


@pytest.fixture(scope="module")
def bad_space_results(tmp_path_factory):
    """Each BAD_SPACES case as ``python -m dsac.tune --space <file> ...`` runs it, all in one
    process (conftest.run_in_one_process: one import of Ray Tune for all of them)."""
    workdir = tmp_path_factory.mktemp("bad_spaces")
    programs = []
    for i, (space, options, _) in enumerate(BAD_SPACES):
        path = workdir / f"space{i}.yaml"
        path.write_text(yaml.safe_dump(space))
        programs.append({"program": "-m dsac.tune", "cwd": workdir, "env": {"RAY_ADDRESS": None},
                         "args": ["--space", str(path), "--storage_path", str(workdir / f"tr{i}"), *options]})
    return run_in_one_process(programs, workdir)


@pytest.mark.parametrize("case", range(len(BAD_SPACES)), ids=[message for _, _, message in BAD_SPACES])
def test_a_bad_space_is_one_line_and_exit_2_before_ray_starts(case, bad_space_results):
    space, _, message = BAD_SPACES[case]
    proc = bad_space_results[case]
    assert proc.returncode == 2 and message in proc.stderr, (proc.stdout[-2000:], proc.stderr[-2000:])
    if "max_seconds" in space:  # and no step budget: the algorithm's default also stops a trial, and it says so
        assert "whichever comes first: set total_env_steps to lift it" in proc.stdout, proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "Started a local Ray" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_pbt_continues_the_donors_training_state(tmp_path):
    """Population Based Training over two local trials (side by side on a local Ray of 2
    logical CPUs): when a trial exploits the other, it is restored from the donor's checkpoint
    (Trainer.save's full state) in a new dsac output directory beside its first, and its update
    and env-step counts carry on from the donor's at that checkpoint. Local trials: Tune's
    side is the same for a distributed one, whose saved state tests/test_api.py restores."""
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({
        "env": "CartPole-v1", "algo": "dqn", "local": True, "lr": {"loguniform": [1e-4, 3e-3]},
        "steps_per_iteration": 500, "eval_every": 500, "eval_episodes": 2, "learning_starts": 250,
        "fcnet_hiddens": [32, 32], "updates_per_step": 0.25,  # these test Tune's wiring, not learning
    }))
    # 3 iterations of 500 env steps: a synchronous perturbation after the 2nd (the bottom quarter
    # of 2 trials is one trial, which exploits the other), then an iteration from the restored state.
    proc = tune_command(["--space", str(space), "--scheduler", "pbt", "--num_samples", "2", "--total_env_steps", "1500",
                         "--num_cpus", "2", "--storage_path", str(tmp_path / "tr")], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert "so 2 at once" in out, out[-3000:]
    assert "[Exploit] Cloning trial" in out, out[-3000:]
    # Judged from what dsac writes in each process's output directory (its progress.jsonl
    # and, for a restored process, restored_from.json), not from Tune's result.json, which
    # may lose the rows of a process an exploit ended.
    trial_dirs = sorted((tmp_path / "tr" / "dsac_tune").glob("DsacTrainable*"))
    assert len(trial_dirs) == 2, trial_dirs
    exploited, processes = 0, []
    for trial_dir in trial_dirs:
        for output_dir in sorted(trial_dir.glob("dsac*")):
            progress = output_dir / "progress.jsonl"
            rows = [json.loads(line) for line in progress.read_text().splitlines()] if progress.exists() else []
            record = output_dir / "restored_from.json"  # dsac.tune.trainable.RESTORED_FROM_FILE
            restored = json.loads(record.read_text()) if record.exists() else None
            processes.append((trial_dir.name[-40:], output_dir.name, restored,
                              [(r["env_steps"], r["updates"]) for r in rows]))
            if restored is None:
                assert output_dir.name == "dsac", output_dir  # the trial's first process
                continue
            # A later process of this trial, beside its first, continued from a checkpoint
            # taken at an earlier iteration: its own (a pause) or, when exploiting, the other
            # trial's; its counts carry on from the checkpoint's.
            assert output_dir.name.startswith("dsac-"), output_dir
            source = next((d for d in trial_dirs if d.name in restored["checkpoint"]), None)
            assert source is not None, (restored, trial_dirs)
            assert restored["updates"] > 0 and restored["env_steps"] > 0, restored
            assert rows, (output_dir, restored)  # every process trains to an evaluation at least
            assert rows[0]["updates"] > restored["updates"] and rows[0]["env_steps"] > restored["env_steps"], (
                restored, rows[0])
            exploited += source != trial_dir
    assert exploited >= 1, ([line for line in out.splitlines() if "[Exploit]" in line], processes)


SIGTERM_IN_A_CALLBACK = """
import os, signal, sys, time, weakref
signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))  # what Ray's worker installs
if sys.argv[1] == "dsac":
    from dsac.runtime.run_loop import exit_at_once_on_sigterm
    exit_at_once_on_sigterm()  # what DsacTrainable.setup installs
class Handle: pass
handle = Handle()
def collected(_ref):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
ref = weakref.ref(handle, collected)
del handle
print("carried on", flush=True)
"""


@pytest.mark.parametrize("handler", ["ray", "dsac"])
def test_a_trials_process_ends_at_sigterm_without_a_traceback_even_inside_a_callback(handler):
    """Tune ends a trial's actor with SIGTERM; Ray's handler raises SystemExit, which inside a
    weakref callback (an actor handle collected) Python prints as a traceback on the tuning
    console and then ignores. A trial's process exits at once instead."""
    proc = subprocess.run([sys.executable, "-c", SIGTERM_IN_A_CALLBACK, handler], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    if handler == "ray":  # the fault, as Ray's handler alone leaves it
        assert proc.returncode == 0 and "carried on" in proc.stdout and "SystemExit" in proc.stderr, proc
    else:
        assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", ""), proc
