"""What must not leave the machine: a tracker URI's credentials (in config.json, the log, the
trackers' params and config), and a checkout's secrets and stores in a submitted job's upload."""

import base64
import http.client
import http.server
import json
import threading
import urllib.parse
import zipfile

import pytest
from test_trackers import mlflow_server  # noqa: F401 - the fixture: a real mlflow server on 127.0.0.1


def test_a_submitted_job_uploads_neither_tracker_stores_nor_tune_results_nor_secrets(tmp_path):
    """The upload Ray builds from dsac-submit's runtime env (Ray's own packaging code, on a
    checkout-like directory): the code goes, the stores and secrets stay."""
    from ray._private.runtime_env.packaging import _zip_files

    from dsac.submit import runtime_env

    checkout = tmp_path / "checkout"
    kept = ["launch.py", "requirements.txt", "dsac/__init__.py", "dsac/envs/make.py", "docs/guide.md", "my_envs.py"]
    left_out = ["mlflow.db", "mlruns/0/meta.yaml", "mlartifacts/1/a/weights.pkl", "wandb/offline-run-1/run.wandb",
                "tune_results/dsac_tune/experiment_state.json", ".env", ".env.local", "cluster.pem", "tls/server.key",
                ".netrc", "runs/sac-Pendulum/config.json", "sub/.env"]
    for name in kept + left_out:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("x")
    package = tmp_path / "package.zip"
    _zip_files(str(checkout), runtime_env(install=False, stop_grace_s=60)["excludes"], str(package),
               include_gitignore=True)
    uploaded = {name for name in zipfile.ZipFile(package).namelist() if not name.endswith("/")}
    assert not uploaded & set(left_out), sorted(uploaded & set(left_out))
    assert set(kept) <= uploaded, sorted(uploaded)


@pytest.mark.parametrize("uri, shown", [
    ("https://user:s3cret-token@host:5000/path?a=1#f", "https://user:***@host:5000/path?a=1#f"),
    ("http://s3cret-token@host", "http://***@host"),  # a lone user is often a token
    ("http://user:p%40ss%3Aword@host", "http://user:***@host"),
    ("https://host/x?token=s3cret&run=1&api_key=k3y-value&password=&sig=zz9-sig",
     "https://host/x?token=***&run=1&api_key=***&password=&sig=***"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
    ("sqlite:///home/a@b/mlflow.db", "sqlite:///home/a@b/mlflow.db"),
    # a password with a raw "/" or "?" ends the authority early: all of it before the last "@" is hidden
    ("https://u:pa/ss@host:5000", "https://u:***@host:5000"),
    ("https://u:p?ss@host/x", "https://u:***@host/x"),
    ("http://user:Sup/3rS3cret@host", "http://user:***@host"),
    # without a scheme://
    ("user:Sup3rS3cret@host:1", "user:***@host:1"),
    ("Sup3rS3cret@host:1", "***@host:1"),
    # query, path parameters and fragment, by the name of each value
    ("https://host/x?session=Sup3rS3cret&run=1", "https://host/x?session=***&run=1"),
    ("https://host/x;token=Sup3rS3cret/y;v=1?a=1", "https://host/x;token=***/y;v=1?a=1"),
    ("https://host/cb#access_token=Sup3rS3cret&token_type=bearer", "https://host/cb#access_token=***&token_type=***"),
    ("host:5000/x?a=1;Authorization=Sup3rS3cret", "host:5000/x?a=1;Authorization=***"),
    ("ray://u:Sup3rS3cret@head:10001", "ray://u:***@head:10001"),
    ("s3://bucket/runs?X-Amz-Signature=Sup3rS3cret", "s3://bucket/runs?X-Amz-Signature=***"),
    ("/runs/mlruns", "/runs/mlruns"),
    ("runs/x", "runs/x"),
    ("127.0.0.1:6379", "127.0.0.1:6379"),
    (None, None),
])
def test_redact_uri_hides_userinfo_passwords_and_credential_params(uri, shown):
    from dsac.formats.redaction import redact_text, redact_uri

    assert redact_uri(uri) == shown
    if uri:  # a library's message quoting the URI it was given
        assert redact_text(f"failed: {uri}", uri) == f"failed: {shown}"
    assert redact_text("bad password p@ss:word", "http://user:p%40ss%3Aword@host") == "bad password ***"


SECRET = "s3cret-token"


class BasicAuthProxy(http.server.ThreadingHTTPServer):
    """A reverse proxy on 127.0.0.1 in front of a tracking server that takes only requests with
    Basic auth ``user:s3cret-token`` (as a server behind nginx or a cloud gateway does), and
    counts those it let through and those it refused."""

    daemon_threads = True

    def __init__(self, target: str):
        super().__init__(("127.0.0.1", 0), ProxyHandler)
        self.target = urllib.parse.urlsplit(target)
        self.passed = self.refused = 0
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _body(self) -> bytes | None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
            return body
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _reply(self, status: int, reason: str, headers: list, data: bytes) -> None:
        self.send_response(status, reason)
        for key, value in headers:
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self):
        body = self._body()
        if self.headers.get("Authorization") != "Basic " + base64.b64encode(f"user:{SECRET}".encode()).decode():
            self.server.refused += 1
            self._reply(401, "Unauthorized", [("WWW-Authenticate", 'Basic realm="mlflow"')], b"")
            return
        self.server.passed += 1
        target = self.server.target
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "authorization", "connection", "transfer-encoding", "content-length")}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        connection.request(self.command, self.path, body=body, headers=headers)
        reply = connection.getresponse()
        self._reply(reply.status, reply.reason, reply.getheaders(), reply.read())
        connection.close()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET


