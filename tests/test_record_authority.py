"""A file is data, not authority (docs/safety.md#a-run-directory-is-data): a run's record — the
``config.json`` dsac writes, read by ``--resume``, ``Trainer.restore`` or ``--config`` to repeat a
run — imports no code, connects nowhere, sends nothing anywhere and reads or writes nothing outside
its run directory unless the command line says the same. A user's own YAML stays as trusted as
typing. Real runs (the serial runner, a few hundred env steps of a golden run) in one process; a
TCP listener on 127.0.0.1 stands for a Ray cluster and an MLflow server and records any connection."""

import json
import logging
import os
import shutil
import socket
import threading

import pytest
from conftest import REPO_ROOT, run_in_one_process

from dsac.config import RECORD_EXCLUDED_KEYS, Config
from dsac.errors import DsacError
from dsac.preparation import resume_config

GOLDEN_RUN = os.path.join(REPO_ROOT, "tests", "data", "golden", "sac_pendulum")  # a serial SAC run, 300 env steps
# A module a file names: importing it leaves a file behind, so a test sees whether it was imported.
CODE = '''
import pathlib
pathlib.Path(__file__).with_name("imported-" + __name__).touch()


class Named:
    pass
'''


class Listener:
    """A TCP server on 127.0.0.1 that accepts (and counts) connections until closed."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.closed = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self.closed = True
        self.thread.join()
        self.server.close()


def record(tmp_path, name: str, marker: bool = True, **changes) -> str:
    """A copy of the golden run whose config.json says ``changes`` (with dsac's record marker,
    or without it as dsac wrote it before the marker)."""
    run = tmp_path / name
    shutil.copytree(GOLDEN_RUN, run)
    values = json.loads((run / "config.json").read_text())
    values.update(changes, **({"dsac_record": 1} if marker else {}))
    (run / "config.json").write_text(json.dumps(values))
    return str(run)


def test_a_record_is_data_a_users_own_file_is_trusted(tmp_path):
    listener = Listener()
    address = f"127.0.0.1:{listener.port}"
    elsewhere = {"address": address, "mlflow": f"http://{address}", "wandb": "dsac-record-test",
                 "storage_path": str(tmp_path / "store"), "init_weights": str(tmp_path / "moved" / "weights.pkl"),
                 "output_dir": str(tmp_path / "elsewhere")}
    for name in ("rec_env", "rec_callbacks", "rec_policy", "own_env"):
        (tmp_path / f"{name}.py").write_text(CODE)
    (tmp_path / "mine.yaml").write_text("env: own_env:Named\n")
    resumed, repeated = record(tmp_path, "resumed", **elsewhere), record(tmp_path, "repeated", **elsewhere)
    code_names = [record(tmp_path, "env", env="rec_env:Named"),
                  record(tmp_path, "callbacks", callbacks="rec_callbacks:Named"),
                  record(tmp_path, "policy", marker=False, policy_class="rec_policy:Named")]
    launch_py = os.path.join(REPO_ROOT, "launch.py")
    cases = [
        (["--resume", resumed, "--total_env_steps", "400", "--no-progress_bar"], 0),
        (["--config", os.path.join(repeated, "config.json"), "--total_env_steps", "100", "--no-progress_bar"], 0),
        *((["--resume", run], 2) for run in code_names),
        *((["--config", os.path.join(run, "config.json")], 2) for run in code_names),
        (["--config", str(tmp_path / "mine.yaml")], 2),  # imported: the user's own; then no such env class
    ]
    (tmp_path / "batch").mkdir()
    try:
        results = run_in_one_process([{"program": launch_py, "args": args, "cwd": tmp_path,
                                       "env": {"RAY_TMPDIR": str(tmp_path / "ray"), "TF_CPP_MIN_LOG_LEVEL": "3",
                                               "WANDB_MODE": "offline", "RAY_ADDRESS": None}}
                                      for args, _ in cases], tmp_path / "batch", purge_root=str(tmp_path))
    finally:
        listener.close()
    for (args, code), result in zip(cases, results, strict=True):
        assert result.returncode == code, f"{args}: {result.stderr[-2000:]}"
    resume, repeat, *refused, own = results
    # Nothing connected to the cluster or server the records name, nothing went outside the run
    # directories (no store, no other output directory, no W&B folder), the moved init_weights
    # was not needed.
    assert listener.connections == 0
    assert not any((tmp_path / name).exists() for name in ("store", "elsewhere", "moved", "ray"))
    for result, left_out in ((resume, "address, mlflow, wandb, storage_path, init_weights"),
                             (repeat, "address, mlflow, wandb, storage_path, init_weights, output_dir")):
        lines = [line for line in result.stdout.splitlines() if "is a run's record" in line]
        assert len(lines) == 1 and f"read as data: {left_out} left out" in lines[0], result.stdout[-2000:]
    runs = list((tmp_path / "runs").iterdir())  # the repeat: in a new directory of its own, under ./runs
    assert len(runs) == 1 and (runs[0] / "weights.pkl").exists()
    for run in (resumed, runs[0]):
        written = json.loads(open(os.path.join(run, "config.json")).read())
        assert written["dsac_record"] == 1 and not os.path.exists(os.path.join(run, "wandb"))
        assert all(written[key] is None for key in ("address", "mlflow", "wandb", "storage_path", "init_weights"))
    # The records' code names were refused in one line and never imported; the user's own file's were.
    for result in refused:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "names code to import" in lines[0] and "--trust_code" in lines[0], result.stderr
    assert sorted(p.name for p in tmp_path.glob("imported-*")) == ["imported-own_env"]
    assert "module own_env has no gymnasium.Env class Named" in own.stderr


def test_the_rule_in_python_one_log_line_overrides_and_trust_code(tmp_path, caplog):
    """``Trainer.restore`` and Tune's restore (``trust_code=True`` with the trial's own flags)
    read a record by the same rule; the command line (overrides) still sets every key."""
    run = record(tmp_path, "run", local=False, num_workers=2, address="127.0.0.1:1", mlflow="http://127.0.0.1:1",
                 callbacks="rec_callbacks:Named", init_weights="/nowhere/weights.pkl")
    with caplog.at_level(logging.WARNING, logger="dsac"):
        config = Config.load(os.path.join(run, "config.json"), {"trust_code": True, "output_dir": run})
    assert (config.address, config.mlflow, config.init_weights, config.output_dir) == (None, None, None, run)
    assert config.callbacks == "rec_callbacks:Named"  # code: trust_code is consent (Tune's restore gives it)
    assert [r.getMessage().split(" read as data: ")[1].split(" left out")[0] for r in caplog.records] == [
        "address, mlflow, init_weights"]
    typed = resume_config(run, {"address": "10.0.0.1:6379", "callbacks": "rec_callbacks:Named"})
    assert (typed.address, typed.resume, typed.output_dir) == ("10.0.0.1:6379", run, run)
    from dsac import Trainer

    with pytest.raises(DsacError, match=r"names code to import: callbacks 'rec_callbacks:Named'.*trust_code=True"):
        Trainer.restore(run)
    assert set(RECORD_EXCLUDED_KEYS) == {"address", "mlflow", "wandb", "storage_path", "init_weights", "output_dir",
                                         "resume"}
