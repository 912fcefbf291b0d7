"""The page's verdict priced against Best-of-N as vLLM v1 schedules it (issue 63, 1): hand-worked Best-of-k on
KV blocks, the curve equal to ``paging``'s for the same answers, the fixed-passes schedule kept under its own name
(and said on the page where it is faster: a small budget in blocks of 16), the fallback to fixed passes where the
budget is unknown or an answer does not fit it in whole blocks."""
from __future__ import annotations

import pytest

from specrej import Candidate, Finished, Ledger, Round
from specrej.analysis.paging import fits, vllm_curve
from specrej.analysis.verdict import PASSES, VLLM, from_race, verdict
from specrej.core.budget import KVBudget


def step(rows: int) -> float:
    return 1.0 + 0.1 * rows


def test_best_of_k_on_blocks_worked_by_hand():
    # a prompt of 4 tokens (stored once: none of its blocks full, so nothing shared), answers of 2 tokens: each
    # needs ceil((4 + 1) / 16) = 1 block; 4 blocks of 16 hold both at once. Best-of-1: 2 steps of 1 row (2.2 s);
    # Best-of-2: 2 steps of 2 rows (2.4 s). In fixed passes of 1 row Best-of-2 is 4 steps of 1 row (4.4 s).
    b = KVBudget(64, 4, True)
    v = verdict(bon_scores=[0.1, 0.5], bon_lengths=[2, 2], rows_per_pass=1, sr_reward=0.5, sr_lengths=[2, 2],
                sr_flops=1.0, step=step, budget=b)
    assert v.schedule == VLLM and "vLLM" in v.schedule_words
    assert [p.steps for p in v.curve] == pytest.approx([2, 2]) and [p.seconds for p in v.curve] == pytest.approx([2.2, 2.4])
    assert v.k == pytest.approx(2) and v.bon_seconds == pytest.approx(2.4) and v.widest == 2
    # the same k in fixed passes, kept beside it: 4.4 s, slower here, so the page says nothing of it
    assert v.passes_seconds == pytest.approx(4.4) and not v.passes_faster
    fixed = verdict(bon_scores=[0.1, 0.5], bon_lengths=[2, 2], rows_per_pass=1, sr_reward=0.5, sr_lengths=[2, 2],
                    sr_flops=1.0, step=step)
    assert fixed.schedule == PASSES and fixed.bon_seconds == pytest.approx(4.4) and fixed.passes_seconds is None


def test_a_small_budget_in_blocks_is_slower_than_fixed_passes_and_the_verdict_says_so():
    # 90 slots, a copied prompt of 14 tokens, 6 answers of 16: reserving whole lengths fits 90 // (14 + 15) = 3 rows,
    # 2 passes of 16 steps (32). In blocks of 16 there are 5; an answer needs 1 block for its first 3 tokens and 2
    # from token 4 on: 5 start, at step 4 three are preempted (#1 and #2 take their second blocks), and so on:
    # 45 steps, 3 preemptions, 9 tokens recomputed (paging.vllm_schedule, checked against vLLM's own Scheduler)
    b = KVBudget(90, 14, False)
    assert b.rows_per_pass(6, 16) == 3
    scores = [0.1 * i for i in range(6)]
    v = verdict(bon_scores=scores, bon_lengths=[16] * 6, rows_per_pass=3, sr_reward=0.5, sr_lengths=[16] * 6,
                sr_flops=1.0, step=lambda r: 1.0, budget=b)
    assert v.curve[-1].steps == pytest.approx(45) and v.bon_seconds == pytest.approx(45)
    assert v.passes_seconds == pytest.approx(32) and v.passes_faster
    assert v.time_words() == "2.81x less time" and v.passes_time_words() == "2x less time"   # 45 / 16, 32 / 16


def test_the_curve_is_pagings_for_the_same_answers():
    lengths = [5, 30, 17, 48, 2, 33, 40, 9, 21, 48]
    b = KVBudget(448, 30, True)
    v = verdict(bon_scores=[float(i % 4) for i in range(10)], bon_lengths=lengths, rows_per_pass=8, sr_reward=2.0,
                sr_lengths=[48] * 3, sr_flops=1.0, step=step, budget=b, bon_scoring_s=1.0)
    steps, seconds = vllm_curve(lengths, b, 16, step)
    assert [p.steps for p in v.curve] == pytest.approx(steps)
    assert [p.seconds for p in v.curve] == pytest.approx([s + k / 10 for k, s in enumerate(seconds, 1)])


