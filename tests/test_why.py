"""Why this speed-up (``specrej.analysis.why``) on hand-made coupled races, every number worked out by hand in the
comments; the words the page puts beside the verdict (``components.panels.why_markdown``), live and
replayed; and the box on the page's summary after a real tiny race."""
from __future__ import annotations

import pytest

from specrej import Candidate, Finished, Ledger, Round
from specrej.arms import parse_arms
from specrej.core.config import RunConfig
from specrej.core.budget import KVBudget
from specrej.core.cost import StepCost
from specrej.analysis.verdict import from_race as verdict_from_race
from specrej.analysis.why import (PAPER_FIRST_BATCH_CAP, causes_of, explain, outcome_of, paper_cap_prompt,
                         paper_first_batch, paper_setting, signal_strength)
from specrej.analysis.why import from_race as why_from_race


# ---------------------------------------------------------------- hand-made races

def _cand(i, tokens, status, score, finish=None, round_pruned=None):
    return Candidate(id=i, text=f"answer {i}", tokens=tokens, status=status, score=score, finish_reason=finish,
                     round_pruned=round_pruned)


def _bon(finals: list[float], length: int, rows: int, *, budget: int = 0, shared: bool = True):
    """Best-of-N: every answer written to ``length`` tokens (its final reward ``finals[i]``), in passes of
    ``rows`` rows (one Round per pass, ``n_kept`` its rows)."""
    led = Ledger(budget=budget, prompt_tokens=30, kv_sharing="shared" if shared else "copied")
    done = tuple(_cand(i, length, "finished", s, "length") for i, s in enumerate(finals))
    n = len(finals)
    rounds = [Round(arm="bon", index=j, position=length, candidates=done, threshold=None,
                    n_kept=min(rows, n - first), n_pruned=0, forced=False, ledger=led)
              for j, first in enumerate(range(0, n, rows))]
    winner = max(done, key=lambda c: (c.score, -c.id))
    return Finished(arm="bon", winner=winner, candidates=done, rounds=len(rounds), ledger=led), rounds


def _sr(finals: list[float], opening: int, decisions: list[tuple[int, dict[int, float], set[int]]], length: int):
    """Speculative Rejection on candidates 0..opening-1 (coupled: candidate i's text is Best-of-N's #i, so its
    final reward is ``finals[i]``). ``decisions``: (token, {id: partial reward} of those decoding, the ids kept)."""
    alive = set(range(opening))
    cut: dict[int, tuple[int, int, float]] = {}   # id -> (decision index, tokens, partial reward)
    rounds = []
    for d, (pos, partial, kept) in enumerate(decisions):
        assert set(partial) == alive and kept <= alive
        cands = []
        for i in range(opening):
            if i in alive:
                cands.append(_cand(i, pos, "kept" if i in kept else "pruned", partial[i],
                                   round_pruned=None if i in kept else d))
            else:
                c = cut[i]
                cands.append(_cand(i, c[1], "pruned", c[2], round_pruned=c[0]))
        for i in alive - kept:
            cut[i] = (d, pos, partial[i])
        alive = set(kept)
        rounds.append(Round(arm="sr", index=d, position=pos, candidates=tuple(cands), threshold=min(partial[i] for i in kept),
                            n_kept=len(kept), n_pruned=len(cands) - len(kept), forced=False, ledger=Ledger()))
    final = tuple(_cand(i, length, "finished", finals[i], "length") if i in alive else
                  _cand(i, cut[i][1], "pruned", cut[i][2], round_pruned=cut[i][0]) for i in range(opening))
    winner = max((c for c in final if c.status == "finished"), key=lambda c: (c.score, -c.id))
    return Finished(arm="sr", winner=winner, candidates=final, rounds=len(rounds), ledger=Ledger()), rounds


def _unit(rows: int) -> float:
    return 1.0


