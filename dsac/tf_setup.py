"""TensorFlow process settings for a learner: device visibility, GPU memory growth, threads."""

from __future__ import annotations

import math
import os


def configure_tensorflow(num_gpus: float, num_cpus: float, threads: int | None = None) -> str:
    """Call before building any model. Hides GPUs the process was not given (Ray does not
    always do it for ``num_gpus=0``), lets TF grow GPU memory instead of grabbing it all,
    and sizes TF's thread pools: ``threads``, else the CPUs the process asked for or, more,
    its node's cores up to 4 (rollout workers mostly wait for the learner under the rate
    limiter, so its matrix products may use the cores they leave idle: 1.5x the updates/s of
    one thread on 2 cores). Returns the device used."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if num_gpus <= 0:
        # Not given a GPU: keep CUDA from even probing for one (and logging that it failed).
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import tensorflow as tf

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
        threads = threads or max(1, math.ceil(num_cpus), min(4, len(os.sched_getaffinity(0))))
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        pass
    device = f"GPU ({gpus[0].name})" if num_gpus > 0 and gpus else "CPU"
    return f"{device}, {tf.config.threading.get_intra_op_parallelism_threads()} TF threads"
