"""What the page says at the verdict's edges (``panels.verdict_lines``, ``charts.verdict_short``), on
hand-made verdicts with the arithmetic in the comments: a loss below Best-of-1, a degenerate curve, N = 1,
k = N, a bound, ratios near 1 and below 1, and a step priced beyond what was measured. No model."""
from __future__ import annotations

import pytest

from specrej import RunConfig
from specrej.core.cost import StepCost
from specrej.analysis.verdict import verdict

from components import charts, panels
from components.state.view import RunView


def step(rows: int) -> float:
    """1 s a step plus 0.1 s a row."""
    return 1.0 + 0.1 * rows


def _words(v, view=None) -> str:
    view = view or RunView(RunConfig(prompt="-"))
    return "\n".join(panels.verdict_lines(view, view.arms["sr"], v))


def _v(scores, lengths, rows_per_pass, sr_reward, sr_lengths, sr_flops=1.0, **kw):
    return verdict(bon_scores=scores, bon_lengths=lengths, rows_per_pass=rows_per_pass, sr_reward=sr_reward,
                   sr_lengths=sr_lengths, sr_flops=sr_flops, step=step, **kw)


def _timed_view(measured=(1, 64)):
    view = RunView(RunConfig(prompt="-"))
    view.step = StepCost(measured, tuple(step(r) for r in measured))
    return view


def test_a_loss_below_best_of_1_says_one_answer_already_beats_it():
    # Best-of-2 scores 0.2, 0.6 (one answer: 0.4 on average, 2 x 1.1 = 2.2 s); SR's winner 0.3 in 2 x 1.3 = 2.6 s
    v = _v([0.2, 0.6], [2, 2], 1, 0.3, [2, 2, 2])
    text = _words(v)
    assert "is below what a single Best-of-N answer scores on average (0.400)" in text
    assert "one answer drawn at random already beats it" in text
    assert "1.18x more time than that one answer" in text                 # 2.6 / 2.2 = 1.18
    assert "needs about 1 answer" not in text and "Best-of-1's winner" not in text
    # improvement 100 x (1 + (0.3 - 0.6) / 0.4) = 25: 75 points below, and below one answer's average
    assert "Improvement score **25.0**: 75.0 points below Best-of-2's winner" in text
    assert "below what one answer scores on average" in text
    assert charts.verdict_short(v) == "below one answer's average: a single answer beats it"


@pytest.mark.parametrize("scores", [[0.3], [0.3, 0.3, 0.3]])
def test_a_degenerate_curve_says_there_is_nothing_to_compare(scores):
    # N = 1 or every score 0.3, SR's winner 0.0: the old page said "at or above Best-of-1's winner",
    # "needs all 1 answers" and "1x less time"
    v = _v(scores, [2] * len(scores), 1, 0.0, [2])
    text = _words(v)
    assert text.startswith("**Nothing to compare: ")
    assert ("a single answer (0.300), so its curve is one point" if len(scores) == 1 else
            "all 3 of Best-of-N's answers score 0.300, so its curve is flat") in text
    assert "winner scored 0.000" in text
    for wrong in ("1x", "all 1 answers", "Improvement score **", "at or above", "less time", "more time"):
        assert wrong not in text
    assert charts.verdict_short(v) == "nothing to compare: Best-of-N's curve is flat"
    assert charts.verdict_short(v, "flops") == "nothing to compare: Best-of-N's curve is flat"


def test_k_equal_to_n_needs_all_and_past_it_is_at_least():
    scores, lengths = [0.1, 0.5, 0.3, 0.9], [2, 2, 2, 2]
    # SR's winner is Best-of-4's: all 4 (two passes of 2 rows, 4 x 1.2 = 4.8 s) against SR's 2 x 1.1 = 2.2 s:
    # 4.8 / 2.2 = 2.18x
    v = _v(scores, lengths, 2, 0.9, [2])
    text = _words(v, _timed_view())
    assert "needs all 4 answers (4.8 s) to reach Speculative Rejection's reward: Speculative Rejection took " \
           "2.18x less time** (2.2 s)" in text and "at least" not in text
    assert "Improvement score **100.0**: Best-of-4's winner, equal to the digits shown" in text
    assert charts.verdict_short(v) == "2.18x less time than all 4 answers"
    # past the tolerance (1e-4 x 0.8): a lower bound
    past = _v(scores, lengths, 2, 0.95, [2])
    text = _words(past, _timed_view())
    assert "never reach Speculative Rejection's reward: Speculative Rejection took at least 2.18x less time" in text
    assert "Improvement score **106.2**: above Best-of-4's winner" in text   # 100 x (1 + 0.05 / 0.8) = 106.25
    assert charts.verdict_short(past) == "all 4 answers fall short; ≥ 2.18x less time than all 4 answers"
    # FLOPs at 10 a token: Best-of-4 wrote 8 tokens, 80 FLOPs. SR at 40: 2x fewer; at 82: within 5%, no "1.02x"
    half = _v(scores, lengths, 2, 0.9, [2], sr_flops=40.0, flops_per_token=10.0)
    assert "spent 2x fewer FLOPs than Best-of-4 (40 FLOP against 80 FLOP)." in _words(half)
    assert charts.verdict_short(half, "flops") == "2x fewer FLOPs than all 4 answers"
    even = _v(scores, lengths, 2, 0.9, [2], sr_flops=82.0, flops_per_token=10.0)
    assert "spent about as many FLOPs as Best-of-4" in _words(even)
    assert charts.verdict_short(even, "flops") == "about as many FLOPs as all 4 answers"


