"""Rules for a weak early signal (issue 25 item 5): each one's ranking on a hand-made pool, the
schedule's keep counts on a hand-made case, the probes the window and upside rules ask for, their
fits, and the live method against its replay for each of them (one loop)."""
from __future__ import annotations

import json

import pytest

from specrej import RunConfig, speculative_rejection
from specrej.bench.coupled import PrefixScorer, collect
from specrej.bench.fit_rule import fit_schedule, fit_upside, pool_at, reliability
from specrej.bench.simulate import simulate_sr
from specrej.core.budget import KVBudget
from specrej.core.decisions import MemoryFull, Moment
from specrej.core.rules import (KINDS, RULES, Contender, ScheduleRule, UpsideRule, WindowRule, get_rule, recent,
                                rule_from_dict, upside_features)
from specrej.core.events import Finished, Round

PROMPT = "Give me three tips for staying healthy."


def pool():
    """Three live candidates at 16 tokens, scored at 8, 12 and 16, and one that finished at 10."""
    return [Contender(0, 0.3, 16, history=((8, 1.0), (12, 0.2), (16, 0.3))),     # fell: high early, low now
            Contender(1, 0.4, 16, history=((8, 0.1), (12, 0.4), (16, 0.4))),     # rose
            Contender(2, 0.45, 10, True, history=((8, 0.9), (10, 0.45))),        # finished at 10 tokens
            Contender(3, 0.35, 16, history=((8, 0.35), (12, 0.35), (16, 0.35)))]  # flat


def test_recent_reads_the_window_and_the_current_score():
    c = pool()[0]
    assert recent(c, 8) == [1.0, 0.2, 0.3] and recent(c, 4) == [0.2, 0.3] and recent(c, 0) == [0.3]
    assert recent(Contender(9, 0.7, 16), 8) == [0.7]                         # no history: its score


def test_schedule_keeps_more_while_the_score_is_unreliable():
    # reliability 0.2 at 8 tokens, 0.8 at 64, linear in log length between; alpha is rejected at 0.4
    rule = ScheduleRule("s", (8, 64), (0.2, 0.8), full_at=0.4)
    assert rule.reliability_at(4) == 0.2 and rule.reliability_at(128) == 0.8    # flat beyond the ends
    assert rule.reliability_at(16) == pytest.approx(0.4)                        # a third of the way, log scale
    assert [rule.keep_count(0.5, 100, t) for t in (4, 8, 16, 64, 256)] == [75, 75, 50, 5, 5]
    assert rule.keep_count(0.5, 1, 64) == 1                                     # never fewer than one
    assert rule.rank(pool(), 16) == get_rule("paper").rank(pool(), 16) == [2, 1, 3, 0]
    live, finished = [c for c in pool() if not c.finished], [Contender(2, 0.45, 6, True)]
    # at 8 tokens it keeps round(0.75 * 4) = 3 where the paper's alpha = 0.5 keeps 2; memory still caps it
    early = MemoryFull(0.5, rule=rule).select([Contender(c.id, c.score, 8) for c in live], finished, cap=10)
    assert early.kept == (2, 1, 3) and early.kept_live == (1, 3)
    assert MemoryFull(0.5).select([Contender(c.id, c.score, 8) for c in live], finished, cap=10).kept == (2, 1)
    capped = MemoryFull(0.5, rule=rule).select([Contender(c.id, c.score, 8) for c in live], finished, cap=1)
    assert capped.forced and capped.kept_live == (1,)
    late = MemoryFull(0.5, rule=rule).select([Contender(c.id, c.score, 64) for c in live], finished, cap=10)
    assert late.kept == (2,)                                                    # reliable: reject 95%, keep one
    assert ScheduleRule.from_dict(rule.to_dict()) == rule
    with pytest.raises(ValueError, match="ascending"):
        ScheduleRule("bad", (64, 8), (0.2, 0.8))


def test_window_ranks_by_the_mean_over_recent_prefixes():
    assert WindowRule("w", window=8).rank(pool(), 16) == [0, 2, 3, 1]    # means 0.5, 0.45 (finished), 0.35, 0.3
    assert WindowRule("w", window=4).rank(pool(), 16) == [2, 1, 3, 0]    # means 0.25, 0.4, 0.45, 0.35: c0's fall shows
    assert WindowRule("w", window=0).rank(pool(), 16) == get_rule("paper").rank(pool(), 16)   # one snapshot
    assert WindowRule("w", window=8).smoothed(pool()[2]) == 0.45         # a finished one: its final reward
    rule = WindowRule("w", window=8, every=4)
    assert rule.score_every == 4 and WindowRule.from_dict(rule.to_dict()) == rule


