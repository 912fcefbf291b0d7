"""Every bad input is a ValueError that says what was wrong, raised before model work."""
from __future__ import annotations

import pytest

from specrej import BudgetError, RunConfig, best_of_n, speculative_rejection
from specrej.methods import _Run


@pytest.mark.parametrize("field,value,match", [
    ("prompt", "", "prompt is empty"),
    ("prompt", "  \n\t ", "prompt is empty"),
    ("n", 0, "n=0"),
    ("n", -3, "n=-3"),
    ("n", 2.5, "n=2.5"),
    ("alpha", 1.0, r"outside \[0, 1\)"),
    ("alpha", -0.1, r"outside \[0, 1\)"),
    ("alpha", float("nan"), r"outside \[0, 1\)"),
    ("budget", 0, "budget=0"),
    ("budget", -10, "budget=-10"),
    ("max_new_tokens", 0, "max_new_tokens=0"),
    ("temperature", 0.0, "temperature=0.0 must be > 0"),
    ("temperature", -1.0, "must be > 0"),
    ("top_p", 0.0, r"top_p=0.0 must be in \(0, 1\]"),
    ("top_p", 1.5, r"must be in \(0, 1\]"),
    ("top_k", -1, "top_k=-1"),
    ("decision", "sometimes", "decision='sometimes' is unknown"),
    ("interval", 0, "interval=0"),
    ("seed", -1, "seed=-1"),
    ("stop", ("",), "stop strings"),
])
def test_bad_config_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        RunConfig(**{"prompt": "hi", field: value})


def test_defaults_are_valid_and_documented():
    c = RunConfig(prompt="hi")
    assert 0 <= c.alpha < 1 and c.n >= 1
    assert all(RunConfig.help().values())


@pytest.mark.parametrize("method", [best_of_n, speculative_rejection])
def test_impossible_budget_is_refused_before_model_work(tiny_lm, length_reward, method, monkeypatch):
    prefilled = []
    monkeypatch.setattr(_Run, "prefill", lambda self: prefilled.append(1))
    with pytest.raises(BudgetError, match="raise the budget to at least"):
        next(method(tiny_lm, length_reward, RunConfig(prompt="hi", n=64, budget=200, max_new_tokens=8)))
    with pytest.raises(BudgetError, match="even one candidate at full length"):
        next(method(tiny_lm, length_reward, RunConfig(prompt="hi", n=1, budget=20, max_new_tokens=64)))
    with pytest.raises(BudgetError, match="context"):
        next(method(tiny_lm, length_reward, RunConfig(prompt="hi", n=1, budget=10_000, max_new_tokens=600)))
    assert not prefilled


def test_reward_returning_nan_stops_the_run_with_a_clear_error(tiny_lm):
    from specrej import CallableReward, RewardError

    nan = CallableReward(lambda p, rs: [float("nan")] * len(rs), name="broken")
    with pytest.raises(RewardError, match="broken"):
        list(speculative_rejection(tiny_lm, nan, RunConfig(prompt="hi", n=4, budget=4 * 30, max_new_tokens=16)))
