"""The offline simulator is the live method driving a replay of a coupled run: it reproduces a live
run event for event."""
from __future__ import annotations

import pytest

from specrej import RunConfig, best_of_n, speculative_rejection, to_dict
from specrej.bench.coupled import PrefixScorer, collect
from specrej.bench.simulate import rerun, simulate_sr
from specrej.core.budget import KVBudget
from specrej.core.events import Finished, Progress, Round

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


def _same(event) -> dict:
    """An event as data, less what a replay cannot share with a live run: the clock, the backend's name and its
    decoding step's."""
    d = to_dict(event)
    for k in ("wall_s", "reward_s", "backend", "step"):   # the clock (scoring's seconds too), the backend's names
        d["ledger"].pop(k, None)
    return d


@pytest.mark.parametrize("method,kw", [
    (speculative_rejection, dict(alpha=0.5, budget_extra=6)),
    (speculative_rejection, dict(alpha=0.7, budget_extra=9, decision="interval", interval=5)),
    (speculative_rejection, dict(alpha=0.5, budget_extra=5, keep_finished=True, rule="calibrated")),
    (best_of_n, dict(budget_extra=20)),
])
def test_replay_reproduces_a_live_run_event_for_event(tiny_lm, length_reward, coupled, method, kw):
    """The same method, the same config: on the model, and on a replay of the coupled run (the
    simulator's one loop). Every event (Progress, Round, Finished) is equal, candidates, scores,
    statuses and ledger included (but the clock)."""
    kw = dict(kw)
    extra = kw.pop("budget_extra")
    cfg = RunConfig(prompt=PROMPT, n=16, max_new_tokens=24, seed=5, progress_every=3,
                    budget=coupled.prompt_tokens + 16 * extra, **kw)
    live = list(method(tiny_lm, length_reward, cfg))
    scorer = PrefixScorer(tiny_lm, length_reward, coupled)
    replayed = list(rerun(method, coupled, scorer, cfg))
    assert [type(e) for e in replayed] == [type(e) for e in live]
    assert sum(isinstance(e, Round) for e in live) >= 2 and any(isinstance(e, Progress) for e in live)
    assert [_same(e) for e in replayed] == [_same(e) for e in live]
    assert replayed[-1].ledger.backend == "replay"
    if method is speculative_rejection:
        assert any(e.n_pruned for e in live if isinstance(e, Round))


def test_replay_scores_each_prefix_once(tiny_lm, coupled):
    """The replays of one coupled run share its scorer's memory: a prefix is scored once, whatever
    reads it (the scorer itself, or any number of replayed points)."""
    from specrej import CallableReward

    seen: list[str] = []
    reward = CallableReward(lambda p, rs: (seen.extend(rs), [float(len(r)) for r in rs])[1], name="len")
    scorer = PrefixScorer(tiny_lm, reward, coupled)
    final = scorer.final()
    assert len(seen) == len(set(seen)) and len(seen) == 16
    P = coupled.prompt_tokens
    for alpha in (0.5, 0.5, 0.8):
        simulate_sr(coupled, scorer, budget=P + 16 * 6, alpha=alpha, n0=16, max_new_tokens=24)
    assert len(seen) == len(set(seen)) > 16            # partial prefixes were scored, each once
    assert scorer.final() == final


def test_replay_refuses_what_the_recording_does_not_hold(tiny_lm, length_reward, coupled):
    scorer = PrefixScorer(tiny_lm, length_reward, coupled)
    P = coupled.prompt_tokens
    with pytest.raises(ValueError, match="recorded run"):
        simulate_sr(coupled, scorer, budget=P + 17 * 6, alpha=0.5, n0=17, max_new_tokens=24)
    with pytest.raises(ValueError, match="prompt"):
        list(rerun(speculative_rejection, coupled, scorer, RunConfig(prompt="Something else entirely.", n=4,
                                                                       max_new_tokens=24, budget=400)))


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
