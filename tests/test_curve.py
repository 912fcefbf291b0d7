"""The order-statistics Best-of-N curve against brute-force enumeration of subsets."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
import random

import pytest

from specrej.core.cost import passes
from specrej.analysis.curve import (PromptRun, bon_curve, bon_point, curves_by_measure, default_ks, expected_max, refill_steps,
                           speedups)


def brute_max(values, k):
    """E[max of k] over every k-subset, in exact rationals."""
    subs = list(itertools.combinations([Fraction(v) for v in values], k))
    return sum(max(s) for s in subs) / len(subs)


@pytest.mark.parametrize("n", [1, 2, 5, 8, 11])
def test_expected_max_is_the_mean_over_every_subset_and_exact_at_ties(n):
    """Issue 48: the curve from lgamma/exp put E[max of 28] of 27 zeros and 5 ones at 1 - 7e-16 and E[max of 29]
    at 1 + 5e-16, so a target of 100 landed past a jump. Against every k-subset in exact rationals: each k
    within rounding, a tie at the top reached exactly, never above the largest value, never decreasing."""
    rng = random.Random(n)
    for trial in range(6):
        values = [rng.choice([0.0, 0.1, 0.5, 0.5, 0.9, 1.0, rng.random(), -rng.random()]) for _ in range(n)]
        if trial == 0:
            values = [0.9] * n   # one value: every k is it
        got = [expected_max(values, k) for k in range(1, n + 1)]
        for k, g in enumerate(got, start=1):
            exact = brute_max(values, k)
            assert g == pytest.approx(float(exact), rel=1e-14, abs=1e-15)
            assert (g == max(values)) is (exact == max(values))
        assert all(a <= b for a, b in zip(got, got[1:])) and got[-1] == max(values)


def test_a_tie_at_the_top_is_a_plateau_from_the_first_k_that_must_hold_it():
    scores = [0.0] * 27 + [1.0] * 5
    assert expected_max(scores, 27) == 1.0 - 1.0 / math.comb(32, 27)   # one 27-subset of the 32 holds no 1
    assert all(expected_max(scores, k) == 1.0 for k in range(28, 33))
    assert expected_max([3, 1, 2], 1) == 2.0   # k = 1: the mean
    assert expected_max([3, 1, 2], 3) == 3.0   # k = N: the max
    with pytest.raises(ValueError):
        expected_max([3, 1, 2], 4)
    with pytest.raises(ValueError):
        expected_max([3, 1, 2], 0)


def test_the_speedup_on_a_plateau_is_at_the_first_k_on_it():
    """A target equal to the plateau's score needs the first k on the plateau, never a point past it."""
    runs = [PromptRun([0.0] * 27 + [1.0] * 5, [10] * 32, prompt_tokens=4, flops_per_token=2.0)]
    curve = bon_curve(runs, default_ks(32), [32])
    assert [row["k"] for row in curve if row["improvement"] == 100.0][0] == 28
    by = curves_by_measure(curve)
    sp = speedups(by, 100.0, {"flops": curve[27]["flops"]})["flops"]
    assert sp.value == 1.0 and not sp.lower_bound


def test_steps_and_tokens_against_enumeration_of_ordered_draws():
    lengths = [5, 9, 3, 9, 7, 2]
    scores = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4]
    run = PromptRun(scores, lengths, prompt_tokens=10, flops_per_token=2.0, reward_flops=60.0, fixed_s=1.2)
    step_s = lambda rows: 0.01 * rows + 0.1   # noqa: E731
    for k in range(1, 7):
        for b in (1, 2, 4):
            perms = list(itertools.permutations(range(6), k))
            steps = wall = tokens = best = 0.0
            for p in perms:   # an ordered draw split into passes of b rows
                best += max(scores[i] for i in p)
                tokens += sum(lengths[i] for i in p)
                for j in range(0, k, b):
                    chunk = p[j:j + b]
                    steps += max(lengths[i] for i in chunk)
                    # the verdict's rule: at step t the rows of the pass still decoding (a row leaves as its answer ends)
                    wall += sum(step_s(sum(lengths[i] >= t for i in chunk))
                                for t in range(1, max(lengths[i] for i in chunk) + 1))
            m = len(perms)
            pt = bon_point(run, k, b, step_s)
            assert pt.best == pytest.approx(best / m)
            assert pt.tokens == pytest.approx(tokens / m)
            assert pt.steps == pytest.approx(steps / m)
            assert pt.wall_s == pytest.approx(wall / m + 1.2 * k / 6)
            assert pt.flops == pytest.approx(2.0 * (10 + tokens / m) + 60.0 * k / 6)


