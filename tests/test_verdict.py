"""The verdict's arithmetic on hand-made coupled races: Best-of-N's curve (expected best of k by order
statistics, its time under the budget's passes priced per step at the rows decoding), the k where it
reaches Speculative Rejection's reward, the times and their ratio, the bound when N never reaches it,
and the improvement score. Every number here is worked out by hand in the comments. Then the edges (a
reward below Best-of-1's, a degenerate curve, k = N and just past it, the tolerance on three scales,
inputs refused), random passes of unequal lengths against every subset, and a property test against a
slow exact reference (every ordered draw of k answers)."""
from __future__ import annotations

import itertools
import math
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specrej import Candidate, Finished, Ledger, Round
from specrej.analysis.verdict import bon_curve, decode_cost, from_race, place, verdict
from specrej.core.cost import expected_pass_cost


def step(rows: int) -> float:
    """A made-up machine: 1 s a step plus 0.1 s a row (a step's cost grows far slower than its rows)."""
    return 1.0 + 0.1 * rows


def test_decode_cost_prices_each_step_at_the_rows_decoding_then():
    # lengths 3, 1, 2: step 1 has 3 rows (1.3 s), step 2 has 2 (1.2 s), step 3 has 1 (1.1 s)
    steps, seconds = decode_cost([3, 1, 2], step)
    assert steps == 3 and seconds == pytest.approx(3.6)
    assert decode_cost([], step) == (0, 0.0)


def test_a_pass_of_random_answers_is_priced_in_expectation():
    lengths = [4, 2]
    # all of them: steps 1-2 with 2 rows (1.2 s each), steps 3-4 with 1 row (1.1 s each)
    assert expected_pass_cost(lengths, 2, step) == pytest.approx((4.0, 4.6))
    # one at random: half the time 4 steps of 1 row, half the time 2: E steps 3, E seconds 3 * 1.1
    assert expected_pass_cost(lengths, 1, step) == pytest.approx((3.0, 3.3))
    with pytest.raises(ValueError):
        expected_pass_cost(lengths, 3, step)


def test_best_of_ns_curve_by_order_statistics_and_passes():
    scores, lengths = [0.1, 0.5, 0.3, 0.9], [2, 2, 2, 2]
    curve = bon_curve(scores, lengths, rows_per_pass=2, step=step, flops_per_token=10.0, prompt_flops=5.0)
    # E[best of 1] = the mean 0.45; best of 4 = 0.9; best of 2 over the 6 pairs: (0.5+0.3+0.9+0.5+0.9+0.9)/6
    assert [p.best for p in curve] == pytest.approx([0.45, 4.0 / 6, 0.8, 0.9])
    # passes of 2 rows, every answer 2 tokens: k=1 one pass of 1 row (2 x 1.1), k=2 one of 2 (2 x 1.2),
    # k=3 a pass of 2 and one of 1, k=4 two of 2
    assert [p.seconds for p in curve] == pytest.approx([2.2, 2.4, 4.6, 4.8])
    assert [p.steps for p in curve] == pytest.approx([2, 2, 4, 4])
    assert [p.flops for p in curve] == pytest.approx([25, 45, 65, 85])   # 5 + 10 x 2k


def test_the_verdict_reads_k_and_the_time_off_the_curve():
    scores, lengths = [0.1, 0.5, 0.3, 0.9], [2, 2, 2, 2]
    # Speculative Rejection wrote 4 candidates: two pruned after 1 token, two finished at 2; its winner 0.8
    v = verdict(bon_scores=scores, bon_lengths=lengths, rows_per_pass=2, sr_reward=0.8, sr_lengths=[1, 1, 2, 2],
                sr_flops=60.0, step=step, flops_per_token=10.0, prompt_flops=5.0)
    # its time: step 1 with 4 rows (1.4 s), step 2 with 2 (1.2 s)
    assert v.steps == 2 and v.seconds == pytest.approx(2.6)
    # the curve reaches 0.8 exactly at k = 3 (4.6 s): 4.6 / 2.6 times Speculative Rejection's time
    assert v.kind == "reached" and v.bound is None
    assert v.k == pytest.approx(3.0) and v.bon_seconds == pytest.approx(4.6) and not v.beyond
    assert v.speedup == pytest.approx(4.6 / 2.6)
    assert v.flops_ratio == pytest.approx(60 / 65)
    # improvement score against Best-of-4: 100 x (1 + (0.8 - 0.9) / (0.9 - 0.1)) = 87.5
    assert v.improvement == pytest.approx(87.5)
    # between two k: 0.7 lies (0.7 - 2/3) / (0.8 - 2/3) = 1/4 of the way from k = 2 to k = 3
    k, seconds, flops = place(v.curve, 0.7, spread=0.8)
    assert k == pytest.approx(2.25) and seconds == pytest.approx(2.4 + 0.25 * 2.2) and flops == pytest.approx(50)
    # at or below one answer's expectation: k = 1 (the verdict calls a target below it "below" first)
    assert place(v.curve, 0.2, spread=0.8)[0] == 1.0


