"""A pruning schedule keyed to how reliable the partial score is: prune less early, more later. No torch.

The paper rejects the same fraction alpha at every decision, though at 16 tokens the partial
reward ranks the final ones at Spearman ~0.3 and at 250 tokens at ~0.9. ``ScheduleRule`` ranks as
the paper's rule does (highest partial reward) but keeps more when the partial score is a weak
signal: at a decision after ``position`` tokens it rejects

    alpha x reliability(position) / full_at      (at most ``MAX_REJECT``)

of the pool, where ``reliability`` is a measured table, Spearman(partial reward at t, final
reward) over candidates still live at t, averaged over coupled runs (``bench/fit_rule.py``
``fit_schedule``), read between its lengths on a log scale; ``full_at`` is the reliability at which
it rejects exactly alpha (beyond it, more). Memory may still force more pruning (the policy's
cap), and a decision that keeps more comes sooner (the next token overflows sooner), so the
schedule shifts cuts later rather than removing them: decode steps are reported for every rule.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .base import Contender, RuleDefaults, rank

MAX_REJECT = 0.95   # a decision keeps at least 5% of its pool, however reliable the score


@dataclass(frozen=True)
class ScheduleRule(RuleDefaults):
    """The paper's ranking, with a keep count that follows the partial score's measured reliability."""

    name: str
    positions: tuple[int, ...]            # decision lengths the reliability was measured at, ascending
    reliability: tuple[float, ...]        # Spearman(partial, final) at each, averaged over runs
    full_at: float = 0.6                  # the reliability at which it rejects alpha
    label: str = "Schedule: prune less while the partial score is unreliable"
    fitted_on: tuple[str, ...] = ()

    kind = "schedule"
    uses_token_stats = False

    def __post_init__(self) -> None:
        if not self.positions or len(self.positions) != len(self.reliability):
            raise ValueError(f"rule {self.name!r}: one reliability per decision length is needed.")
        if list(self.positions) != sorted(self.positions) or self.positions[0] < 1:
            raise ValueError(f"rule {self.name!r}: positions must be ascending positive token counts.")
        if not self.full_at > 0:
            raise ValueError(f"rule {self.name!r}: full_at={self.full_at} must be > 0 (a Spearman correlation).")

    def reliability_at(self, position: int) -> float:
        """The measured reliability at ``position`` tokens: linear in log(position) between the fitted
        lengths, flat beyond them, clipped to [0, 1]."""
        pos, rel = self.positions, self.reliability
        x = math.log(max(position, 1))
        if x <= math.log(pos[0]):
            r = rel[0]
        elif x >= math.log(pos[-1]):
            r = rel[-1]
        else:
            j = next(j for j in range(1, len(pos)) if x <= math.log(pos[j]))
            x0, x1 = math.log(pos[j - 1]), math.log(pos[j])
            r = rel[j - 1] + (rel[j] - rel[j - 1]) * (x - x0) / (x1 - x0)
        return min(1.0, max(0.0, r))

    def reject_fraction(self, alpha: float, position: int) -> float:
        return min(MAX_REJECT, alpha * self.reliability_at(position) / self.full_at)

    def keep_count(self, alpha: float, pool: int, position: int) -> int:
        """Candidates a decision after ``position`` tokens keeps out of ``pool``."""
        return max(1, round((1 - self.reject_fraction(alpha, position)) * pool))

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        return rank({c.id: c.score for c in pool})

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "label": self.label, "positions": list(self.positions),
                "reliability": list(self.reliability), "full_at": self.full_at, "fitted_on": list(self.fitted_on)}

    @classmethod
    def from_dict(cls, d: dict) -> "ScheduleRule":
        return cls(d["name"], tuple(d["positions"]), tuple(d["reliability"]), d.get("full_at", cls.full_at),
                   d.get("label", cls.label), tuple(d.get("fitted_on", ())))
