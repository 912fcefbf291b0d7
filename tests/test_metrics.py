"""Tests for specrej.analysis.metrics on small hand-computed examples."""

import math

import pytest

from specrej.analysis.metrics import (
    SpeedUp,
    best_of_k,
    improvement_score,
    relative_compute,
    spearman,
    speedup,
)


# --- improvement_score -------------------------------------------------------


def test_improvement_score_equals_100_when_method_matches_reference():
    ref_best = [0.5, 2.0, -1.0]
    assert improvement_score(ref_best, ref_best, [1.0, 3.0, 0.0], [0.0, 1.0, -2.0]) == 100.0


def test_improvement_score_hand_computed():
    # Prompt gains: (3 - 2) / (4 - 0) = 0.25, (1 - 2) / (6 - 2) = -0.25,
    # (4 - 3) / (3 - 1) = 0.5 -> mean 0.5 / 3.
    method_best = [3.0, 1.0, 4.0]
    ref_best = [2.0, 2.0, 3.0]
    ref_max = [4.0, 6.0, 3.0]
    ref_min = [0.0, 2.0, 1.0]
    assert improvement_score(method_best, ref_best, ref_max, ref_min) == pytest.approx(
        100 * (1 + 0.5 / 3)
    )


def test_improvement_score_zero_spread_prompt_contributes_zero():
    # Prompt 1 gains 0.25; prompt 2 has zero spread so contributes 0 even
    # though the method beat the reference. Mean = 0.125.
    score = improvement_score([3.0, 9.0], [2.0, 5.0], [4.0, 5.0], [0.0, 5.0])
    assert score == pytest.approx(112.5)


def test_improvement_score_rejects_empty_input():
    with pytest.raises(ValueError):
        improvement_score([], [], [], [])


@pytest.mark.parametrize(
    "args",
    [
        ([1.0, 2.0], [1.0], [2.0], [0.0]),
        ([1.0], [1.0, 2.0], [2.0], [0.0]),
        ([1.0], [1.0], [2.0, 3.0], [0.0]),
        ([1.0], [1.0], [2.0], [0.0, 1.0]),
    ],
)
def test_improvement_score_rejects_mismatched_lengths(args):
    with pytest.raises(ValueError):
        improvement_score(*args)


# --- relative_compute --------------------------------------------------------


def test_relative_compute():
    assert relative_compute(30.0, 120.0) == pytest.approx(0.25)


@pytest.mark.parametrize("reference", [0.0, -1.0])
def test_relative_compute_rejects_non_positive_reference(reference):
    with pytest.raises(ValueError):
        relative_compute(1.0, reference)


# --- speedup -----------------------------------------------------------------


def test_speedup_interpolates_in_log_compute():
    # Target 0.5 is halfway between scores 0 and 1, so log(compute) is halfway
    # between log(1) and log(100): compute = exp(0.5 * log(100)) = 10.
    curve = [(1.0, 0.0), (100.0, 1.0)]
    result = speedup(curve, target_score=0.5, method_compute=2.0)
    assert result.value == pytest.approx(5.0)
    assert result.lower_bound is False


def test_speedup_interpolation_uneven_fraction_and_unsorted_curve():
    # Bracket (2, 1.0) -> (8, 3.0); target 1.5 is a quarter of the way, so
    # compute = exp(log 2 + 0.25 * (log 8 - log 2)) = 2 * 4 ** 0.25 = 2 * sqrt(2).
    curve = [(8.0, 3.0), (1.0, 0.0), (2.0, 1.0), (32.0, 4.0)]
    result = speedup(curve, target_score=1.5, method_compute=1.0)
    assert result.value == pytest.approx(2 * math.sqrt(2))
    assert result.lower_bound is False


def test_speedup_exact_hit_on_a_point():
    curve = [(1.0, 0.0), (4.0, 1.0), (16.0, 2.0)]
    result = speedup(curve, target_score=1.0, method_compute=2.0)
    assert result == SpeedUp(value=2.0, lower_bound=False)


def test_speedup_target_below_first_point_uses_first_compute():
    curve = [(4.0, 1.0), (16.0, 2.0)]
    result = speedup(curve, target_score=-3.0, method_compute=8.0)
    assert result == SpeedUp(value=0.5, lower_bound=False)


def test_speedup_target_above_curve_is_lower_bound():
    curve = [(1.0, 0.0), (4.0, 1.0), (16.0, 2.0)]
    result = speedup(curve, target_score=2.5, method_compute=4.0)
    assert result == SpeedUp(value=4.0, lower_bound=True)