def test_beyond_n_the_speed_up_is_a_lower_bound():
    v = verdict(bon_scores=[0.1, 0.5], bon_lengths=[3, 3], rows_per_pass=1, sr_reward=0.7, sr_lengths=[3],
                sr_flops=1.0, step=step)
    # Best-of-2 never reaches 0.7: its whole time (two passes of 3 steps at 1.1 s) over SR's 3 x 1.1 s
    assert v.beyond and v.kind == "beyond" and v.bound == "lower" and v.k is None and v.bon_seconds == pytest.approx(6.6)
    assert v.speedup == pytest.approx(2.0) and v.improvement == pytest.approx(150.0)


def _cand(i, tokens, score, status, finish="eos", round_pruned=None):
    return Candidate(id=i, text=f"answer {i}", tokens=tokens, status=status, score=score, finish_reason=finish,
                     round_pruned=round_pruned)


def test_from_race_reads_the_events_and_refuses_an_unfinished_best_of_n():
    bon = tuple(_cand(i, 2, s, "finished") for i, s in enumerate([0.1, 0.5, 0.3, 0.9]))
    rounds = [Round(arm="bon", index=j, position=2, candidates=bon, threshold=None, n_kept=2, n_pruned=0,
                    forced=False, ledger=Ledger()) for j in range(2)]
    led = Ledger(prompt_tokens=5, generated_tokens=8, generator_flops=2.0 * 13)   # 2 FLOPs per token
    bon_fin = Finished(arm="bon", winner=bon[3], candidates=bon, rounds=2, ledger=led)
    sr = (_cand(0, 1, 0.2, "pruned", None, 0), _cand(1, 1, 0.4, "pruned", None, 0), _cand(2, 2, 0.3, "finished"),
          _cand(3, 2, 0.9, "finished"))
    sr_fin = Finished(arm="sr", winner=sr[3], candidates=sr, rounds=1, ledger=Ledger(generator_flops=30.0))
    v = from_race(sr_fin, bon_fin, rounds, step)
    # Speculative Rejection kept Best-of-N's winner: Best-of-N needs all 4 answers (4.8 s) against 2.6 s
    assert v.k == pytest.approx(4.0) and v.bon_seconds == pytest.approx(4.8) and v.seconds == pytest.approx(2.6)
    assert v.curve[-1].flops == pytest.approx(2.0 * 5 + 2.0 * 8) and v.improvement == pytest.approx(100.0)
    # Best-of-N stopped once it matched (an answer never written): no curve of N, no verdict
    cut = bon[:3] + (_cand(3, 0, None, "waiting", None),)
    assert from_race(sr_fin, Finished(arm="bon", winner=bon[1], candidates=cut, rounds=1, ledger=led), rounds,
                     step) is None


# ------------------------------------------------------------------ the edges, each worked out by hand
def _v(scores, lengths, rows_per_pass, sr_reward, sr_lengths, **kw):
    return verdict(bon_scores=scores, bon_lengths=lengths, rows_per_pass=rows_per_pass, sr_reward=sr_reward,
                   sr_lengths=sr_lengths, sr_flops=1.0, step=step, **kw)


