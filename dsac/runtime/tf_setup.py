"""TensorFlow in a dsac process: a quiet import, and a learner's settings (device visibility,
GPU memory growth, threads)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import tempfile

# What TensorFlow's C++ side prints while it starts on a machine without a GPU, written
# straight to file descriptor 2 while its libraries load (twice: two copies of absl) and at the
# first GPU query — before TF_CPP_MIN_LOG_LEVEL applies (the stub lines) or at ERROR level
# (cuInit), so no environment variable hides them all. The cuInit pattern matches only "no
# driver" (303) and "no device": on a GPU machine a real reason (a missing libcudnn, a driver
# mismatch) still shows.
_PREFIX = r"^(?:[IWEF]\d{4} \d\d:\d\d:[\d.]+\s+\d+ |\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] )(?:\S*/)?"
START_UP_NOTICES = re.compile("|".join((
    r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$",
    _PREFIX + r"cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine",
    _PREFIX + r"\w+\.cc:\d+\] failed call to cuInit: .*(UNKNOWN ERROR \(303\)|CUDA_ERROR_NO_DEVICE)",
    _PREFIX + r"cuda_diagnostics\.cc:\d+\] ",
    _PREFIX + r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized",
    r"^To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\.$",
    _PREFIX + r"\w+\.cc:\d+\] oneDNN custom operations are on\.",
    _PREFIX + r"\w+\.cc:\d+\] Unable to register cu(FFT|DNN|BLAS) factory: ",
    _PREFIX + r"\w+\.cc:\d+\] [Cc]omputation placer (already registered|creation function is already registered)",
    _PREFIX + r"\w+\.cc:\d+\] TF-TRT Warning: Could not find TensorRT",
)))
# Marks a TF_CPP_MIN_LOG_LEVEL that dsac set (inherited by Ray workers started after it), so
# that it is not mistaken for the user's own.
_LEVEL_SET_BY_DSAC = "DSAC_SET_TF_CPP_MIN_LOG_LEVEL"

# Keras imports these at its own import, each inside ``try: ... except ImportError``, only for
# wrappers, input adapters and notebook helpers dsac never calls (scikit-learn estimators,
# pandas DataFrames in ``fit``, OpenCV box drawing, IPython's shell in its file editor,
# matplotlib's image gallery): over a third of TensorFlow and Keras's import CPU where they
# are installed (mlflow brings the first two). A process that is dsac's alone imports Keras
# without them (:func:`own_this_process`); a user's process, where their code may hand Keras
# a DataFrame, keeps Keras whole.
KERAS_EXTRAS = ("sklearn", "pandas", "cv2", "IPython", "matplotlib")
_OWN_PROCESS = False


def own_this_process() -> None:
    """Mark this process as dsac's alone (a command-line program, a Ray task's or a Tune
    trial's worker), so that TensorFlow is imported here without :data:`KERAS_EXTRAS`."""
    global _OWN_PROCESS
    _OWN_PROCESS = True


@contextlib.contextmanager
def _keras_extras_hidden():
    """Within the block, ``import`` of a :data:`KERAS_EXTRAS` module not yet imported raises
    ImportError; afterwards each imports as usual (for an env that uses OpenCV, say)."""
    hidden = [name for name in KERAS_EXTRAS if name not in sys.modules] if _OWN_PROCESS else []
    for name in hidden:
        sys.modules[name] = None
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def tensorflow_is_quiet(verbose: bool = False) -> bool:
    """Whether TensorFlow's start-up notices are hidden: yes unless ``--verbose`` or the user
    set ``TF_CPP_MIN_LOG_LEVEL`` to 0 or 1 (then TensorFlow's own output is theirs to see). A
    level of 2 or 3 — the usual way to silence TensorFlow — asks for less output, not more: it
    is kept, and the notices it cannot hide (written before it applies) are hidden as well."""
    if verbose:
        return False
    if "TF_CPP_MIN_LOG_LEVEL" not in os.environ or _LEVEL_SET_BY_DSAC in os.environ:
        return True
    try:
        return int(os.environ["TF_CPP_MIN_LOG_LEVEL"].strip()) >= 2
    except ValueError:  # not a level TensorFlow reads: its output stays the user's to see
        return False


@contextlib.contextmanager
def start_up_notices_hidden(enabled: bool = True):
    """Point file descriptor 2 (where C++ writes, whatever ``sys.stderr`` is) at a temporary
    file for the block, then write back every line of it except TensorFlow's known start-up
    notices: anything else — a real error — still reaches stderr, after the block. Start no
    child process inside the block (it would inherit the temporary fd 2)."""
    if not enabled:
        yield
        return
    for stream in (sys.stderr, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    try:
        saved = os.dup(2)
    except OSError:  # fd 2 is closed: nothing to keep clean
        yield
        return
    with tempfile.TemporaryFile(prefix="dsac-tf-") as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            for stream in (sys.stderr, sys.__stderr__):
                with contextlib.suppress(Exception):
                    stream.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().splitlines(keepends=True)
                    if not START_UP_NOTICES.search(line.decode("utf-8", "replace").rstrip("\r\n"))]
            with contextlib.suppress(OSError):
                os.write(2, b"".join(kept))


