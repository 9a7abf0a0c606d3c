"""SAC's settings: the ``algorithm`` section of a run's :class:`dsac.config.Config` when
``--algo sac`` (Haarnoja et al. 2018)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsac.errors import DsacError
from dsac.settings.coercion import in_half_open_unit_interval, positive_numbers
from dsac.settings.sections import AlgorithmSettings, setting


@dataclass(frozen=True)
class MaxEntropySettings(AlgorithmSettings):
    """The entropy coefficient's settings, which SAC and CrossQ share: the shared ones
    (:class:`dsac.settings.sections.AlgorithmSettings`) and automatic entropy tuning's."""

    init_alpha: float = setting(1.0, "initial entropy coefficient (sac, crossq)")
    target_entropy: float | None = setting(None, "entropy target (sac, crossq; default: -|A|)")

    def check(self) -> None:
        super().check()
        positive_numbers(self, "init_alpha")
        if self.target_entropy is not None and not math.isfinite(self.target_entropy):
            raise DsacError(f"--target_entropy must be a finite number, got {self.target_entropy!r}")


@dataclass(frozen=True)
class SACSettings(MaxEntropySettings):
    """SAC's settings: the entropy coefficient's (:class:`MaxEntropySettings`) and the target
    critics'."""

    tau: float = setting(0.005, "polyak averaging coefficient of the target critics (sac)")

    def check(self) -> None:
        super().check()
        in_half_open_unit_interval(self, "tau")


SETTINGS = SACSettings