def test_a_reward_below_best_of_1_is_a_bound_the_other_way():
    # Best-of-2 scores 0.2 and 0.6: one answer at random scores 0.4 on average, in one pass of 1 row of
    # 2 steps: 2 x 1.1 = 2.2 s. Speculative Rejection: 3 rows for 2 steps, 2 x 1.3 = 2.6 s, winner 0.3.
    v = _v([0.2, 0.6], [2, 2], 1, 0.3, [2, 2, 2])
    assert v.kind == "below" and v.k is None and not v.beyond and v.bound == "upper"
    assert v.curve[0].best == pytest.approx(0.4) and v.bon_seconds == pytest.approx(2.2)
    assert v.seconds == pytest.approx(2.6) and v.speedup == pytest.approx(2.2 / 2.6)
    assert v.time_words("that one answer") == "1.18x more time than that one answer"   # 2.6 / 2.2 = 1.1818
    # improvement: 100 x (1 + (0.3 - 0.6) / (0.6 - 0.2)) = 25; below even the worst answer, 0.0: -50
    assert v.improvement == pytest.approx(25.0)
    low = _v([0.2, 0.6], [2, 2], 1, 0.0, [2, 2, 2])
    assert low.kind == "below" and low.improvement == pytest.approx(-50.0)
    # just under one answer's average, but within the tolerance (1e-4 x 0.4 = 4e-5): a tie, k = 1
    tie = _v([0.2, 0.6], [2, 2], 1, 0.4 - 2e-5, [2, 2, 2])
    assert tie.kind == "reached" and tie.k == 1.0 and tie.bon_seconds == pytest.approx(2.2)
    # just over it, within the tolerance: k = 1 too, not 1 + 2e-5 / (0.6 - 0.4) interpolated towards Best-of-2
    assert _v([0.2, 0.6], [2, 2], 1, 0.4 + 2e-5, [2, 2, 2]).k == 1.0


@pytest.mark.parametrize("scores, sr", [([0.3], 0.0), ([0.3], 0.3), ([0.3], 0.9), ([0.3, 0.3, 0.3], 0.0),
                                        ([0.3, 0.3, 0.3], 0.5)])
def test_a_degenerate_curve_has_nothing_to_compare(scores, sr):
    # N = 1, or every score equal: the spread is 0, so the curve is flat and the improvement score (a gap over
    # the spread) has no scale; the old verdict said 100 for SR at 0.0 against 0.3
    v = _v(scores, [2] * len(scores), 1, sr, [2])
    assert v.kind == "degenerate" and v.k is None and v.improvement is None
    assert v.speedup is None and v.bound is None and not v.beyond
    assert v.time_words() == "nothing to compare"
    # what Best-of-N spent: all its answers, passes of 1 row of 2 steps (2.2 s each)
    assert v.bon_seconds == pytest.approx(2.2 * len(scores))


def test_k_equal_to_n_is_reached_and_just_past_it_is_a_bound():
    scores, lengths = [0.1, 0.5, 0.3, 0.9], [2, 2, 2, 2]
    # spread 0.8: the tolerance is 1e-4 x 0.8 = 8e-5. Best-of-4 = 0.9 at 4.8 s (two passes of 2 rows, 2 x 2 x 1.2)
    exact = _v(scores, lengths, 2, 0.9, [2])
    assert exact.kind == "reached" and exact.k == 4.0 and not exact.beyond and exact.bon_seconds == pytest.approx(4.8)
    assert exact.bound is None and exact.improvement == pytest.approx(100.0)
    # above Best-of-4's best by half the tolerance (float noise): still k = N, not a bound
    noise = _v(scores, lengths, 2, 0.9 + 4e-5, [2])
    assert noise.kind == "reached" and noise.k == 4.0 and not noise.beyond
    # below it by half the tolerance: a tie with Best-of-4, not k = 3.9996 (interpolation from Best-of-3's 0.8)
    assert _v(scores, lengths, 2, 0.9 - 4e-5, [2]).k == 4.0
    # above by twice the tolerance: none of the 4 reaches it, a lower bound against all 4 (4.8 s)
    past = _v(scores, lengths, 2, 0.9 + 1.6e-4, [2])
    assert past.kind == "beyond" and past.beyond and past.k is None and past.bon_seconds == pytest.approx(4.8)


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_the_tolerance_is_relative_to_the_rewards_spread(scale):
    # the same race on three scales (a reward in thousandths, in [0, 1], self-certainty in the hundreds):
    # the same verdicts. The tolerance is 1e-4 x spread = 8e-5 x scale.
    scores = [x * scale for x in (0.1, 0.5, 0.3, 0.9)]
    tol = 8e-5 * scale
    assert _v(scores, [2] * 4, 2, 0.9 * scale + tol / 2, [2]).k == 4.0
    assert _v(scores, [2] * 4, 2, 0.9 * scale + 2 * tol, [2]).beyond
    # 0.7 lies 1/4 of the way from Best-of-2 (2/3) to Best-of-3 (0.8), on every scale
    assert _v(scores, [2] * 4, 2, 0.7 * scale, [2]).k == pytest.approx(2.25)


