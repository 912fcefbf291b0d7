"""The CLI tells a race as a reviewer reads it (issue 48, item 4): a race the reward cannot decide says so, each
rival's rounds are named by what they did, a warm-up trace's fate is named, a wall-time ratio stands beside the
work that explains it, and the time-to-equal-reward verdict is printed in the page's own sentence."""
from __future__ import annotations

import dataclasses

import pytest

CFG = dict(prompt="Say something.", n=16, max_new_tokens=20, seed=3)


def race(tiny_lm, reward, arms, **over):
    from specrej import RunConfig
    from specrej.analysis.compare import Tally
    from specrej.arms import parse_arms, race_arms

    cfg, arms, tally = RunConfig(**{**CFG, **over}), parse_arms(arms), Tally()
    for ev in race_arms(tiny_lm, reward, cfg, arms):
        tally.add(ev)
    return cfg, arms, tally


@pytest.fixture(scope="module")
def step(tiny_lm):
    from specrej.backends.steptime import measure

    return measure(tiny_lm, rows=(2,), steps=1)


def test_a_race_the_reward_cannot_decide_says_it_decided_nothing(tiny_lm, step):
    from specrej import CallableReward
    from specrej import cli

    flat = CallableReward(lambda prompt, rs: [0.0] * len(rs), name="flat")
    cfg, arms, tally = race(tiny_lm, flat, ["bon", "sr:n=16"], budget=160)
    out = cli.summary(arms, tally, cfg, step)
    assert "decided nothing: every one of Best-of-N's answers scored 0.0000" in out, out
    assert "Spearman" not in out   # no "Spearman undefined" standing for the whole story
    assert "Nothing to compare: all 16 of Best-of-N's answers score 0.0000, so its curve is flat" in out


def test_the_verdict_is_the_pages_sentence_and_wall_time_stands_beside_its_work(tiny_lm, length_reward, step):
    from specrej import cli
    from specrej.analysis.verdict import from_race

    cfg, arms, tally = race(tiny_lm, length_reward, ["bon", "sr:n=16"], budget=160)
    out = cli.summary(arms, tally, cfg, step)
    v = from_race(tally.finished["sr"], tally.finished["bon"], tally.rounds["bon"], step, scoring=True)
    sr_label, bon_label = arms[1].label, arms[0].label
    said = v.headline(sr_label, bon_label, f"{v.seconds:.1f} s", f"{v.bon_seconds:.1f} s", score=lambda x: f"{x:.4f}")
    assert f"== time to equal reward, {sr_label} against {bon_label}" in out and said in out
    assert "improvement score" in out
    sr, bon = tally.finished["sr"].ledger, tally.finished["bon"].ledger
    wall = next(line for line in out.splitlines() if line.strip().startswith("wall time:"))
    assert f"decoding steps {sr.steps} vs {bon.steps}" in wall or "the same tokens and FLOPs" in wall, wall


def test_an_arm_that_did_best_of_ns_work_has_its_wall_ratio_called_the_clock(tiny_lm, length_reward, step):
    from specrej import cli

    cfg, arms, tally = race(tiny_lm, length_reward, ["bon", "sr:n=16"], budget=4096)   # memory never fills: no cut
    sr, bon = tally.finished["sr"].ledger, tally.finished["bon"].ledger
    assert (sr.generated_tokens, sr.flops) == (bon.generated_tokens, bon.flops)
    out = cli.summary(arms, tally, cfg, step)
    assert "the same tokens and FLOPs: the difference is this machine's clock, not the method's work" in out


def test_a_rivals_rounds_and_a_warm_up_traces_fate_are_named_by_what_they_did(tiny_lm, length_reward):
    from specrej import cli

    cfg, arms, tally = race(tiny_lm, length_reward, ["bon", "deepconf:warmup=4"])
    rounds = tally.rounds["deepconf"]
    kinds = [r.marks[0][0] for r in rounds]
    assert kinds[0] == "threshold set"
    header = cli.rounds_words(arms[1], tally.finished["deepconf"], rounds)
    assert header.startswith("threshold set") and "rounds" not in header, header
    c = tally.compare_all("bon")["deepconf"]
    filtered = [r for r in rounds if r.marks[0][0] == "filtered"]
    if not filtered:   # the race had no after-run filter: one is made, so the words are checked all the same
        filtered = [dataclasses.replace(rounds[-1], index=len(rounds), marks=(("filtered", rounds[-1].position),))]
        rounds = [*rounds, *filtered]
    dropped = dataclasses.replace(c, kept_baseline_winner=False, baseline_winner=0,
                                  baseline_winner_round_pruned=filtered[0].index)
    fate = cli._fate(arms[1], arms[0], dropped, rounds, cfg)
    assert fate.startswith("dropped Best-of-N's winner #0 (a warm-up trace, written to the end) in its after-run "
                           "filter"), fate
    later = dataclasses.replace(dropped, baseline_winner=cfg.n - 1)   # not a warm-up trace: not called one
    assert "warm-up" not in cli._fate(arms[1], arms[0], later, rounds, cfg)


def test_help_never_prints_a_default_of_none_or_one_twice():
    """Issue 51 (8): ``--help`` printed "(default: SPECREJ_DTYPE, else auto) (default: None)"."""
    import re

    from specrej.cli import build_parser

    for record in (False, True):
        text = " ".join(build_parser(record).format_help().split())
        assert "(default: None)" not in text and "(default: False)" not in text
        assert not re.search(r"\(default[^()]*\)\s*\(default", text)
        assert "(default: 0.5)" in text or record   # a real default is still said
