"""What a dsac run will find on this machine, in a few lines, with each problem and its fix.

    dsac-doctor                      # or: python -m dsac.doctor
    dsac-doctor --json               # the same as one JSON object
    dsac-doctor --address HOST:PORT  # and the Ray cluster there

Exit 1 when something a default run needs is missing (TensorFlow, Ray or gymnasium that does
not import, a cluster that cannot be joined, ...); a problem a default run survives (a GPU
TensorFlow cannot use, a small ``/dev/shm``) is listed with exit 0. An ``--address`` where no
Ray head answers (nothing listens, or something else does: a dashboard's HTTP port) is one
line and exit 2, within seconds, before anything else is checked.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import threading

import dsac
from dsac.errors import DsacError, OneLineParser, quiet_when_the_reader_leaves
from dsac.formats.redaction import redact_uri

# Below this, Ray puts its object store in /tmp (slower) and dsac's weights boards lack room.
SHM_LOW_BYTES = 1 << 30
# How long joining the cluster of ``--address`` may take once a Ray head answered there.
JOIN_TIMEOUT_S = 30.0
# Packages a default run imports, by import name (their distribution names for the versions).
NEEDED = {"tensorflow": "tensorflow", "ray": "ray", "gymnasium": "gymnasium", "numpy": "numpy", "keras": "keras"}
OPTIONAL = {"ale_py": "ale-py", "mujoco": "mujoco", "onnx": "onnx", "onnxruntime": "onnxruntime"}


def version(distribution: str) -> str | None:
    """An installed distribution's version, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


class Findings:
    """What the checks found, and the problems with their fixes (``fatal``: a default run needs it)."""

    def __init__(self):
        self.facts: dict = {}
        self.problems: list[str] = []
        self.fatal = False

    def problem(self, text: str, fatal: bool = False) -> None:
        self.problems.append(text)
        self.fatal = self.fatal or fatal


def check_packages(found: Findings) -> None:
    """Python and the packages' versions; a needed one that does not import is fatal."""
    found.facts["python"] = platform.python_version()
    found.facts["dsac"] = dsac.__version__
    versions = {}
    for module, distribution in {**NEEDED, **OPTIONAL}.items():
        versions[distribution] = version(distribution)
        if module in NEEDED and versions[distribution] is None:
            found.problem(f"{distribution} is not installed: pip install -r requirements.txt (or pip install dsac)",
                          fatal=True)
    found.facts["versions"] = versions
    found.facts["ale"] = versions["ale-py"] is not None
    found.facts["mujoco"] = versions["mujoco"] is not None


def check_tensorflow(found: Findings, ray_gpus: float | None) -> None:
    """The GPUs TensorFlow sees and the learner's device; a GPU Ray has but TF cannot use."""
    from dsac.runtime.tf_setup import GPU_FIX, describe_gpu, import_tensorflow

    found.facts["tf_gpus"] = []
    found.facts["learner_device"] = "CPU"
    if found.facts["versions"].get("tensorflow") is None:
        return
    try:
        tf = import_tensorflow()
    except Exception as exc:  # a broken install: whatever it raises is the finding
        found.problem(f"TensorFlow does not import ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}): "
                      "reinstall it with pip install -r requirements.txt", True)
        return
    gpus = tf.config.list_physical_devices("GPU")
    found.facts["tf_gpus"] = [describe_gpu(tf, gpu) for gpu in gpus]
    found.facts["tf_built_with_cuda"] = bool(tf.test.is_built_with_cuda())
    if gpus and ray_gpus:
        found.facts["learner_device"] = found.facts["tf_gpus"][0].split(",")[0]
    elif ray_gpus and not gpus:
        found.problem(f"Ray sees {ray_gpus:g} GPU(s) but TensorFlow sees none, so the learner would run on the CPU; "
                      f"fix: {GPU_FIX}")
    elif gpus and not ray_gpus:
        found.problem("TensorFlow sees a GPU but Ray does not, so the learner runs on the CPU; fix: give the Ray "
                      "node its GPUs (ray start --num-gpus N)")


def check_machine(found: Findings) -> float | None:
    """CPUs, the GPUs a local Ray would find, and /dev/shm; returns Ray's GPU count (None: unknown)."""
    from dsac.distributed import ray_private

    found.facts["cpus"] = os.cpu_count()
    found.facts["ray_cpus"] = ray_private.num_cpus()
    gpus = ray_private.num_gpus()
    found.facts["ray_gpus"] = gpus if gpus != float("inf") else None
    try:
        free = shutil.disk_usage("/dev/shm").free
    except OSError:
        free = None
    found.facts["shm_free_bytes"] = free
    if free is None or free < SHM_LOW_BYTES:
        size = "no /dev/shm" if free is None else f"/dev/shm has {free / 2**20:.0f} MiB free"
        found.problem(f"{size}: Ray's object store falls back to /tmp (slower); fix: a larger /dev/shm "
                      "(docker run --shm-size=4g)")
    return found.facts["ray_gpus"]