def test_upside_ranks_by_its_fitted_probability():
    rows = upside_features(pool(), 8)
    assert [r[2] for r in rows] == [0.0, 0.0, 1.0, 0.0]                  # finished
    trend = [r[1] for r in rows]                                           # moves: -0.7, +0.3, -0.45, 0
    assert trend.index(max(trend)) == 1 and trend.index(min(trend)) == 0
    by_trend = UpsideRule("u", (16,), ((0.0, 1.0, 0.0),), (0.0,))
    assert by_trend.rank(pool(), 16) == [1, 3, 2, 0]
    by_score = UpsideRule("u", (8, 64), ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)), (-3.0, -3.0))
    assert by_score.rank(pool(), 16) == get_rule("paper").rank(pool(), 16)   # nearer 8: the score alone
    p = by_score.probability(pool(), 16)
    assert all(0 < v < 1 for v in p.values()) and p[2] > p[1] > p[3] > p[0]
    assert by_score.rank(list(reversed(pool())), 16) == by_score.rank(pool(), 16)
    assert UpsideRule.from_dict(by_score.to_dict()) == by_score
    with pytest.raises(ValueError, match="entries"):
        UpsideRule("bad", (8,), ((1.0, 2.0),), (0.0,))


def test_only_rules_that_read_history_ask_for_probes():
    budget = KVBudget(1000, 10, True)
    at = lambda g: Moment(g, 4, g + 1, 0, budget)   # noqa: E731
    assert [MemoryFull(0.5, rule=WindowRule("w", every=4)).probe(at(g)) for g in (0, 3, 4, 8)] == \
        [False, False, True, True]
    assert not any(MemoryFull(0.5).probe(at(g)) for g in (4, 8, 16))
    assert not MemoryFull(0.5, rule=ScheduleRule("s", (8,), (0.3,))).probe(at(8))


def test_bundled_rules_load_by_kind():
    assert set(KINDS) == {"calibrated", "schedule", "window", "upside"}
    assert isinstance(rule_from_dict({"kind": "window", "name": "w2", "window": 16}), WindowRule)
    with pytest.raises(ValueError, match="kind"):
        rule_from_dict({"kind": "nope", "name": "x"})
    for name in ("schedule", "window", "upside"):
        assert name in RULES and RunConfig(prompt="x", rule=name).rule == name


@pytest.fixture(scope="module")
def coupled(tiny_lm):
    return collect(tiny_lm, RunConfig(prompt=PROMPT, n=16, max_new_tokens=24, seed=5))


def test_fits_on_coupled_runs(tiny_lm, length_reward, coupled):
    scorer = PrefixScorer(tiny_lm, length_reward, coupled)
    rel = reliability([coupled], [scorer], (4, 8, 16))
    assert len(rel) == 3 and all(-1 <= r <= 1 for r in rel)
    sched = fit_schedule([coupled], [scorer], positions=(4, 8, 16), full_at=0.5, fitted_on=("p",))
    assert sched.reliability == rel and sched.fitted_on == ("p",)
    # the history a decision at 12 tokens holds: scores at 4, 8 and 12 within a 8-token window
    c = pool_at(coupled, scorer, 12, every=4, window=8)
    live = next(x for x in c if not x.finished)
    assert [t for t, _ in live.history] == [4, 8, 12] and live.score == live.history[-1][1]
    up = fit_upside([coupled], [scorer], positions=(8, 16), window=8, every=4, top=0.25)
    assert up.positions == (8, 16) and len(up.intercepts) == 2 and json.dumps(up.to_dict())


@pytest.mark.parametrize("rule", [ScheduleRule("sched", (4, 16), (0.2, 0.9), full_at=0.5),
                                  WindowRule("win", window=6, every=2),
                                  UpsideRule("up", (6, 12), ((1.0, -0.5, 0.2), (0.5, 1.0, 0.0)), (0.0, -1.0),
                                             window=6, every=2)], ids=lambda r: r.kind)
@pytest.mark.parametrize("alpha", [0.5, 0.8])
def test_simulation_matches_the_live_method(tiny_lm, length_reward, coupled, monkeypatch, rule, alpha):
    """The replay is the live method: the same decisions, probes, winner and reward reads for each new rule."""
    monkeypatch.setitem(RULES, rule.name, rule)
    P = coupled.prompt_tokens
    shared = tiny_lm.shares_prefix
    budget = P + 16 * 6 if shared else 16 * (P + 6)
    cfg = RunConfig(prompt=PROMPT, n=16, alpha=alpha, max_new_tokens=24, budget=budget, seed=5, progress_every=0,
                    rule=rule.name)
    events = list(speculative_rejection(tiny_lm, length_reward, cfg))
    fin = events[-1]
    assert isinstance(fin, Finished)
    rounds = [e for e in events if isinstance(e, Round)]
    sim = simulate_sr(coupled, PrefixScorer(tiny_lm, length_reward, coupled), budget=budget, alpha=alpha, n0=16,
                      max_new_tokens=24, shared=shared, rule=rule.name)
    assert sim.winner == fin.winner.id and sim.score == pytest.approx(fin.winner.score)
    assert sim.generated_tokens == fin.ledger.generated_tokens and sim.steps == fin.ledger.steps
    assert sim.rounds == fin.rounds == len(rounds)
    assert [d["position"] for d in sim.decisions] == [r.position for r in rounds]
    scored = sum(len(c.history) for c in fin.candidates)
    if getattr(rule, "score_every", 0):   # the probes are real reward calls: each is in the candidates' history
        assert scored > 16 + sum(r.n_kept for r in rounds)
        assert any(t == 2 for c in fin.candidates for t, _ in c.history)
