"""The memory budget at its boundaries: what ``KVBudget.check`` refuses and what the methods then use.

A row of P prompt tokens at full length holds P + max_new_tokens - 1 KV slots (its last token is
never fed back). Budgets are drawn over a range (hypothesis), not one value, so an off-by-one in
``KVBudget.rows_per_pass`` or ``KVBudget.check`` cannot hide at a budget where both formulas agree.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from specrej import BudgetError, Round, RunConfig, best_of_n, run_to_completion, speculative_rejection
from specrej.core.budget import FEW_TOKENS, KVBudget
from specrej.backends.hf import Rows
from conftest import cache_slots

# prompts of very different token lengths through the tiny tokenizer's chat template
PROMPTS = ["Give me three tips for staying healthy.", "hi", "Write a haiku about the sea. " * 3,
           "Explain how a rainbow forms, step by step, for a child of seven who loves colours and rain."]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))


def slots(rows: int, p: int, generated: int, shared: bool) -> int:
    """KV slots that ``rows`` rows of a P-token prompt hold after ``generated`` tokens were fed: the
    prompt once when the rows share it (``lm.shares_prefix``), else once per row. Stated here on
    its own, not taken from ``specrej.core.budget``, so that a slip there cannot hide."""
    return p + rows * generated if shared else rows * (p + generated)


def lowest_budget(p: int, n: int, m: int, shared: bool) -> int:
    """The smallest budget KVBudget.check accepts: one row at full length, and all n rows for a few tokens."""
    return max(slots(1, p, m - 1, shared), slots(n, p, min(FEW_TOKENS, m), shared))


@pytest.fixture
def peak_slots(monkeypatch):
    """KV slots held after every decoding step of every batch, read from the engine's cache."""
    seen: list[int] = []
    real = Rows.step

    def spy(self):
        out = real(self)
        seen.append(cache_slots(self))
        return out

    monkeypatch.setattr(Rows, "step", spy)
    return seen


@SETTINGS
@given(prompt=st.sampled_from(PROMPTS), n=st.integers(1, 14), max_new_tokens=st.integers(1, 32),
       extra=st.integers(-3, 400))
@example(prompt=PROMPTS[0], n=16, max_new_tokens=30, extra=828 - 16 * 45)   # the budget 828 that once overran
@example(prompt=PROMPTS[0], n=16, max_new_tokens=30, extra=840 - 16 * 45)   # 12 rows of 70 slots fit exactly
@example(prompt=PROMPTS[0], n=16, max_new_tokens=30, extra=300)   # shared prompt: 12 rows of 29, not 13 of 28
def test_best_of_n_passes_fit_the_budget_and_are_as_large_as_fit(tiny_lm, length_reward, peak_slots, prompt, n,
                                                                  max_new_tokens, extra):
    p, shared = len(tiny_lm.render(prompt)), tiny_lm.shares_prefix
    budget = lowest_budget(p, n, max_new_tokens, shared) + extra
    cfg = RunConfig(prompt=prompt, n=n, alpha=0.5, max_new_tokens=max_new_tokens, budget=budget, seed=extra % 7,
                    progress_every=0)
    if extra < 0:
        with pytest.raises(BudgetError, match="raise the budget"):
            run_to_completion(best_of_n(tiny_lm, length_reward, cfg))
        return
    peak_slots.clear()
    events = list(best_of_n(tiny_lm, length_reward, cfg))
    full = max_new_tokens - 1   # tokens fed to a row at full length (its last token is never fed)
    sizes = [e.n_kept for e in events if isinstance(e, Round)]
    assert sum(sizes) == n
    assert max(peak_slots) <= budget and events[-1].ledger.peak_kv_slots <= budget
    # every pass but the last is as large as fits: all N rows, or one more at full length would overflow
    for rows in sizes[:-1] or sizes:
        assert slots(rows, p, full, shared) <= budget or rows == 1
        assert rows == n or slots(rows + 1, p, full, shared) > budget, (rows, budget)


@SETTINGS
@given(prompt=st.sampled_from(PROMPTS), n=st.integers(1, 14), max_new_tokens=st.integers(1, 32),
       extra=st.integers(0, 400), alpha=st.sampled_from([0.0, 0.3, 0.5, 0.9]))
def test_speculative_rejection_never_holds_more_than_the_budget(tiny_lm, length_reward, peak_slots, prompt, n,
                                                               max_new_tokens, extra, alpha):
    p, shared = len(tiny_lm.render(prompt)), tiny_lm.shares_prefix
    budget = lowest_budget(p, n, max_new_tokens, shared) + extra
    cfg = RunConfig(prompt=prompt, n=n, alpha=alpha, max_new_tokens=max_new_tokens, budget=budget, seed=extra % 5,
                    progress_every=0)
    peak_slots.clear()
    f = run_to_completion(speculative_rejection(tiny_lm, length_reward, cfg))
    assert max(peak_slots) <= budget and f.ledger.peak_kv_slots == max(peak_slots)
    assert sum(c.status == "finished" for c in f.candidates) >= 1


