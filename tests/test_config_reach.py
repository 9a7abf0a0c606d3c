"""Configuration by algorithm, seen from outside config.py: what a run records and plots, and
the source count of flat Config reads (python -m benchmarks config-reach --static)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from conftest import REPO_ROOT

from dsac.config import ALGORITHMS_OF, Config
from dsac.output.curves import Run, experiment_key

GOLDEN = os.path.join(REPO_ROOT, "tests", "data", "golden")


def test_runs_before_and_after_per_algorithm_settings_plot_as_one_experiment():
    """A config.json written before each algorithm owned its settings holds every algorithm's;
    one written now holds its own: dsac-plot groups the two as the same experiment."""
    with open(os.path.join(GOLDEN, "sac_pendulum", "config.json")) as f:
        before = json.load(f)
    now = {key: value for key, value in before.items() if "sac" in ALGORITHMS_OF.get(key, ("sac",))}
    assert len(now) < len(before)

    def run(config):
        return Run("sac-s0", config, np.zeros(1), np.zeros(1), np.zeros(1))

    assert experiment_key(run(before)) == experiment_key(run(now))
    assert experiment_key(run(before)) != experiment_key(run({**now, "tau": 0.01}))


def test_the_record_of_a_run_holds_its_own_algorithms_settings_only():
    sac, dqn = Config(algo="sac").validate().record(), Config(algo="dqn").validate().record()
    assert {"tau", "init_alpha"} <= sac.keys() and not {"dueling", "target_update_every", "epsilon"} & sac.keys()
    assert {"dueling", "target_update_every"} <= dqn.keys() and not {"tau", "init_alpha"} & dqn.keys()
    assert Config.from_dict(dict(sac)).validate().record() == sac


def test_the_source_count_of_flat_reads_names_the_boundary_and_counts_per_file():
    result = subprocess.run([sys.executable, "-m", "benchmarks", "config-reach", "--static", "--json"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    count = json.loads(result.stdout)
    assert "dsac/config.py" in count["boundary"] and "dsac/cli.py" in count["boundary"]
    assert count["flat_reads"] == sum(count["flat_reads_per_file"].values())
    assert not set(count["flat_reads_per_file"]) & set(count["boundary"])
    # The modules that resolve and record a config read it by section.
    for path in ("dsac/runtime/preparation.py", "dsac/output/recorder.py", "dsac/output/trackers.py",
                 "dsac/tune/trainable.py"):
        assert path not in count["flat_reads_per_file"], path
    assert "dsac/runtime/preparation.py" in count["modules"]