@pytest.mark.parametrize("kw, words", [
    (dict(bon_scores=[0.1, math.nan]), "Best-of-N's scores must be finite numbers: #1 is nan"),
    (dict(bon_scores=[math.inf, 0.1]), "Best-of-N's scores must be finite numbers: #0 is inf"),
    (dict(sr_reward=math.nan), "Speculative Rejection's reward must be finite"),
    (dict(sr_reward=-math.inf), "Speculative Rejection's reward must be finite"),
    (dict(sr_lengths=[]), "Speculative Rejection's lengths: no answers"),
    (dict(sr_lengths=[0, 0]), "Speculative Rejection's lengths are all 0 tokens"),
    (dict(sr_lengths=[2, -1]), "token counts of 0 or more: got -1"),
    (dict(bon_lengths=[0, 0]), "Best-of-N's lengths are all 0 tokens"),
    (dict(bon_scores=[], bon_lengths=[]), "at least one answer"),
])
def test_inputs_that_cannot_give_a_verdict_are_refused_with_what_is_wrong(kw, words):
    args = dict(bon_scores=[0.1, 0.5], bon_lengths=[2, 2], rows_per_pass=1, sr_reward=0.3, sr_lengths=[2],
                sr_flops=1.0, step=step) | kw
    with pytest.raises(ValueError, match=re.escape(words)):
        verdict(**args)


# ------------------------------------------------------------------ against brute force
def slow_decode(lengths, step_fn):
    """The rule written out: at step t, every row with at least t tokens decodes."""
    return sum(step_fn(sum(x >= t for x in lengths)) for t in range(1, max(lengths, default=0) + 1))


def test_a_random_pass_of_unequal_lengths_by_hand():
    # lengths 4, 2, 1, passes of 2 drawn at random: the 3 pairs are equally likely.
    # {4, 2}: 2 steps of 2 rows + 2 of 1 = 2.4 + 2.2 = 4.6; {4, 1}: 1.2 + 3 x 1.1 = 4.5; {2, 1}: 1.2 + 1.1 = 2.3
    # E seconds = 11.4 / 3 = 3.8; E steps = (4 + 4 + 2) / 3 = 10/3. Rows that never leave would price every
    # step at 2 rows: 10/3 x 1.2 = 4.0.
    assert expected_pass_cost([4, 2, 1], 2, step) == pytest.approx((10 / 3, 3.8))


@pytest.mark.parametrize("seed", range(6))
def test_expected_pass_cost_equals_the_mean_over_every_subset(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    lengths = [rng.randint(0, 7) for _ in range(n - 1)] + [rng.randint(1, 7)]   # unequal, some maybe 0
    for m in range(1, n + 1):
        subsets = list(itertools.combinations(lengths, m))
        seconds = sum(slow_decode(s, step) for s in subsets) / len(subsets)
        steps = sum(max(s) for s in subsets) / len(subsets)
        assert expected_pass_cost(lengths, m, step) == pytest.approx((steps, seconds), abs=1e-12), (lengths, m)


def slow_verdict(scores, lengths, b, sr, sr_lengths):
    """The verdict by enumeration: Best-of-k is every ordered draw of k of the N answers, in passes of b
    rows, each pass priced by ``slow_decode``; then the four kinds, the tolerance 1e-4 x spread."""
    n, spread = len(scores), max(scores) - min(scores)
    curve = []
    for k in range(1, n + 1):
        draws = list(itertools.permutations(range(n), k))
        best = sum(max(scores[i] for i in d) for d in draws) / len(draws)
        secs = sum(slow_decode([lengths[i] for i in d[j:j + b]], step) for d in draws
                   for j in range(0, k, b)) / len(draws)
        curve.append((best, secs))
    sr_secs = slow_decode(sr_lengths, step)
    tol = 1e-4 * spread
    if spread == 0:
        return "degenerate", None, curve[-1][1], sr_secs, None
    imp = 100 * (1 + (sr - max(scores)) / spread)
    if sr < curve[0][0] - tol:
        return "below", None, curve[0][1], sr_secs, imp
    for k, (best, secs) in enumerate(curve, start=1):
        if best >= sr - tol:
            if k == 1 or sr >= best - tol:       # a tie within the tolerance: that k
                return "reached", float(k), secs, sr_secs, imp
            b0, s0 = curve[k - 2]
            f = (sr - b0) / (best - b0)
            return "reached", k - 1 + f, s0 + f * (secs - s0), sr_secs, imp
    return "beyond", None, curve[-1][1], sr_secs, imp


@st.composite
def races(draw):
    n = draw(st.integers(1, 5))
    scores = draw(st.lists(st.integers(0, 4).map(lambda x: x / 4), min_size=n, max_size=n))
    lengths = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n).filter(lambda x: max(x) > 0))
    b = draw(st.integers(1, n))
    spread = max(scores) - min(scores)
    mean = sum(scores) / n
    sr = draw(st.one_of(st.sampled_from([*scores, mean, max(scores) + 5e-5 * spread, max(scores) - 5e-5 * spread,
                                         max(scores) + 3e-4 * spread, mean - 3e-4 * spread, mean + 5e-5 * spread]),
                        st.floats(-0.5, 1.5)))
    sr_lengths = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6).filter(lambda x: max(x) > 0))
    return scores, lengths, b, sr, sr_lengths