# The defaults: budget 448, the prompt (30 tokens) stored once, N = 32, 48 tokens, first decision at 14.
BUDGET = KVBudget(448, 30, True)
# Best-of-N's rows at full length: (448 - 30) // 47 (the last token is never fed back) = 418 // 47 = 8 (376;
# 9 rows need 423); Speculative Rejection's first batch fills the budget at token 14: 418 // 14 = 29 (406).
FINALS = [1.0 - i / 100 for i in range(32)]   # #0 is Best-of-N's winner (1.00), #31 its worst (0.69)
# a measured machine: 0.10 s a step up to 8 rows, 0.16 s at 29 (linear between: 0.06 / 21 s a row)
COST = StepCost((8, 29), (0.10, 0.16))


def defaults_race():
    """Decision 1 at token 14 over the 29 opening rows: the partial reward keeps the order of the final one for
    #0..#10 and reverses it for the 18 below (#11..#28: #11 gets #28's, ... #28 gets #11's). It keeps 15: #0..#10
    and #25..#28 (partials 0.89..0.86). Decision 2 at token 28 keeps #0..#7 of those 15; they finish at 48."""
    partial1 = {i: FINALS[i] if i <= 10 else FINALS[39 - i] for i in range(29)}
    kept1 = set(range(11)) | {25, 26, 27, 28}
    partial2 = {i: FINALS[i] for i in kept1}
    sr, rounds = _sr(FINALS, 29, [(14, partial1, kept1), (28, partial2, set(range(8)))], 48)
    bon, bon_rounds = _bon(FINALS, 48, 8, budget=448)
    return bon, bon_rounds, sr, rounds


def test_the_defaults_room_price_and_signal_worked_by_hand():
    assert BUDGET.rows_per_pass(32, 48) == 8 and BUDGET.auto_n(14) == 29
    bon, bon_rounds, sr, rounds = defaults_race()
    v = verdict_from_race(sr, bon, bon_rounds, COST.step, schedule="passes")
    w = explain(baseline=bon, baseline_rounds=bon_rounds, challenger=sr, rounds=rounds, verdict=v, step=COST,
                max_new_tokens=48, budget=BUDGET)
    # the room: 32 answers in passes of 8 = 4 passes of 48 steps (192) against one pass of 48: at most 4x
    assert (w.n, w.rows_per_pass, w.passes, w.bound, w.opening_rows) == (32, 8, 4, 4, 29)
    assert (w.budget, w.shared, w.length) == (448, True, 48)
    assert w.opening_passes == pytest.approx(29 / 8)
    # its winner is #0 (1.00), Best-of-N's own: E[best of 31] = 31/32 x 1.00 + 1/32 x 0.99 < 1.00, so k = 32,
    # all 4 passes: 192 steps against its 48, 4x fewer
    assert w.k == pytest.approx(32) and w.full_steps == pytest.approx(192) and w.bon_steps == pytest.approx(192)
    assert w.sr_steps == 48 and w.step_ratio == pytest.approx(4.0) and w.room == pytest.approx(4.0)
    assert w.use == pytest.approx(1.0)
    # the price: one step of 29 rows 0.16 s against one of 8 rows 0.10 s: 1.6x. Its steps: 14 of 29 rows
    # (0.16 s: 2.24 s), 14 of 15 rows (0.10 + 7 x 0.06/21 = 0.12 s: 1.68 s), 20 of 8 rows (0.10 s: 2.0 s) =
    # 5.92 s over 48 steps; Best-of-32's 192 steps of 8 rows at 0.10 s = 19.2 s. Mean price (5.92/48) / 0.10
    assert w.measured and w.opening_price == pytest.approx(1.6)
    assert v.seconds == pytest.approx(5.92) and v.bon_seconds == pytest.approx(19.2)
    assert w.price == pytest.approx(5.92 / 48 / 0.10)
    # the speed-up factors exactly: 4x fewer steps / 1.233x the price = 19.2 / 5.92 = 3.24x
    assert w.speedup == pytest.approx(19.2 / 5.92) == pytest.approx(w.step_ratio / w.price)
    assert w.outcome == "won" and w.causes == ()
    # the signal: ranks at decision 1 agree for #0..#10 and reverse among the 18 below: sum d^2 =
    # 18 (18^2 - 1) / 3 = 1938, rho = 1 - 6 x 1938 / (29 (29^2 - 1)) = 1 - 11628 / 24360 = 0.5227, over 29
    assert w.first_decision == 14 and w.rho_live == 29
    assert w.rho == pytest.approx(1 - 6 * 1938 / 24360) and w.strength == "moderate"
    assert w.fate.fate == "kept" and w.bon_winner == 0
    assert w.to_dict()["fate"] == {"fate": "kept", "decision": None, "position": None}
    # the race's own budget, as from_race reads it from Best-of-N's ledger, gives the same reasons
    assert why_from_race(sr, rounds, bon, bon_rounds, v, COST, 48) == w
    assert why_from_race(sr, rounds, bon, bon_rounds, None, COST, 48) is None


