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
import sys
import threading

import pytest
from conftest import REPO_ROOT, run_in_one_process

from dsac.config import Config
from dsac.errors import DsacError
from dsac.runtime.preparation import resume_config
from dsac.settings.records import RECORD_EXCLUDED_KEYS

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
    assert "module own_env has no gymnasium.Env class 'Named'" in own.stderr


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


# A script for the one entry point that is a Python call: Trainer.restore, its DsacError as one line.
RESTORE = """
import sys
from dsac import Trainer
from dsac.errors import DsacError
try:
    Trainer.restore(sys.argv[1])
except DsacError as exc:
    print(f"restore: error: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def test_every_entry_point_that_reads_a_record_reads_it_by_the_one_rule(tmp_path):
    """The list of dsac's entry points that read a run's record (its config.json, or the settings
    a weights file carries), each run on one hostile record — it names an env module that leaves a
    marker when imported, a Ray address and an MLflow server (a listener that counts connections),
    a W&B project, a storage path and an output directory elsewhere: every one refuses in one line
    and exit 2 (dsac-plot, which imports and contacts nothing, draws it as data), nothing is
    imported, nothing connects, nothing is written elsewhere. All in one process."""
    from dsac.formats.files import load_weights, save_weights

    listener = Listener()
    address = f"127.0.0.1:{listener.port}"
    (tmp_path / "rec_probe.py").write_text(CODE)
    run = record(tmp_path, "run", env="rec_probe:Named", address=address, mlflow=f"http://{address}",
                 wandb="dsac-record-test", storage_path=str(tmp_path / "store"),
                 output_dir=str(tmp_path / "elsewhere"))
    payload = load_weights(os.path.join(run, "weights.pkl"))
    save_weights(os.path.join(run, "weights.pkl"), {**payload, "env": "rec_probe:Named"})
    with open(os.path.join(run, "progress.jsonl"), "w") as f:
        f.writelines(json.dumps({"env_steps": 100 * k, "wall_s": k, "eval_return_mean": -k}) + "\n"
                     for k in (1, 2))
    (tmp_path / "restore.py").write_text(RESTORE)
    launch_py, config_json = os.path.join(REPO_ROOT, "launch.py"), os.path.join(run, "config.json")
    entry_points = [  # (name, program, args, exit code)
        ("launch.py --resume", launch_py, ["--resume", run], 2),
        ("launch.py --config", launch_py, ["--config", config_json], 2),
        ("Trainer.restore", str(tmp_path / "restore.py"), [run], 2),
        ("dsac.tune --space", "-m dsac.tune", ["--space", config_json, "--storage_path", str(tmp_path / "tune")], 2),
        ("dsac.infer", "-m dsac.infer", [os.path.join(run, "weights.pkl"), "--episodes", "1"], 2),
        ("dsac.export", "-m dsac.export", [os.path.join(run, "weights.pkl"), "-o", str(tmp_path / "p.onnx")], 2),
        ("dsac.plot", "-m dsac.plot", [run, "--out", str(tmp_path / "curves.png")], 0),
    ]
    (tmp_path / "batch").mkdir()
    try:
        results = run_in_one_process([{"program": program, "args": args, "cwd": tmp_path,
                                       "env": {"RAY_TMPDIR": str(tmp_path / "ray"), "TF_CPP_MIN_LOG_LEVEL": "3",
                                               "WANDB_MODE": "offline", "RAY_ADDRESS": None}}
                                      for _, program, args, _ in entry_points], tmp_path / "batch",
                                     purge_root=str(tmp_path))
    finally:
        listener.close()
    for (name, _, _, code), result in zip(entry_points, results, strict=True):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == code, f"{name}: {result.stderr[-2000:]}"
        if code == 2:
            assert len(lines) == 1 and "names code to import: env 'rec_probe:Named'" in lines[0], (name, lines)
            assert "--trust_code" in lines[0], (name, lines)
        else:
            assert lines == [] and result.stdout.strip() == f"wrote {tmp_path / 'curves.png'}", (name, result)
    assert not list(tmp_path.glob("imported-*"))
    assert listener.connections == 0
    assert not any((tmp_path / name).exists() for name in ("store", "elsewhere", "ray", "tune", "p.onnx"))


def test_a_record_given_as_a_search_space_is_data(tmp_path, caplog):
    """``dsac-tune --space <a run's config.json>``: what a record may not decide is left out of
    the trials' flags (one log line), its values are fixed ones (a record's ``{"grid": [...]}``
    searches nothing and names no code), and ``--trust_code`` is the consent its code needs."""
    from dsac.tune.space import read_space

    (tmp_path / "rec_probe.py").write_text(CODE)
    run = record(tmp_path, "run", address="127.0.0.1:1", mlflow="http://u:pw@127.0.0.1:1", wandb="dsac-test",
                 storage_path=str(tmp_path / "store"), output_dir=str(tmp_path / "elsewhere"),
                 init_weights="/nowhere/weights.pkl")
    with caplog.at_level(logging.WARNING, logger="dsac"):
        space = read_space(os.path.join(run, "config.json"), {"total_env_steps": 400})
    assert not set(space) & {*RECORD_EXCLUDED_KEYS, "dsac_record", "custom_models", "trust_code"}, sorted(space)
    assert space["env"] == (None, "Pendulum-v1") and space["total_env_steps"] == (None, 400)
    [line] = [r.getMessage() for r in caplog.records if "is a run's record" in r.getMessage()]
    assert "read as data: address, mlflow, wandb, storage_path, init_weights, output_dir left out" in line
    grid = record(tmp_path, "grid", env={"grid": ["rec_probe:Named"]})
    with pytest.raises(DsacError, match=r"--env must be a string, got \{'grid'"):
        read_space(os.path.join(grid, "config.json"))
    named = record(tmp_path, "named", env="rec_probe:Named")
    with pytest.raises(DsacError, match=r"names code to import: env 'rec_probe:Named'"):
        read_space(os.path.join(named, "config.json"))
    assert not list(tmp_path.glob("imported-*"))


# Names with a newline and a terminal's escape, as a file may hold them.
CODES = "\n\x1b[31m"


def test_names_from_a_file_stay_one_line_without_terminal_codes(tmp_path, monkeypatch, capsys):
    """A --config file or a record whose env, env_kwargs key, callbacks or key holds a newline
    and an ANSI escape: each refusal is one line, the names shown with repr (escaped)."""
    from dsac.cli import main

    (tmp_path / "rec_named.py").write_text(CODE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    files = {
        "unknown env": {"env": f"Pendulum{CODES}-v1"},
        "env_kwargs key": {"env": "Pendulum-v1", "env_kwargs": {f"g{CODES}": 1}},
        "env class": {"env": f"rec_named:Na{CODES}me"},  # the user's own file: imported, then no such class
        "record's code": {"env": f"ev{CODES}il:X", "dsac_record": 1},
        "callbacks": {"callbacks": f"json:No{CODES}pe"},
        "key": {f"lr{CODES}": 1},
        "nested key": {"replay": {f"buffer{CODES}": 1}},
    }
    shown = {}
    for name, values in files.items():
        path = tmp_path / f"{len(shown)}.json"
        path.write_text(json.dumps({**values, "local": True}))
        code = main(["--config", str(path)])
        shown[name] = capsys.readouterr().err
        assert code == 2, (name, shown[name])
    for name, err in shown.items():
        assert err.count("\n") == 1 and err.startswith("dsac: error: ") and "\x1b" not in err, (name, err)
        assert "\\n\\x1b[31m" in err, (name, err)
    monkeypatch.delitem(sys.modules, "rec_named", raising=False)


def test_dsac_plot_refuses_a_run_it_cannot_read_in_one_line(tmp_path, capsys, monkeypatch):
    """dsac-plot on a run whose config.json is not a mapping (a list, nested 100k deep, a FIFO)
    or whose progress rows are not what dsac writes (or more, or longer, than a run writes): one
    line naming the file and what is wrong, exit 2 (a bad row refuses the run: a curve that
    skipped rows would show another run)."""
    from dsac.plot import main

    good = [{"env_steps": 100, "wall_s": 1.0, "eval_return_mean": -5.0},
            {"env_steps": 200, "wall_s": 2.0, "eval_return_mean": -3.0}]
    cases = {  # name: (config.json text or None, progress rows, the message)
        "list": ("[1, 2]", good, "config.json holds a JSON list, not a run's config (a mapping)"),
        "deep": ("[" * 100_000 + "]" * 100_000, good, "config.json is nested too deeply"),
        "deep value": ('{"env_kwargs": ' + "[" * 100_000 + "]" * 100_000 + "}", good, "nested too deeply"),
        "fifo": (None, good, "config.json is a FIFO, not a regular file"),
        "steps": ("{}", [*good, {"env_steps": "x", "wall_s": 3, "eval_return_mean": 1}],
                  "progress.jsonl: line 3: env_steps must be a finite number, got 'x'"),
        "nan steps": ("{}", [{**good[0], "env_steps": float("nan")}], "line 1: env_steps must be a finite number"),
        "no return": ("{}", [{"env_steps": 1, "wall_s": 1}], "line 1: eval_return_mean must be a number, got None"),
        "row": ("{}", [[1, 2]], "progress.jsonl: line 1 is a JSON list, not a row of a run's progress"),
        "deep row": ("{}", ["[" * 100_000 + "]" * 100_000], "progress.jsonl: line 1 is not JSON"),
        "long row": ("{}", [good[0], '{"x": [' + "[]," * 2**19 + "[]]}"], "line 2 is longer than the 1 MiB a row may"),
        "many rows": ("{}", good * 3, "progress.jsonl has more than 5 rows, more than a run writes"),
    }
    # The row bound (1,000,000) made small: a file of a million tiny rows takes seconds to read.
    monkeypatch.setattr("dsac.output.curves.MAX_PROGRESS_ROWS", 5)
    for name, (config, rows, message) in cases.items():
        run = tmp_path / name.replace(" ", "_")
        run.mkdir()
        (run / "progress.jsonl").write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
        if config is None:
            os.mkfifo(run / "config.json")
        else:
            (run / "config.json").write_text(config)
        code = main([str(run), "--out", str(tmp_path / "curves.png")])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and err.startswith("plot: error: ") and message in err, (name, err)
    assert not (tmp_path / "curves.png").exists()
