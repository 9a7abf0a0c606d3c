"""A dsac run as a Ray Tune trial: :class:`DsacTrainable`.

    from ray import tune
    from dsac.tune import DsacTrainable

    tuner = tune.Tuner(DsacTrainable, param_space={"env": "CartPole-v1", "local": True,
                                                   "lr": tune.grid_search([1e-3, 3e-4])},
                       tune_config=tune.TuneConfig(metric="eval_return_mean", mode="max"))
    best = tuner.fit().get_best_result()

A trial is a :class:`dsac.Trainer` built from the trial's flags (the ``launch.py`` flag names);
one Tune step is one ``Trainer.train()``; Tune's checkpoints are ``Trainer.save``'s full
training state (networks, targets, optimizer, counters), so Population Based Training's exploit
continues a better trial where it was. A ``local`` trial (the serial runner) asks Tune for one
CPU; a distributed trial for all of its roles at once, as a placement group sized from its own
flags, and places every task and actor of its run inside it.
"""

from __future__ import annotations

import gc
import math
import os
import time

from ray import tune

from dsac.config import Config
from dsac.formats.files import write_json
from dsac.runtime.run_loop import exit_at_once_on_sigterm
from dsac.runtime.tf_setup import own_this_process
from dsac.runtime.trainer import Trainer

# The evaluation's result key, carried in every result so that Tune's metric is always there.
METRIC = "eval_return_mean"
# A trial's first step trains until its first evaluation, at most this many iterations, so that
# the metric is in every result.
FIRST_EVAL_MAX_ITERATIONS = 1_000
# Written into a restored process's dsac output directory: the checkpoint and the counts it held.
RESTORED_FROM_FILE = "restored_from.json"


class DsacTrainable(tune.Trainable):
    """A dsac run as a Tune trial (the class API: Tune can checkpoint, pause and resume it).

    The trial's ``config`` holds ``launch.py`` flag names and values; unknown keys and bad
    values fail this trial with dsac's one-line message. ``output_dir`` defaults to ``dsac``
    inside the trial's directory.
    """

    def setup(self, config: dict) -> None:
        own_this_process()  # the trial's actor: Tune starts one per trial
        exit_at_once_on_sigterm()  # Tune ends it with SIGTERM after cleanup()
        self.trainer: Trainer | None = None  # built at the first step, or by load_checkpoint
        self.last_eval: dict = {}
        self.restored_from = ""  # the checkpoint this process continued from (PBT: maybe another trial's)
        Config.from_dict(self._values(config)).validate()  # bad flags fail the trial here, in one line

    def _values(self, flags: dict) -> dict:
        """The trial's flags for a Trainer: its dsac output in ``dsac/`` inside the trial's
        directory, or ``dsac-<k>`` when an earlier process of this trial (PBT's exploit, a
        restore) wrote there."""
        base = os.path.join(self.trial_dir(), "dsac")
        output_dir, k = base, 0
        while os.path.exists(os.path.join(output_dir, "progress.jsonl")):
            k += 1
            output_dir = f"{base}-{k}"
        return {"output_dir": output_dir, "progress_bar": False, "tensorboard": False, **flags}

    def trial_dir(self) -> str:
        """The trial's directory under the experiment's storage path (Tune's ``result.json`` is
        there too), or its working directory when the storage is not a local path."""
        storage = getattr(self, "_storage", None)
        path = storage.trial_fs_path if storage is not None else None
        return path if path and os.path.isabs(path) else self.logdir

    def step(self) -> dict:
        """One ``Trainer.train()`` (the first: until the first evaluation), its result with the
        latest evaluation carried over and Tune's ``timesteps_total``."""
        if self.trainer is None:
            self.trainer = Trainer(self._values(self.config))
        for _ in range(FIRST_EVAL_MAX_ITERATIONS):
            result = self.trainer.train()
            if METRIC in result:
                self.last_eval = {k: result[k] for k in (METRIC, "eval_return_std") if k in result}
            if self.last_eval:
                break
        result = {k: v for k, v in result.items() if v is not None}
        return {**result, **self.last_eval, "timesteps_total": result["env_steps"],
                "dsac_output_dir": self.trainer.output_dir, "dsac_restored_from": self.restored_from,
                "done": self._finished(result)}

    def _finished(self, result: dict) -> bool:
        """The trial's own budget (``total_env_steps``, ``max_seconds``, ``stop_return``) is spent."""
        run = self.trainer.config.run
        return bool(
            (run.total_env_steps and result["env_steps"] >= run.total_env_steps)
            or (run.max_seconds and time.time() - self.trainer.started_at >= run.max_seconds)
            or (run.stop_return is not None and self.last_eval.get(METRIC, -math.inf) >= run.stop_return)
        )

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        self.trainer.save(checkpoint_dir)

    def load_checkpoint(self, checkpoint) -> None:
        """Continue from a checkpoint (this trial's, or with PBT a better trial's), with this
        trial's own flags."""
        path = checkpoint if isinstance(checkpoint, str) else checkpoint.path
        self._drop_trainer()
        self.trainer = Trainer.restore(path, self._values(self.config), trust_code=True)
        self.restored_from = os.path.abspath(path)
        # dsac's own record of the restore, beside the run's progress.jsonl: Tune's result.json
        # may lose rows when a trial restarts, so this is what tells where a process took up.
        write_json(os.path.join(self.trainer.output_dir, RESTORED_FROM_FILE),
                   {"checkpoint": self.restored_from, **self.trainer.restored_counters})

    def cleanup(self) -> None:
        self._drop_trainer()

    def _drop_trainer(self) -> None:
        """Stop the run and release its actor handles now, before Tune ends the process."""
        if self.trainer is not None:
            self.trainer.stop()
            self.trainer = None
            gc.collect()

    @classmethod
    def default_resource_request(cls, config: dict) -> tune.PlacementGroupFactory:
        """A ``local`` trial: one CPU, where it does all its work. A distributed trial: all of
        its roles at once (:func:`dsac.distributed.topology.trial_bundles`: its driver, each
        learner, each rollout worker, the evaluator), so that trials sharing a cluster never
        oversubscribe it and one that does not fit waits; the run places everything inside."""
        return tune.PlacementGroupFactory(resource_bundles(config))


def resource_bundles(flags: dict) -> list[dict]:
    """The placement-group bundles of a trial with these flags (a bad flag: one CPU; the trial
    then fails with dsac's message in its setup)."""
    from dsac.distributed.topology import TRIAL_DRIVER_CPUS, trial_bundles

    try:
        config = Config.from_dict(dict(flags)).validate()
    except Exception:  # reported by the trial's own setup, in one line
        return [{"CPU": TRIAL_DRIVER_CPUS}]
    return [{"CPU": TRIAL_DRIVER_CPUS}] if config.resources.local else trial_bundles(config.resources, config.flow)
