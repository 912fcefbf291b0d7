"""The offline simulator replays Speculative Rejection exactly as the real method runs it."""
from __future__ import annotations

import pytest

from specrej import RunConfig, speculative_rejection
from specrej.bench.coupled import PrefixScorer, collect
from specrej.bench.simulate import simulate_sr
from specrej.core.budget import KVBudget
from specrej.events import Finished, Round

PROMPT = "Give me three tips for staying healthy."


@pytest.fixture(scope="module")
def coupled(tiny_lm):
    return collect(tiny_lm, RunConfig(prompt=PROMPT, n=16, max_new_tokens=24, seed=5))


@pytest.mark.parametrize("alpha,extra", [(0.5, 6), (0.8, 10), (0.3, 4)])
def test_simulation_matches_the_real_method(tiny_lm, length_reward, coupled, alpha, extra):
    P = coupled.prompt_tokens
    shared = tiny_lm.shares_prefix
    budget = P + 16 * extra if shared else 16 * (P + extra)
    cfg = RunConfig(prompt=PROMPT, n=16, alpha=alpha, max_new_tokens=24, budget=budget, seed=5, progress_every=0)
    events = list(speculative_rejection(tiny_lm, length_reward, cfg))
    fin = events[-1]
    assert isinstance(fin, Finished)
    rounds = [e for e in events if isinstance(e, Round)]
    sim = simulate_sr(coupled, PrefixScorer(tiny_lm, length_reward, coupled), budget=budget, alpha=alpha, n0=16,
                      max_new_tokens=24, shared=shared)
    assert sim.winner == fin.winner.id
    assert sim.score == pytest.approx(fin.winner.score)
    assert sim.generated_tokens == fin.ledger.generated_tokens
    assert sim.rounds == fin.rounds == len(rounds)
    assert [d["position"] for d in sim.decisions] == [r.position for r in rounds]
    assert sim.first_decision == rounds[0].position == extra
    assert sim.steps == max(c.tokens for c in fin.candidates if c.status == "finished")


def test_coupled_run_is_best_of_n(tiny_lm, length_reward, coupled):
    """Its tokens are what Best-of-N writes; its statistics give the confidence rewards' values."""
    from specrej import best_of_n, run_to_completion

    bon = run_to_completion(best_of_n(tiny_lm, length_reward, RunConfig(
        prompt=PROMPT, n=16, max_new_tokens=24, seed=5, budget=16 * 45, progress_every=0)))
    by_id = sorted(bon.candidates, key=lambda c: c.id)
    assert [c.tokens for c in by_id] == coupled.lengths()
    scorer = PrefixScorer(tiny_lm, length_reward, coupled)
    assert scorer.final() == pytest.approx([c.score for c in by_id])
    for c in range(16):
        assert len(coupled.cum_lp[c]) == coupled.lengths()[c]
        assert coupled.stats(c, 1).mean_logprob <= 0


def test_auto_rows_fill_the_budget_at_the_first_decision():
    assert KVBudget(2048, 48, True).auto_n(16) == 125            # 48 + 125 x 16 = 2048
    assert KVBudget(2048, 48, False).auto_n(16) == 2048 // 64
    assert KVBudget(2048, 48, True).rows_per_pass(None, 256) == 2000 // 255
    assert KVBudget(100, 48, True).rows_per_pass(None, 256) == 1
    assert KVBudget(2048, 48, True).rows_per_pass(3, 256) == 3   # never more rows than candidates


def test_reward_study_analysis(tiny_lm, length_reward, coupled):
    from specrej.bench.reward_study import analyse_run, table

    res = analyse_run(tiny_lm, length_reward, [coupled, coupled], ks=[1, 4, 16], budgets=[41 + 16 * 6],
                      alphas=[0.5, 0.8], first_decisions=[6, 12], max_new_tokens=24)
    assert [r["k"] for r in res["curve"]] == [1, 4, 16] and res["curve"][-1]["improvement"] == pytest.approx(100)
    assert res["curve"][0]["improvement"] < 100
    assert [r["t"] for r in res["spearman"]][:2] == [8, 16]
    assert len(res["simulated"]) == 4
    first = res["simulated"][0]
    assert first["n0"] == 16 and first["first_decision"] == 6
    assert first["speedup_steps"]["value"] > 0
    assert res["simulated"][2]["n0"] == 8          # first decision 12: 97 // 12 rows
    assert "SIMULATED" in table(res)