@settings(max_examples=150, deadline=None)
@given(races())
def test_the_verdict_agrees_with_exact_enumeration(race):
    scores, lengths, b, sr, sr_lengths = race
    v = verdict(bon_scores=scores, bon_lengths=lengths, rows_per_pass=b, sr_reward=sr, sr_lengths=sr_lengths,
                sr_flops=1.0, step=step)
    kind, k, bon_secs, sr_secs, imp = slow_verdict(scores, lengths, b, sr, sr_lengths)
    assert v.kind == kind and v.beyond == (kind == "beyond")
    assert (v.k is None) == (k is None) and (k is None or v.k == pytest.approx(k, abs=1e-9))
    assert v.bon_seconds == pytest.approx(bon_secs, abs=1e-9) and v.seconds == pytest.approx(sr_secs, abs=1e-9)
    assert (v.improvement is None) == (imp is None) and (imp is None or v.improvement == pytest.approx(imp))


def test_the_rewards_measured_seconds_are_priced_when_asked():
    """Scoring has a price (issue 40): Best-of-k pays k/N of Best-of-N's measured reward seconds (each answer
    scored once), the challenger all of its own (its partial scores at every decision and its finals)."""
    bon = tuple(_cand(i, 2, s, "finished") for i, s in enumerate([0.1, 0.5, 0.3, 0.9]))
    rounds = [Round(arm="bon", index=j, position=2, candidates=bon, threshold=None, n_kept=2, n_pruned=0,
                    forced=False, ledger=Ledger()) for j in range(2)]
    led = Ledger(prompt_tokens=5, generated_tokens=8, generator_flops=2.0 * 13, reward_s=0.8, reward_calls=2,
                 scored=4)
    bon_fin = Finished(arm="bon", winner=bon[3], candidates=bon, rounds=2, ledger=led)
    sr = (_cand(0, 1, 0.2, "pruned", None, 0), _cand(1, 1, 0.4, "pruned", None, 0), _cand(2, 2, 0.3, "finished"),
          _cand(3, 2, 0.9, "finished"))
    sr_led = Ledger(generator_flops=30.0, reward_s=0.5, wall_s=3.0)
    sr_fin = Finished(arm="sr", winner=sr[3], candidates=sr, rounds=1, ledger=sr_led)
    plain = from_race(sr_fin, bon_fin, rounds, step)
    priced = from_race(sr_fin, bon_fin, rounds, step, scoring=True)
    # decoding alone as before: 4.8 s against 2.6 s; with scoring, all 4 finals (0.8 s) and its own 0.5 s
    assert (plain.bon_seconds, plain.seconds) == (pytest.approx(4.8), pytest.approx(2.6))
    assert priced.bon_seconds == pytest.approx(4.8 + 0.8) and priced.seconds == pytest.approx(2.6 + 0.5)
    assert [p.seconds - q.seconds for p, q in zip(priced.curve, plain.curve)] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert sr_led.decode_s == pytest.approx(2.5)


def test_the_widest_step_is_the_challengers_widest_step_not_its_narrowest():
    """Issue 48's surviving mutant: ``widest`` (what "priced beyond the largest batch measured" reads) must be the
    most rows any priced step decodes: Speculative Rejection's opening 12 rows, not its last step's 3."""
    v = verdict(bon_scores=[0.1, 0.5, 0.3, 0.9], bon_lengths=[2, 2, 2, 2], rows_per_pass=2, sr_reward=0.8,
                sr_lengths=[1, 2, 3] + [1] * 9, sr_flops=60.0, step=step, sr_profile=[12, 5, 3])
    assert v.widest == 12
    # Best-of-N's own pass when it is the wider one
    v = verdict(bon_scores=[0.1, 0.5, 0.3, 0.9], bon_lengths=[2, 2, 2, 2], rows_per_pass=4, sr_reward=0.8,
                sr_lengths=[1, 2], sr_flops=60.0, step=step, sr_profile=[2, 1])
    assert v.widest == 4
