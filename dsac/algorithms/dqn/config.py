"""DQN's settings: the ``algorithm`` section of a run's :class:`dsac.config.Config` when
``--algo dqn`` (Mnih et al. 2015; Ape-X, Horgan et al. 2018; C51, Bellemare et al. 2017)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from dsac.errors import DsacError
from dsac.models.sizes import check_num_atoms
from dsac.settings.coercion import in_half_open_unit_interval, in_unit_interval, positive_ints, positive_numbers
from dsac.settings.sections import AlgorithmSettings, setting


@dataclass(frozen=True)
class DQNSettings(AlgorithmSettings):
    """DQN's settings: the shared ones (:class:`dsac.settings.sections.AlgorithmSettings`) and the
    Q-network's, its targets' and its exploration's."""

    dueling: bool = setting(True, "dueling value/advantage heads (dqn)")
    double_q: bool = setting(True, "double Q-learning targets (dqn)")
    target_update_every: int | None = setting(None, "hard target-network copy every this many updates (dqn; algorithm "
                                         "default)")
    grad_clip: float = setting(10.0, "global gradient-norm clip (dqn)")
    num_atoms: int = setting(1, "C51 atoms of the return distribution; 1 = expected Q (dqn)")
    v_min: float = setting(-10.0, "lowest C51 atom (dqn)")
    v_max: float = setting(10.0, "highest C51 atom (dqn)")
    epsilon: float = setting(0.4, "Ape-X base exploration: worker i uses epsilon^(1 + epsilon_alpha*i/(N-1)) (dqn)")
    epsilon_alpha: float = setting(7.0, "Ape-X exploration spread across workers (dqn)")
    exploration_fraction: float = setting(
        0.1, "one worker: epsilon decays linearly over this fraction of the run (dqn)"
    )
    final_epsilon: float = setting(0.02, "one worker: epsilon at the end of its decay (dqn)")

    def check(self) -> None:
        super().check()
        positive_ints(self, "target_update_every")
        check_num_atoms(self.num_atoms)  # before a support of that many atoms is made
        positive_numbers(self, "grad_clip")
        in_half_open_unit_interval(self, "epsilon", "exploration_fraction")
        in_unit_interval(self, "final_epsilon")
        if not (math.isfinite(self.epsilon_alpha) and self.epsilon_alpha >= 0):
            raise DsacError(f"--epsilon_alpha must be >= 0, got {self.epsilon_alpha!r}")
        if not (math.isfinite(self.v_min) and math.isfinite(self.v_max) and self.v_min < self.v_max):
            raise DsacError(f"--v_min {self.v_min!r} must be below --v_max {self.v_max!r}")


SETTINGS = DQNSettings