LOSS_FINALS = [0.8 - 0.1 * i for i in range(8)]   # #0 0.8 (Best-of-N's winner) ... #7 0.1


def loss_race():
    """N = 8 of 10 tokens, passes of 4 (2 passes); Speculative Rejection opens with all 8 and decides at token 4
    on partial rewards that rank #6, #7, #4, #5, #2, #3, #0, #1 from the top: it keeps #4..#7 and cuts #0."""
    order = [6, 7, 4, 5, 2, 3, 0, 1]
    partial = {i: 1.0 - 0.1 * order.index(i) for i in range(8)}
    sr, rounds = _sr(LOSS_FINALS, 8, [(4, partial, {4, 5, 6, 7})], 10)
    bon, bon_rounds = _bon(LOSS_FINALS, 10, 4, budget=60, shared=False)
    return bon, bon_rounds, sr, rounds


LOSS_COST = StepCost((1, 8), (0.10, 0.24))   # 0.10 s at 1 row, 0.02 s more a row: 0.16 s at 4, 0.24 s at 8


def test_a_loss_where_the_winner_is_cut_at_the_first_decision_worked_by_hand():
    bon, bon_rounds, sr, rounds = loss_race()
    v = verdict_from_race(sr, bon, bon_rounds, LOSS_COST.step, schedule="passes")
    w = explain(baseline=bon, baseline_rounds=bon_rounds, challenger=sr, rounds=rounds, verdict=v, step=LOSS_COST,
                max_new_tokens=10)
    # its winner is #4 (0.4); one answer of Best-of-N is 0.45 on average (3.6 / 8), already above: k = 1,
    # one pass of 1 row, 10 steps at 0.10 s = 1.0 s. Its own: 4 steps of 8 rows (0.24 s) + 6 of 4 (0.16 s) =
    # 1.92 s over 10 steps. 1.0 / 1.92 = 0.52: it took 1.92x more time
    assert sr.winner.id == 4 and v.kind == "below" and w.k == pytest.approx(1.0)
    assert v.seconds == pytest.approx(1.92) and v.bon_seconds == pytest.approx(1.0)
    assert w.speedup == pytest.approx(1 / 1.92) and w.outcome == "lost"
    # the room: 2 passes of 4 (20 steps) against its 10: at most 2x; at equal reward 10 steps to its 10
    assert (w.passes, w.bound, w.rows_per_pass, w.opening_rows) == (2, 2, 4, 8)
    assert w.full_steps == pytest.approx(20) and w.bon_steps == pytest.approx(10) and w.step_ratio == pytest.approx(1)
    assert w.use == pytest.approx(0.5) and w.room == pytest.approx(2.0)
    # the price: a step of 8 rows 0.24 s against one of 4 0.16 s: 1.5x; on average 0.192 s against 0.10 s
    assert w.opening_price == pytest.approx(1.5) and w.price == pytest.approx(1.92)
    # the signal: partial ranks 7, 8, 5, 6, 3, 4, 1, 2 for #0..#7 (final ranks 1..8): d = 6, 6, 2, 2, -2, -2, -6,
    # -6, sum d^2 = 160, rho = 1 - 6 x 160 / (8 x 63) = -0.905; Best-of-N's winner #0 cut at decision 1, token 4
    assert w.rho == pytest.approx(1 - 960 / 504) and w.strength == "inverse" and w.rho_live == 8
    assert (w.fate.fate, w.fate.decision, w.fate.position) == ("pruned", 1, 4)
    # what made it lose: the signal (Best-of-N matched with half its steps: 10 of 20 < 3/4) and the price
    # (the steps alone were even, 1x >= the bar of 1, and the price 1.92x took it below); the room, 2x, is not
    # under SMALL_ROOM
    assert w.causes == ("signal", "price")


