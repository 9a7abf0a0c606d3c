"""Joining or starting Ray, and making the user's own code reach every Ray worker."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import sys
import time

import psutil
import ray

import dsac
from dsac.distributed import ray_private
from dsac.distributed.recovery import ray_error_line
from dsac.errors import DsacError
from dsac.formats.redaction import redact_text, redact_uri
from dsac.runtime.preparation import in_ray_job

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(dsac.__file__)))
log = logging.getLogger("dsac")

# Ray's own paragraphs about a process that died (worker and node ids, IP, port, exit detail,
# OOM advice), which it prints on the driver's console as "(raylet) ...": dsac says in one
# line what died and what it did about it (recovery.py), so without --verbose they go to the
# debug log only.
RAY_DEATH_NOTICE = re.compile(
    r"A worker died or was killed|Worker exit type|worker .* died|has been marked dead|"
    r"killed due to the node running low on memory|The actor died|actor is dead", re.IGNORECASE)


def connect_ray(address: str | None, env: str, verbose: bool = False, num_cpus: int | None = None) -> bool:
    """Join the cluster at ``address`` (``--address``) or ``RAY_ADDRESS``, else start a local
    Ray of ``num_cpus`` CPUs (None: the machine's); the user's ``env`` module reaches its
    workers. Returns whether this call started Ray (and so should shut it down)."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    try:
        if address:
            check_reachable(address)
            # Joining: the cluster's resources are what they are — no num_cpus/num_gpus here.
            # A `ray job submit` driver already ships its working dir; any other driver ships
            # the dsac package so tasks on other nodes can import it.
            ray.init(address=address, runtime_env=code_for_the_cluster(env))
        else:
            roots = [REPO_ROOT, *(package_root(m) for m in user_env_modules(env)), os.environ.get("PYTHONPATH")]
            pythonpath = os.pathsep.join(p for p in roots if p)
            start_local_ray(pythonpath, num_cpus)
    except (ConnectionError, TimeoutError, ValueError, RuntimeError) as exc:
        where = f"join a Ray cluster at {redact_uri(address)}" if address else "start a local Ray"
        why = redact_text(ray_error_line(exc), address) if address else ray_error_line(exc)
        raise DsacError(f"cannot {where}: {why}") from None
    if not verbose:
        quiet_ray_death_notices()
    return True


def quiet_ray_death_notices() -> None:
    """Send Ray's console notices of dead processes (:data:`RAY_DEATH_NOTICE`) to the debug
    log instead of the console; every other message Ray prints still reaches it. Ray's driver
    prints what its cluster publishes through one private function, which
    :func:`dsac.distributed.ray_private.wrap_console_printer` wraps once per process."""

    def quiet(print_to_stdstream):
        def filtered(data, *args, **kwargs):
            if data.get("pid") == "raylet":
                lines = [line for line in data.get("lines", []) if not RAY_DEATH_NOTICE.search(str(line))]
                for line in data.get("lines", []):
                    if line not in lines:
                        log.debug("ray: %s", line)
                if not lines:
                    return None
                data = {**data, "lines": lines}
            return print_to_stdstream(data, *args, **kwargs)

        return filtered

    ray_private.wrap_console_printer(quiet)


# Ray's raylet exits when its dashboard agent has not written its port within a fixed 15 s
# (ray-project/ray#65983), which on a busy machine (the agent's imports starved of CPU) ends
# ray.init() with a plain Exception some 30 s later. A second start usually finds the CPU.
STARTUP_TIMED_OUT = "timed out during startup"


def start_local_ray(pythonpath: str, num_cpus: int | None = None) -> None:
    """A local Ray of ``num_cpus`` CPUs (None: the machine's) whose processes import dsac (and
    the user's env package) from ``pythonpath``.
    The path travels in the environment the local Ray inherits, not in a job ``runtime_env``:
    with one, Ray could not use the worker processes it starts ahead of time (one per CPU) and
    would start new ones, a few seconds more before the learner's first update on 2 cores.
    A start that times out (:data:`STARTUP_TIMED_OUT`) is stopped and tried once more; a
    failure of Ray's own is raised as a RuntimeError (one line for the user)."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = pythonpath
    try:
        for attempt in (1, 2):
            ours = set(psutil.Process().children(recursive=True))
            try:
                # "local": a new Ray of its own, even where `ray start` (or another program) left
                # a cluster's address in Ray's temp dir, which ray.init() would otherwise join.
                ray.init(address="local", include_dashboard=False, num_cpus=num_cpus)
                return
            except (ConnectionError, TimeoutError, ValueError, RuntimeError):
                raise
            except Exception as exc:  # what Ray raises when its node does not come up
                if STARTUP_TIMED_OUT not in str(exc):
                    raise RuntimeError(str(exc)) from None
                if attempt == 2:
                    raise RuntimeError(f"{exc} (tried twice)") from None
                log.warning("the local Ray did not start in time (Ray's raylet waits 15 s for its dashboard agent; a "
                            "busy machine?): starting it again")
                stop_processes(set(psutil.Process().children(recursive=True)) - ours)  # what the failed start left
    finally:  # the raylet has it; this process's own environment is left as it was
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def stop_processes(processes, timeout_s: float = 5.0) -> None:
    """SIGTERM ``processes`` (psutil), then SIGKILL those still alive after ``timeout_s``."""
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(list(processes), timeout=timeout_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()


def code_for_the_cluster(env: str) -> dict | None:
    """The ``runtime_env`` of a driver joining a cluster: the dsac package and the user's
    ``env`` module travel to every node (a ``ray job submit`` driver's working dir already does)."""
    return None if in_ray_job() else {"py_modules": [dsac, *user_env_modules(env)]}


def user_env_modules(env: str) -> list:
    """The top-level package of a ``module:Name`` env (``--env``) that is the user's own code
    (not an installed package): every Ray worker must be able to import it."""
    if ":" not in env:
        return []
    top = sys.modules.get(env.split(":", 1)[0].split(".")[0])
    path = getattr(top, "__file__", None) or ""
    if top is None or top is dsac or not path or "-packages" + os.sep in path:
        return []
    return [top]


def package_root(module) -> str:
    """The directory to put on PYTHONPATH so that ``import <module>`` works."""
    path = os.path.dirname(os.path.abspath(module.__file__))
    return os.path.dirname(path) if os.path.basename(module.__file__) == "__init__.py" else path


def check_reachable(address: str, timeout_s: float = 10.0, reply_s: float = 5.0) -> None:
    """Fail fast when no Ray head answers at a ``host:port`` address: ``ray.init`` would hang,
    deaf to SIGTERM, on a closed port and on one where something else listens, such
    as the dashboard's port that ``dsac-submit`` takes. A Ray head's GCS (and a Ray Client
    server) speaks gRPC, so it answers HTTP/2's connection preface with a SETTINGS frame within
    ``reply_s``; an HTTP/1 server answers ``HTTP/1.x`` and anything else something else or
    nothing. A cluster with TLS (``RAY_USE_TLS``) is only connected to."""
    if address in ("auto", "local"):
        return
    host, _, port = address.split("://")[-1].rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DsacError(f"--address {redact_uri(address)} is not of the form host:port")
    try:
        connection = socket.create_connection((host, int(port)), timeout=timeout_s)
    except OSError as exc:
        raise DsacError(f"nothing answers at Ray address {redact_uri(address)} ({exc.strerror or exc})") from None
    reply = b""
    with connection:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return
        deadline = time.monotonic() + reply_s
        try:
            connection.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            while len(reply) < 9 and time.monotonic() < deadline:
                connection.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = connection.recv(9 - len(reply))
                if not chunk:
                    break
                reply += chunk
        except OSError:  # a reset or the deadline: judged by what came before it
            pass
    if len(reply) == 9 and reply[3] == 4 and reply[5:9] == bytes(4):  # a SETTINGS frame on stream 0: gRPC
        return
    if reply.startswith(b"HTTP/") or reply.lstrip()[:1] == b"<":  # a status line, or HTTP/0.9's bare page
        what = "an HTTP server answers there (a Ray dashboard's port?)"
    elif reply:
        what = "it answers nothing Ray speaks"
    else:
        what = f"it accepts connections but sent no reply in {reply_s:g} s"
    raise DsacError(f"no Ray head at {redact_uri(address)}: {what}; give the head's GCS address, as `ray start "
                    "--address` takes it (host:6379 by default)")


def ship_user_code(run, model) -> None:
    """Make the user's callbacks, policy class (the ``run`` section's) and custom model builders
    (the ``model`` section's) reach every Ray worker: their modules (unless part of dsac or
    installed packages) travel by value."""
    import ray.cloudpickle

    objects = [run.callbacks, run.policy_class, *model.custom_models.values()]
    for obj in objects:
        if obj is None or isinstance(obj, str):
            continue
        module = sys.modules.get(getattr(obj, "__module__", ""))
        name = getattr(module, "__name__", "")
        if module is None or name == "__main__" or name.split(".")[0] == "dsac":
            continue
        if "site-packages" in (getattr(module, "__file__", "") or ""):
            continue
        ray.cloudpickle.register_pickle_by_value(module)
