"""A race that always concludes: shortening keeps the rows and the decisions (core/cost.py), the fit picks
the largest share of the answers that fits the target at this machine's step times now
(components/session/pace.py), and links carry the settings of the race that ran (components/links.py)."""
from __future__ import annotations

import dataclasses

import pytest

from specrej import RunConfig
from specrej.core.budget import KVBudget
from specrej.core.cost import MIN_SCALE, StepCost, fit_scale, race_seconds, shorten


def test_shortening_keeps_the_rows_at_every_step():
    cfg = RunConfig(prompt="x", n=32, budget=448, first_decision=14, max_new_tokens=48)
    for scale in (0.8, 0.6, 0.4):
        short = shorten(cfg, scale, shared_slots=40)
        assert short.max_new_tokens == round(48 * scale) and short.n == 32
        full, small = KVBudget(448, 40, True), KVBudget(short.budget, 40, True)
        # the first batch and Best-of-N's rows per pass stay (within a row of rounding)
        assert abs(small.auto_n(short.first_decision) - full.auto_n(14)) <= 2
        assert abs(small.rows_per_pass(32, short.max_new_tokens) - full.rows_per_pass(32, 48)) <= 1
    # never below what N rows need for a few tokens (the race could not start)
    tiny = shorten(dataclasses.replace(cfg, budget=60), 0.4, shared_slots=40)
    assert tiny.budget >= 40 + 4 * 32


def test_fit_scale_takes_the_largest_share_that_fits():
    assert fit_scale(lambda s: 10 * s, 20) == 1.0          # fits as it is
    assert fit_scale(lambda s: 40 * s, 20) == pytest.approx(0.5)
    assert fit_scale(lambda s: 1000 * s, 20) == MIN_SCALE   # never shorter than the floor
    cost = StepCost((1, 8, 32, 128), (0.03, 0.035, 0.05, 0.12))
    cfg = RunConfig(prompt="x", n=32, budget=448, first_decision=14, max_new_tokens=48)
    t1 = race_seconds(KVBudget(448, 40, True), cfg, cost, sr_auto=True)
    half = shorten(cfg, 0.5, 40)
    t2 = race_seconds(KVBudget(half.budget, 40, True), half, cost, sr_auto=True)
    assert t2 == pytest.approx(t1 / 2, rel=0.1)             # the same rows, half the steps
    assert cost.scaled(3.0).step(8) == pytest.approx(3 * cost.step(8))
    assert cost.merged(cost.scaled(0.5)).seconds == cost.scaled(0.5).seconds


def test_the_fit_shortens_a_race_on_a_busy_machine(tiny_app, monkeypatch):
    from components.session import pace

    ctx = tiny_app
    quiet = StepCost((1, 8, 32, 128), (0.01, 0.012, 0.02, 0.05))
    cfg = RunConfig(prompt="Name three rivers.", n=8, budget=400, first_decision=8, max_new_tokens=40)
    monkeypatch.setattr(pace, "measure", lambda ctx, model, lm: (quiet, 1.0, 2))
    calm = pace.fit(ctx, ctx.default_model, cfg, sr_auto=True, target_s=1000)
    assert not calm.shortened and calm.cfg == cfg and calm.words() == ""
    monkeypatch.setattr(pace, "measure", lambda ctx, model, lm: (quiet.scaled(3.0), 3.0, 1))
    busy = pace.fit(ctx, ctx.default_model, cfg, sr_auto=True, target_s=calm.estimate_s)
    assert busy.shortened and busy.cfg.max_new_tokens < 40 and busy.cfg.n == 8
    assert busy.estimate_s <= calm.estimate_s or busy.scale == MIN_SCALE
    assert "3.0x slower" in busy.words() and f"{busy.cfg.max_new_tokens} tokens" in busy.words()
    off = pace.fit(ctx, ctx.default_model, cfg, sr_auto=True, target_s=calm.estimate_s, allow_shorten=False)
    assert not off.shortened and off.cost.step(8) == pytest.approx(3 * quiet.step(8))
    # a race that ran: what it took over its bound moves the next estimate (a third of the way)
    before = ctx.overhead
    pace.learn(ctx, calm, 2 * calm.estimate_s / ctx.overhead)
    assert ctx.overhead == pytest.approx(before + (2 - before) / 3)


@pytest.fixture()
def tiny_app(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    from conftest import tiny_app_context

    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


def test_links_round_trip_and_drop_what_they_do_not_know():
    from components import links

    values = dict(prompt="Name three rivers.", n=16, alpha=0.5, seed=7, fit=True, step=False, decision="budget")
    q = links.query(values)
    assert "seed=7" in q and "fit=1" in q and "prompt=Name+three+rivers." in q
    parsed = dict(p.split("=", 1) for p in q.split("&"))
    from urllib.parse import unquote_plus

    back = links.settings({k: unquote_plus(v) for k, v in parsed.items()}, {"decision": ["budget", "interval"]},
                          {"n": (1, 32)})
    assert back == values
    junk = links.settings({"n": "999", "alpha": "nan", "seed": "-3", "decision": "sometimes", "model": "evil",
                           "fit": "maybe", "budget": "1e3"}, {"decision": ["budget"]}, {"n": (1, 32)})
    assert junk == {"budget": 1000}


def test_a_link_after_a_fitted_race_holds_the_race_that_ran():
    from types import SimpleNamespace

    from components import links

    asked = RunConfig(prompt="x", max_new_tokens=48, first_decision=14, budget=448)
    ran = shorten(asked, 0.5, 40)
    view = SimpleNamespace(state="done", fit=SimpleNamespace(shortened=True, cfg=ran))
    out = links.run_values(view, {"max_new_tokens": 48, "first_decision": 14, "budget": 0, "fit": True, "seed": 3})
    assert (out["max_new_tokens"], out["first_decision"], out["budget"], out["fit"], out["seed"]) == (
        ran.max_new_tokens, ran.first_decision, ran.budget, False, 3)
    assert links.run_values(None, {"seed": 3}) == {"seed": 3}
