"""The Python API: ``Trainer(config)`` runs the distributed system one iteration at a time.

    from dsac import Trainer

    trainer = Trainer({"env": "Pendulum-v1", "num_workers": 4, "model": {"fcnet_hiddens": [64, 64]}})
    for _ in range(10):
        result = trainer.train()          # about config.steps_per_iteration more env steps
        print(result["env_steps"], result.get("eval_return_mean"))
    path = trainer.save("checkpoints/p")     # the full training state
    trainer.stop()

    trainer = Trainer.restore("checkpoints/p")  # continues training from it
    action = trainer.compute_single_action(obs)

The actors and tasks start once, in the constructor, and keep running until ``stop()``;
between ``train()`` calls collection is held at the iteration's limit by the replay buffer,
and the learner waits for it. Each ``train()`` ends by taking the learner's full state: what
``get_policy()`` acts with and what ``save()`` writes until the next ``train()``, so a
restored Trainer acts exactly as the one that saved it (as RLlib's ``Algorithm``, which
stands still between calls).
"""

from __future__ import annotations

import os
import time

import numpy as np

from dsac.config import Config
from dsac.errors import DsacError
from dsac.formats.checkpoints import read_checkpoint
from dsac.formats.files import check_run_dir, check_writable_dir
from dsac.runtime import build
from dsac.runtime.preparation import resume_config
from dsac.runtime.runner import start

POLL_S = 0.2
STALL_TIMEOUT_S = 120.0  # train() gives up waiting when nothing moves for this long


