"""A window-smoothed score: each candidate's reward averaged over its recent prefixes. No torch.

One snapshot of a partial reward is noisy; ``WindowRule`` ranks live candidates by the mean of
the scores of their prefixes within ``window`` tokens of the decision (the current one
included). It asks the method to score the live rows every ``every`` tokens between decisions
(``score_every``), so those prefixes have scores live as well as in a replay; each is a reward
call on the live rows, counted in the ledger (reward tokens and FLOPs; the generator's own
confidence rewards cost no extra FLOPs). A finished candidate competes with its final reward,
unsmoothed. Ties: the current score, then the lower id.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .base import Contender, RuleDefaults, recent


@dataclass(frozen=True)
class WindowRule(RuleDefaults):
    """Rank by the mean score over the last ``window`` tokens' prefixes (scored every ``every`` tokens)."""

    name: str = "window"
    window: int = 8
    every: int = 4
    label: str = "Window: partial reward averaged over recent prefixes"

    kind = "window"
    uses_token_stats = False

    def __post_init__(self) -> None:
        if self.window < 0 or self.every < 1:
            raise ValueError(f"rule {self.name!r}: window >= 0 and every >= 1 tokens, not {self.window}, {self.every}.")

    @property
    def score_every(self) -> int:
        return self.every

    def smoothed(self, c: Contender) -> float:
        if c.finished:
            return c.score
        xs = recent(c, self.window)
        return sum(xs) / len(xs)

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        value = {c.id: self.smoothed(c) for c in pool}
        return [c.id for c in sorted(pool, key=lambda c: (-value[c.id], -c.score, c.id))]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "label": self.label, "window": self.window, "every": self.every}

    @classmethod
    def from_dict(cls, d: dict) -> "WindowRule":
        return cls(d["name"], d.get("window", cls.window), d.get("every", cls.every), d.get("label", cls.label))
