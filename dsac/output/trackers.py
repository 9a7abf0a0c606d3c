"""Experiment trackers: Weights & Biases (``--wandb PROJECT``) and MLflow (``--mlflow URI``).

The driver's :class:`dsac.output.recorder.Recorder` hands each tracker what it writes to disk: the
config when the run starts, every ``progress.jsonl`` row (an evaluation, with its counters) at
its env step, every evaluation video, and at the end the weights files and ``summary.json``.
Nothing else logs: rollout workers, learners and the evaluator never import a tracker.

- :func:`check_trackers` runs before Ray starts: a missing extra, a W&B run without a login,
  or an MLflow tracking server that does not answer is one line and exit 2.
- A resumed run (``--resume``) continues the same W&B run and MLflow run: their ids are kept
  in ``<output_dir>/trackers.json``.
- A tracker that fails during the run (its server went away) logs one warning and is dropped;
  the run and its files go on.
- Credentials in a tracking URI (``https://user:token@host``, ``?token=...``) stay in the
  process: everything that leaves it — ``config.json``, the log, the trackers' params and
  config, error messages — shows the URI as :func:`redact_uri` gives it (``user:***@host``).
  MLflow gets the user and password through its own ``MLFLOW_TRACKING_USERNAME`` /
  ``MLFLOW_TRACKING_PASSWORD`` (:func:`mlflow_client_uri`), not in the URI it puts in its errors.

Both libraries are optional extras: ``pip install -e ".[wandb]"`` / ``".[mlflow]"``.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from dsac.envs.make import one_line
from dsac.errors import DsacError
from dsac.formats.files import write_json
from dsac.formats.redaction import Parts, redact_text, redact_uri

__all__ = ["redact_text", "redact_uri"]  # dsac.formats.redaction's, here where they always were

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


def _credentials(uri: str) -> tuple[str, str | None, str | None]:
    """(the URI without its userinfo, its user, its password), percent-decoded; None for those
    the URI does not give."""
    parts = Parts(uri)
    return parts.bare(), *parts.credentials()


def redact_argv() -> None:
    """This process's ``sys.argv`` with :func:`redact_uri` applied to each argument: W&B records
    the command line (``sys.argv[1:]``) with a run's metadata, an ``--mlflow`` URI's password
    with it. Called before W&B starts; nothing of dsac reads the arguments after parsing them."""
    sys.argv[:] = [redact_uri(arg) for arg in sys.argv]


def _sqlite_file(uri: str) -> str:
    """The database file of a ``sqlite:///PATH`` URI ('' when there is none)."""
    return uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else ""


def check_mlflow_uri(uri: str) -> None:
    """An ``http(s)://`` tracking server must answer its ``/health`` within 10 s; a
    ``sqlite:///`` or file store's directory must be writable. Never raises anything but a
    one-line :class:`DsacError` that shows the URI as :func:`redact_uri` gives it."""
    shown = redact_uri(uri)
    parts = Parts(uri)
    try:
        parsed = urllib.parse.urlparse(parts.bare())
    except Exception as exc:  # whatever the text makes the parser raise: its type, not its message
        raise DsacError(f"--mlflow {shown}: not a URI ({type(exc).__name__})") from None
    web = parts.head and parsed.scheme in ("http", "https")
    if parts.userinfo is not None and not parts.loose and not web:
        raise DsacError(f"--mlflow {shown}: a user and password go in an http:// or https:// URI "
                        "(http://USER:PASSWORD@HOST:PORT)")
    if web:
        if parts.loose:  # urllib and MLflow would read the password's start as a host or a port
            raise DsacError(f"--mlflow {shown}: the part before '@' holds a raw '/', '?' or '#': percent-encode "
                            "them in a user or password (%2F, %3F, %23)")
        _check_health(uri, shown, parts)
        return
    if parsed.scheme == "sqlite":
        path = _sqlite_file(uri)
        if not path:
            raise DsacError(f"--mlflow {shown}: a SQLite store is sqlite:///PATH/TO/FILE.db")
        directory = os.path.dirname(os.path.abspath(path))
    elif parsed.scheme in ("", "file"):
        directory = parsed.path if parsed.scheme == "file" else uri
    elif parsed.scheme in ("databricks", "databricks-uc", "uc"):
        return  # MLflow's own errors say what is wrong with these
    else:
        raise DsacError(f"--mlflow {shown}: not a tracking URI MLflow takes (http://HOST:PORT, https://..., "
                        "sqlite:///FILE.db, a directory, databricks)")
    from dsac.formats.files import check_writable_dir

    try:
        check_writable_dir(directory, "--mlflow")
    except DsacError as exc:
        reason = str(exc).rpartition(" is not writable: ")[2]  # its path is the URI's: shown redacted, once
        raise DsacError(f"--mlflow {shown}: the store's directory is not writable ({reason})") from None


