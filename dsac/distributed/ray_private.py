"""Every use dsac makes of Ray's private API (``ray._private``), in one place and each guarded.

Ray has no public call for these three things, and its private modules move between releases,
so each function here falls back to a plain answer instead of raising when the private name is
gone: dsac then runs as before, only less precisely (a CPU count without cgroup limits, GPUs
checked once Ray is up, Ray's notices of dead processes printed as Ray prints them).
``tests/test_ray_private.py`` checks each function on the pinned Ray and that no other file of
``dsac/`` touches ``ray._private``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable


def overridden(resource: str) -> float | None:
    """A count set in ``RAY_OVERRIDE_RESOURCES`` (a JSON object), which a new local Ray takes
    over what it detects: how autoscalers, and tests, give a node resources it does not see."""
    import json

    try:
        value = json.loads(os.environ.get("RAY_OVERRIDE_RESOURCES") or "{}").get(resource)
        return float(value) if value is not None else None
    except (ValueError, TypeError, AttributeError):  # Ray itself refuses such a value at start-up
        return None


def num_cpus() -> int:
    """The CPUs ``ray.init()`` without an address will find on this machine: Ray's own count,
    which honours a container's CPU quota, or the CPUs this process may run on."""
    if overridden("CPU") is not None:
        return int(overridden("CPU"))
    try:
        from ray._private.utils import get_num_cpus

        return int(get_num_cpus())
    except (ImportError, AttributeError):  # another Ray: its count is not importable
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def num_gpus() -> float:
    """The GPUs ``ray.init()`` without an address will find on this machine, or ``math.inf``
    when Ray's accelerator manager cannot say (the request is then checked once Ray is up)."""
    if overridden("GPU") is not None:
        return overridden("GPU")
    try:
        from ray._private.accelerators import get_accelerator_manager_for_resource

        return float(get_accelerator_manager_for_resource("GPU").get_current_node_num_accelerators())
    except Exception:  # any failure of a private API means "unknown", never a refused run
        return math.inf


def wrap_console_printer(wrap: Callable[[Callable], Callable]) -> bool:
    """Replace the function through which Ray's driver prints what its cluster publishes
    (``ray._private.worker.print_to_stdstream``, looked up at each call) by ``wrap(original)``,
    once per process: the wrapper carries ``dsac_wrapped``. Returns whether the printer is
    wrapped now; False when this Ray has no such function (its notices then print unchanged).

    Args:
        wrap: takes Ray's printer and returns the function that prints instead; it is called
            with the same arguments and should call the original for what it lets through.
    """
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return False
    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is None:
        return False
    if getattr(printer, "dsac_wrapped", False):
        return True
    wrapped = wrap(printer)
    wrapped.dsac_wrapped = True
    ray_worker.print_to_stdstream = wrapped
    return True