def check_cluster(found: Findings, address: str) -> float | None:
    """Join the cluster at ``address`` for a moment: its nodes and resources; returns its GPUs.
    The join runs in a thread given :data:`JOIN_TIMEOUT_S`: ``ray.init`` can wait far longer on
    a server that speaks gRPC but is no Ray head, and from a thread it leaves SIGTERM as it is."""
    import ray

    outcome: dict = {}

    def join() -> None:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
            try:
                outcome["resources"] = ray.cluster_resources()
                outcome["nodes"] = sum(1 for n in ray.nodes() if n.get("Alive"))
            finally:
                ray.shutdown()
        except Exception as exc:  # whatever the join raises is the finding
            outcome["error"] = exc

    thread = threading.Thread(target=join, name="join-ray", daemon=True)
    thread.start()
    thread.join(JOIN_TIMEOUT_S)
    if thread.is_alive():  # stuck in Ray's C++ client: nothing to wait for, nothing to clean up
        print(f"dsac-doctor: error: --address {redact_uri(address)}: no Ray cluster joined within {JOIN_TIMEOUT_S:g} s",
              file=sys.stderr, flush=True)
        os._exit(2)
    if "resources" not in outcome:
        why = str(outcome.get("error", "")).strip().splitlines() or [type(outcome.get("error")).__name__]
        found.facts["cluster"] = None
        found.problem(f"cannot join a Ray cluster at {redact_uri(address)} ({why[0][:160]}): fix: start it "
                      "(ray start --head) or give its address as host:port", True)
        return None
    resources = outcome["resources"]
    found.facts["cluster"] = {"address": address, "nodes": outcome["nodes"], "CPU": resources.get("CPU", 0.0),
                              "GPU": resources.get("GPU", 0.0), "memory_bytes": resources.get("memory", 0.0)}
    found.facts["ray_gpus"] = resources.get("GPU", 0.0)
    return found.facts["ray_gpus"]


def diagnose(address: str | None = None) -> Findings:
    """Every check, in the order a run meets them."""
    found = Findings()
    check_packages(found)
    ray_gpus = check_machine(found)
    if address and found.facts["versions"].get("ray"):
        ray_gpus = check_cluster(found, address)
    check_tensorflow(found, ray_gpus)
    return found


def report(found: Findings) -> str:
    """The findings in a few lines."""
    f, v = found.facts, found.facts["versions"]
    lines = [f"dsac {f['dsac']} on Python {f['python']}: tensorflow {v['tensorflow']}, ray {v['ray']}, "
             f"gymnasium {v['gymnasium']}, numpy {v['numpy']}",
             f"CPUs: {f['cpus']} (a local Ray uses {f['ray_cpus']}); GPUs: Ray sees "
             f"{'?' if f['ray_gpus'] is None else format(f['ray_gpus'], 'g')}, TensorFlow sees "
             f"{len(f['tf_gpus'])}{': ' + '; '.join(f['tf_gpus']) if f['tf_gpus'] else ''}",
             f"learner device: {f['learner_device']}",
             f"ALE: {v['ale-py'] or 'not installed'}; MuJoCo: {v['mujoco'] or 'not installed'}; "
             f"ONNX export: {v['onnx'] or 'not installed'}",
             "/dev/shm: " + ("absent" if f["shm_free_bytes"] is None
                             else f"{f['shm_free_bytes'] / 2**30:.1f} GiB free")]
    if f.get("cluster"):
        c = f["cluster"]
        lines.append(f"Ray cluster at {redact_uri(c['address'])}: {c['nodes']} node(s), {c['CPU']:g} CPUs, "
                     f"{c['GPU']:g} GPUs, {c['memory_bytes'] / 2**30:.1f} GiB for tasks")
    lines += [f"problem: {p}" for p in found.problems] or ["no problems found"]
    return "\n".join(lines)


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    parser = OneLineParser("dsac-doctor", prog="dsac-doctor", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    parser.add_argument("--address", default=None, help="also join the Ray cluster at this address (host:port)")
    args = parser.parse_args(argv)
    if args.address and version("ray"):  # the flag first: a port where no Ray head answers is one line, in seconds
        try:
            from dsac.distributed.cluster import check_reachable

            check_reachable(args.address)
        except DsacError as exc:
            print(f"dsac-doctor: error: {exc}", file=sys.stderr)
            return 2
    found = diagnose(args.address)
    if args.json:
        print(json.dumps({**found.facts, "problems": found.problems, "ok": not found.fatal}))
    else:
        print(report(found))
    return 1 if found.fatal else 0


if __name__ == "__main__":
    sys.exit(main())
