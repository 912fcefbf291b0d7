"""The rivals (DeepConf online, ST-BoN) on hand-made pools: every threshold, stop step, divergence step and
consistency ranking below is worked out by hand from the script (a replay backend, no model)."""
from __future__ import annotations

import pytest
from test_replay import ByteLM, LastLetter

from specrej.backends.replay import MemoReward, Replay, Script
import dataclasses

from specrej.core.config import RunConfig
from specrej.core.settings import DeepConfSettings, STBoNSettings
from specrej.core.events import Finished, Round
from specrej.methods import METHODS, run_to_completion
from specrej.methods.deepconf import (
    group_confidence,
    lowest_group_confidence,
    percentile,
)
from specrej.methods.stbon import inconsistency, most_consistent, vote
from specrej.analysis.verdict import verdict


def events(method: str, script: Script, cfg: RunConfig, *, refills: bool = True):
    engine = Replay(script)
    if not refills:   # the transformers engine's way: a running batch takes no new rows
        engine.refills = False
    return list(METHODS[method](ByteLM(), LastLetter(), cfg, engine=engine))


# ---------------------------------------------------------------------------------- DeepConf
def test_the_confidence_arithmetic_by_hand():
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([1.0, 2.0, 4.0, 8.0], 10) == pytest.approx(1.3)      # 1 + 0.3 x (2 - 1)
    assert percentile([3.0], 90) == 3.0
    assert group_confidence([2, 2, 1, 1], 2) == 1.0 and group_confidence([4], 2) == 4.0
    assert lowest_group_confidence([1, 1, 3, 3], 2) == 1.0                  # windows: 1, 2, 3
    assert lowest_group_confidence([3, 1, 3, 1, 0], 3) == pytest.approx(4 / 3)   # 7/3, 5/3, 4/3
    assert lowest_group_confidence([2, 4], 3) == 3.0                        # shorter than a window: the mean


# token confidences per token; c0, c1 are the warm-up (lowest group 1.0 and 2.0: threshold at the 50th
# percentile = 1.5). c2's group (window 2) is 2, 1.5, 1 after tokens 2, 3, 4: stopped at token 4 (1.5 is not
# below 1.5); c4's is 0.5 at token 2: stopped there; c3's is always 2 (never stopped); c5 1.6 (never).
DC_TEXTS = ["aaaa", "bbbb", "cccccc", "ddddd", "eee", "ffff"]
DC_CONF = [[1, 1, 3, 3], [2, 2, 2, 2], [2, 2, 1, 1, 2, 2], [1, 3, 1, 3, 1], [0.5, 0.5, 0.5], [1.6] * 4]
DC_SCRIPT = Script(prompt_tokens=4, tokens=[list(t.encode()) for t in DC_TEXTS],
                   conf=[[float(x) for x in c] for c in DC_CONF], conf_topk=20)
# the prompt held once (4 slots) + 3 rows at full length (8 tokens, the last never fed: 7 slots each) in 28
# slots (every arm must fit its N rows for 4 tokens: 4 + 6 x 4 = 28)
DC_SET = DeepConfSettings(warmup=2, window=2, conf_percentile=50)
DC_CFG = RunConfig(prompt="abcd", n=6, max_new_tokens=8, budget=28, settings=DC_SET, progress_every=0)


def dc(**kw) -> RunConfig:
    """DC_CFG with DeepConf's settings ``kw`` changed."""
    return dataclasses.replace(DC_CFG, settings=dataclasses.replace(DC_SET, **kw))