@pytest.fixture
def proxy(request):
    """A real ``mlflow server`` on 127.0.0.1 behind :class:`BasicAuthProxy`: (proxy, server URI,
    the server's process)."""
    uri, process = request.getfixturevalue("mlflow_server")
    server = BasicAuthProxy(uri)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, uri, process
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_credentials_in_the_mlflow_uri_authenticate_and_appear_nowhere(tmp_path, proxy, caplog):
    """A run logging to an MLflow server that needs Basic auth, with the user and token in the
    --mlflow URI, and to W&B (offline): the health check, the metrics and the artifacts all get
    through with them, and the server holds the run with its last row; the token is in none of
    the run's output, files, MLflow params and tags, or W&B config. A wrong token is refused by
    the health check without being printed. Then the server goes away in the middle of a run:
    that costs the tracking only (one warning), not the run."""
    import logging
    import os
    import time

    import mlflow
    from test_trackers import SHORT_RUN, launch, wandb_records

    from dsac.config import Config
    from dsac.output.trackers import Trackers

    server, direct, process = proxy
    port = server.server_address[1]
    out = tmp_path / "run"
    run = launch([*SHORT_RUN, "--total_env_steps", "800", "--output_dir", str(out), "--wandb", "dsac-test",
                  "--mlflow", f"http://user:{SECRET}@127.0.0.1:{port}"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    shown = f"http://user:***@127.0.0.1:{port}"
    assert SECRET not in run.stdout + run.stderr and "MLflow: logging this run as" in run.stdout + run.stderr
    assert shown in run.stdout + run.stderr
    assert server.passed > 0 and server.refused == 0  # every request of the run authenticated
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {"config.json", "progress.jsonl", "summary.json"} <= {p.name for p in files}
    assert any("tfevents" in p.name for p in files) and any(p.suffix == ".wandb" for p in files)
    assert [str(p) for p in files if SECRET.encode() in p.read_bytes()] == []
    assert json.loads((out / "config.json").read_text())["mlflow"] == shown

    client = mlflow.MlflowClient(tracking_uri=direct)  # the server itself, behind the proxy
    [logged] = client.search_runs([client.get_experiment_by_name("dsac").experiment_id])
    rows = [json.loads(line) for line in (out / "progress.jsonl").read_text().splitlines()]
    assert logged.info.status == "FINISHED" and logged.data.metrics["eval_return_mean"] == pytest.approx(
        rows[-1]["eval_return_mean"])
    assert logged.data.params["algo"] == "sac" and logged.data.tags["mlflow.runName"] == "run"
    assert logged.data.params["mlflow"] == shown
    assert not [k for k, v in {**logged.data.params, **logged.data.tags}.items() if SECRET in v]
    assert {a.path for a in client.list_artifacts(logged.info.run_id, "weights")} == {
        "weights/weights.pkl", "weights/best_weights.pkl"}

    [run_file] = out.glob("wandb/offline-run-*/run-*.wandb")
    config = {item.key: json.loads(item.value_json) for r in wandb_records(str(run_file))
              if r.WhichOneof("record_type") == "run" for item in r.run.config.update}
    assert shown in (config["mlflow"], config["mlflow"].get("value") if isinstance(config["mlflow"], dict) else None)

    refused = launch(["--local", "--env", "Pendulum-v1", "--output_dir", str(tmp_path / "refused"), "--mlflow",
                      f"http://user:wrong-{SECRET}@127.0.0.1:{port}"], tmp_path)
    assert refused.returncode == 2 and SECRET not in refused.stdout + refused.stderr, refused.stderr
    assert refused.stderr.strip() == (f"dsac: error: --mlflow http://user:***@127.0.0.1:{port}: the tracking server "
                                      "answered HTTP 401 Unauthorized (check the user and password)"), refused.stderr

    # The server goes away in the middle of a run: one warning, the tracker is dropped, the
    # run's own files go on.
    os.makedirs(tmp_path / "second")
    config = Config(mlflow=direct).validate()
    trackers = Trackers(config.output, config.to_dict(), str(tmp_path / "second"))
    assert len(trackers.active) == 1
    os.killpg(process.pid, 9)
    process.wait()
    with caplog.at_level(logging.WARNING, logger="dsac"):
        started = time.monotonic()
        trackers.row({"env_steps": 10, "eval_return_mean": -1.0})
        trackers.row({"env_steps": 20, "eval_return_mean": -0.5})
        trackers.finish({"failure": None})
    assert not trackers.active
    assert caplog.text.count("MLflow stopped logging this run") == 1, caplog.text
    assert time.monotonic() - started < 60  # it gave up after a few retries


# URIs a user may type that must end in one line naming the URI with its secret hidden: the
# health check never raises anything else, whatever the text.
HOSTILE_MLFLOW_URIS = [
    "http://user:Sup/3rS3cret@host",  # a raw "/" in the password: urllib would read "Sup" as a port
    "user:Sup3rS3cret@host:1",  # no scheme://
    "https://user:Sup3rS3cret@host:notaport/x",
    "http://user:Sup3rS3cret@[::1",
    "http://127.0.0.1:1/x;token=Sup3rS3cret?session=Sup3rS3cret#access_token=Sup3rS3cret",
    "http://127.0.0.1:1/x?token=Sup3rS3cret\n&a=1",
    "http://user:Sup3rS3cret@127.0.0.1:99999999",
    "file://user:Sup3rS3cret@/proc/no/such/dir",
    "user:Sup3rS3cret@/proc/x",
]


def test_the_health_check_never_raises_and_never_shows_a_secret():
    """Each hostile URI, through the check a run and dsac-tune make before Ray starts: one line,
    a DsacError, the URI shown redacted, and no part of the password in it."""
    from dsac.errors import DsacError
    from dsac.formats.redaction import redact_uri
    from dsac.output.trackers import check_mlflow_uri

    for uri in HOSTILE_MLFLOW_URIS:
        with pytest.raises(DsacError) as caught:
            check_mlflow_uri(uri)
        message = str(caught.value)
        assert len(message.splitlines()) == 1 and message.startswith(f"--mlflow {redact_uri(uri)}: "), (uri, message)
        assert "Sup" not in message and "3rS3cret" not in message, (uri, message)


def test_the_two_mlflow_uris_of_issue_56_are_one_line_and_exit_2(tmp_path):
    """``launch.py --mlflow`` with a ``/`` in the password, and without a scheme: one line,
    exit 2, before Ray starts, the password nowhere in the output (one process for both)."""
    import os

    from conftest import REPO_ROOT, run_in_one_process

    launch_py = os.path.join(REPO_ROOT, "launch.py")
    cases = [("http://user:Sup/3rS3cret@host", "http://user:***@host: the part before '@' holds a raw '/'"),
             ("user:Sup3rS3cret@host:1", "user:***@host:1: a user and password go in an http:// or https:// URI")]
    results = run_in_one_process([{"program": launch_py, "cwd": tmp_path, "env": {"RAY_ADDRESS": None},
                                   "args": ["--local", "--env", "Pendulum-v1", "--mlflow", uri]}
                                  for uri, _ in cases], tmp_path)
    for (_, line), result in zip(cases, results, strict=True):
        assert result.returncode == 2 and result.stderr.startswith(f"dsac: error: --mlflow {line}"), result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Sup" not in result.stdout + result.stderr


def test_a_configs_repr_and_record_and_the_best_config_of_a_search_hide_credentials():
    """``repr(Config)`` (and its sections'), ``config.json`` and a tracker's params
    (:meth:`Config.to_dict`), and ``best_config.yaml``'s text show every URI redacted."""
    import yaml

    from dsac.config import Config
    from dsac.tune.cli import best_config_text

    secret = "Sup3rS3cret"
    uris = {"mlflow": f"http://user:{secret}@host:5000", "address": f"ray://user:{secret}@head:10001",
            "storage_path": f"s3://bucket/runs?X-Amz-Signature={secret}"}
    config = Config(env="Pendulum-v1", env_kwargs={"url": f"https://host/?token={secret}"}, **uris)
    for text in (repr(config), repr(config.output), repr(config.resources), repr(config.run), str(config)):
        assert secret not in text and "user:***@host:5000" in repr(config), text
    record = config.to_dict()  # env_kwargs are the env's own settings, which a resumed run reads back
    assert secret not in json.dumps({key: record[key] for key in uris}), record
    assert config.mlflow == uris["mlflow"]  # the process itself keeps the real value
    text = best_config_text({"lr": 1e-3, **uris})
    assert secret not in text and "# mlflow: its credentials are hidden (***); type --mlflow to give them" in text
    assert yaml.safe_load(text)["mlflow"] == "http://user:***@host:5000"


def test_an_address_that_cannot_be_reached_is_named_without_its_password():
    """--address (launch.py, dsac-tune, dsac-doctor) goes through the same redaction."""
    from dsac.distributed.cluster import check_reachable
    from dsac.errors import DsacError

    for address in ("ray://u:Sup3rS3cret@127.0.0.1:9", "u:Sup3rS3cret@127.0.0.1:9", "u:Sup3rS3cret@127.0.0.1"):
        with pytest.raises(DsacError) as refused:
            check_reachable(address)
        assert "Sup3rS3cret" not in str(refused.value) and "\n" not in str(refused.value), refused.value
