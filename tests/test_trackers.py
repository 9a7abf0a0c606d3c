"""Experiment trackers (``--wandb``, ``--mlflow``): real runs of ``launch.py`` logging to W&B in
offline mode, to a local SQLite MLflow store and to a real ``mlflow server`` on 127.0.0.1 (its
fixture is here; its run, behind a proxy that takes Basic auth, is in tests/test_secrets.py),
read back with each library's own client (MLflow) or from the run's own files (W&B)."""

import glob
import json
import os
import socket
import struct
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT, run_in_one_process

mlflow = pytest.importorskip("mlflow")
pytest.importorskip("wandb")

SHORT_RUN = ["--local", "--env", "Pendulum-v1", "--eval_every", "400", "--eval_episodes", "2", "--video_every", "2",
             "--no-progress_bar", "--fcnet_hiddens", "32", "32"]


def launch(args, tmp_path, **env):
    environ = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "WANDB_MODE": "offline", **env}
    environ = {k: v for k, v in environ.items() if v is not None}
    return subprocess.run([sys.executable, os.path.join(REPO_ROOT, "launch.py"), *args], capture_output=True,
                          text=True, timeout=600, env=environ, cwd=str(tmp_path))


def wandb_records(run_file: str) -> list:
    """The records of an offline W&B run's ``run-<id>.wandb`` file (a LevelDB-style log of
    ``wandb_internal_pb2.Record`` protos: a 7-byte file header, then 32 KiB blocks of
    records, each with a 7-byte header of checksum, length and type full/first/middle/last)."""
    from wandb.proto import wandb_internal_pb2

    data = open(run_file, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, whole, pending = 7, 32768, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # the rest of the block is padding
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            whole.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            whole.append(pending + chunk)
    records = []
    for raw in whole:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def wandb_history(records) -> list[dict]:
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item})
    return rows


