"""What every rejection rule shares: the ``Contender`` a rule sees, the protocol, the paper's rule. No torch.

A rule ranks a decision's pool, best first; the decision policy (``core.decisions``) keeps the head
of that ranking. Two more parts of the protocol extend the seam without touching the methods' loop
(``RuleDefaults`` gives the paper's answer to both; a rule overrides what it changes):

- ``keep_count(alpha, pool, position) -> int``: how many of the pool to keep (the paper's
  ``max(1, round((1 - alpha) * pool))``). Memory may still force more pruning.
- ``score_every: int``: score the live rows every this many generated tokens between decisions
  too (0: only at decisions, the paper's), so that ``Contender.history`` holds the scores of
  earlier prefixes. Each extra score is a reward call, counted in the ledger's reward tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence


@dataclass(frozen=True)
class Contender:
    """What a rule sees of one candidate at a decision."""

    id: int
    score: float                               # reward of its response so far (final when finished)
    tokens: int                                # tokens it has generated
    finished: bool = False
    mean_logprob: float | None = None          # the generator's token statistics, when kept
    mean_self_certainty: float | None = None
    history: tuple[tuple[int, float], ...] = ()   # (tokens, score) of every time the method scored it, oldest first


def rank(scores: dict[int, float]) -> list[int]:
    """Candidate ids, best score first; ties go to the lower id."""
    return sorted(scores, key=lambda c: (-scores[c], c))


def paper_keep_count(alpha: float, pool: int) -> int:
    """Candidates a decision keeps out of ``pool`` (the paper's): max(1, round((1 - alpha) * pool))."""
    return max(1, round((1 - alpha) * pool))


class RejectionRule(Protocol):
    name: str
    label: str
    uses_token_stats: bool   # reads mean_logprob / mean_self_certainty
    score_every: int         # score the live rows every this many tokens between decisions too (0: never)

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        """The pool's ids, the ones to keep first. ``position``: tokens the live rows have generated."""

    def keep_count(self, alpha: float, pool: int, position: int) -> int:
        """How many of ``pool`` a decision after ``position`` tokens keeps."""


class RuleDefaults:
    """The paper's answers to the protocol's ``keep_count`` and ``score_every``, for a rule that changes
    only its ranking."""

    score_every = 0

    def keep_count(self, alpha: float, pool: int, position: int) -> int:
        return paper_keep_count(alpha, pool)


@dataclass(frozen=True)
class PaperRule(RuleDefaults):
    """Keep the highest partial rewards (the paper's rule)."""

    name: str = "paper"
    label: str = "Paper: highest partial reward"
    uses_token_stats = False

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        return rank({c.id: c.score for c in pool})


PAPER = PaperRule()


def zscores(values: Sequence[float | None]) -> list[float]:
    """Each value standardised within the list (mean 0, sd 1); 0 where it is missing or the list is constant."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    if len(known) < 2:
        return [0.0] * len(values)
    mean = sum(known) / len(known)
    sd = math.sqrt(sum((v - mean) ** 2 for v in known) / len(known))
    if sd == 0:
        return [0.0] * len(values)
    return [(v - mean) / sd if v is not None and math.isfinite(v) else 0.0 for v in values]


def recent(c: Contender, window: int) -> list[float]:
    """The scores of ``c``'s prefixes within ``window`` tokens of its latest, oldest first (its current
    score last; just that when it has no history)."""
    hist = [(t, s) for t, s in c.history if c.tokens - window <= t <= c.tokens]
    if not hist or hist[-1][0] != c.tokens:   # a hand-made contender: no record of its current score
        hist.append((c.tokens, c.score))
    return [s for _, s in hist]
