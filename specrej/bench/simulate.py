"""Speculative Rejection replayed offline from one coupled Best-of-N_max run (``coupled.CoupledRun``).

With coupled randomness a Speculative Rejection candidate writes the same tokens as its
Best-of-N self for as long as it lives, so its partial reward at a decision is the reward of
that prefix. The decision rule mirrors ``specrej.methods`` (decode until the next token would
overflow the budget; rank live and finished candidates; keep ``max(1, round((1 - alpha) * n))``;
memory may force more pruning), with the budget counting the prompt once (``shared=True``, the
engine's shared prefix) or once per row (``shared=False``).

It is a cross-check of the real methods and a cheap way to choose defaults (budget, first
decision, alpha): its numbers are tokens, decode steps and rewards, never timings, and wherever
they are shown they are labelled simulated. Reward FLOPs are estimated from generated tokens
(the reward's own tokenizer is not run), so the FLOPs here are the generator's plus that estimate.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..budget import AUTO_MAX_ROWS, rows_that_fit
from ..metrics import spearman
from ..rules import Contender, Rule, get_rule
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


def auto_rows(budget: int, prompt_tokens: int, first_decision: int, shared: bool = True) -> int:
    """Rows that fill ``budget`` at ``first_decision`` generated tokens (the paper's first batch)."""
    return max(1, min(AUTO_MAX_ROWS, rows_that_fit(budget, prompt_tokens, first_decision, shared)))


def rows_per_pass(budget: int, prompt_tokens: int, max_new_tokens: int, shared: bool = True) -> int:
    """Best-of-N rows that fit at full length (the last token is never fed back)."""
    return max(1, rows_that_fit(budget, prompt_tokens, max_new_tokens - 1, shared))


def simulate_sr(run: CoupledRun, scorer: PrefixScorer, *, budget: int, alpha: float, n0: int,
                max_new_tokens: int, shared: bool = True, keep_finished: bool = False,
                rule: str | Rule = "paper") -> SimResult:
    """Speculative Rejection on candidates 0..n0-1 of ``run`` (n0 <= run.n), scored by ``scorer``,
    kept by ``rule`` (``specrej.rules``), as the live method does."""
    rule = get_rule(rule)
    with_stats = bool(getattr(scorer.reward, "uses_token_stats", True))

    def contender(c: int, score: float, tokens: int, done: bool) -> Contender:
        st = run.stats(c, tokens) if with_stats else None
        return Contender(c, score, tokens, done, st.mean_logprob if st else None,
                         st.mean_self_certainty if st else None)

    if not 1 <= n0 <= run.n:
        raise ValueError(f"n0={n0} must be within the recorded run's 1..{run.n} candidates")
    P = run.prompt_tokens
    length = [min(len(t), max_new_tokens) for t in run.tokens]
    final = scorer.final()
    bon_winner = max(range(run.n), key=lambda c: (final[c], -c))

    def fits(rows: int, per_row: int) -> bool:
        return (P + rows * per_row if shared else rows * (P + per_row)) <= budget

    def cap(per_row: int) -> int:
        return (budget - P) // per_row if shared else budget // (P + per_row)

    live = list(range(n0))
    finished: dict[int, float] = {}
    status: dict[int, str] = {}
    g = generated = scored = rounds = 0
    first = None
    decisions = []
    while live:
        per_row = g + 1 if g + 1 < max_new_tokens else g
        if g > 0 and not fits(len(live), per_row):
            scores = dict(zip(live, scorer.score(live, g)))
            scored += g * len(live)
            pool = list(live) + ([] if keep_finished else list(finished))
            both = {**finished, **scores}
            ranked = rule.rank([contender(c, both[c], g if c in scores else length[c], c not in scores)
                                for c in pool], g)
            n_keep = max(1, round((1 - alpha) * len(pool)))
            kept = ranked[:n_keep]
            kept_live = [c for c in kept if c in scores]
            forced = len(kept_live) > cap(per_row)
            if forced:
                kept_live = kept_live[:cap(per_row)]
            for c in ranked:
                if c in finished and c not in kept:
                    del finished[c]
                    status[c] = "pruned"
            for c in live:
                if c not in kept_live:
                    status[c] = "pruned"
            rho = spearman([scores[c] for c in live], [final[c] for c in live]) if len(live) > 1 else None
            decisions.append({"position": g, "live": len(live), "kept_live": len(kept_live), "forced": forced,
                              "spearman": rho, "kept_bon_winner": bon_winner in kept})
            first = g if first is None else first
            rounds += 1
            live = sorted(kept_live)
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