def test_with_no_measured_step_time_is_counted_in_decoding_steps():
    bon, bon_rounds, sr, rounds = defaults_race()
    v = verdict_from_race(sr, bon, bon_rounds, _unit, schedule="passes")
    w = explain(baseline=bon, baseline_rounds=bon_rounds, challenger=sr, rounds=rounds, verdict=v, step=None,
                max_new_tokens=48, budget=BUDGET)
    # as vLLM pages them (the default), the 32 full-length answers take 193 steps, one more than 4 passes of 8
    # (27 open at once, then preemption by recompute: paging.vllm_schedule): the steps saved, 193 / 48
    paged = verdict_from_race(sr, bon, bon_rounds, _unit)
    assert paged.schedule == "vllm" and v.schedule == "passes"
    assert paged.bon_seconds == pytest.approx(193) and paged.speedup == pytest.approx(193 / 48)
    # every step one unit: the speed-up is the steps saved, 192 / 48 = 4x in fixed passes; no price at all
    assert not w.measured and w.opening_price is None and w.price == 1.0
    assert w.speedup == pytest.approx(4.0) == pytest.approx(w.step_ratio) and w.outcome == "won"
    # the loss race, counted in steps: 10 against 10, 1x: it gains little (the price cannot be named: not
    # measured); the signal is the cause (half of Best-of-N's run)
    bon, bon_rounds, sr, rounds = loss_race()
    v = verdict_from_race(sr, bon, bon_rounds, _unit)
    w = explain(baseline=bon, baseline_rounds=bon_rounds, challenger=sr, rounds=rounds, verdict=v, step=None,
                max_new_tokens=10)
    assert w.speedup == pytest.approx(1.0) and w.outcome == "little" and w.causes == ("signal",)


def test_best_of_one_is_nothing_to_compare_and_no_decision_is_the_bound():
    # N = 1: Best-of-N's curve is one point (a degenerate verdict): there is no speed-up to explain
    bon, bon_rounds = _bon([0.3], 6, 1, budget=100)
    sr, rounds = _sr([0.3], 1, [], 6)
    v = verdict_from_race(sr, bon, bon_rounds, COST.step)
    assert v.kind == "degenerate" and v.speedup is None
    assert explain(baseline=bon, baseline_rounds=bon_rounds, challenger=sr, rounds=rounds, verdict=v, step=COST,
                   max_new_tokens=6) is None
    assert why_from_race(sr, rounds, bon, bon_rounds, v, COST, 6) is None
    # N = 2 in passes of one row, Speculative Rejection on the same two rows with no decision: it wins the
    # same answer (0.5, #1) in 6 steps of 2 rows against Best-of-2's 2 passes x 6 steps of 1 row
    bon, bon_rounds = _bon([0.3, 0.5], 6, 1, budget=100)
    sr, rounds = _sr([0.3, 0.5], 2, [], 6)
    v = verdict_from_race(sr, bon, bon_rounds, COST.step)
    w = explain(baseline=bon, baseline_rounds=bon_rounds, challenger=sr, rounds=rounds, verdict=v, step=COST,
                max_new_tokens=6)
    assert (w.passes, w.opening_rows, w.sr_steps) == (2, 2, 6)
    assert w.first_decision is None and w.rho is None and w.rho_live == 0 and w.fate.fate == "kept"
    # rows per pass from the budget when no pass was given; never more than N
    w2 = explain(baseline=bon, baseline_rounds=[], challenger=sr, rounds=rounds, verdict=v, step=COST,
                 max_new_tokens=6, budget=KVBudget(100, 30, True))
    assert w2.rows_per_pass <= 2
    with pytest.raises(ValueError):
        explain(baseline=bon, baseline_rounds=[], challenger=sr, rounds=rounds, verdict=v, step=COST,
                max_new_tokens=6)