def test_deepconf_sets_its_threshold_and_stops_traces_by_hand_with_refills():
    evs = events("deepconf", DC_SCRIPT, DC_CFG)
    rounds = [e for e in evs if isinstance(e, Round)]
    fin = evs[-1]
    # Round 0: the warm-up's lowest group confidences and the threshold between them
    r0 = rounds[0]
    assert (r0.index, r0.position, r0.signal_threshold, r0.signals, r0.n_kept) == (0, 4, 1.5, ((0, 1.0), (1, 2.0)), 1)
    # online, 3 rows at once (2, 3, 4): c4 stops at token 2, its slot goes to c5; c2 stops at token 4
    # then the paper's filter after the run: c0, a warm-up trace below the threshold (1.0 < 1.5), is dropped
    assert [(r.index, r.position, r.n_pruned) for r in rounds[1:]] == [(1, 2, 1), (2, 4, 1), (3, 5, 1)]
    assert [r.marks for r in rounds[1:]] == [(("stopped", 2),), (("stopped", 4),), (("filtered", 5),)]
    assert dict(rounds[1].signals) == {2: 2.0, 3: 2.0, 4: 0.5}
    assert dict(rounds[3].signals) == {0: 1.0, 1: 2.0, 3: 2.0, 5: 1.6} and rounds[3].n_kept == 3
    status = {c.id: (c.status, c.tokens, c.round_pruned) for c in fin.candidates}
    assert status == {0: ("pruned", 4, 3), 1: ("finished", 4, None), 2: ("pruned", 4, 2),
                      3: ("finished", 5, None), 4: ("pruned", 2, 1), 5: ("finished", 4, None)}
    # warm-up 4 steps of 2 rows; then 3, 3 (c4 leaves, c5 joins), 3, 3 (c2 leaves), 2 (c3 ends), 1
    assert fin.rows_per_step == (2, 2, 2, 2, 3, 3, 3, 3, 2, 1)
    assert fin.ledger.steps == 10 and fin.ledger.generated_tokens == 23
    # the reward (the last letter) picks among the finished: 'f'; stopped traces were never scored
    assert (fin.winner.id, fin.picked_by, fin.rounds) == (5, "reward", 4)
    assert all(c.score is None for c in fin.candidates if c.status == "pruned" and c.round_pruned < 3)
    assert fin.candidates[0].score is not None    # a trace the filter drops was written to its end and scored


@pytest.mark.parametrize("keep,bar,kept", [(90, 1.0, 3), (10, 1.8, 1)])
def test_deepconf_high_keeps_most_traces_and_deepconf_low_few(keep, bar, kept):
    """An asymmetric percentile (the hand test's 50 cannot tell them apart): three warm-up traces whose lowest group
    confidences are 1.0, 2.0 and 1.0; DeepConf-high (90) sets the bar at their 10th percentile, 1.0, and keeps all
    three above it, DeepConf-low (10) at their 90th, 1.8 (linear interpolation: 1 + 0.8 x (2 - 1)), keeping one."""
    r0 = next(e for e in events("deepconf", DC_SCRIPT, dc(warmup=3, conf_percentile=keep)) if isinstance(e, Round))
    assert dict(r0.signals) == {0: 1.0, 1: 2.0, 2: 1.0}
    assert r0.signal_threshold == pytest.approx(bar) and r0.n_kept == kept


def test_deepconf_without_refills_starts_a_new_pass_when_the_running_one_empties():
    fin = events("deepconf", DC_SCRIPT, DC_CFG, refills=False)[-1]
    # online pass 1 (2, 3, 4): 3, 3 (c4 stops), 2, 2 (c2 stops), 1 (c3 ends); pass 2 (c5): 4 steps of 1
    assert fin.rows_per_step == (2, 2, 2, 2, 3, 3, 2, 2, 1, 1, 1, 1, 1)
    assert {c.id for c in fin.candidates if c.status == "pruned"} == {0, 2, 4}   # c0: the filter


