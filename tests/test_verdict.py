"""The verdict's arithmetic on hand-made coupled races: Best-of-N's curve (expected best of k by order
statistics, its time under the budget's passes priced per step at the rows decoding), the k where it
reaches Speculative Rejection's reward, the times and their ratio, the bound when N never reaches it,
and the improvement score. Every number here is worked out by hand in the comments."""
from __future__ import annotations

import math

import pytest

from specrej import Candidate, Finished, Ledger, Round
from specrej.verdict import bon_curve, decode_cost, expected_pass_cost, from_race, place, verdict


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
    assert v.k == pytest.approx(3.0) and v.bon_seconds == pytest.approx(4.6) and not v.beyond
    assert v.speedup == pytest.approx(4.6 / 2.6)
    assert v.flops_ratio == pytest.approx(60 / 65)
    # improvement score against Best-of-4: 100 x (1 + (0.8 - 0.9) / (0.9 - 0.1)) = 87.5
    assert v.improvement == pytest.approx(87.5)
    # between two k: 0.7 lies (0.7 - 2/3) / (0.8 - 2/3) = 1/4 of the way from k = 2 to k = 3
    k, seconds, flops = place(v.curve, 0.7)
    assert k == pytest.approx(2.25) and seconds == pytest.approx(2.4 + 0.25 * 2.2) and flops == pytest.approx(50)
    # at or below one answer's expectation: k = 1
    assert place(v.curve, 0.2)[0] == 1.0


def test_beyond_n_the_speed_up_is_a_lower_bound():
    v = verdict(bon_scores=[0.1, 0.5], bon_lengths=[3, 3], rows_per_pass=1, sr_reward=0.7, sr_lengths=[3],
                sr_flops=1.0, step=step)
    # Best-of-2 never reaches 0.7: its whole time (two passes of 3 steps at 1.1 s) over SR's 3 x 1.1 s
    assert v.beyond and v.k is None and v.bon_seconds == pytest.approx(6.6)
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
    assert math.isinf(verdict(bon_scores=[1.0], bon_lengths=[1], rows_per_pass=1, sr_reward=1.0, sr_lengths=[],
                              sr_flops=0.0, step=step).speedup)