def _check_health(uri: str, shown: str, parts: Parts) -> None:
    """The tracking server of an ``http(s)://`` URI answers its ``/health``."""
    # urllib takes no userinfo in a URL: the URI's user and password go as Basic auth, as
    # MLflow sends them (from MLFLOW_TRACKING_USERNAME/PASSWORD, set by mlflow_client_uri).
    user, password = parts.credentials()
    headers = {}
    if user is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password or ''}".encode()).decode()
    elif os.environ.get("MLFLOW_TRACKING_USERNAME") and os.environ.get("MLFLOW_TRACKING_PASSWORD"):
        pair = f"{os.environ['MLFLOW_TRACKING_USERNAME']}:{os.environ['MLFLOW_TRACKING_PASSWORD']}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    try:
        url = re.split(r"[?#]", parts.bare())[0].rstrip("/") + "/health"  # its query and fragment stay here
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read(64)
    except urllib.error.HTTPError as exc:
        raise DsacError(f"--mlflow {shown}: the tracking server answered HTTP {exc.code} "
                        f"{redact_text(str(exc.reason), uri)}"
                        + (" (check the user and password)" if exc.code in (401, 403) else "")) from None
    except (urllib.error.URLError, OSError) as exc:  # the network's reason, which quotes no URL
        reason = redact_text(str(getattr(exc, "reason", exc)), uri)
        raise DsacError(f"--mlflow {shown}: the tracking server does not answer ({reason})") from None
    except Exception as exc:  # http.client's InvalidURL, a ValueError: their messages quote the URL's parts
        raise DsacError(f"--mlflow {shown}: not a URL the health check can request ({type(exc).__name__})") from None


def check_trackers(output) -> None:
    """Before Ray starts: each tracker asked for can start (one line, exit 2, otherwise).

    Args:
        output: the output section (:class:`dsac.settings.sections.OutputSettings`), or anything with
            its ``wandb`` and ``mlflow``.
    """
    if output.wandb is not None:
        if not str(output.wandb).strip() or "/" in output.wandb:
            raise DsacError(f"--wandb takes a W&B project name, got {redact_uri(output.wandb)!r}")
        wandb = _import("wandb", "--wandb")
        mode = os.environ.get("WANDB_MODE", "").lower()
        if mode not in ("offline", "disabled", "dryrun") and not os.environ.get("WANDB_API_KEY"):
            try:
                logged_in = bool(wandb.login(prompt=False))  # a stored key; no network
            except Exception:  # wandb's own settings could not be read
                logged_in = False
            if not logged_in:
                raise DsacError("--wandb: not logged in to W&B: run `wandb login`, set WANDB_API_KEY, "
                                "or WANDB_MODE=offline to log to files (wandb sync later)")
    if output.mlflow is not None:
        _import("mlflow", "--mlflow")
        check_mlflow_uri(output.mlflow)


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

        redact_argv()
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


def mlflow_client_uri(uri: str) -> str:
    """The URI to give MLflow's client for ``uri``: without a ``user:password@``, whose user and
    password become this process's ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``
    (what the URI says wins: it was typed for this run). MLflow sends those as Basic auth with
    every request, its artifact uploads included, and then puts no secret in the URLs its errors
    quote. A lone user (a token) stays in the URI, where the HTTP library sends it."""
    bare, user, password = _credentials(uri)
    if user is None or password is None:
        return uri
    os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"] = user, password
    return bare


class MLflowTracker(Tracker):
    name = "MLflow"

    def __init__(self, uri: str, config: dict, output_dir: str, run_id: str | None):
        mlflow_defaults()  # a server gone away costs seconds, not minutes of retries
        import mlflow

        uri = mlflow_client_uri(uri)
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
    """The trackers a run's ``output`` section asks for, started in ``output_dir`` with the
    run's config ``values`` (``Config.to_dict``) as their params (each one's failure drops it
    with one warning)."""

    def __init__(self, output, values: dict, output_dir: str):
        self.output_dir = output_dir
        self.active: list[Tracker] = []
        self.uri = None
        if output.wandb is None and output.mlflow is None:
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
        self.uri = output.mlflow  # its secrets are hidden in warnings (to_dict gives it redacted)
        starts = [("wandb", output.wandb, WandbTracker), ("mlflow", output.mlflow, MLflowTracker)]
        for key, target, cls in starts:
            if target is None:
                continue
            try:
                tracker = cls(target, values, output_dir, ids.get(key) if isinstance(ids.get(key), str) else None)
            except Exception as exc:  # a tracker must not cost the run
                log.warning("%s: could not start a run (%s); the run goes on without it", cls.name,
                            redact_text(one_line(exc), output.mlflow))
                continue
            ids[key] = tracker.run_id
            self.active.append(tracker)
            log.info("%s: logging this run as %s (%s)", tracker.name, tracker.run_id, redact_uri(target))
        write_json(ids_path, ids)

    def _each(self, method: str, *args) -> None:
        for tracker in list(self.active):
            try:
                getattr(tracker, method)(*args)
            except Exception as exc:  # a tracker must not cost the run
                log.warning("%s stopped logging this run: %s (the run and its files go on)", tracker.name,
                            redact_text(one_line(exc), self.uri))
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