def test_deepconf_filters_the_last_window_and_traces_shorter_than_a_window_after_the_run():
    # threshold 1.5 as above; c2 ends at the length cap (8 tokens) with its last window at 1.05 (never checked
    # while decoding: the row left the batch the step it ended); c3 is 1 token long (shorter than a window),
    # confidence 1.0; c4 and c5 stay above. The reward would pick c2 ('z') or c3 ('y'): both are dropped.
    texts = ["aaaa", "bbbb", "cccccccz", "y", "dddd", "eeee"]
    conf = [[1, 1, 3, 3], [2, 2, 2, 2], [2, 2, 2, 2, 2, 2, 1.1, 1.0], [1.0], [2] * 4, [1.6] * 4]
    script = Script(prompt_tokens=4, tokens=[list(t.encode()) for t in texts],
                    conf=[[float(x) for x in c] for c in conf], conf_topk=20)
    evs = events("deepconf", script, DC_CFG)
    rounds = [e for e in evs if isinstance(e, Round)]
    fin = evs[-1]
    assert rounds[-1].marks == (("filtered", 8),) and rounds[-1].n_pruned == 3
    assert {c.id: c.status for c in fin.candidates} == {0: "pruned", 1: "finished", 2: "pruned", 3: "pruned",
                                                        4: "finished", 5: "finished"}
    assert fin.winner.id == 5       # 'e' beats 'd' and 'b' once 'z' and 'y' are out
    paper = events("deepconf", script, dc(pick="paper"))[-1]
    assert paper.winner.id == 1     # the vote: c1 and c4 at 2.0 (the lower id), never a dropped trace


def test_deepconfs_stop_mark_is_the_token_the_stop_came_at_with_progress_every_step():
    evs = events("deepconf", DC_SCRIPT, RunConfig(**{**vars(DC_CFG), "progress_every": 1}))
    stops = [r for r in evs if isinstance(r, Round) and r.marks and r.marks[0][0] == "stopped"]
    assert [(r.position, r.marks) for r in stops] == [(2, (("stopped", 2),)), (4, (("stopped", 4),))]


def test_deepconfs_consensus_stop_ends_the_run_once_the_answers_agree():
    # every later trace writes the warm-up's answer 'bbbb' (confidence 2): after c1 and c2 the vote is all
    # 'bbbb' except c0 (below the threshold, not a voter), so with consensus 0.95 the run stops when c2 ends
    texts = ["aaaa", "bbbb", "bbbb", "BBbb", "bbbb", "bbbb"]
    conf = [[1, 1, 3, 3]] + [[2] * 4] * 5
    script = Script(prompt_tokens=4, tokens=[list(t.encode()) for t in texts],
                    conf=[[float(x) for x in c] for c in conf], conf_topk=20)
    cfg = dc(consensus=0.95)
    evs = events("deepconf", script, cfg, refills=False)
    fin = evs[-1]
    agreed = [r for r in evs if isinstance(r, Round) and r.marks and r.marks[0][0] == "consensus"]
    assert len(agreed) == 1 and agreed[0].position == 4
    # pass 1 (c2, c3, c4) ends together at token 4: the vote agrees, so c5 never starts
    assert {c.id: c.status for c in fin.candidates}[5] == "waiting"
    assert fin.ledger.generated_tokens == 2 * 4 + 3 * 4
    off = events("deepconf", script, DC_CFG, refills=False)[-1]
    assert off.ledger.generated_tokens == 2 * 4 + 4 * 4       # off (the default): the traces go on to N
    with pytest.raises(ValueError, match="consensus"):
        DeepConfSettings(consensus=1.5)


def test_deepconfs_own_pick_is_the_highest_lowest_group_confidence_among_its_voters():
    fin = events("deepconf", DC_SCRIPT, dc(pick="paper"))[-1]
    # voters: what the filter kept: c1 (warm-up, 2.0 >= 1.5; c0's 1.0 is dropped), c3 (2.0), c5 (1.6): a tie at
    # 2.0 goes to the lower id
    assert (fin.winner.id, fin.picked_by) == (1, "paper")


def test_deepconf_refuses_a_warmup_that_leaves_nothing_to_stop():
    with pytest.raises(ValueError, match="warmup=6 leaves none of N=6"):
        events("deepconf", DC_SCRIPT, dc(warmup=6))


def test_a_replay_without_confidences_refuses_deepconf_with_the_fix():
    plain = Script(prompt_tokens=4, tokens=DC_SCRIPT.tokens)
    with pytest.raises(ValueError, match="no token confidences at top-20"):
        events("deepconf", plain, DC_CFG)
    with pytest.raises(ValueError, match="hidden-state chain"):
        events("stbon", plain, DC_CFG)