def test_never_drawn_and_the_cause_rules():
    # Speculative Rejection opens with 6 of Best-of-N's 8 (#6 and #7 never drawn); Best-of-N's winner is #7
    finals = [0.1 * i for i in range(8)]
    bon, bon_rounds = _bon(finals, 10, 4)
    sr, rounds = _sr(finals, 6, [(4, {i: finals[i] for i in range(6)}, {3, 4, 5})], 10)
    v = verdict_from_race(sr, bon, bon_rounds, _unit)
    w = explain(baseline=bon, baseline_rounds=bon_rounds, challenger=sr, rounds=rounds, verdict=v, step=None,
                max_new_tokens=10)
    assert w.fate.fate == "never_drawn" and w.bon_winner == 7 and w.rho == pytest.approx(1.0)
    # the rules, by hand: a win names nothing; a small room is the bound; a short use the signal; a price
    # above 1 when the steps alone cleared the bar (2x >= 1.5), or at PRICEY (1.25) or more
    assert causes_of("won", room=1, use=0.1, step_ratio=1, price=3, measured=True) == ()
    assert causes_of("little", room=1.2, use=1, step_ratio=1.2, price=1.0, measured=True) == ("bound",)
    assert causes_of("lost", room=4, use=0.3, step_ratio=1.2, price=1.3, measured=True) == ("signal", "price")
    assert causes_of("little", room=4, use=0.5, step_ratio=2, price=1.1, measured=True) == ("signal", "price")
    assert causes_of("little", room=4, use=0.5, step_ratio=2, price=1.1, measured=False) == ("signal",)
    # none holds (room 2.5, use 0.8, price 1.1 with steps 1.4 < 1.5): the furthest from neutral, log-wise:
    # bound log(2/2.5) < 0, signal -log(0.8) = 0.22, price log(1.1) = 0.095: the signal
    assert causes_of("little", room=2.5, use=0.8, step_ratio=1.4, price=1.1, measured=True) == ("signal",)
    assert outcome_of(0.99) == "lost" and outcome_of(1.0) == "little" and outcome_of(1.5) == "won"
    assert [signal_strength(r) for r in (0.9, 0.5, 0.2, -0.5, None)] == ["strong", "moderate", "weak", "inverse", None]


def test_the_papers_setting_by_the_same_arithmetic():
    ps = paper_setting()
    # Best-of-120 ... 3840 in passes of 120 rows (README --batch_size 120; plot_compare: N // 120 GPUs)
    assert [(p.n, p.gpus, p.passes, p.bound) for p in ps.points] == [
        (120, 1, 1, 1), (240, 2, 2, 2), (480, 4, 4, 4), (960, 8, 8, 8), (1920, 16, 16, 16), (3840, 32, 32, 32)]
    assert ps.bounds == (1, 32) and ps.length == 2048 and ps.reported == (16, 32)
    # the first batch: min(2 x int(61626.403 / (L + 2.076)), 1000); the cap holds while int(...) >= 500, i.e.
    # 61626.403 / (L + 2.076) >= 500, L <= 123.25 - 2.076 = 121.18: up to 121 tokens
    assert ps.first_batch == PAPER_FIRST_BATCH_CAP == 1000 and ps.cap_prompt == paper_cap_prompt() == 121
    assert paper_first_batch(121) == 1000 and paper_first_batch(122) == 2 * int(61626.403 / 124.076) == 992
    assert ps.opening_passes == pytest.approx(1000 / 120) and ps.first_decision_min == 8


# ---------------------------------------------------------------- the words

def _view(bon, bon_rounds, sr, rounds, step, *, n, max_new_tokens, recording=None):
    from components.state.view import RunView

    view = RunView(RunConfig(prompt="hi", n=n, max_new_tokens=max_new_tokens), specs=parse_arms(("bon", "sr")))
    for e in [*bon_rounds, bon, *rounds, sr]:
        view.apply(e)
    view.step, view.recording = step, recording
    return view


