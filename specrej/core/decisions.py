"""When Speculative Rejection decides, and whom it keeps: decision rules as policy objects.

A rule answers two questions for the methods (``specrej.methods``), live or replaying a coupled run
(``specrej.bench.simulate``: the same loop):

- ``due(moment)``: decide before the next step? ``Moment`` says how far the rows have decoded,
  how many are live, the slots a row will hold after the next step and when the last decision was.
- ``select(live, finished, cap)``: rank the contenders (``core.rules.Contender``) with the
  policy's rejection rule (``core.rules``: the paper's, highest partial reward, or another) and
  keep the top ``keep_count`` (the rule's ``keep_count``: the paper's, or a schedule's own;
  finished candidates compete too unless ``keep_finished``); if more kept live rows remain than
  memory can hold (``cap``), memory forces more pruning, lowest-ranked first (``Selection.forced``).
- ``probe(moment)``: score the live rows before the next step without deciding? Only for a rule
  that reads earlier prefixes' scores (its ``score_every``); the paper's never asks.

``MemoryFull`` is the paper's timing (decide when the next token would overflow the budget);
``EveryK`` also decides every ``k`` generated tokens. ``decision_rule(...)`` builds one from its
settings, ``rule_for(cfg)`` the one a ``RunConfig`` asks for. A new policy is a class with these
two methods; a new ranking is a ``core.rules.RejectionRule``. No torch here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

from .config import RunConfig
from .budget import KVBudget
from .rules import PAPER, Contender, RejectionRule, get_rule
from .rules.base import paper_keep_count as keep_count


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


def rule_keep_count(rule: RejectionRule, alpha: float, pool: int, position: int) -> int:
    """What ``rule`` keeps out of ``pool`` at a decision after ``position`` tokens (its ``keep_count``);
    always 1..pool."""
    return min(pool, max(1, int(rule.keep_count(alpha, pool, position)))) if pool else 0


class DecisionRule(Protocol):
    uses_token_stats: bool   # its rejection rule reads the generator's token statistics

    def due(self, at: Moment) -> bool: ...

    def probe(self, at: Moment) -> bool: ...

    def select(self, live: Sequence[Contender], finished: Sequence[Contender], cap: int) -> Selection: ...


@dataclass(frozen=True)
class MemoryFull:
    """Decide when the next token would overflow the memory budget (the paper's decision token);
    keep the head of ``rule``'s ranking."""

    alpha: float
    keep_finished: bool = False
    rule: RejectionRule = field(default=PAPER, kw_only=True)

    @property
    def uses_token_stats(self) -> bool:
        return self.rule.uses_token_stats

    def due(self, at: Moment) -> bool:
        return at.generated > 0 and not at.budget.fits(at.live, at.per_row)

    def probe(self, at: Moment) -> bool:
        """Score the live rows now (no decision): every ``score_every`` tokens of a rule that reads
        earlier prefixes' scores (``core.rules.WindowRule``, ``UpsideRule``); never for the paper's."""
        every = self.rule.score_every
        return bool(every) and at.generated > 0 and at.generated % every == 0

    def select(self, live: Sequence[Contender], finished: Sequence[Contender], cap: int) -> Selection:
        """Keep the top ``keep_count`` of the pool (live rows, plus finished ones unless
        ``keep_finished``) in the rule's order; at most ``cap`` kept rows stay live."""
        pool = list(live) if self.keep_finished else [*finished, *live]
        live_ids = {c.id for c in live}
        position = max((c.tokens for c in pool), default=0)   # live rows are all this long
        ranked = self.rule.rank(pool, position)
        kept = ranked[:rule_keep_count(self.rule, self.alpha, len(pool), position)]
        pruned = ranked[len(kept):]
        kept_live = [c for c in kept if c in live_ids]
        forced = len(kept_live) > cap
        if forced:   # memory forces more pruning than alpha asked for: drop the lowest kept live rows
            dropped = kept_live[cap:]
            kept_live = kept_live[:cap]
            kept = [c for c in kept if c not in dropped]
            pruned = pruned + dropped
        score = {c.id: c.score for c in pool}
        threshold = min(score[c] for c in kept) if kept else None
        return Selection(tuple(kept), tuple(kept_live), tuple(pruned), forced, threshold)


@dataclass(frozen=True)
class EveryK(MemoryFull):
    """Decide every ``k`` generated tokens, and whenever memory is full."""

    k: int = 16

    def due(self, at: Moment) -> bool:
        return super().due(at) or (at.generated > 0 and at.generated - at.last_decision >= self.k)


def decision_rule(*, alpha: float, decision: str = "budget", interval: int = 16, keep_finished: bool = False,
                  rule: str | RejectionRule = PAPER) -> DecisionRule:
    """The policy for ``decision`` ("budget": memory full; "interval": also every ``interval``
    tokens) at ``alpha``, ranking with the rejection rule ``rule`` (a name in ``core.rules.RULES``)."""
    rule = get_rule(rule)
    if decision == "interval":
        return EveryK(alpha, keep_finished, interval, rule=rule)
    return MemoryFull(alpha, keep_finished, rule=rule)


def rule_for(cfg: RunConfig) -> DecisionRule:
    """The decision policy ``cfg`` asks for: ``cfg.decision`` at ``cfg.alpha``, ranked by ``cfg.rule``."""
    return decision_rule(alpha=cfg.alpha, decision=cfg.decision, interval=cfg.interval,
                         keep_finished=cfg.keep_finished, rule=cfg.rule)