class Trainer:
    """Runs dsac's distributed system from Python.

    Args:
        config: a dict of flag names (plus RLlib's ``model`` dict, ``callbacks``,
            ``policy_class``) or a :class:`dsac.config.Config`. Unknown keys are refused with
            close matches; the algorithm's defaults fill what is not given.
        local: run rollout, replay, learner and evaluator in this process without Ray (the
            serial runner of ``launch.py --local``; also ``num_workers=0`` or ``local=True`` in
            the config) — same results API, for a debugger and for tiny runs.
    """

    def __init__(self, config: dict | Config | None = None, *, local: bool | None = None,
                 _checkpoint: dict | None = None):
        config = config if isinstance(config, Config) else Config.from_dict(config or {})
        if local is not None:
            config = config.replace(local=local)
        self.config = config.validate()
        self.started_at = time.time() - ((_checkpoint or {}).get("meta", {}).get("wall_s", 0.0))
        self.iteration = 0
        self._started_ray = False
        self._run, self._started_ray = start(self.config, self.started_at, insert_limit=0, checkpoint=_checkpoint)
        counters = self._run.counters
        # Where a restored Trainer took up its checkpoint's counts (None when it started fresh,
        # from zero); train() counts the warm-up and the updates wanted from there.
        self.restored_counters: dict | None = (
            {"env_steps": counters["env_steps"], "updates": counters["updates"]} if _checkpoint else None)
        self._local_policy = None
        self._stopped = False
        # The learner's state as the last train() ended: what get_policy() acts with and
        # save() writes, so that both stand still between train() calls even while the
        # learner applies the batches it still had in flight.
        self._held = None
        self._held_weights = None  # its acting weights, taken out once

    @property
    def output_dir(self) -> str:
        return self._run.output_dir

    @property
    def actor_handles(self) -> dict:
        """The Ray handles of the running actors (the same across ``train()`` calls; empty
        when local)."""
        if self.config.resources.local:
            return {}
        return {"parameter_server": self._run.ps, "run_monitor": self._run.monitor,
                "replay_shards": list(self._run.shards)}

    def train(self) -> dict:
        """Let the system collect ``config.steps_per_iteration`` more env steps and the learner
        catch up with them; returns a result dict: ``iteration``, ``env_steps``, ``updates``,
        ``env_steps_per_s``, ``updates_per_s``, ``episodes_this_iter``, ``episode_return_mean``,
        the learner's latest statistics (losses, ...), ``custom_metrics/*`` and, when an
        evaluation finished during the iteration, ``eval_return_mean`` / ``eval_return_std``.

        Raises:
            DsacError: the run failed (a role crashed) — what was learned is saved.
        """
        if self._stopped:
            raise DsacError("this Trainer is stopped")
        started_counts, started = dict(self._run.counters), time.monotonic()
        target = started_counts["env_steps"] + self.config.run.steps_per_iteration
        self._run.set_insert_limit(target)
        evaluations, episodes = self._step_until(target)
        self._held = self._run.full_state()
        self._held_weights = self._acting_weights(self._held.state)
        self.iteration += 1
        result = self._result(started_counts, max(time.monotonic() - started, 1e-9), evaluations, episodes)
        if self._run.callbacks is not None:
            self._run.callbacks.on_train_result(trainer=self, result=result)
        return result

    def _updates_wanted(self, env_steps: int) -> float:
        """The updates the learner has caught up at, for ``env_steps`` collected: the ratio
        counted from where this Trainer started (a restored one warms up again, as a resumed
        run), give or take what is in flight."""
        flow, algorithm = self.config.flow, self.config.algorithm
        from_counts = self.restored_counters or {"env_steps": 0, "updates": 0}
        in_flight = (flow.batches_per_sample * (flow.prefetch + 1) * self.config.resources.num_replay_shards
                     + flow.push_every)
        new_steps = env_steps - from_counts["env_steps"] - algorithm.learning_starts
        return from_counts["updates"] + algorithm.updates_per_step * new_steps - in_flight

    def _step_until(self, target: int) -> tuple[list[dict], list]:
        """Step the run until it has ``target`` env steps and the learner caught up with them,
        or nothing moved for :data:`STALL_TIMEOUT_S`; the evaluations and episodes meanwhile.

        Raises:
            DsacError: the run failed (it is stopped, what was learned saved).
        """
        run = self._run
        evaluations, episodes = [], []
        last_progress, last_seen = time.monotonic(), (run.counters["env_steps"], run.counters["updates"])
        while True:
            step = run.step(POLL_S)
            evaluations += step.lines
            episodes += step.episodes
            if run.failure:
                summary = self.stop()
                raise DsacError(f"run failed: {summary['failure']} (weights so far are in {run.weights_path})")
            seen = (run.counters["env_steps"], run.counters["updates"])
            if seen[0] >= target and seen[1] >= self._updates_wanted(seen[0]):
                return evaluations, episodes
            if seen != last_seen:
                last_seen, last_progress = seen, time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                return evaluations, episodes  # nothing moves (e.g. the learner cannot catch up): report what there is

    def _result(self, started_counts: dict, elapsed: float, evaluations: list[dict], episodes: list) -> dict:
        """The result dict of :meth:`train` (see there) for an iteration that took ``elapsed``
        seconds from ``started_counts``."""
        from dsac.output.recorder import custom_metric_means

        c = self._run.counters
        result = {
            "iteration": self.iteration,
            "env_steps": c["env_steps"],
            "updates": c["updates"],
            "weights_version": c["version"],
            "env_steps_per_s": (c["env_steps"] - started_counts["env_steps"]) / elapsed,
            "updates_per_s": (c["updates"] - started_counts["updates"]) / elapsed,
            "time_this_iter_s": elapsed,
            "episodes_this_iter": len(episodes),
            "episode_return_mean": float(np.mean([e.episode_return for e in episodes])) if episodes else None,
            **{k: v for k, v in self._run.learner_stats.items() if isinstance(v, int | float)},
            **custom_metric_means([e.custom_metrics for e in episodes if e.custom_metrics]),
        }
        if evaluations:
            result["eval_return_mean"] = evaluations[-1]["eval_return_mean"]
            result["eval_return_std"] = evaluations[-1]["eval_return_std"]
        return result

    def get_policy(self):
        """A local (driver-side, numpy) policy with the weights as the last :meth:`train` ended
        (the latest pushed ones before the first)."""
        policy = self._policy_for_names()
        if self._held_weights is not None:
            policy.set_weights(self._held_weights)
            return policy
        deadline = time.monotonic() + STALL_TIMEOUT_S
        latest = self._run.latest()
        while latest.weights is None:  # the learner's first push comes once TensorFlow is up
            if self._run.failure:
                raise DsacError(f"no weights: {self._run.failure}")
            if time.monotonic() > deadline:
                raise DsacError("no weights yet: the learner has not pushed any")
            self._run.check_tasks(POLL_S)
            latest = self._run.latest()
        policy.set_weights(latest.weights)
        return policy

    def _acting_weights(self, state: dict) -> dict:
        """The acting weights within a learner's full state (it holds them by the same names),
        or the latest pushed ones for a policy whose names it does not hold."""
        names = list(self._policy_for_names().weight_shapes() or ())
        if names and all(n in state for n in names):
            return {n: state[n] for n in names}
        return self._run.latest().weights

    def compute_single_action(self, obs, explore: bool = False):
        """The action for one observation (deterministic unless ``explore``)."""
        return self.get_policy().compute_actions(np.asarray(obs)[None], explore=explore)[0]

    def save(self, checkpoint_dir: str | None = None) -> str:
        """Write the full training state — networks, targets, optimizer state, entropy
        coefficient, update count, weights version, env steps — to ``checkpoint_dir``
        (default: ``<output_dir>/checkpoint-<iteration>``) in a run's checkpoint format
        (``checkpoint/``, read with the same checks as ``--resume``), with ``config.json`` and
        the acting weights as ``weights.pkl`` (for :func:`dsac.load_policy`). Returns the directory.

        Raises:
            DsacError: nothing to save yet (call :meth:`train` first), or the learner failed.
        """
        run = self._run
        checkpoint_dir = checkpoint_dir or os.path.join(self.output_dir, f"checkpoint-{self.iteration:06d}")
        check_writable_dir(checkpoint_dir, "Trainer.save")
        check_run_dir(checkpoint_dir, "Trainer.save")
        if run.latest().weights is None:
            raise DsacError("no weights to save yet: call train() first")
        if self._held is not None:
            taken, weights = self._held, self._held_weights
        else:
            taken = run.full_state()
            weights = self._acting_weights(taken.state)
        counters = {**run.counters, "updates": int(taken.report.updates)}
        return run.recorder.saved_state(checkpoint_dir, taken.state, weights, run.latest().version, counters)

    def _policy_for_names(self):
        """A local acting policy (numpy; no weights needed) that knows its weight names."""
        if self._local_policy is None:
            self._local_policy = build.acting_policy(self.config, self._run.observation_space,
                                                     self._run.action_space, self.config.run.seed)
        return self._local_policy

    @classmethod
    def restore(cls, checkpoint_dir: str, overrides: dict | None = None, *, trust_code: bool = False) -> Trainer:
        """A new Trainer that continues from :meth:`save`'s directory (or a run directory with a
        checkpoint): the learner's networks, targets, optimizer and update count, the weights
        version and the env step count carry on; the replay buffer refills. ``overrides``
        change config keys (e.g. ``output_dir``; a new run directory by default).

        The files are checked as ``--resume`` checks them: the checkpoint's arrays and types,
        the weights through the safe loader. The saved config is a run's record, read as data
        (docs/safety.md): code it names (an env module, callbacks, policy class, custom model) is
        imported only with ``trust_code=True`` or when ``overrides`` give the same value; its
        ``address``, ``mlflow``, ``wandb``, ``storage_path``, ``init_weights`` and
        ``output_dir`` are left out (give them in ``overrides``). A directory where a name dsac
        reads or writes is a symlink is refused.

        Raises:
            DsacError: one line naming the file and the problem.
        """
        values = {"output_dir": None, **(overrides or {}), "trust_code": trust_code}
        config = resume_config(checkpoint_dir, values, "Trainer.restore").validate()
        checkpoint = read_checkpoint(checkpoint_dir, label=checkpoint_dir)  # its weights too, safely
        return cls(config, _checkpoint=checkpoint)

    def stop(self) -> dict:
        """Stop the actors and tasks, save the final weights; returns the run's summary."""
        if self._stopped:
            return self._summary
        self._stopped = True
        self._summary = self._run.stop("trainer.stop")
        if self._started_ray:
            import ray

            ray.shutdown()
        return self._summary

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

