"""CrossQ's settings: the ``algorithm`` section of a run's :class:`dsac.config.Config` when
``--algo crossq`` (Bhatt et al. 2024)."""

from __future__ import annotations

from dataclasses import dataclass

from dsac.algorithms.sac.config import MaxEntropySettings
from dsac.errors import DsacError
from dsac.settings.coercion import in_half_open_unit_interval, positive_ints
from dsac.settings.sections import setting


@dataclass(frozen=True)
class CrossQSettings(MaxEntropySettings):
    """CrossQ's settings: SAC's entropy-regularized ones without target networks, and the
    batch-renormalized critics'."""

    critic_hiddens: list[int] | None = setting(
        None, "hidden layer sizes of the two critics; the actor's are --fcnet_hiddens (crossq; algorithm default)",
        nargs="+"
    )
    policy_delay: int = setting(3, "critic updates per actor and entropy-coefficient update (crossq)")
    batch_norm_momentum: float = setting(0.01, "rate of the batch renormalization's running statistics (crossq)")
    renorm_warmup_steps: int = setting(
        100_000, "training steps of a batch-renormalization layer that normalize with the batch's own statistics "
        "before the running ones correct them (crossq)"
    )
    adam_beta1: float = setting(0.5, "Adam's beta_1 of the actor and the critics (crossq)")

    def check(self) -> None:
        super().check()
        positive_ints(self, "policy_delay", "renorm_warmup_steps")
        in_half_open_unit_interval(self, "batch_norm_momentum")
        if not 0.0 <= self.adam_beta1 < 1.0:
            raise DsacError(f"--adam_beta1 must be in [0, 1), got {self.adam_beta1!r}")
        if self.critic_hiddens is not None and (
            not self.critic_hiddens or not all(isinstance(n, int) and n > 0 for n in self.critic_hiddens)
        ):
            raise DsacError(f"--critic_hiddens must be one or more positive layer sizes, got {self.critic_hiddens!r}")


SETTINGS = CrossQSettings