def _race(budget: int, lengths=(2, 2, 2, 2)):
    bon = tuple(Candidate(id=i, text="a", tokens=n, status="finished", score=s, finish_reason="eos")
                for i, (n, s) in enumerate(zip(lengths, [0.1, 0.5, 0.3, 0.9])))
    led = Ledger(prompt_tokens=5, generated_tokens=8, generator_flops=26.0, budget=budget, kv_sharing="shared")
    rounds = [Round(arm="bon", index=j, position=2, candidates=bon, threshold=None, n_kept=2, n_pruned=0,
                    forced=False, ledger=led) for j in range(2)]
    sr = Finished(arm="sr", winner=bon[3], candidates=bon, rounds=1, ledger=Ledger(generator_flops=30.0))
    return sr, Finished(arm="bon", winner=bon[3], candidates=bon, rounds=2, ledger=led), rounds


def test_from_race_prices_vllm_where_the_budget_is_known_and_fixed_passes_otherwise():
    # 64 slots, prompt 5 stored once: 4 blocks; each answer needs ceil((5 + 1) / 16) = 1: all 4 at once, 2 steps
    v = from_race(*_race(64), step)
    assert v.schedule == VLLM and v.curve[-1].steps == pytest.approx(2) and v.bon_seconds == pytest.approx(2 * 1.4)
    # the fixed passes under their own name: 2 passes of 2 rows, 4 steps
    p = from_race(*_race(64), step, schedule="passes")
    assert p.schedule == PASSES and p.curve[-1].steps == pytest.approx(4) and v.passes_seconds == pytest.approx(p.bon_seconds)
    # an older trace without a budget, or a budget no answer fits in whole blocks: fixed passes
    assert from_race(*_race(0), step).schedule == PASSES
    assert not fits([20], KVBudget(24, 5, True)) and from_race(*_race(24, (20, 2, 2, 2)), step).schedule == PASSES
    with pytest.raises(ValueError):
        from_race(*_race(64), step, schedule="paged")
    with pytest.raises(ValueError):
        verdict(bon_scores=[0.1, 0.5], bon_lengths=[20, 2], rows_per_pass=1, sr_reward=0.5, sr_lengths=[2],
                sr_flops=1.0, step=step, budget=KVBudget(24, 5, True))


def test_a_committed_recording_recomputes_its_verdict_on_vllms_schedule():
    """The page's recording of the default race on the robot prompt, replayed as the page does: Best-of-k on vLLM's
    schedule under the recorded budget (what scripts/recorded_verdicts.py prints: 3.09x, 3.4x in fixed passes)."""
    pytest.importorskip("gradio")
    from components.frames import drawn
    from components.session.recordings import RECORDINGS, index, replay_updates

    folder = RECORDINGS / "page"
    prompt = next(p for p, path in index(folder).items() if "robot" in path.name and "defaults" in path.name)
    last = None
    for last in drawn(replay_updates(prompt, "inf", folder=folder)):
        pass
    view = last.view
    v = view.verdicts()["sr"]
    bon = view.arms[view.baseline]
    led = bon.finished.ledger
    assert v.schedule == VLLM and led.budget == 448
    lengths = [c.tokens for c in bon.finished.candidates]
    steps, _ = vllm_curve(lengths, KVBudget(led.budget, led.prompt_tokens, led.kv_sharing == "shared"))
    assert [p.steps for p in v.curve] == pytest.approx(steps)
    assert v.speedup == pytest.approx(3.09, abs=0.005)
    fixed = from_race(view.arms["sr"].finished, bon.finished, bon.round_events, view.step.step, scoring=True,
                      schedule="passes")
    assert v.passes_seconds == pytest.approx(fixed.bon_seconds) and fixed.speedup == pytest.approx(3.4, abs=0.05)
