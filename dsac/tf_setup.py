"""TensorFlow in a dsac process: a quiet import, and a learner's settings (device visibility,
GPU memory growth, threads)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import tempfile

# What TensorFlow's C++ side prints while it starts on a machine without a GPU. TF >= 2.19
# prints the CUDA stub lines before TF_CPP_MIN_LOG_LEVEL applies, and cuInit's failure at
# ERROR level, so the level alone cannot hide them.
START_UP_NOTICES = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called|cudart_stub\.cc|cuda_platform\.cc|"
    r"cuda_executor\.cc|cuda_diagnostics\.cc|cuda_dnn\.cc|cuda_fft\.cc|cuda_blas\.cc|dso_loader\.cc|"
    r"cpu_feature_guard\.cc|To enable the following instructions|computation_placer\.cc|"
    r"oneDNN custom operations are on|TF-TRT Warning|Could not find cuda drivers|failed call to cuInit|"
    r"Unable to register cu(DNN|FFT|BLAS) factory|could not open file to read NUMA node"
)


def tensorflow_is_quiet(verbose: bool = False) -> bool:
    """Whether TensorFlow's start-up notices are hidden: yes unless ``--verbose`` or the user
    set ``TF_CPP_MIN_LOG_LEVEL`` (then TensorFlow's own output is theirs to see)."""
    return not verbose and "TF_CPP_MIN_LOG_LEVEL" not in os.environ


@contextlib.contextmanager
def start_up_notices_hidden(enabled: bool = True):
    """Send file descriptor 2 to a temporary file for the block, then write back every line
    of it except TensorFlow's known start-up notices (anything else — a real error — still
    reaches stderr, after the block)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr is no real file (e.g. captured)
        fd = None
    if not enabled or fd is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines(keepends=True)
                    if not START_UP_NOTICES.search(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


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
    if quiet:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # INFO and WARNING of later C++ logging too
    with start_up_notices_hidden(quiet):
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # loads the GPU platform
        if configure is not None:
            configure(tf)
        tf.constant(0.0) + 1.0  # the first op initializes the devices: cuInit's notice comes here
    return tf


def configure_tensorflow(num_gpus: float, num_cpus: float, threads: int | None = None, verbose: bool = False) -> str:
    """Call before building any model. Hides GPUs the process was not given (Ray does not
    always do it for ``num_gpus=0``), lets TF grow GPU memory instead of grabbing it all,
    and sizes TF's thread pools: ``threads``, else the CPUs the process asked for or, more,
    its node's cores up to 4 (rollout workers mostly wait for the learner under the rate
    limiter, so its matrix products may use the cores they leave idle: 1.5x the updates/s of
    one thread on 2 cores). Returns the device used."""
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
            count = threads or max(1, math.ceil(num_cpus), min(4, len(os.sched_getaffinity(0))))
            tf.config.threading.set_intra_op_parallelism_threads(count)
            tf.config.threading.set_inter_op_parallelism_threads(count)
        except RuntimeError:
            pass

    tf = import_tensorflow(verbose, configure)
    gpus = tf.config.list_physical_devices("GPU")
    device = f"GPU ({gpus[0].name})" if num_gpus > 0 and gpus else "CPU"
    return f"{device}, {tf.config.threading.get_intra_op_parallelism_threads()} TF threads"
