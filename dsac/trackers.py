"""Experiment trackers: Weights & Biases (``--wandb PROJECT``) and MLflow (``--mlflow URI``).

The driver's :class:`dsac.recorder.Recorder` hands each tracker what it writes to disk: the
config when the run starts, every ``progress.jsonl`` row (an evaluation, with its counters) at
its env step, every evaluation video, and at the end the weights files and ``summary.json``.
Nothing else logs: rollout workers, learners and the evaluator never import a tracker.

- :func:`check_trackers` runs before Ray starts: a missing extra, a W&B run without a login,
  or an MLflow tracking server that does not answer is one line and exit 2.
- A resumed run (``--resume``) continues the same W&B run and MLflow run: their ids are kept
  in ``<output_dir>/trackers.json``.
- A tracker that fails during the run (its server went away) logs one warning and is dropped;
  the run and its files go on.

Both libraries are optional extras: ``pip install -e ".[wandb]"`` / ``".[mlflow]"``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.error
import urllib.parse
import urllib.request

from dsac.envs import one_line
from dsac.errors import DsacError
from dsac.files import write_json

log = logging.getLogger("dsac")

IDS_FILE = "trackers.json"
# MLflow experiment dsac's runs go to unless MLFLOW_EXPERIMENT_NAME says otherwise.
MLFLOW_EXPERIMENT = "dsac"


def _import(name: str, flag: str):
    try:
        return __import__(name)
    except ImportError:
        raise DsacError(f"{flag} needs the {name} package: pip install -e \".[{name}]\" (or pip install {name})") \
            from None


def _sqlite_file(uri: str) -> str:
    """The database file of a ``sqlite:///PATH`` URI ('' when there is none)."""
    return uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""


