"""Contract tests of the two methods on a tiny real model (fast, CPU)."""
from __future__ import annotations

import dataclasses
import math

import pytest

from specrej import (CallableReward, Finished, Progress, Round, RunConfig, best_of_n, run_to_completion,
                     speculative_rejection, to_dict)
from specrej.backends.hf import Engine, Rows
from conftest import cache_slots

PROMPT = "Give me three tips for staying healthy."
P = 41  # tokens of PROMPT through the tiny tokenizer's chat template (checked below)


def cfg(**kw) -> RunConfig:
    """Defaults, with ``budget`` given as tokens per row beyond the prompt, which the rows share
    (P + rows x budget slots)."""
    base = dict(prompt=PROMPT, n=12, alpha=0.5, max_new_tokens=24, budget=10, seed=3)
    base.update(kw)
    base["budget"] = P + base["n"] * base["budget"]
    return RunConfig(**base)


def test_prompt_length(tiny_lm):
    assert len(tiny_lm.render(PROMPT)) == P
    assert tiny_lm.shares_prefix   # a Llama: rows share the prompt's cache, so budgets count it once


def events(method, lm, reward, c):
    return list(method(lm, reward, c))


def texts(f: Finished) -> dict[int, str]:
    return {c.id: c.text for c in f.candidates}


def test_same_seed_same_run(tiny_lm, length_reward):
    a = run_to_completion(speculative_rejection(tiny_lm, length_reward, cfg()))
    b = run_to_completion(speculative_rejection(tiny_lm, length_reward, cfg()))
    assert [(c.text, c.score, c.status) for c in a.candidates] == [(c.text, c.score, c.status) for c in b.candidates]
    c = run_to_completion(speculative_rejection(tiny_lm, length_reward, cfg(seed=4)))
    assert texts(a) != texts(c)


def test_alpha_zero_equals_best_of_n(tiny_lm, length_reward):
    c = cfg(alpha=0.0, decision="interval", interval=5, budget=30)
    sr_events = events(speculative_rejection, tiny_lm, length_reward, c)
    sr = sr_events[-1]
    bon = run_to_completion(best_of_n(tiny_lm, length_reward, c))
    assert sum(isinstance(e, Round) for e in sr_events) >= 3  # decisions were taken, and pruned nothing
    assert all(e.n_pruned == 0 for e in sr_events if isinstance(e, Round))
    assert texts(sr) == texts(bon)
    assert sr.winner.id == bon.winner.id and sr.winner.score == bon.winner.score


def test_pruned_candidates_are_prefixes_of_their_best_of_n_selves(tiny_lm, length_reward):
    """Coupled randomness: candidate i writes the same text in both arms while it survives."""
    c = cfg(alpha=0.6, budget=30, decision="interval", interval=6)
    sr = run_to_completion(speculative_rejection(tiny_lm, length_reward, c))
    bon = {x.id: x for x in run_to_completion(best_of_n(tiny_lm, length_reward, c)).candidates}
    pruned = [x for x in sr.candidates if x.status == "pruned"]
    assert pruned
    for x in pruned:
        assert bon[x.id].text.startswith(x.text.rstrip("\ufffd"))
    for x in sr.candidates:
        if x.status == "finished":
            assert x.text == bon[x.id].text


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.8])
def test_each_round_keeps_round_one_minus_alpha_n_top_scores(tiny_lm, length_reward, alpha):
    c = cfg(alpha=alpha, n=16, budget=12, max_new_tokens=30)
    in_contention = {i for i in range(c.n)}
    rounds = [e for e in events(speculative_rejection, tiny_lm, length_reward, c) if isinstance(e, Round)]
    assert rounds, "the budget should force at least one decision"
    for r in rounds:
        by_id = {x.id: x for x in r.candidates}
        pool = [i for i in in_contention]
        pruned_now = [x for x in r.candidates if x.status == "pruned" and x.round_pruned == r.index]
        kept = [by_id[i] for i in pool if by_id[i].status in ("kept", "finished")]
        if not r.forced:
            assert len(kept) == max(1, round((1 - alpha) * len(pool)))
        assert r.n_kept == len(kept) and r.n_pruned == len(pruned_now)
        assert min(k.score for k in kept) == r.threshold
        if pruned_now:
            assert max(p.score for p in pruned_now) <= r.threshold
        in_contention = {k.id for k in kept}


@pytest.mark.parametrize("method", [best_of_n, speculative_rejection])
def test_budget_is_never_exceeded(tiny_lm, length_reward, method, monkeypatch):
    seen = []
    real_step = Rows.step

    def spy(self):
        out = real_step(self)
        seen.append(cache_slots(self))
        return out

    monkeypatch.setattr(Rows, "step", spy)
    c = cfg(n=16, budget=8, max_new_tokens=30)
    f = run_to_completion(method(tiny_lm, length_reward, c))
    assert seen and max(seen) <= c.budget
    assert f.ledger.peak_kv_slots == max(seen)
    assert f.ledger.kv_sharing == "shared" and f.ledger.dtype == str(tiny_lm.dtype).removeprefix("torch.")
    # with the prompt copied to every row, the same budget holds fewer tokens per row
    seen.clear()
    copied = dataclasses.replace(tiny_lm, shares_prefix=False)
    c = RunConfig(prompt=PROMPT, n=4, max_new_tokens=30, budget=4 * (P + 8), seed=3)
    f = run_to_completion(method(copied, length_reward, c))
    assert seen and max(seen) <= c.budget and f.ledger.kv_sharing == "copied"