@pytest.mark.parametrize("n,max_new_tokens", [(1, 30), (3, 2), (5, 12), (16, 30)])
def test_budget_check_refuses_exactly_one_slot_below_what_a_run_needs(tiny_lm, n, max_new_tokens):
    p = len(tiny_lm.render(PROMPTS[0]))
    cfg = RunConfig(prompt=PROMPTS[0], n=n, max_new_tokens=max_new_tokens)
    low = lowest_budget(p, n, max_new_tokens, tiny_lm.shares_prefix)
    shared = tiny_lm.shares_prefix
    KVBudget(low, p, shared).check(n, max_new_tokens, None)      # exactly enough: runs
    KVBudget(low + 1, p, shared).check(n, max_new_tokens, None)
    with pytest.raises(BudgetError) as e:                         # one slot short: refused, and told the fix
        KVBudget(low - 1, p, shared).check(n, max_new_tokens, None)
    assert f"at least {low}" in str(e.value)
    # the model's context: prompt + max_new_tokens may reach it, not pass it
    KVBudget(10**6, p, False).check(n, max_new_tokens, p + max_new_tokens)
    with pytest.raises(BudgetError, match="context"):
        KVBudget(10**6, p, False).check(n, max_new_tokens, p + max_new_tokens - 1)


@pytest.mark.parametrize("method", [best_of_n, speculative_rejection])
def test_a_run_at_the_lowest_accepted_budget_completes_within_it(tiny_lm, length_reward, peak_slots, method):
    p = len(tiny_lm.render(PROMPTS[0]))
    for n, m in ((1, 20), (6, 20)):
        budget = lowest_budget(p, n, m, tiny_lm.shares_prefix)
        cfg = RunConfig(prompt=PROMPTS[0], n=n, alpha=0.5, max_new_tokens=m, budget=budget, seed=2,
                        progress_every=0)
        peak_slots.clear()
        f = run_to_completion(method(tiny_lm, length_reward, cfg))
        assert max(peak_slots) <= budget
        assert len(f.candidates) == n and any(c.status == "finished" for c in f.candidates)


def test_vllm_on_a_cpu_sizes_its_kv_pool_from_the_race_not_from_all_memory():
    """vLLM's CPU default reserves a share of ALL the machine's memory and refuses to start when other
    processes hold it; the backend asks instead for the bytes of the race's budget (at least one sequence of
    the model's length, which vLLM requires), from the model's layers, KV heads and head size."""
    from types import SimpleNamespace

    from specrej.backends.vllm import kv_pool_bytes

    cfg = SimpleNamespace(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
                          max_position_embeddings=8192)
    per_slot = 2 * 30 * 3 * 64 * 4                       # K and V, 30 layers, 3 KV heads of 64, fp32: 46 kB
    assert kv_pool_bytes(cfg, 4, 16384) == int(16384 * per_slot * 1.05) + 4 * 128 * per_slot
    assert kv_pool_bytes(cfg, 4, 1024) == kv_pool_bytes(cfg, 4, 8192)   # never below one whole sequence
    assert kv_pool_bytes(cfg, 4, 1024, max_model_len=2048) < kv_pool_bytes(cfg, 4, 8192)
    assert kv_pool_bytes(cfg, 2, 16384) < kv_pool_bytes(cfg, 4, 16384) < 2**30   # the largest public budget: < 1 GiB


def test_one_admission_answers_fits_or_why_with_the_slots_granted_and_its_inverse():
    """Issue 41 (1): ``core.budget.admit`` is the one answer to "does this run fit?" (n='auto' resolved, the
    rows checked), ``admit_race`` sums every arm a race holds at once, ``budget_for`` is the inverse."""
    from specrej.core.budget import BudgetError, admit, admit_race, budget_for, opening_rows

    cfg = RunConfig(prompt="x", n="auto", first_decision=8, max_new_tokens=32)
    a = admit(cfg, budget=448, prompt_len=20, shared=True)
    assert a.fits and a.slots == 448 and a.granted().n == (448 - 20) // 8
    assert budget_for(a.cfg.n, 8, 20, True) <= 448 < budget_for(a.cfg.n + 1, 8, 20, True)   # the inverse
    assert budget_for(32, 14) == 448 and opening_rows(448, 14) == 32 and opening_rows(10**9, 1) == 4096
    big = admit(RunConfig(prompt="x", n=64, max_new_tokens=32), budget=100, prompt_len=20, shared=False)
    assert not big.fits and "raise the budget" in big.why
    with pytest.raises(BudgetError, match="raise the budget"):
        big.granted()
    assert admit_race([448, 448], 1000) is None
    why = admit_race([16384] * 5, 16384, limit_name="the cap")
    assert "5 arms would hold" in why and "81920" in why and "the cap is 16384" in why and "to 3276" in why


SLOT_ARITHMETIC = [   # what the hand-written slot sums looked like (issue 41's list), outside core/budget.py
    r"budget\s*//\s*\w*first_decision", r"\bn\"?\]?\s*\*\s*\w*\[?\"?first_decision", r"DEFAULT_CPU_BUDGET\s*//",
    r"max_budget\s*//\s*\w*max_auto_n", r"KVBudget\(\s*cfg\.budget",
]


def test_no_slot_arithmetic_outside_the_admission():
    """Issue 41 (1): slots are computed in ``specrej/core/budget.py`` only; the methods, the page's check before
    a race, the deployment's limits, Paper scale, the request's defaults and the scripts ask it."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [p for d in ("specrej", "components", "scripts") for p in (root / d).rglob("*.py")] + [root / "app.py"]
    found = [f"{p.relative_to(root)}: {m.group(0)}" for p in files if p.name != "budget.py"
             for pattern in SLOT_ARITHMETIC for m in re.finditer(pattern, p.read_text(encoding="utf-8"))]
    assert not found, found
