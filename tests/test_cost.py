"""The estimate of a race's time before it runs: rows per step bounded by the memory budget, and a
step's cost interpolated from measured batch sizes (hand-made numbers with known answers)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specrej import RunConfig
from specrej.core.budget import KVBudget
from specrej.core.cost import StepCost, bon_rows, race_rows, sr_rows


def test_best_of_n_decodes_its_passes_to_full_length():
    kv = KVBudget(100, 10, shared=True)   # 90 slots beside the prompt: 10 rows of 9 own slots (the last token is never fed)
    assert kv.rows_per_pass(None, 10) == 10
    assert bon_rows(kv, 25, 10) == [10] * 10 + [10] * 10 + [5] * 10


def test_speculative_rejection_holds_at_most_what_memory_does():
    kv = KVBudget(100, 10, shared=True)
    rows = sr_rows(kv, 40, 8)
    assert rows == [40, 40, 30, 22, 18, 15, 12, 11]   # its first batch, then 90 // t
    assert sr_rows(KVBudget(12, 10, shared=True), 5, 3) == [2, 1, 1]   # never below one row


def test_race_rows_opens_speculative_rejection_with_the_auto_batch():
    kv = KVBudget(90, 10, shared=True)
    cfg = RunConfig(prompt="-", n=4, max_new_tokens=6, first_decision=3, budget=90)
    out = race_rows(kv, cfg, sr_auto=True)
    assert out["sr"][0] == kv.auto_n(3) == 26 and len(out["sr"]) == 6
    assert out["bon"] == [4] * 6
    assert race_rows(kv, cfg, sr_auto=False)["sr"][0] == 4


def test_step_cost_interpolates_and_extends_the_last_slope():
    cost = StepCost((1, 8, 32), (0.05, 0.1, 0.2))
    assert cost.step(1) == pytest.approx(0.05) and cost.step(8) == pytest.approx(0.1)
    assert cost.step(20) == pytest.approx(0.15)
    assert cost.step(64) == pytest.approx(0.2 + 32 * 0.1 / 24)
    assert cost.total([1, 8, 8]) == pytest.approx(0.25)
    assert not cost.extrapolates(32) and cost.extrapolates(33) and cost.measured_max == 32
    # noise: 8 rows measured faster than 1, so 1 row costs at most that (timing noise only slows): 0.05 flat
    assert StepCost((1, 8), (0.1, 0.05)).step(1) == StepCost((1, 8), (0.1, 0.05)).step(100) == pytest.approx(0.05)


def test_step_cost_never_prices_more_rows_cheaper_than_fewer():
    # the noisy measurement: 1, 8, 32 rows at 0.05, 0.04, 0.06 s. The suffix minimum lowers the
    # 1-row time to the 8-row one: fitted 0.04, 0.04, 0.06 (the points as measured stay in ``seconds``)
    cost = StepCost((1, 8, 32), (0.05, 0.04, 0.06))
    assert cost.fitted == (0.04, 0.04, 0.06) and cost.seconds == (0.05, 0.04, 0.06)
    assert cost.step(1) == cost.step(8) == pytest.approx(0.04)          # it gave 0.05 at 8 rows
    assert cost.step(9) == pytest.approx(0.04 + 0.02 / 24)              # 0.04083, no longer below step(8)
    assert cost.step(20) == pytest.approx(0.04 + 12 * 0.02 / 24)        # 0.05
    assert cost.step(64) == pytest.approx(0.06 + 32 * 0.02 / 24) and cost.extrapolates(64)   # past 32: extrapolated
    prices = [cost.step(r) for r in range(1, 200)]
    assert prices == sorted(prices)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 64), st.floats(0.001, 1.0)), min_size=1, max_size=6,
                unique_by=lambda p: p[0]))
def test_step_cost_is_monotone_and_never_above_a_measurement(points):
    points = sorted(points)
    cost = StepCost(tuple(r for r, _ in points), tuple(s for _, s in points))
    prices = [cost.step(r) for r in range(1, 130)]
    assert all(a <= b + 1e-15 for a, b in zip(prices, prices[1:]))
    # at each measured size, the fastest measured there or at any larger size
    for i, (r, _) in enumerate(points):
        assert cost.step(r) == pytest.approx(min(s for _, s in points[i:]))


def test_step_cost_from_the_bench_passes_keeps_the_fastest_at_each_size():
    cost = StepCost.from_passes([{"rows": 4, "step_s": 0.2}, {"rows": 4, "step_s": 0.1}, {"rows": 1, "step_s": 0.05}])
    assert (cost.rows, cost.seconds) == ((1, 4), (0.05, 0.1)) and cost.points == [[1, 0.05], [4, 0.1]]
    assert cost.step(2) == pytest.approx(0.05 + 0.05 / 3)
    one = StepCost.from_passes([{"rows": 3, "step_s": 0.2}])   # a budget that fits one row: one size measured
    assert one.step(1) == one.step(3) == one.step(40) == 0.2
    assert not one.extrapolates(3) and one.extrapolates(40)


@pytest.mark.parametrize("rows, secs", [((), ()), ((8, 1), (0.1, 0.2)), ((1, 8), (0.1, 0.0)),
                                        ((1, 8), (0.1, float("nan"))), ((1, 8), (0.1, float("inf"))),
                                        ((1, 1), (0.1, 0.1))])
def test_step_cost_refuses_what_it_cannot_interpolate(rows, secs):
    with pytest.raises(ValueError):
        StepCost(rows, secs)


def test_race_rows_bound_every_arm_of_the_race_the_rivals_included():
    """The page's estimate counts every arm it races: DeepConf in Best-of-N's passes (a trace may run to the
    end), ST-BoN opening with all N rows as far as the budget holds them; a second arm of a method its own."""
    from specrej.core.cost import race_seconds

    kv, cfg = KVBudget(448, 40, True), RunConfig(prompt="x", n=32, max_new_tokens=48, first_decision=14)
    out = race_rows(kv, cfg, sr_auto=True, methods=("bon", "sr", "deepconf", "stbon", "sr"))
    assert list(out) == ["bon", "sr", "deepconf", "stbon", "sr4"]
    assert out["deepconf"] == out["bon"] == bon_rows(kv, 32, 48) and out["sr4"] == out["sr"]
    assert out["stbon"] == sr_rows(kv, 32, 48) and max(out["stbon"]) == 32 > max(out["bon"])
    cost = StepCost((1, 8, 32), (0.05, 0.06, 0.1))
    two = race_seconds(kv, cfg, cost, sr_auto=True)
    four = race_seconds(kv, cfg, cost, sr_auto=True, methods=("bon", "sr", "deepconf", "stbon"))
    assert four > 1.8 * two and two == race_seconds(kv, cfg, cost, sr_auto=True, methods=("bon", "sr"))


def test_one_best_of_k_point_gives_steps_seconds_and_flops():
    """Issue 41: the one Best-of-k point (core.cost.best_of_k) that the verdict maps over k and the bench's curve
    reads: all N in passes is decode_cost pass by pass; FLOPs through cost.flops; scoring k/N of the run's."""
    from specrej.core.cost import best_of_k, decode_cost, flops

    lengths = [3, 5, 2, 4]
    price = lambda rows: 0.1 * rows   # noqa: E731
    p = best_of_k(4, lengths, 2, price, params=10, prompt_tokens=6, reward_flops=8.0, scoring_s=0.4)
    # passes of 2 in expectation over which answers go together: all 4 drawn, two passes of 2 random ones
    one = best_of_k(2, lengths, 2, price)
    assert p.steps == pytest.approx(2 * one.steps) and p.seconds == pytest.approx(2 * one.seconds + 0.4)
    whole = best_of_k(4, lengths, 4, price)
    assert (whole.steps, whole.seconds) == (5.0, pytest.approx(decode_cost(lengths, price)[1]))
    assert p.flops == pytest.approx(flops(10, 6 + 4 * 3.5) + 8.0)
    assert best_of_k(1, lengths, 2).seconds == 0.0 and best_of_k(1, lengths, 2).steps == pytest.approx(3.5)
    with pytest.raises(ValueError):
        best_of_k(5, lengths, 2)
