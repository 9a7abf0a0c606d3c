"""Checks across a config's sections (:meth:`dsac.config.Config.check` runs them after each
section's own): settings of different sections that must agree, and the code a config names.
"""

from __future__ import annotations

from dsac.errors import DsacError
from dsac.settings.registry import load_subclass


def check_relations(run, resources, algorithm, replay, model) -> None:
    """Fields of different sections (a config's ``run``, ``resources``, ``algorithm``, ``replay``
    and ``model``) that must agree."""
    buffer_size = replay.buffer_size
    if run.her and replay.n_step != 1:
        raise DsacError(f"--her relabels one-step transitions; --n_step {replay.n_step} would sum rewards "
                        "of the episode's own goal (use --n_step 1)")
    if algorithm.batch_size > buffer_size:
        raise DsacError(
            f"--batch_size {algorithm.batch_size} is larger than the replay capacity --buffer_size {buffer_size}"
        )
    if algorithm.learning_starts > buffer_size:
        raise DsacError(f"--learning_starts {algorithm.learning_starts} exceeds --buffer_size {buffer_size}")
    num_learners = resources.num_learners
    if model.normalize_obs and run.policy_class is not None:
        raise DsacError("--normalize_obs normalizes for dsac's own algorithms; a policy_class normalizes its "
                        "observations itself")
    if num_learners > 1 and run.policy_class is not None:  # dsac's own learners all split their steps
        from dsac.policy import Policy
        from dsac.settings.registry import policy_class_for

        policy = policy_class_for(run)
        if policy.compute_gradients is Policy.compute_gradients:
            raise DsacError(
                f"--num_learners {num_learners}: policy_class {policy.__name__} does not implement "
                "compute_gradients/apply_gradients"
            )


def check_named_code(run) -> None:
    """Callbacks and policy classes a config's ``run`` section names are what they must be."""
    if run.callbacks is not None:
        from dsac.runtime.callbacks import Callbacks

        load_subclass(run.callbacks, Callbacks, "callbacks")
    if run.policy_class is not None:
        from dsac.policy import Policy

        load_subclass(run.policy_class, Policy, "policy_class")