def test_the_box_for_the_defaults_reads_aloud():
    from components.panels import why_markdown

    bon, bon_rounds, sr, rounds = defaults_race()
    text = why_markdown(_view(bon, bon_rounds, sr, rounds, COST, n=32, max_new_tokens=48))
    # priced against Best-of-N as vLLM pages it: 193 steps for the 32 full-length answers (one more than 4 fixed
    # passes: test_with_no_measured_step_time...), each priced at its rows; the passes named as fixed passes'
    assert text.startswith("#### Why this speed-up (3.38x)")
    assert ("Best-of-32 at 48 tokens, each answer reserving its full length, needs 4 fixed passes of 8 rows in the "
            "448-slot budget (the prompt stored once); Speculative Rejection opens with 29 rows in one pass, so "
            "against fixed passes of full-length answers its decoding steps could shrink at most 4x. As vLLM pages "
            "Best-of-N (KV blocks of 16 slots taken as answers write, preemption by recompute), all 32 of its answers "
            "took 193 steps against its 48 (4.02x fewer); at equal reward it took 193 steps (4.02x fewer).") in text
    assert "ended early" not in text   # they did not: vLLM's one step more than the passes is its preemption
    assert ("On this machine, one step of 29 rows costs 1.6x one of 8 rows, and its steps cost 1.19x Best-of-N's "
            "on average") in text
    assert "At the first decision (token 14) the partial reward ranked 29 answers with Spearman ρ = 0.52 (moderate" in text
    assert "Best-of-N's winner #0 was kept to the end." in text
    assert "What made it lose" not in text and "What kept the gain small" not in text
    # the paper's setting, every number from specrej.analysis.why's cited constants
    assert ("Best-of-120 to Best-of-3,840 is 1 to 32 passes of 120 rows (run side by side on 1 to 32 GPUs" in text
            and "up to 1,000 rows on one GPU" in text and "shrink up to 32x" in text and "16-32x" in text)
    assert "barely more with more rows" in text and "on this machine it grows with them: 1.6x from 8 rows to 29." in text


def test_the_box_for_a_loss_says_what_made_it_lose_and_names_the_recordings_machine():
    from components.panels import why_markdown

    bon, bon_rounds, sr, rounds = loss_race()
    rec = {"hardware": "2-core CPU", "date": "2025-01-01", "seconds": 3.0}
    text = why_markdown(_view(bon, bon_rounds, sr, rounds, LOSS_COST, n=8, max_new_tokens=10, recording=rec))
    assert text.startswith("#### Why Speculative Rejection lost here (1.92x more time)")
    assert "in the 60-slot budget (a copy of the prompt in every row)" in text
    # 60 slots are 3 blocks of 16, and one answer (30 + 9 tokens) needs all 3: vLLM runs the 8 one at a time
    assert "all 8 of its answers took 80 steps against its 10 (8x fewer); at equal reward it took 10 steps" in text
    assert "On the recording's machine, one step of 8 rows costs 1.5x one of 4 rows" in text
    assert "on this machine" not in text.lower()
    assert "Spearman ρ = -0.90 (inverse agreement)" in text and "#0 was cut at decision 1 (token 4)" in text
    assert ("**What made it lose:** the early signal: with ρ = -0.90 at token 4, Speculative Rejection cut "
            "Best-of-N's winner at decision 1, and Best-of-N needed only about 1 of its 8 answers (10 of its 80 "
            "steps) to match what Speculative Rejection kept; and the step price: its steps cost 1.92x Best-of-N's "
            "on average, while it took as many steps as Best-of-N.") in text
    assert "on the recording's machine it grows with them: 1.5x from 4 rows to 8." in text


