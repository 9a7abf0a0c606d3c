"""A real 2-node Ray cluster on this machine, and dsac submitted to it with `ray job submit`
(through scripts/submit.py): the rollout workers run on both nodes, the files land on the
driver's side, and `ray job stop` leaves loadable final weights.

The cluster is ``ray.cluster_utils.Cluster``: it starts the same head and worker node
processes as ``ray start`` (GCS, raylets, dashboard with the job server), and its
``shutdown()`` stops exactly those — ``ray stop`` would also kill the test session's own
local Ray and any other Ray on the machine.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT

from dsac.artifacts import load_weights

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    """Head + one worker node, 2 logical CPUs each; torn down whatever happens."""
    from ray.cluster_utils import Cluster

    port = free_port()
    # Every node's dashboard agent gets a port of its own: the default one (52365) may be taken
    # by another Ray on this machine (the test session's), and then jobs cannot be submitted.
    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": True, "dashboard_port": port, "dashboard_host": "127.0.0.1",
        "dashboard_agent_listen_port": free_port(),
    })
    try:
        nodes.add_node(num_cpus=2, dashboard_agent_listen_port=free_port())
        nodes.wait_for_nodes()
        node_ids = {nodes.head_node.node_id, *(n.node_id for n in nodes.worker_nodes)}
        assert len(node_ids) == 2
        yield f"http://127.0.0.1:{port}", node_ids
    finally:
        nodes.shutdown()


def submit(address: str, job_id: str, *launch_args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    deadline = time.monotonic() + 120
    while True:
        result = subprocess.run(
            [sys.executable, os.path.join(REPO_ROOT, "scripts", "submit.py"), "--address", address, "--no-wait",
             "--submission-id", job_id, "--", *launch_args],
            capture_output=True, text=True, timeout=120, env=env,
        )
        # A fresh cluster's job agent may not have registered yet ("please try again later").
        if result.returncode == 0 or "try again later" not in result.stderr or time.monotonic() > deadline:
            break
        time.sleep(2.0)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def wait_for_status(client, job_id: str, timeout: float, statuses=TERMINAL) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = str(client.get_job_status(job_id).value)
        if status in statuses:
            return status
        time.sleep(1.0)
    raise AssertionError(f"job {job_id} still {status} after {timeout} s:\n{client.get_job_logs(job_id)[-3000:]}")


SMALL = ["--num_workers", "2", "--fcnet_hiddens", "32", "32", "--eval_every", "300", "--eval_episodes", "2",
         "--learning_starts", "100", "--start_steps", "100", "--log_every", "5"]


def test_submitted_job_uses_both_nodes_and_writes_on_the_driver_side(cluster, tmp_path):
    from ray.job_submission import JobSubmissionClient

    address, node_ids = cluster
    out = tmp_path / "run"
    submit(address, "dsac-test-small", *SMALL, "--total_env_steps", "600", "--output_dir", str(out))
    client = JobSubmissionClient(address)
    status = wait_for_status(client, "dsac-test-small", timeout=300)
    logs = client.get_job_logs("dsac-test-small")
    assert status == "SUCCEEDED", logs[-3000:]
    payload = load_weights(str(out / "weights.pkl"))
    assert payload["env_steps"] >= 600
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["rollout_workers_per_node"]) == node_ids  # one worker on each node
    assert "rollout workers per node" in logs
    progress = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert progress and set(progress[-1]["rollout_workers_per_node"]) == node_ids


def test_ray_job_stop_saves_loadable_final_weights(cluster, tmp_path):
    from ray.job_submission import JobSubmissionClient

    address, _ = cluster
    out = tmp_path / "run"
    submit(address, "dsac-test-stop", *SMALL, "--total_env_steps", "1000000", "--output_dir", str(out))
    client = JobSubmissionClient(address)
    deadline = time.monotonic() + 240
    while not (out / "weights.pkl").exists():  # the first evaluation has saved weights
        assert time.monotonic() < deadline, client.get_job_logs("dsac-test-stop")[-3000:]
        assert str(client.get_job_status("dsac-test-stop").value) not in TERMINAL
        time.sleep(1.0)
    stop = subprocess.run(["ray", "job", "stop", "--address", address, "dsac-test-stop"],
                          capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert wait_for_status(client, "dsac-test-stop", timeout=90) == "STOPPED"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "sigterm", summary
    payload = load_weights(str(out / "weights.pkl"))
    assert payload["version"] == summary["weights_version"] > 0  # the final weights, not only an early save


def test_losing_a_node_of_rollout_workers_keeps_the_run_and_its_replay(tmp_path):
    """A node that holds only rollout workers dies mid-run (its processes killed): the run goes
    on with the other node, says in one line what was lost, and the replay keeps everything."""
    from ray.cluster_utils import Cluster

    # The head gets the learner, the evaluator, the actors (on the head node) and some
    # workers; the second node only workers.
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    try:
        worker_node = nodes.add_node(num_cpus=1)
        nodes.wait_for_nodes()
        out = tmp_path / "run"
        total = 4_000
        env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "TF_CPP_MIN_LOG_LEVEL": "3"}
        run = subprocess.Popen(
            [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--address", nodes.address, "--num_workers", "4",
             "--env_step_ms", "2", "--fcnet_hiddens", "32", "32", "--learning_starts", "100", "--start_steps", "100",
             "--eval_every", "1000", "--eval_episodes", "1", "--total_env_steps", str(total), "--log_every", "1",
             "--no-progress_bar", "--output_dir", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO_ROOT,
        )
        deadline = time.monotonic() + 240
        progress = out / "progress.jsonl"
        while not (progress.exists() and progress.read_text().strip()):  # the first evaluation: mid-run
            assert run.poll() is None and time.monotonic() < deadline, run.stdout.read()[-3000:]
            time.sleep(0.5)
        nodes.remove_node(worker_node)  # kills the node's raylet and every process on it
        log, _ = run.communicate(timeout=300)
        (tmp_path / "log.txt").write_text(log)
    finally:
        nodes.shutdown()
    assert run.returncode == 0, log[-3000:]
    assert f"node {worker_node.node_id[:8]} lost with rollout_worker_" in log, log[-3000:]
    assert "Traceback" not in log
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failure"] is None and summary["env_steps"] >= total
    assert set(summary["restarts"]) <= {f"rollout_worker_{i}" for i in range(4)}, summary["restarts"]  # actors kept
    placed = [line for line in log.splitlines() if " placed " in line or " died " in line or " lost " in line]
    assert summary["replay_size"] == summary["env_steps"], placed  # nothing collected was lost
    assert any(role.startswith("rollout_worker_") for role in summary["restarts"])
    assert list(summary["rollout_workers_per_node"].values()) == [4]  # all on the node left
