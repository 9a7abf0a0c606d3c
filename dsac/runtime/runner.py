"""Where every run starts: :func:`start` chooses the serial runner (``config.local``: one
process, no Ray) or the distributed one, and :func:`run` trains until a stop condition. The
command line, :class:`dsac.Trainer`, Tune's trainable and ``dsac.run`` all start runs here."""

from __future__ import annotations

import time

from dsac.config import Config
from dsac.runtime.preparation import check_resume_state, prepare, resume_checkpoint
from dsac.runtime.run_loop import Run, run_until_stopped


def start(config: Config, started_at: float, insert_limit: int | None = None,
          checkpoint: dict | None = None) -> tuple[Run, bool]:
    """Check the input and start a run; returns it and whether Ray was started here (and so
    must be shut down when the run is over).

    Args:
        config: a validated config (:meth:`dsac.config.Config.validate`).
        started_at: ``time.time()`` the run counts its wall seconds from.
        insert_limit: no collection past this many env steps (None: ``total_env_steps``).
        checkpoint: a resumed run's checkpoint (:func:`dsac.formats.checkpoints.read_checkpoint`), or None.

    Raises:
        DsacError: bad input, found before training starts.
    """
    insert_limit = config.run.total_env_steps if insert_limit is None else insert_limit
    if config.resources.local:  # the serial runner: Ray is not imported
        from dsac.runtime.serial import SerialRun

        prepared = prepare(config, local=True)
        if checkpoint is not None:
            check_resume_state(prepared, checkpoint["state"], config.run.resume or "the checkpoint")
        return SerialRun(prepared, started_at, insert_limit, checkpoint), False
    from dsac.distributed.driver import start as start_distributed  # imports Ray

    return start_distributed(config, started_at, insert_limit, checkpoint=checkpoint)


def run(config: Config, started_at: float | None = None) -> dict:
    """Train until a stop condition (serially when ``config.local``); returns the summary
    (``stop_reason``, counters, paths).

    Raises:
        DsacError: bad input, found before training starts.
        RunFailed: a role failed during the run (what was learned is saved).
        KeyboardInterrupt: after a graceful stop on Ctrl-C (everything saved).
    """
    started_at = time.time() if started_at is None else started_at
    config = config.validate()
    checkpoint, started_at = resume_checkpoint(config, started_at)
    started, started_ray = start(config, started_at, checkpoint=checkpoint)
    try:
        return run_until_stopped(started)
    finally:
        if started_ray:
            import ray

            ray.shutdown()