def test_the_bench_prices_best_of_k_by_the_verdicts_rule():
    """One Best-of-k pricing rule: the bench's modelled wall time (``curve.bon_point``) is the page's verdict
    curve's time (``verdict.bon_curve``), plus the run's fixed time scaled by k/N. By hand: lengths 4, 2, 1,
    one pass of 2 random answers (k = 2): 3.8 s at 1 + 0.1 x rows (``test_verdict``), where rows that never
    leave would give 10/3 x 1.2 = 4.0 s."""
    from specrej.analysis.verdict import bon_curve as verdict_curve

    step_s = lambda rows: 1.0 + 0.1 * rows   # noqa: E731
    run = PromptRun([0.3, 0.1, 0.7], [4, 2, 1], prompt_tokens=3, flops_per_token=2.0, fixed_s=0.6)
    assert bon_point(run, 2, 2, step_s).wall_s == pytest.approx(3.8 + 0.6 * 2 / 3)
    page = verdict_curve(run.scores, run.lengths, 2, step_s)
    for k in range(1, 4):
        assert bon_point(run, k, 2, step_s).wall_s == pytest.approx(page[k - 1].seconds + 0.6 * k / 3)


def test_passes():
    assert passes(10, 4) == [range(0, 4), range(4, 8), range(8, 10)]
    assert [len(p) for p in passes(8, 4)] == [4, 4]
    assert passes(3, 8) == [range(3)]


def test_curve_rises_to_100_and_speedups_read_it():
    rng = random.Random(0)
    runs = [PromptRun([rng.random() for _ in range(32)], [rng.randint(5, 20) for _ in range(32)], 8, 2.0)
            for _ in range(3)]
    curve = bon_curve(runs, [1, 2, 4, 8, 16, 32], rows_per_pass=[4, 4, 4])
    imps = [row["improvement"] for row in curve]
    assert imps == sorted(imps) and imps[-1] == pytest.approx(100.0)
    steps = [row["steps"] for row in curve]
    assert steps == sorted(steps)
    by = curves_by_measure(curve)
    assert set(by) == {"flops", "steps", "steps_refill"}   # no step model, so no wall
    refill = [row["steps_refill"] for row in curve]
    assert refill == sorted(refill)
    assert all(r <= f + 1e-9 for r, f in zip(refill, steps))   # refilling slots never takes longer
    # a method that scores like Best-of-8 with 1/4 of Best-of-8's decode steps is a 4x speed-up in steps
    target, at8 = curve[3]["improvement"], curve[3]
    s = speedups(by, target, {"steps": at8["steps"] / 4, "flops": at8["flops"]})
    assert s["steps"].value == pytest.approx(4.0) and not s["steps"].lower_bound
    assert s["flops"].value == pytest.approx(1.0)
    assert speedups(by, 101.0, {"steps": 1.0})["steps"].lower_bound


def test_default_ks_are_every_k():
    assert default_ks(1024) == list(range(1, 1025))
    assert default_ks(5) == [1, 2, 3, 4, 5]