# ---------------------------------------------------------------------------------- ST-BoN
def test_the_consistency_arithmetic_by_hand():
    s = inconsistency({0: 0.0, 1: 1.2, 2: 2.0, 3: 3.0})
    # c1: ((1.2)^2 + (0.8)^2 + (1.8)^2) / 3 = 5.32 / 3
    assert s[1] == pytest.approx(5.32 / 3) and s[0] == pytest.approx((1.44 + 4 + 9) / 3)
    assert most_consistent({0: 0.0, 1: 1.2, 2: 2.0, 3: 3.0}) == 1
    assert most_consistent({0: 0.0, 1: 1.0, 2: 1.1, 3: 3.0}) == 2      # S: 1.67 against 1.61
    assert most_consistent({5: 0.5, 2: 0.5}) == 2                      # a tie: the lower id
    assert vote([2, 1]) == 1 and vote([3, 2, 3]) == 3
    assert inconsistency({7: 1.0}) == {7: 0.0}


# t = 1: prefixes a, a, b, b (not all distinct); t = 2: aa, ab, ba, bb: every pair differs, c = 2, tau = 2,
# truncation at token 4. Votes at t = 3 (features 0, 1, 1.1, 3: c2) and t = 4 (0, 1.2, 2, and c3's 3 frozen
# at its end: c1): a tie, the lower id, c1, is kept. c3 ended at token 3 ('z', the best last letter).
ST_TEXTS = ["aaxxxxxx", "abxxxxxx", "bayyyyyy", "bbz"]
ST_COE = [[0.5, 0.2, 0.0, 0.0, 0, 0, 0, 0], [0.5, 0.3, 1.0, 1.2, 1, 1, 1, 1], [0.5, 0.4, 1.1, 2.0, 2, 2, 2, 2],
          [0.5, 0.6, 3.0]]
ST_SCRIPT = Script(prompt_tokens=4, tokens=[list(t.encode()) for t in ST_TEXTS],
                   coe=[[float(x) for x in c] for c in ST_COE])
ST_CFG = RunConfig(prompt="abcd", n=4, max_new_tokens=8, budget=4 + 4 * 8, progress_every=0)


def test_stbon_truncates_after_the_divergence_step_and_its_buffer_by_hand():
    evs = events("stbon", ST_SCRIPT, ST_CFG)
    (r,) = [e for e in evs if isinstance(e, Round)]
    fin = evs[-1]
    assert (r.position, r.marks, r.forced, r.n_kept, r.n_pruned) == (4, (("diverged", 2), ("truncated", 4)), False, 1, 2)
    # the signal is the consistency -S at the truncation (higher is better): c1 the most consistent
    sig = dict(r.signals)
    assert sig[1] == pytest.approx(-5.32 / 3) and max(sig, key=sig.get) == 1
    status = {c.id: (c.status, c.tokens) for c in fin.candidates}
    assert status == {0: ("pruned", 4), 1: ("finished", 8), 2: ("pruned", 4), 3: ("finished", 3)}
    assert fin.rows_per_step == (4, 4, 4, 3, 1, 1, 1, 1)
    assert (fin.winner.id, fin.picked_by) == (3, "reward")      # the reward's best of the two written to the end
    paper_cfg = dataclasses.replace(ST_CFG, settings=STBoNSettings(pick="paper"))
    paper = run_to_completion(METHODS["stbon"](ByteLM(), LastLetter(), paper_cfg, engine=Replay(ST_SCRIPT)))
    assert (paper.winner.id, paper.picked_by) == (1, "paper")   # the kept one