@pytest.mark.slow
def test_a_run_and_its_resumption_log_config_rows_videos_and_weights_to_wandb_and_mlflow(tmp_path):
    """One run logs to W&B (offline) and to a SQLite MLflow store at once: the config, one
    metrics row per progress row (at its env step), the evaluation videos, the final weights;
    resuming it (the trackers typed again) continues the same W&B run and the same MLflow run."""
    out, store = tmp_path / "run", tmp_path / "store" / "mlflow.db"
    uri = f"sqlite:///{store}"
    os.makedirs(store.parent)
    first = launch([*SHORT_RUN, "--total_env_steps", "1200", "--output_dir", str(out), "--wandb", "dsac-test",
                    "--mlflow", uri], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # The trackers are typed again: a run's config.json never decides where a run sends anything.
    second = launch(["--resume", str(out), "--total_env_steps", "1600", "--wandb", "dsac-test", "--mlflow", uri],
                    tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    ids = json.loads((out / "trackers.json").read_text())
    assert "W&B: logging this run as" in first.stdout + first.stderr
    assert f"MLflow: logging this run as {ids['mlflow']}" in second.stdout + second.stderr

    client = mlflow.MlflowClient(tracking_uri=uri)
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["dsac"])
    assert len(runs) == 1 and runs.run_id[0] == ids["mlflow"], runs  # resumed into the same run
    run = client.get_run(ids["mlflow"])
    assert run.info.status == "FINISHED" and run.data.params["env"] == "Pendulum-v1"
    history = client.get_metric_history(ids["mlflow"], "eval_return_mean")
    assert [(m.step, m.value) for m in history] == [(r["env_steps"], r["eval_return_mean"]) for r in rows]
    assert rows[-1]["env_steps"] == 1600
    artifacts = {a.path for folder in (None, "videos", "weights") for a in client.list_artifacts(ids["mlflow"], folder)}
    assert {"weights/weights.pkl", "weights/best_weights.pkl", "summary.json"} <= artifacts, artifacts
    assert any(path.startswith("videos/") and path.endswith(".mp4") for path in artifacts), artifacts
    assert os.path.isdir(store.parent / "mlartifacts") and not os.path.exists(tmp_path / "mlruns")

    run_files = sorted(glob.glob(str(out / "wandb" / f"offline-run-*-{ids['wandb']}" / f"run-{ids['wandb']}.wandb")))
    assert len(run_files) == 2, run_files  # the first process and the resumed one, one W&B run id
    records = [r for path in run_files for r in wandb_records(path)]
    config = {item.key: json.loads(item.value_json) for r in records if r.WhichOneof("record_type") == "run"
              for item in r.run.config.update}
    assert config["env"] == {"value": "Pendulum-v1"} or config["env"] == "Pendulum-v1", config.get("env")
    logged = [(h["env_steps"], h["eval_return_mean"]) for h in wandb_history(records) if "eval_return_mean" in h]
    assert logged == [(r["env_steps"], r["eval_return_mean"]) for r in rows]
    assert any(key.startswith("eval/video/") for h in wandb_history(records) for key in h)  # nested: its path, size
    videos = glob.glob(str(out / "wandb" / "offline-run-*" / "files" / "media" / "videos" / "eval" / "*.mp4"))
    assert videos
    import imageio.v3 as iio

    assert iio.imread(videos[0], extension=".mp4").shape[1:3] == (500, 500)  # Pendulum's render size
    artifacts = [r.artifact for r in records if r.WhichOneof("record_type") == "artifact"]
    assert artifacts and {"weights.pkl", "best_weights.pkl"} <= {c.path for c in artifacts[-1].manifest.contents}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on 127.0.0.1 (SQLite behind it), until the test ends."""
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    # `python -m mlflow`, not the `mlflow` script: PATH may not have it yet (pyenv shims).
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}", "--artifacts-destination",
         str(tmp_path / "server-artifacts")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        # Without its job runner (huey consumers: ~20 CPU-s over the suite): dsac logs runs, not jobs.
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    uri = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 300  # its first start creates the store's schema: 20-90 s on 2 busy cores
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2).read()
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, \
                f"mlflow server did not start: {(tmp_path / 'server.log').read_text()[-2000:]}"
            time.sleep(0.5)
    yield uri, server
    if server.poll() is None:
        os.killpg(server.pid, 9)
        server.wait()
    log.close()


# A run logging to a real ``mlflow server`` (mlflow_server), and the server lost in the middle of
# a run: tests/test_secrets.py, where the same run goes through a proxy that takes Basic auth.


TRACKER_FAILURES = [
    (["--mlflow", "http://127.0.0.1:9"], {}, "--mlflow http://127.0.0.1:9: the tracking server does not answer"),
    # the URI's password is not shown (tests/test_secrets.py: the run that authenticates with it)
    (["--mlflow", "http://user:s3cret-token@127.0.0.1:9/?token=s3cret-token"], {},
     "--mlflow http://user:***@127.0.0.1:9/?token=***: the tracking server does not answer"),
    (["--mlflow", "sqlite:///"], {}, "a SQLite store is sqlite:///PATH/TO/FILE.db"),
    (["--mlflow", "/proc/no/such/dir"], {}, "is not writable"),
    (["--mlflow", "ftp://example.org/x"], {}, "not a tracking URI MLflow takes"),
    (["--wandb", "a/b"], {}, "--wandb takes a W&B project name"),
    # W&B keeps its login state in the process: this one runs in a process of its own
    (["--wandb", "dsac-test"], {"WANDB_MODE": None, "WANDB_API_KEY": None, "HOME": "{tmp}", "NETRC": "{tmp}/none"},
     "--wandb: not logged in to W&B"),
]


@pytest.fixture(scope="module")
def tracker_failures(tmp_path_factory):
    """The TRACKER_FAILURES cases without an environment of their own, as ``python launch.py``
    runs each, all in one process (conftest.run_in_one_process): {index: (result, run dir)}."""
    workdir = tmp_path_factory.mktemp("trackers")
    cases = [i for i, (_, env, _) in enumerate(TRACKER_FAILURES) if not env]
    programs = [{"program": os.path.join(REPO_ROOT, "launch.py"), "cwd": workdir,
                 "env": {"TF_CPP_MIN_LOG_LEVEL": "3", "WANDB_MODE": "offline"},
                 "args": ["--env", "Pendulum-v1", "--output_dir", str(workdir / f"run{i}"), *TRACKER_FAILURES[i][0]]}
                for i in cases]
    results = run_in_one_process(programs, workdir)
    return {i: (result, workdir / f"run{i}") for i, result in zip(cases, results, strict=True)}


@pytest.mark.parametrize("case", range(len(TRACKER_FAILURES)), ids=[m for _, _, m in TRACKER_FAILURES])
def test_a_tracker_that_cannot_start_is_one_line_and_exit_2_before_ray_starts(tmp_path, case, tracker_failures):
    args, env, message = TRACKER_FAILURES[case]
    if env:
        env = {k: v.replace("{tmp}", str(tmp_path)) if isinstance(v, str) else v for k, v in env.items()}
        run_dir = tmp_path / "run"
        proc = launch(["--env", "Pendulum-v1", "--output_dir", str(run_dir), *args], tmp_path, **env)
    else:
        proc, run_dir = tracker_failures[case]
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "s3cret" not in proc.stderr, proc.stderr
    assert not (run_dir / "progress.jsonl").exists()