def test_refill_steps_known_answers():
    # equal lengths: every order gives ceil(k / slots) x length, fixed passes or refilled alike
    assert refill_steps([10] * 12, 4) == [10.0 * -(-k // 4) for k in range(1, 13)]
    # one slot: the lengths add up; k = N is the sum whatever the order
    assert refill_steps([1, 2, 3], 1) == pytest.approx([2.0, 4.0, 6.0])
    # slots >= N: the longest of k random candidates (exact enumeration of the 3! orders)
    assert refill_steps([1, 2, 3], 5) == pytest.approx([2.0, (2 + 3 + 3) / 3, 3.0])
    # a long answer no longer holds up a whole pass. Lengths 9,1,1,1 on 2 slots, all 4 candidates:
    # refilled, 9 steps when the long one starts first or second (the short ones share the other
    # slot), 10 when it starts third or fourth (at step 1): 9.5. Fixed passes of 2: 2 x E[max of a
    # random pair] = 2 x 5 = 10.
    assert refill_steps([9, 1, 1, 1], 2)[-1] == pytest.approx(9.5)
    run = PromptRun([0.1, 0.2, 0.3, 0.4], [9, 1, 1, 1], 5, 2.0)
    assert bon_point(run, 4, 2).steps == pytest.approx(10.0)
    # many orders: a seeded Monte Carlo, the same every call
    lengths = list(range(1, 41))
    assert refill_steps(lengths, 3) == refill_steps(lengths, 3)
    with pytest.raises(ValueError):
        refill_steps([], 2)


def test_paged_refill_steps_by_hand():
    """A paged KV cache: each answer holds its real length (its last token never fed), the next starts
    when its memory fits (first come, first served)."""
    from specrej.core.budget import KVBudget
    from specrej.analysis.curve import paged_refill_steps, paged_schedule

    kv = KVBudget(10, 0, True)                    # 10 slots for the rows' own tokens
    lengths = [6, 5, 3, 2]                        # hold 5, 4, 2, 1 slots
    # t=0: 0 (5) and 1 (4) start, 1 slot left; 2 (2) waits. t=5: 1 ends, 5 free: 2 and 3 start.
    # 0 ends at 6, 2 at 8, 3 at 7: Best-of-1..4 take 6, 6, 8, 8 steps.
    assert paged_schedule(lengths, [0, 1, 2, 3], kv) == [6, 6, 8, 8]
    # the other way round: 3 (1), 2 (2), 1 (4) start, 3 left; 0 (5) waits for 2 and 3 to end at 3
    assert paged_schedule(lengths, [3, 2, 1, 0], kv) == [2, 3, 5, 9]
    # the prompt held once (shared) leaves less room; copied per row, each row holds it too
    assert paged_schedule(lengths, [0, 1, 2, 3], KVBudget(12, 2, True)) == [6, 6, 8, 8]
    assert paged_schedule([3, 3, 3], [0, 1, 2], KVBudget(11, 2, False)) == [3, 3, 6]   # each 2 + 2 slots of 11
    # over every order (4! = 24 <= draws): Best-of-1 is the mean length; Best-of-4 averages 24 schedules
    steps = paged_refill_steps(lengths, kv)
    assert steps[0] == pytest.approx(4.0) and len(steps) == 4
    import itertools
    assert steps[3] == pytest.approx(sum(paged_schedule(lengths, o, kv)[3]
                                         for o in itertools.permutations(range(4))) / 24)
    with pytest.raises(ValueError, match="does not fit"):
        paged_schedule([12], [0], kv)


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def exact_max(values, k):
    """E[max of k of n] without replacement in exact rationals: the i-th smallest is the max of C(i-1, k-1) of the
    C(n, k) subsets (ties included: each sorted position counts once)."""
    v = sorted(Fraction(x) for x in values)
    return sum(x * math.comb(i, k - 1) for i, x in enumerate(v)) / math.comb(len(v), k)


@pytest.mark.parametrize("name", ["rivals", "quick"])
def test_the_committed_tables_rest_on_the_exact_curve_and_recompute_exactly(name, tmp_path):
    """Issue 48's done-means: every committed figure regenerated from its JSON by one command
    (``python -m specrej.bench --from``) equals what is committed, and the curve under it is exact: at every k,
    for every prompt's Best-of-N scores, the curve agrees with exact rationals (equal where the rationals reach
    the top)."""
    import json

    from specrej.bench.run import recompute

    src = ROOT / "assets" / "bench" / f"{name}.json"
    committed = json.loads(src.read_text(encoding="utf-8"))
    for record in committed["prompts"][:6]:
        scores = record["bon"]["scores"]
        top = max(scores)
        for k in range(1, len(scores) + 1):
            exact = exact_max(scores, k)
            got = expected_max(scores, k)
            assert got == pytest.approx(float(exact), rel=1e-13, abs=1e-13), (record.get("id"), k)
            assert (got == top) is (exact == top), (record.get("id"), k, got)
    again = json.loads(json.dumps(recompute(src, tmp_path)))
    assert again["summary"] == committed["summary"]
    assert again["protocol"] == committed["protocol"]
    if name == "rivals":   # priced again on the committed H200 step when asked: the GPU's speed-up appears
        gpu = recompute(src, tmp_path / "gpu", gpu_steps=str(ROOT / "assets" / "gpu"))["summary"]
        assert all(r["speedup_gpu"] is None for r in committed["summary"])
        assert any(r["speedup_gpu"] for r in gpu)
        assert [r["speedup_steps"] for r in gpu] == [r["speedup_steps"] for r in committed["summary"]]
    if name == "rivals":   # the audit's case: the flat prompts are listed apart, never averaged in as 100
        assert again["protocol"]["flat_prompts"] == ["if-01", "if-04", "if-09"]
        assert again["protocol"]["prompts"] == 9


def test_the_improvement_spreads_each_prompt_from_its_lowest_score_not_from_zero():
    """Issue 48's surviving mutant: a prompt's improvement is (best - Best-of-N's best) over Best-of-N's spread
    (its highest minus its lowest score). With scores 2, 3, 4, a best of 3 is half the spread short: 50, where a
    spread from 0 would say 75."""
    from specrej.analysis.curve import improvement

    run = PromptRun(scores=[2.0, 3.0, 4.0], lengths=[5, 5, 5], prompt_tokens=4, flops_per_token=2.0)
    assert improvement([3.0], [run]) == pytest.approx(50.0)
    assert improvement([4.0], [run]) == pytest.approx(100.0)
    assert improvement([5.0], [run]) == pytest.approx(150.0) and improvement([5.0], [run], capped=True) == pytest.approx(100.0)