def test_best_of_n_runs_passes_of_rows_that_fit(tiny_lm, length_reward):
    c = cfg(n=16, budget=8, max_new_tokens=30)
    prompt_len = len(tiny_lm.render(PROMPT))
    per_pass = (c.budget - prompt_len) // 29   # the prompt once, then 29 fed tokens per row
    rounds = [e for e in events(best_of_n, tiny_lm, length_reward, c) if isinstance(e, Round)]
    assert len(rounds) == math.ceil(16 / per_pass)


def test_finished_candidates_keep_their_score_and_compete(tiny_lm):
    # Stop on a common character so that many candidates finish early; reward short answers.
    short = CallableReward(lambda p, rs: [-len(r) for r in rs], name="short")
    c = cfg(n=16, alpha=0.5, stop=("e", "a"), max_new_tokens=30, decision="interval", interval=3, budget=40)
    evs = events(speculative_rejection, tiny_lm, short, c)
    f = evs[-1]
    finished = [x for x in f.candidates if x.finish_reason is not None]
    assert finished
    for x in finished:  # a finished candidate's score is the one it finished with
        assert x.score == x.history[-1][1] and x.history[-1][0] == x.tokens
    # with keep_finished, finished candidates are never pruned
    c2 = cfg(n=16, alpha=0.5, stop=("e", "a"), max_new_tokens=30, decision="interval", interval=3,
             budget=40, keep_finished=True)
    long_ = CallableReward(lambda p, rs: [len(r) for r in rs], name="long")
    f2 = run_to_completion(speculative_rejection(tiny_lm, long_, c2))
    assert all(x.status == "finished" for x in f2.candidates if x.finish_reason is not None)
    # without it, long-favouring reward makes early finishers lose their slots
    f3 = run_to_completion(speculative_rejection(tiny_lm, long_, cfg(
        n=16, alpha=0.5, stop=("e", "a"), max_new_tokens=30, decision="interval", interval=3, budget=40)))
    assert any(x.status == "pruned" and x.finish_reason is not None for x in f3.candidates)


def test_stopping_mid_run_frees_the_batch(tiny_lm, length_reward, monkeypatch):
    made: list[Rows] = []
    real_start = Engine.start

    def spy(self, ids):
        rows = real_start(self, ids)
        made.append(rows)
        return rows

    monkeypatch.setattr(Engine, "start", spy)
    it = speculative_rejection(tiny_lm, length_reward, cfg(progress_every=2))
    first = next(it)
    assert isinstance(first, Progress) and made and made[0].cache is not None
    it.close()
    assert made[0].cache is None and len(made[0]) == 0


@pytest.mark.parametrize("method", [best_of_n, speculative_rejection])
def test_ledger_adds_up(tiny_lm, length_reward, method):
    c = cfg()
    f = run_to_completion(method(tiny_lm, length_reward, c))
    led = f.ledger
    assert led.generated_tokens == sum(x.tokens for x in f.candidates)
    assert led.prompt_tokens == len(tiny_lm.render(PROMPT))
    # FLOPs as core.cost.FlopModel counts them: the prompt at positions 1..P, each candidate's g tokens at P+1..P+g
    from specrej.core.cost import flop_model_of

    fm, P = flop_model_of(tiny_lm), led.prompt_tokens
    assert led.generator_flops == pytest.approx(fm.sequence(0, P) + sum(fm.sequence(P, x.tokens) for x in f.candidates))
    assert led.reward_flops == 0.0 and led.wall_s > 0
    assert to_dict(f)["ledger"]["flops"] == led.flops


def test_speculative_rejection_spends_less_than_best_of_n(tiny_lm, length_reward):
    c = cfg(n=16, budget=12, max_new_tokens=30)
    sr = run_to_completion(speculative_rejection(tiny_lm, length_reward, c))
    bon = run_to_completion(best_of_n(tiny_lm, length_reward, c))
    assert sr.ledger.generated_tokens < bon.ledger.generated_tokens
    assert all(math.isfinite(x.score) for x in sr.candidates if x.score is not None)


def test_events_are_ordered(tiny_lm, length_reward):
    evs = events(speculative_rejection, tiny_lm, length_reward, cfg(progress_every=3))
    assert isinstance(evs[-1], Finished) and not any(isinstance(e, Finished) for e in evs[:-1])
    wall = [e.ledger.wall_s for e in evs]
    assert wall == sorted(wall)
    assert [e.index for e in evs if isinstance(e, Round)] == list(range(evs[-1].rounds))