def test_ratios_near_one_and_below_one_read_as_people_say_them():
    scores, lengths = [0.1, 0.5, 0.3, 0.9], [2, 2, 2, 2]
    # SR reaches 0.8 = Best-of-3 (a pass of 2 and one of 1: 2 x 1.2 + 2 x 1.1 = 4.6 s).
    # SR with 4 rows for 4 steps: 4 x 1.4 = 5.6 s: 4.6 / 5.6 = 0.82, said as 5.6 / 4.6 = 1.22x more time
    slow = _v(scores, lengths, 2, 0.8, [4, 4, 4, 4])
    assert slow.speedup == pytest.approx(4.6 / 5.6)
    text = _words(slow, _timed_view())
    assert "needs about 3 answers (4.6 s) to reach Speculative Rejection's reward: Speculative Rejection took " \
           "1.22x more time** (5.6 s)" in text and "0.82" not in text
    assert charts.verdict_short(slow) == "1.22x more time than Best-of-3"
    # SR with lengths 4, 2: 2 steps of 2 rows (2.4 s) + 2 of 1 (2.2 s) = 4.6 s, Best-of-3's time: a ratio of 1
    same = _v(scores, lengths, 2, 0.8, [4, 2])
    assert same.speedup == pytest.approx(1.0)
    assert "Speculative Rejection took about the same time** (4.6 s)" in _words(same, _timed_view())
    assert charts.verdict_short(same) == "about the same time as Best-of-3"
    for text in (_words(same, _timed_view()), charts.verdict_short(same)):
        assert "1x" not in text and "1.0x" not in text and "less time" not in text and "more time" not in text


@pytest.mark.parametrize("sr_lengths, words", [
    ([10, 10, 10], "1.08x more time"),      # 10 x 1.3 = 13 s: 13 / 12 = 1.083
    ([10, 10, 7], "1.06x more time"),       # 7 x 1.3 + 3 x 1.2 = 12.7 s: 1.058, past 5%
    ([10, 10, 4], "about the same time"),   # 4 x 1.3 + 6 x 1.2 = 12.4 s: 1.033, within 5%
    ([10, 8], "about the same time"),       # 8 x 1.2 + 2 x 1.1 = 11.8 s: 12 / 11.8 = 1.017 less, within 5%
    ([10], "1.09x less time"),              # 10 x 1.1 = 11 s: 12 / 11 = 1.091
])
def test_the_same_time_tolerance_is_five_percent(sr_lengths, words):
    # Best-of-2 reaches SR's 1.0 with both answers: one pass of 2 rows for 10 steps, 10 x 1.2 = 12 s
    v = _v([0.0, 1.0], [10, 10], 2, 1.0, sr_lengths)
    assert v.bon_seconds == pytest.approx(12.0) and v.time_words() == words


def test_a_step_beyond_the_measured_batches_is_called_extrapolated():
    scores, lengths = [0.1, 0.5, 0.3, 0.9], [2, 2, 2, 2]
    v = _v(scores, lengths, 2, 0.8, [2] * 12)    # SR opens with 12 rows: the widest step priced
    assert v.widest == 12
    assert "priced beyond the largest batch measured here (8 rows): extrapolated" in _words(v, _timed_view((1, 8)))
    assert "extrapolated" not in _words(v, _timed_view((1, 16)))
    assert "extrapolated" not in _words(v)       # counted in decoding steps: nothing priced


def test_a_measurement_lowered_by_the_monotone_fit_is_disclosed():
    # 1 row measured at 0.1 s, 8 rows at 0.05 s: the 1-row step is priced at 0.05 s and the page says why
    v = _v([0.1, 0.5, 0.3, 0.9], [2, 2, 2, 2], 2, 0.8, [2, 2])
    view = RunView(RunConfig(prompt="-"))
    view.step = StepCost((1, 8), (0.1, 0.05))
    assert "A step of 1 row measured slower than a larger batch" in _words(v, view)
    assert "measured slower" not in _words(v, _timed_view())
