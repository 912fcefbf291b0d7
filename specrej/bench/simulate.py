"""Speculative Rejection replayed offline from one coupled Best-of-N_max run (``coupled.CoupledRun``).

One loop for live and simulated runs: a simulation is the live method itself
(``methods.speculative_rejection``, or ``best_of_n``), unchanged, driving a replay backend over the
coupled run (``backends.replay.Replay``) instead of a model. The seam (stated in full in
``backends/replay.py``): the methods own the loop; the budget (``core.budget.KVBudget``) answers
every slot question; the decision policy and rejection rule (``core.decisions``, ``core.rules``)
decide; the replay reports only what a real backend reports (rows, their tokens and lengths, the
rows that ended), and scores go through the reward, here memoised (``PrefixScorer.memo``), so the
reward of a prefix is computed once for every point and rule that reads it. With coupled
randomness candidate c writes the same tokens in every method while it lives, so the replay is
what a live run would do: exact in fp32.

This module only reads the replay's events into a ``SimResult`` (the winner, steps, decisions,
the fate of Best-of-N's winner). Its numbers are tokens, decode steps and rewards, never timings,
and wherever they are shown they are labelled simulated. Reward FLOPs are estimated from the
generated tokens of every prefix the reward read (the reward's own tokenizer is not run).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..backends.replay import Replay
from ..analysis.compare import Fate, decision_rank, live_at_decision, winner_fate
from ..core.config import RunConfig
from ..core import cost
from ..core.decisions import DecisionRule, decision_rule
from ..core.events import Event, Finished, Round
from ..core.rules import RULES, RejectionRule
from ..methods import speculative_rejection
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
    bon_winner_fate: Fate | None = None         # what became of Best-of-N_max's winner
    rows_per_step: tuple[int, ...] = ()         # rows decoding at each of its steps (what a step price reads)

    def flops(self, prompt_tokens: int, gen_params: int, reward_params: int) -> float:
        return cost.flops(gen_params, prompt_tokens + self.generated_tokens) + cost.flops(reward_params, self.scored_tokens)


def rerun(method: Callable[..., Iterator[Event]], run: CoupledRun, scorer: PrefixScorer, cfg: RunConfig, *,
           shared: bool = True, engine: Replay | None = None, **kw) -> Iterator[Event]:
    """``method`` (a live method: ``speculative_rejection``, ``best_of_n``, ...) on ``cfg``, driving a replay
    of ``run`` whose rewards come from ``scorer``'s memo. ``shared``: the prompt's slots are held once
    (the engine's shared prefix, vLLM's prefix cache) or once per row. ``engine``: a ``Replay`` of ``run`` set up
    otherwise (e.g. one that does not refill, as the transformers engine). ``kw``: the method's own (``policy``)."""
    if cfg.prompt != run.prompt:
        raise ValueError("the coupled run recorded another prompt: replay the prompt it recorded.")
    if shared and not scorer.lm.shares_prefix:
        raise ValueError(f"model {getattr(scorer.lm, 'name', '?')!r} cannot share the prompt's slots across rows: "
                         "replay it with shared=False.")
    return method(scorer.lm, scorer.memo, cfg, engine=engine or Replay(run, allow_sharing=shared), **kw)


def simulate_sr(run: CoupledRun, scorer: PrefixScorer, *, budget: int, alpha: float, n0: int,
                max_new_tokens: int, shared: bool = True, keep_finished: bool = False,
                decision: str = "budget", interval: int = 16, rule: str | RejectionRule = "paper",
                policy: DecisionRule | None = None, n_ref: int | None = None) -> SimResult:
    """Speculative Rejection on candidates 0..n0-1 of ``run`` (n0 <= run.n), scored by ``scorer``,
    with the live methods' policy (``core.decisions.decision_rule``: ``decision`` "budget" or
    "interval", as ``RunConfig``; the rejection rule ``rule``, a name or a ``core.rules`` object).
    ``policy``: a whole decision policy instead (the oracle ceiling, ``core.oracle``). ``n_ref``: Best-of-N's
    candidates are the run's first ``n_ref`` (default: all), whose winner's fate the result reports."""
    if not 1 <= n0 <= run.n:
        raise ValueError(f"n0={n0} must be within the recorded run's 1..{run.n} candidates")
    policy = policy or decision_rule(alpha=alpha, decision=decision, interval=interval,
                                     keep_finished=keep_finished, rule=rule)
    name = rule if isinstance(rule, str) and rule in RULES else "paper"   # the loop reads ``policy``, not this
    cfg = RunConfig(prompt=run.prompt, n=n0, alpha=alpha, max_new_tokens=max_new_tokens, budget=budget,
                    keep_finished=keep_finished, decision=decision, interval=interval, rule=name, progress_every=0)
    rounds: list[Round] = []
    fin = None
    for ev in rerun(speculative_rejection, run, scorer, cfg, shared=shared, policy=policy):
        if isinstance(ev, Round):
            rounds.append(ev)
        elif isinstance(ev, Finished):
            fin = ev
    final = scorer.final()
    bon_winner = max(range(n_ref or run.n), key=lambda c: (final[c], -c))
    finals = dict(enumerate(final))
    decisions = []
    for r in rounds:
        status = {c.id: c.status for c in r.candidates}
        rank = decision_rank(r, finals)
        decisions.append({"position": r.position, "live": len(live_at_decision(r)),
                          "kept_live": sum(s == "kept" for s in status.values()), "forced": r.forced,
                          "spearman": rank.spearman,
                          "kept_bon_winner": status.get(bon_winner) in ("kept", "finished")})
    fate = winner_fate(bon_winner, fin, rounds)
    return SimResult(n0, fin.winner.id, fin.winner.score, fin.ledger.generated_tokens, fin.ledger.steps, fin.rounds,
                     rounds[0].position if rounds else None, fate.fate == "kept",
                     sum(t for c in fin.candidates for t, _ in c.history), decisions, fate, fin.rows_per_step)