def test_speedup_uses_running_max_of_scores():
    # The dip at compute 4 is ignored: running max is 0, 2, 2, 3. Target 2 is
    # first reached at compute 2.
    curve = [(1.0, 0.0), (2.0, 2.0), (4.0, 1.0), (8.0, 3.0)]
    result = speedup(curve, target_score=2.0, method_compute=1.0)
    assert result == SpeedUp(value=2.0, lower_bound=False)


def test_speedup_rejects_empty_curve():
    with pytest.raises(ValueError):
        speedup([], target_score=1.0, method_compute=1.0)


@pytest.mark.parametrize("method_compute", [0.0, -2.0])
def test_speedup_rejects_non_positive_method_compute(method_compute):
    with pytest.raises(ValueError):
        speedup([(1.0, 0.0)], target_score=0.0, method_compute=method_compute)


@pytest.mark.parametrize("bad_compute", [0.0, -1.0])
def test_speedup_rejects_non_positive_curve_compute(bad_compute):
    with pytest.raises(ValueError):
        speedup([(bad_compute, 0.0), (4.0, 1.0)], target_score=0.5, method_compute=1.0)


# --- spearman ----------------------------------------------------------------


def test_spearman_with_ties_matches_hand_computation():
    # x ranks: [1, 2.5, 2.5, 4]; y ranks: [1, 3, 2, 4]; both have mean 2.5.
    # Deviations x: [-1.5, 0, 0, 1.5], y: [-1.5, 0.5, -0.5, 1.5].
    # sum xy = 4.5, sum xx = 4.5, sum yy = 5 -> rho = 4.5 / sqrt(22.5) = 3 / sqrt(10).
    assert spearman([1, 2, 2, 3], [10, 30, 20, 40]) == pytest.approx(3 / math.sqrt(10))


def test_spearman_perfect_positive_and_negative():
    # Monotone but non-linear relationships still give exactly +/- 1.
    assert spearman([1, 2, 3, 4], [1, 8, 27, 64]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [5, 1, 0, -10]) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    "x, y",
    [
        ([], []),
        ([1.0], [2.0]),
        ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]),
        ([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]),
    ],
)
def test_spearman_returns_none_when_undefined(x, y):
    assert spearman(x, y) is None


def test_spearman_rejects_mismatched_lengths():
    with pytest.raises(ValueError):
        spearman([1.0, 2.0], [1.0])


# --- best_of_k ---------------------------------------------------------------


def test_best_of_k_takes_max_of_prefix():
    scores = [0.2, 0.9, 0.1, 1.5]
    assert best_of_k(scores, 1) == 0.2
    assert best_of_k(scores, 3) == 0.9
    assert best_of_k(scores, 4) == 1.5


@pytest.mark.parametrize("k", [0, -1, 5])
def test_best_of_k_rejects_out_of_range_k(k):
    with pytest.raises(ValueError):
        best_of_k([0.2, 0.9, 0.1, 1.5], k)


def test_improvement_gains_capped_at_the_reference_best():
    from specrej.analysis.metrics import improvement_gains

    # prompt 1 beats the reference's best by half its spread (drift); prompt 2 falls short by a quarter
    raw = improvement_gains([3.0, 1.5], [2.0, 2.0], [2.0, 2.0], [0.0, 0.0])
    assert raw == [0.5, -0.25]
    capped = improvement_gains([3.0, 1.5], [2.0, 2.0], [2.0, 2.0], [0.0, 0.0], capped=True)
    assert capped == [0.0, -0.25]
    assert improvement_score([3.0, 1.5], [2.0, 2.0], [2.0, 2.0], [0.0, 0.0]) == pytest.approx(112.5)
    assert 100 * (1 + sum(capped) / 2) == pytest.approx(87.5)


def test_bootstrap_interval_known_answers():
    from specrej.analysis.metrics import bootstrap_ci

    assert bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)             # no spread, no interval
    # two prompts, 0 and 1: a resample's mean is 0, 0.5 or 1 with chances 1/4, 1/2, 1/4, so the
    # 5th and 95th percentiles of many resamples are 0 and 1
    assert bootstrap_ci([0.0, 1.0]) == (0.0, 1.0)
    # the interval holds the mean, narrows with more prompts, and is the same every call (seeded)
    few = [0.0, 1.0] * 3
    many = [0.0, 1.0] * 50
    lo, hi = bootstrap_ci(few)
    lo2, hi2 = bootstrap_ci(many)
    assert lo < 0.5 < hi and lo2 < 0.5 < hi2 and hi2 - lo2 < hi - lo
    assert bootstrap_ci(few) == (lo, hi)
    # many prompts: close to the normal interval, mean +- 1.645 sd / sqrt(n)
    assert hi2 - lo2 == pytest.approx(2 * 1.645 * 0.5 / 10, rel=0.15)
    with pytest.raises(ValueError):
        bootstrap_ci([])
