"""The oracle ceiling: a rejection rule that sees the future. A ceiling, not a method. No torch here.

``OracleRule(final)`` ranks a decision's pool by each candidate's *final* reward (``final``: the
reward every candidate ends with, read off a coupled run), so at every decision it keeps the
candidates that will end best. Run through the same loop as any rule (``bench.simulate``, with the
same alpha, first decision, memory and forced pruning), its score is the most any rule can reach
at that point: the best final reward among the first batch's candidates, less nothing but what
memory forces out. A rule's gap to it is what a better early signal could still win; the rest of
Best-of-N's lead is the first batch's size (a winner it never drew).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .rules import Contender, RuleDefaults, rank


@dataclass(frozen=True)
class OracleRule(RuleDefaults):
    """Rank by final reward, best first (ties: the lower id); ``final`` maps candidate id -> final reward."""

    final: Mapping[int, float]
    name: str = "oracle"
    label: str = "Oracle: the best final rewards (sees the future; a ceiling)"
    uses_token_stats = False

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        missing = [c.id for c in pool if c.id not in self.final]
        if missing:
            raise ValueError(f"the oracle knows no final reward for candidates {missing[:3]}.")
        return rank({c.id: self.final[c.id] for c in pool})
