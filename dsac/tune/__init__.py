"""dsac as Ray Tune trials: :class:`DsacTrainable`, and the ``dsac-tune`` command
(:mod:`dsac.tune.cli`, ``python -m dsac.tune``)."""

from dsac.tune.trainable import DsacTrainable

__all__ = ["DsacTrainable"]
