"""Speculative Rejection replayed offline from one coupled Best-of-N_max run (``coupled.CoupledRun``).

With coupled randomness a Speculative Rejection candidate writes the same tokens as its
Best-of-N self for as long as it lives, so its partial reward at a decision is the reward of
that prefix. The decision policy is the live methods' own object (``specrej.core.decisions``: memory
full, or every ``interval`` tokens; rank live and finished candidates with the rejection rule,
``core.rules``; keep ``max(1, round((1 - alpha) * n))``; memory may force more pruning), with the
budget (``core.budget.KVBudget``) counting the prompt once (``shared=True``, the engine's shared
prefix) or once per row (``shared=False``).

It is a cross-check of the real methods and a cheap way to choose defaults (budget, first
decision, alpha): its numbers are tokens, decode steps and rewards, never timings, and wherever
they are shown they are labelled simulated. Reward FLOPs are estimated from generated tokens
(the reward's own tokenizer is not run), so the FLOPs here are the generator's plus that estimate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.budget import KVBudget
from ..core.decisions import Moment, decision_rule
from ..core.rules import Contender, RejectionRule
from ..metrics import spearman
from .coupled import CoupledRun, PrefixScorer


@dataclass
class SimResult:
    n0: int
    winner: int
    score: float
    generated_tokens: int
    steps: int
    rounds: int
    first_decision: int | None
    kept_bon_winner: bool
    scored_tokens: int = 0                      # generated tokens of every prefix the reward read
    decisions: list[dict] = field(default_factory=list)

    def flops(self, prompt_tokens: int, gen_params: int, reward_params: int) -> float:
        return 2.0 * gen_params * (prompt_tokens + self.generated_tokens) + 2.0 * reward_params * self.scored_tokens


def simulate_sr(run: CoupledRun, scorer: PrefixScorer, *, budget: int, alpha: float, n0: int,
                max_new_tokens: int, shared: bool = True, keep_finished: bool = False,
                decision: str = "budget", interval: int = 16, rule: str | RejectionRule = "paper") -> SimResult:
    """Speculative Rejection on candidates 0..n0-1 of ``run`` (n0 <= run.n), scored by ``scorer``,
    with the live methods' policy (``core.decisions.decision_rule``: ``decision`` "budget" or
    "interval", as ``RunConfig``; the rejection rule ``rule``, ``core.rules``)."""
    if not 1 <= n0 <= run.n:
        raise ValueError(f"n0={n0} must be within the recorded run's 1..{run.n} candidates")
    kv = KVBudget(budget, run.prompt_tokens, shared)
    policy = decision_rule(alpha=alpha, decision=decision, interval=interval, keep_finished=keep_finished,
                           rule=rule)
    # the token statistics a live run keeps: when its reward or its rejection rule reads them
    with_stats = bool(getattr(scorer.reward, "uses_token_stats", True)) or policy.uses_token_stats
    length = [min(len(t), max_new_tokens) for t in run.tokens]
    final = scorer.final()
    bon_winner = max(range(run.n), key=lambda c: (final[c], -c))

    def contender(c: int, score: float, tokens: int, done: bool) -> Contender:
        st = run.stats(c, tokens) if with_stats else None
        return Contender(c, score, tokens, done, st.mean_logprob if st else None,
                         st.mean_self_certainty if st else None)

    live = list(range(n0))
    finished: dict[int, float] = {}
    g = generated = scored = rounds = last = 0
    first = None
    decisions = []
    while live:
        per_row = kv.row_slots(g + 1 if g + 1 < max_new_tokens else g)
        if policy.due(Moment(g, len(live), per_row, last, kv)):
            scores = dict(zip(live, scorer.score(live, g)))
            scored += g * len(live)
            sel = policy.select([contender(c, scores[c], g, False) for c in live],
                                [contender(c, s, length[c], True) for c, s in finished.items()], kv.cap(per_row))
            for c in sel.pruned:
                finished.pop(c, None)
            rho = spearman([scores[c] for c in live], [final[c] for c in live]) if len(live) > 1 else None
            decisions.append({"position": g, "live": len(live), "kept_live": len(sel.kept_live),
                              "forced": sel.forced, "spearman": rho, "kept_bon_winner": bon_winner in sel.kept})
            first = g if first is None else first
            rounds, last = rounds + 1, g
            live = sorted(sel.kept_live)
            if not live:
                break
        g += 1
        generated += len(live)
        ended = [c for c in live if length[c] == g]
        if ended:
            for c in ended:
                finished[c] = scorer.score([c], g)[0]
                scored += g
            live = [c for c in live if length[c] != g]
    winner = max(finished, key=lambda c: (finished[c], -c))
    return SimResult(n0, winner, finished[winner], generated, g, rounds, first,
                     bon_winner < n0 and bon_winner in finished, scored, decisions)