def check_mlflow_uri(uri: str) -> None:
    """An ``http(s)://`` tracking server must answer its ``/health`` within 10 s; a
    ``sqlite:///`` or file store's directory must be writable."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.scheme in ("http", "https"):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10) as reply:
                reply.read(64)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DsacError(f"--mlflow {uri}: the tracking server does not answer ({reason})") from None
        return
    if parsed.scheme == "sqlite":
        path = _sqlite_file(uri)
        if not path:
            raise DsacError(f"--mlflow {uri}: a SQLite store is sqlite:///PATH/TO/FILE.db")
        directory = os.path.dirname(os.path.abspath(path))
    elif parsed.scheme in ("", "file"):
        directory = parsed.path if parsed.scheme == "file" else uri
    elif parsed.scheme in ("databricks", "databricks-uc", "uc"):
        return  # MLflow's own errors say what is wrong with these
    else:
        raise DsacError(f"--mlflow {uri}: not a tracking URI MLflow takes (http://HOST:PORT, https://..., "
                        "sqlite:///FILE.db, a directory, databricks)")
    from dsac.files import check_writable_dir

    check_writable_dir(directory, f"--mlflow {uri}:")


def check_trackers(config) -> None:
    """Before Ray starts: each tracker asked for can start (one line, exit 2, otherwise)."""
    if config.wandb is not None:
        if not str(config.wandb).strip() or "/" in config.wandb:
            raise DsacError(f"--wandb takes a W&B project name, got {config.wandb!r}")
        wandb = _import("wandb", "--wandb")
        mode = os.environ.get("WANDB_MODE", "").lower()
        if mode not in ("offline", "disabled", "dryrun") and not os.environ.get("WANDB_API_KEY"):
            try:
                logged_in = bool(wandb.login(prompt=False))  # a stored key; no network
            except Exception:  # noqa: BLE001 - wandb's own settings could not be read
                logged_in = False
            if not logged_in:
                raise DsacError("--wandb: not logged in to W&B: run `wandb login`, set WANDB_API_KEY, "
                                "or WANDB_MODE=offline to log to files (wandb sync later)")
    if config.mlflow is not None:
        _import("mlflow", "--mlflow")
        check_mlflow_uri(config.mlflow)


def numbers(row: dict) -> dict:
    """The finite numbers of a progress row (trackers take metrics, not lists or text)."""
    return {key: float(value) for key, value in row.items()
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)}


class Tracker:
    """What the recorder calls. ``name`` is said in warnings."""

    name = "tracker"
    run_id: str | None = None

    def row(self, row: dict, step: int) -> None: ...

    def video(self, path: str, step: int) -> None: ...

    def files(self, paths: list[str], summary: dict) -> None: ...

    def finish(self, failed: bool) -> None: ...


class WandbTracker(Tracker):
    name = "W&B"

    def __init__(self, project: str, config: dict, output_dir: str, run_id: str | None):
        import wandb

        self.wandb = wandb
        self.run = wandb.init(project=project, config=config, dir=output_dir, name=os.path.basename(output_dir),
                              id=run_id, resume="allow" if run_id else None, reinit="create_new",
                              settings=wandb.Settings(silent=True, console="off"))
        self.run_id = self.run.id

    def row(self, row, step):
        self.run.log(numbers(row), step=step)

    def video(self, path, step):
        self.run.log({"eval/video": self.wandb.Video(path, format="mp4")}, step=step)

    def files(self, paths, summary):
        artifact = self.wandb.Artifact(f"weights-{self.run.id}", type="model",
                                       metadata={k: summary.get(k) for k in ("env_steps", "updates",
                                                                              "best_eval_return")})
        for path in paths:
            artifact.add_file(path)
        self.run.log_artifact(artifact)
        self.run.summary.update(numbers(summary))

    def finish(self, failed):
        self.run.finish(exit_code=1 if failed else 0)


def mlflow_experiment(client, uri: str) -> tuple[str, str]:
    """(name, id) of the MLflow experiment dsac's runs go to (``MLFLOW_EXPERIMENT_NAME``, else
    ``dsac``), created if missing. A new one beside a SQLite store keeps its files in
    ``mlartifacts/`` next to the database (MLflow's own default would be ``./mlruns`` in
    whatever directory the run was started from); a server or a file store decides for itself."""
    name = os.environ.get("MLFLOW_EXPERIMENT_NAME", MLFLOW_EXPERIMENT)
    experiment = client.get_experiment_by_name(name)
    if experiment is not None:
        return name, experiment.experiment_id
    database = _sqlite_file(uri)
    location = "file://" + os.path.join(os.path.dirname(os.path.abspath(database)), "mlartifacts") if database else None
    return name, client.create_experiment(name, artifact_location=location)


# MLflow's HTTP client retries 7 times with backoff and waits 120 s per request by default.
# Its telemetry thread, failing to reach its server (a closed network), removes an environment
# variable that a request being built reads: seen once as KeyError '_MLFLOW_TELEMETRY_SESSION_ID'
# from log_batch, which cost the run its tracker. Each is only a default: the user's own
# settings of these variables win.
MLFLOW_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
              "MLFLOW_HTTP_REQUEST_TIMEOUT": "30", "MLFLOW_DISABLE_TELEMETRY": "true"}


def mlflow_defaults() -> None:
    """:data:`MLFLOW_ENV` for this process, where the user set none (before MLflow is used)."""
    for name, value in MLFLOW_ENV.items():
        os.environ.setdefault(name, value)


class MLflowTracker(Tracker):
    name = "MLflow"

    def __init__(self, uri: str, config: dict, output_dir: str, run_id: str | None):
        mlflow_defaults()  # a server gone away costs seconds, not minutes of retries
        import mlflow

        self.client = mlflow.MlflowClient(tracking_uri=uri)
        if run_id is None:
            _, experiment_id = mlflow_experiment(self.client, uri)
            run = self.client.create_run(experiment_id, run_name=os.path.basename(output_dir))
            run_id = run.info.run_id
            params = [mlflow.entities.Param(key, json.dumps(value) if not isinstance(value, str) else value)
                      for key, value in sorted(config.items())]
            self.client.log_batch(run_id, params=[p for p in params if len(p.value) <= 6000])
        else:
            self.client.update_run(run_id, status="RUNNING")
        self.run_id = run_id

    def row(self, row, step):
        import mlflow

        now = int(1000 * time.time())
        metrics = [mlflow.entities.Metric(key, value, now, step) for key, value in numbers(row).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def video(self, path, step):
        self.client.log_artifact(self.run_id, path, "videos")

    def files(self, paths, summary):
        for path in paths:
            self.client.log_artifact(self.run_id, path, "weights" if path.endswith(".pkl") else None)

    def finish(self, failed):
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


class Trackers:
    """The trackers a run's config asks for, started in ``output_dir`` (each one's failure
    drops it with one warning)."""

    def __init__(self, config, output_dir: str):
        self.output_dir = output_dir
        self.active: list[Tracker] = []
        if config.wandb is None and config.mlflow is None:
            return
        ids_path = os.path.join(output_dir, IDS_FILE)
        ids = {}
        if os.path.exists(ids_path):  # a resumed run: continue its tracker runs
            try:
                with open(ids_path) as f:
                    ids = json.load(f)
            except (OSError, ValueError):
                pass
            ids = ids if isinstance(ids, dict) else {}
        values = config.to_dict()
        starts = [("wandb", config.wandb, WandbTracker), ("mlflow", config.mlflow, MLflowTracker)]
        for key, target, cls in starts:
            if target is None:
                continue
            try:
                tracker = cls(target, values, output_dir, ids.get(key) if isinstance(ids.get(key), str) else None)
            except Exception as exc:  # noqa: BLE001 - a tracker must not cost the run
                log.warning("%s: could not start a run (%s); the run goes on without it", cls.name, one_line(exc))
                continue
            ids[key] = tracker.run_id
            self.active.append(tracker)
            log.info("%s: logging this run as %s (%s)", tracker.name, tracker.run_id, target)
        write_json(ids_path, ids)

    def _each(self, method: str, *args) -> None:
        for tracker in list(self.active):
            try:
                getattr(tracker, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a tracker must not cost the run
                log.warning("%s stopped logging this run: %s (the run and its files go on)", tracker.name,
                            one_line(exc))
                self.active.remove(tracker)

    def row(self, row: dict) -> None:
        self._each("row", row, int(row["env_steps"]))

    def video(self, path: str, step: int) -> None:
        self._each("video", path, step)

    def finish(self, summary: dict) -> None:
        paths = [os.path.join(self.output_dir, name) for name in ("weights.pkl", "best_weights.pkl", "summary.json")]
        self._each("files", [p for p in paths if os.path.exists(p)], summary)
        self._each("finish", bool(summary.get("failure")))
        self.active = []
