"""SAC's settings: the ``algorithm`` section of a run's :class:`dsac.config.Config` when
``--algo sac`` (Haarnoja et al. 2018)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsac.errors import DsacError
from dsac.settings import AlgorithmSettings, in_half_open_unit_interval, positive_numbers, setting


@dataclass(frozen=True)
class SACSettings(AlgorithmSettings):
    """SAC's settings: the shared ones (:class:`dsac.settings.AlgorithmSettings`) and the
    entropy-regularized critics' own."""

    tau: float = setting(0.005, "polyak averaging coefficient of the target critics (sac)")
    init_alpha: float = setting(1.0, "initial entropy coefficient (sac)")
    target_entropy: float | None = setting(None, "entropy target (sac; default: -|A|)")

    def check(self) -> None:
        super().check()
        positive_numbers(self, "init_alpha")
        in_half_open_unit_interval(self, "tau")
        if self.target_entropy is not None and not math.isfinite(self.target_entropy):
            raise DsacError(f"--target_entropy must be a finite number, got {self.target_entropy!r}")


SETTINGS = SACSettings
