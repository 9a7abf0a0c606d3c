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
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO_ROOT

from dsac.formats.files import load_weights

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


def test_a_submitted_job_uses_both_nodes_writes_on_the_driver_side_and_ray_job_stop_saves_its_weights(
        cluster, tmp_path):
    """One job: its rollout workers run on both nodes, its files land on the driver's side,
    and `ray job stop` ends it with loadable final weights."""
    from ray.job_submission import JobSubmissionClient

    address, node_ids = cluster
    out = tmp_path / "run"
    # A budget it never reaches (the job is stopped), without the long run's XLA compile.
    submit(address, "dsac-test-stop", *SMALL, "--total_env_steps", "1000000", "--learner_xla", "false",
           "--output_dir", str(out))
    client = JobSubmissionClient(address)
    deadline = time.monotonic() + 240
    while not (out / "weights.pkl").exists():  # the first evaluation has saved weights
        assert time.monotonic() < deadline, client.get_job_logs("dsac-test-stop")[-3000:]
        status = str(client.get_job_status("dsac-test-stop").value)
        assert status not in TERMINAL, (status, client.get_job_logs("dsac-test-stop")[-3000:])
        time.sleep(1.0)
    progress = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert progress and set(progress[-1]["rollout_workers_per_node"]) == node_ids  # one worker on each node
    stop = subprocess.run(["ray", "job", "stop", "--address", address, "dsac-test-stop"],
                          capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert wait_for_status(client, "dsac-test-stop", timeout=90) == "STOPPED"
    assert "rollout workers per node" in client.get_job_logs("dsac-test-stop")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop_reason"] == "sigterm", summary
    assert set(summary["rollout_workers_per_node"]) == node_ids
    payload = load_weights(str(out / "weights.pkl"))
    assert payload["version"] == summary["weights_version"] > 0  # the final weights, not only an early save


@pytest.mark.slow
def test_replay_beside_its_writers_and_losing_a_weights_cache_and_a_node(tmp_path):
    """Two nodes: each node's rollout workers write to a replay shard on their own node and read
    weights from their node's cache. The worker node's cache is SIGKILLed (Ray restarts it; the
    run says so), then the whole node dies mid-run: the run goes on with the other node, says
    in one line what it lost — that node's shard's transitions — and its counts stay consistent:
    the replay holds exactly what was collected less what was lost."""
    from ray.cluster_utils import Cluster

    # The head gets the learner, the evaluator, the parameter server and some workers; the
    # second node workers, their shard and their weights cache.
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    try:
        worker_node = nodes.add_node(num_cpus=1)
        nodes.wait_for_nodes()
        lost = worker_node.node_id[:8]
        out = tmp_path / "run"
        total = 4_000  # the node goes at ~2,000 env steps; the run goes on without it
        env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "TF_CPP_MIN_LOG_LEVEL": "3"}
        run = subprocess.Popen(
            [sys.executable, os.path.join(REPO_ROOT, "launch.py"), "--address", nodes.address, "--num_workers", "4",
             "--env_step_ms", "2", "--fcnet_hiddens", "32", "32", "--learning_starts", "100", "--start_steps", "100",
             "--eval_every", "1000", "--eval_episodes", "1", "--total_env_steps", str(total), "--log_every", "1",
             "--no-progress_bar", "--output_dir", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO_ROOT,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)
        reader.start()

        def wait_for(pattern: str, timeout: float = 240.0) -> re.Match:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for line in list(lines):
                    if match := re.search(pattern, line):
                        return match
                assert run.poll() is None, "".join(lines)[-3000:]
                time.sleep(0.2)
            raise AssertionError(f"no line matching {pattern!r}:\n" + "".join(lines)[-3000:])

        cache_pid = int(wait_for(rf"placed weights_cache_\d on .*\(node {lost}, pid (\d+)\)").group(1))
        wait_for(r"eval at \d+ env steps")  # mid-run
        os.kill(cache_pid, signal.SIGKILL)
        wait_for(r"weights_cache_\d died .*restarting it")
        nodes.remove_node(worker_node)  # kills the node's raylet and every process on it
        run.wait(timeout=300)
        reader.join(timeout=10)
        log = "".join(lines)
        (tmp_path / "log.txt").write_text(log)
    finally:
        nodes.shutdown()
    assert run.returncode == 0, log[-3000:]
    assert "Traceback" not in log
    shards_line = re.search(r"replay shards beside their writers: (.*)", log).group(1)
    assert "shard 0 on" in shards_line and f"(node {lost})" in shards_line, shards_line  # one on each node
    planned: dict[str, str] = {}  # where each worker first ran
    for m in re.finditer(r"placed (rollout_worker_\d) on .*\(node (\w+), pid", log):
        planned.setdefault(m.group(1), m.group(2))
    assert f"node {lost} lost with rollout_worker_" in log, log[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failure"] is None and summary["env_steps"] >= total
    # The head node's shard only ever had the head node's workers as writers.
    head_shard = next(s for s in summary["replay_shards"] if not s["node"].startswith(lost))
    head_workers = {role.rsplit("_", 1)[1] for role, node in planned.items() if not node.startswith(lost)}
    assert head_shard["writers"] and set(head_shard["writers"]) <= head_workers, (summary["replay_shards"], planned)
    # The lost node's shard was restarted on the node left, empty: said in one line, and counted.
    lost_line = re.search(r"replay_shard_(\d) died .*its ([\d,]+) transitions are lost", log)
    assert lost_line, log[-3000:]
    lost_transitions = int(lost_line.group(2).replace(",", ""))
    assert 0 < lost_transitions and summary["replay_size"] == summary["env_steps"] - lost_transitions, summary
    assert set(summary["restarts"]) <= {f"rollout_worker_{i}" for i in range(4)} | {
        f"replay_shard_{lost_line.group(1)}", "weights_cache_0", "weights_cache_1"}, summary["restarts"]
    assert any(role.startswith("weights_cache_") for role in summary["restarts"])
    assert list(summary["rollout_workers_per_node"].values()) == [4]  # all on the node left