def test_the_box_counts_steps_without_a_measurement_and_is_empty_without_a_verdict():
    from components.panels import why_markdown

    bon, bon_rounds, sr, rounds = defaults_race()
    view = _view(bon, bon_rounds, sr, rounds, None, n=32, max_new_tokens=48)
    text = why_markdown(view)
    assert "Why this speed-up (4.02x)" in text and "counted in decoding steps" in text and "costs 1.6x" not in text
    # the loss race counted in steps: 10 against 10, no speed-up; what kept it small is the signal alone
    bon, bon_rounds, sr, rounds = loss_race()
    text = why_markdown(_view(bon, bon_rounds, sr, rounds, None, n=8, max_new_tokens=10))
    assert text.startswith("#### Why there is no speed-up here")
    assert "**What kept the gain small:** the early signal: with ρ = -0.90 at token 4" in text
    assert "step price" not in text and "it grows with them" not in text
    view.state = "running"
    view.arms["sr"].finished = None
    assert why_markdown(view) == ""


# ---------------------------------------------------------------- the page, after a real tiny race

def test_the_pages_summary_shows_the_box_after_a_real_race(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    pytest.importorskip("gradio")
    from conftest import race_frames, run_request, tiny_app_context

    ctx = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)
    req = run_request(ctx, dict(prompt="Give me three tips for staying healthy.", n=8, alpha=0.5, budget=100,
                                decision="budget", interval=16, max_new_tokens=24, temperature=0.9, top_p=0.95,
                                seed=3))
    last = race_frames(ctx, req)[-1]
    view = last.view
    assert view.done and view.verdicts()
    summary = last.summary
    assert "#### Why this speed-up" in summary or "#### Why Speculative Rejection lost here" in summary
    assert "Best-of-8 at 24 tokens" in summary and "The paper, by the same arithmetic" in summary
    # beside the verdict: after it, before the table
    assert summary.index("to reach Speculative Rejection") < summary.index("#### Why") < summary.index("| winner |")


# ---------------------------------------------------------------- issue 40's mutants: an uneven N, a rival
def uneven_race():
    """N = 12 of 48 tokens in passes of 8 rows: a full pass of 8, then a short last pass of 4 (8 does not
    divide 12). The challenger is a rival (DeepConf-style) that decodes in the same passes of 8 rows, so its
    widest step is 8 rows, not its 12 candidates; its winner is #2 (0.98), written to the end."""
    finals = [1.0 - i / 100 for i in range(12)]
    bon, bon_rounds = _bon(finals, 48, 8, budget=448)
    cands = tuple(_cand(i, 48, "finished", finals[i], "length") if i in (2, 9) else
                  _cand(i, 20, "pruned", None, round_pruned=0) for i in range(12))
    rival = Finished(arm="deepconf", winner=cands[2], candidates=cands, rounds=1, ledger=Ledger(),
                     rows_per_step=(8,) * 20 + (2,) * 28 + (4,) * 20)
    rounds = [Round(arm="deepconf", index=0, position=20, candidates=cands, threshold=None, n_kept=2,
                    n_pruned=10, forced=False, ledger=Ledger(), signal="group confidence")]
    return bon, bon_rounds, rival, rounds


def test_an_n_the_rows_per_pass_do_not_divide_and_a_short_last_pass():
    bon, bon_rounds, rival, rounds = uneven_race()
    assert [r.n_kept for r in bon_rounds] == [8, 4]            # the short last pass
    v = verdict_from_race(rival, bon, bon_rounds, _unit, schedule="passes")
    # rows per pass are the widest pass's, 8 (not the last one's 4): 2 passes of 48 steps, 96 for all 12
    assert v.curve[-1].steps == pytest.approx(96) and v.widest == 8
    w = explain(baseline=bon, baseline_rounds=bon_rounds, challenger=rival, rounds=rounds, verdict=v, step=None,
                max_new_tokens=48, budget=BUDGET)
    # 12 answers in passes of 8 are 2 passes (ceil), not 12 // 8 = 1
    assert (w.n, w.rows_per_pass, w.passes, w.bound) == (12, 8, 2, 2)
    # a rival's opening is its widest step (8 rows), not its number of candidates (12)
    assert w.opening_rows == 8 and w.opening_passes == pytest.approx(1.0)
