"""When Speculative Rejection decides, and whom it keeps: decision rules as policy objects.

A rule answers two questions, the same way for the live methods (``specrej.methods``) and for the
offline replay (``specrej.bench.simulate``):

- ``due(moment)``: decide before the next step? ``Moment`` says how far the rows have decoded,
  how many are live, the slots a row will hold after the next step and when the last decision was.
- ``select(live, finished, cap)``: rank the contenders by partial reward and keep the top
  ``keep_count`` (finished candidates compete too unless ``keep_finished``); if more kept live
  rows remain than memory can hold (``cap``), memory forces more pruning (``Selection.forced``).

``MemoryFull`` is the paper's rule (decide when the next token would overflow the budget);
``EveryK`` also decides every ``k`` generated tokens. ``rule_for(cfg)`` builds the one a
``RunConfig`` asks for. A new rule is a class with these two methods; no torch here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from ..config import RunConfig
from .budget import KVBudget


@dataclass(frozen=True)
class Moment:
    """Where a Speculative Rejection run stands before a step."""

    generated: int        # tokens every live row has generated
    live: int             # rows decoding
    per_row: int          # own slots one row holds after the next step
    last_decision: int    # ``generated`` at the last decision (0 before the first)
    budget: KVBudget


@dataclass(frozen=True)
class Selection:
    """The outcome of a decision: ids in rank order (best first)."""

    kept: tuple[int, ...]         # every kept candidate, live or finished
    kept_live: tuple[int, ...]    # the kept live rows (those that decode on)
    pruned: tuple[int, ...]       # rejected by rank, then any that memory forced out
    forced: bool                  # memory pruned more than the rule asked for
    threshold: float | None       # the lowest kept score


def keep_count(alpha: float, pool: int) -> int:
    """Candidates a decision keeps out of ``pool``: max(1, round((1 - alpha) * pool))."""
    return max(1, round((1 - alpha) * pool))


def rank(scores: dict[int, float]) -> list[int]:
    """Candidate ids, best score first; ties go to the lower id."""
    return sorted(scores, key=lambda c: (-scores[c], c))


class DecisionRule(Protocol):
    def due(self, at: Moment) -> bool: ...

    def select(self, live: dict[int, float], finished: dict[int, float], cap: int) -> Selection: ...


@dataclass(frozen=True)
class MemoryFull:
    """Decide when the next token would overflow the memory budget (the paper's decision token)."""

    alpha: float
    keep_finished: bool = False

    def due(self, at: Moment) -> bool:
        return at.generated > 0 and not at.budget.fits(at.live, at.per_row)

    def select(self, live: dict[int, float], finished: dict[int, float], cap: int) -> Selection:
        """Keep the top ``keep_count`` of the pool (live rows, plus finished ones unless
        ``keep_finished``); at most ``cap`` kept rows stay live."""
        pool = dict(live) if self.keep_finished else {**finished, **live}
        ranked = rank(pool)
        kept = ranked[:keep_count(self.alpha, len(pool))]
        pruned = ranked[len(kept):]
        kept_live = [c for c in kept if c in live]
        forced = len(kept_live) > cap
        if forced:   # memory forces more pruning than alpha asked for: drop the lowest kept live rows
            dropped = kept_live[cap:]
            kept_live = kept_live[:cap]
            kept = [c for c in kept if c not in dropped]
            pruned = pruned + dropped
        threshold = min(pool[c] for c in kept) if kept else None
        return Selection(tuple(kept), tuple(kept_live), tuple(pruned), forced, threshold)


@dataclass(frozen=True)
class EveryK(MemoryFull):
    """Decide every ``k`` generated tokens, and whenever memory is full."""

    k: int = 16

    def due(self, at: Moment) -> bool:
        return super().due(at) or (at.generated > 0 and at.generated - at.last_decision >= self.k)


def rule_for(cfg: RunConfig) -> DecisionRule:
    """The decision rule ``cfg.decision`` names, at ``cfg.alpha``."""
    if cfg.decision == "interval":
        return EveryK(cfg.alpha, cfg.keep_finished, cfg.interval)
    return MemoryFull(cfg.alpha, cfg.keep_finished)