def test_stbon_truncates_early_when_memory_fills_before_the_buffer_ends():
    # buffer 2: tau = 4, truncation due at token 6 in 20 slots; c3 ends at token 3, so 3 rows go on; at token 5
    # the next token would need 4 + 3 x 6 = 22 slots: a forced truncation on the votes so far (t = 3: c2,
    # t = 4: c1, t = 5: features 0, 1, 2 and c3's 3, c1 and c2 tied, c1): c1
    cfg = dataclasses.replace(ST_CFG, settings=STBoNSettings(buffer=2.0), budget=20)
    evs = events("stbon", ST_SCRIPT, cfg)
    (r,) = [e for e in evs if isinstance(e, Round)]
    assert (r.position, r.forced, r.marks) == (5, True, (("diverged", 2), ("truncated", 5)))
    assert [c.id for c in evs[-1].candidates if c.status == "finished"] == [1, 3]


def test_a_rivals_verdict_prices_the_steps_it_ran():
    """The verdict prices a rival by its own rows at each step (passes and refills included), not as one
    pass of its candidates."""
    fin = events("deepconf", DC_SCRIPT, DC_CFG, refills=False)[-1]
    v = verdict(bon_scores=[1.0, 2.0, 3.0], bon_lengths=[4, 4, 4], rows_per_pass=3, sr_reward=3.0,
                sr_lengths=[c.tokens for c in fin.candidates], sr_flops=1.0, step=lambda rows: float(rows),
                sr_profile=fin.rows_per_step)
    assert v.steps == 13 and v.seconds == sum(fin.rows_per_step) == 23
    one_pass = verdict(bon_scores=[1.0, 2.0, 3.0], bon_lengths=[4, 4, 4], rows_per_pass=3, sr_reward=3.0,
                       sr_lengths=[c.tokens for c in fin.candidates], sr_flops=1.0, step=lambda rows: float(rows))
    assert one_pass.steps == 5   # what the old rule would have said: its longest answer


def test_the_rivals_take_their_settings_from_arm_specs():
    from specrej.arms import ArmSpecError, parse_arms

    a = parse_arms(["bon", "sr", "deepconf:warmup=2,window=4,conf_percentile=10", "stbon:buffer=0.5,pick=paper"])
    assert [x.id for x in a] == ["bon", "sr", "deepconf", "stbon"] and all(x.kind.prunes for x in a[1:])
    assert a[2].config(DC_CFG).settings == DeepConfSettings(warmup=2, window=4, conf_percentile=10)
    assert a[3].config(DC_CFG).settings == STBoNSettings(buffer=0.5, pick="paper")
    with pytest.raises(ArmSpecError, match=r"ST-BoN-style \(Wang et al., 2025\) does not take 'alpha'"):
        parse_arms(["stbon:alpha=0.5"])
    with pytest.raises(ArmSpecError, match="pick='best' is unknown"):
        parse_arms(["deepconf:pick=best"])[0].config(DC_CFG)
    with pytest.raises(ArmSpecError, match=r"conf_percentile=0.0 must be in \(0, 100\]"):
        parse_arms(["deepconf:conf_percentile=0"])[0].config(DC_CFG)


def test_memo_reward_scores_only_what_the_rivals_finish():
    memo = MemoReward(LastLetter())
    fin = run_to_completion(METHODS["deepconf"](ByteLM(), memo, DC_CFG, engine=Replay(DC_SCRIPT)))
    assert isinstance(fin, Finished)
    assert memo.reward.calls >= 1 and len(memo._memo) == 4    # the four traces written to the end, nothing else


def test_the_rivals_are_labelled_as_adaptations_with_their_citations():
    from specrej.arms import REGISTRY

    dc, st = REGISTRY["deepconf"], REGISTRY["stbon"]
    assert (dc.name, st.name) == ("DeepConf-style (Fu et al., 2025)", "ST-BoN-style (Wang et al., 2025)")
    assert dc.about.rival and st.about.rival and not REGISTRY["sr"].about.rival
    # one line "adapted here: ..." naming every adaptation: the window, the warm-up, the pick, the consensus stop
    line = dc.about.adapted
    assert line.startswith("adapted here: ") and all(w in line for w in ("8 tokens", "warm-up", "consensus", "pick"))
    assert "needs no reward model" in st.about.adapted
    assert (dc.about.schedule, st.about.schedule, REGISTRY["sr"].about.schedule) == ("passes", "opening", "opening")
