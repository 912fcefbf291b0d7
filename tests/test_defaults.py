"""The page's defaults show the method: on every example prompt, with the embedded models and the
default reward, Speculative Rejection (as the page starts it: n='auto') makes at least 2 decisions
and prunes at least three quarters of its candidates. Decision counts, never times."""
from __future__ import annotations

import pytest

from specrej import run_to_completion
from specrej.backends.hf import Engine
from specrej.core.budget import KVBudget
from specrej.core.events import Round


@pytest.fixture(scope="module")
def page():
    from components.session.context import AppContext, get_models
    from specrej.engine.models import EMBEDDED_GGUF, wheel_folder

    if wheel_folder(EMBEDDED_GGUF[0]) is None:
        pytest.skip("needs the embedded model wheel (scripts/setup.sh)")
    ctx = AppContext.from_env({})
    return ctx, get_models(*ctx.resolve(ctx.default_model, ctx.default_reward, ctx.default_preference))


def test_the_page_defaults_are_the_measured_ones():
    from components.state.request import RunRequest

    req = RunRequest(prompt="x")
    assert (req.n, req.max_new_tokens, req.first_decision, req.alpha, req.sr_start) == (32, 48, 14, 0.5, "auto")
    assert req.fit is True and req.step is False


def test_the_defaults_prune_on_every_example_prompt(page):
    from components.state.request import RunRequest

    ctx, (lm, reward) = page
    assert len(ctx.examples) >= 6
    for prompt in ctx.examples:
        req = RunRequest(prompt=prompt, model=ctx.default_model, reward=ctx.default_reward,
                         preference=ctx.default_preference)
        cfg, arms = req.config(0), req.arms(ctx.arms)
        sr = next(a for a in arms if a.method == "sr")
        rounds = []
        events = sr.events(lm, reward, cfg)
        fin = run_to_completion(e for e in events if not (isinstance(e, Round) and rounds.append(e)))
        decided = [r for r in rounds if r.n_pruned]
        pruned = sum(c.status == "pruned" for c in fin.candidates)
        assert len(decided) >= 2, (prompt, [(r.position, r.n_kept, r.n_pruned) for r in rounds])
        assert pruned >= 0.75 * len(fin.candidates), (prompt, pruned, len(fin.candidates))
        # Best-of-N at the page's N (16) fits 8 rows at full length: two passes, memory binds it too
        bon = next(a for a in arms if a.method == "bon").config(cfg)
        budget = bon.budget if bon.budget is not None else Engine.default_budget(lm)
        assert KVBudget(budget, len(lm.render(prompt)), lm.shares_prefix).rows_per_pass(bon.n, bon.max_new_tokens) == 8