def import_tensorflow(verbose: bool = False, configure=None):
    """``import tensorflow``, with its devices initialized, without the C++ start-up notices
    of a machine without a GPU (unless :func:`tensorflow_is_quiet` says otherwise). Every
    dsac process that uses TensorFlow imports it through here. ``configure(tf)`` runs after
    the import and before the first op (device and thread settings are fixed by that op)."""
    if "tensorflow" in sys.modules:
        tf = sys.modules["tensorflow"]
        if configure is not None:
            configure(tf)
        return tf
    quiet = tensorflow_is_quiet(verbose)
    if quiet and "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # INFO and WARNING of later C++ logging too
        os.environ[_LEVEL_SET_BY_DSAC] = "1"
    with start_up_notices_hidden(quiet), _keras_extras_hidden():
        import keras  # noqa: F401  its own top level (saving, visualization), which tf.keras skips
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # loads the GPU platform
        if configure is not None:
            configure(tf)
        tf.constant(0.0) + 1.0  # the first op initializes the devices: cuInit's notice comes here
    return tf


# What a user with an NVIDIA GPU installs so that TensorFlow uses it (docs/guide.md#gpus).
GPU_FIX = "pip install 'dsac[gpu]' (TensorFlow's CUDA 12 and cuDNN 9 libraries; an NVIDIA driver must be installed)"


def gpu_memory_mib(index: str) -> int | None:
    """Total memory of GPU ``index`` (a CUDA index or UUID) as the driver reports it, or None
    (no ``nvidia-smi``, or it failed): TensorFlow has no public call for a device's total memory."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", index],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.strip().splitlines()[0]) if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def describe_gpu(tf, gpu) -> str:
    """``NVIDIA A10G, 22,731 MiB``: a TensorFlow GPU device's name and memory (unknown memory
    left out)."""
    try:
        name = tf.config.experimental.get_device_details(gpu).get("device_name") or gpu.name
    except (ValueError, RuntimeError):
        name = gpu.name
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    index = int(gpu.name.rsplit(":", 1)[-1])
    memory = gpu_memory_mib(visible[index].strip() if index < len(visible) and visible[index].strip() else str(index))
    return f"{name}, {memory:,} MiB" if memory else name


def learner_device(tf, num_gpus: float) -> tuple[str, str | None]:
    """``(device, warning)``: the GPU TensorFlow uses (named, with its memory) or ``CPU``; the
    warning, one line naming the fix, when Ray gave the process a GPU that TensorFlow cannot see."""
    gpus = tf.config.list_physical_devices("GPU")
    if num_gpus > 0 and gpus:
        return f"GPU ({describe_gpu(tf, gpus[0])})", None
    if num_gpus <= 0:
        return "CPU", None
    why = ("this TensorFlow is built without CUDA" if not tf.test.is_built_with_cuda()
           else "CUDA's libraries or the NVIDIA driver were not found")
    return "CPU", (f"Ray gave the learner {num_gpus:g} GPU but TensorFlow sees none ({why}), so it learns on the "
                   f"CPU; fix: {GPU_FIX}")


def configure_tensorflow(num_gpus: float, num_cpus: float, threads: int | None = None,
                         verbose: bool = False) -> tuple[str, str | None]:
    """Call before building any model. Hides GPUs the process was not given (Ray does not
    always do it for ``num_gpus=0``), lets TF grow GPU memory instead of grabbing it all,
    and sizes TF's thread pools: ``threads``, else the CPUs the process asked for (as Ray sizes
    a task's OpenMP threads). A small network's update is a chain of small ops: spread over
    more threads than the process has cores of its own, each op waits for a core the run's
    other roles hold, and the update slows down instead. Returns the device used, described
    (:func:`learner_device`; with TF's threads), and the warning of a GPU given but not seen, if any."""
    if num_gpus <= 0:
        # Not given a GPU: keep CUDA from even probing for one (and logging that it failed).
        os.environ["CUDA_VISIBLE_DEVICES"] = ""

    def configure(tf):
        gpus = tf.config.list_physical_devices("GPU")
        # Ray reuses worker processes: TF may already be initialized here by an earlier task (e.g.
        # a rollout worker acting with a custom Keras model). Then these settings are fixed.
        try:
            if num_gpus <= 0 or not gpus:
                if gpus:
                    tf.config.set_visible_devices([], "GPU")
            else:
                for gpu in gpus:
                    tf.config.experimental.set_memory_growth(gpu, True)
            count = threads or max(1, math.ceil(num_cpus))
            tf.config.threading.set_intra_op_parallelism_threads(count)
            tf.config.threading.set_inter_op_parallelism_threads(count)
        except RuntimeError:
            pass

    tf = import_tensorflow(verbose, configure)
    device, warning = learner_device(tf, num_gpus)
    return f"{device}, {tf.config.threading.get_intra_op_parallelism_threads()} TF threads", warning
