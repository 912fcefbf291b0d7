"""Arm specs, the registry, the comparison and the CLI over any arms, on the tiny models.

A third method registered in ``METHODS`` plus one registry entry must appear in the CLI and its
trace (and, in test_app.py, in the app) with no other edit.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from specrej import Candidate, Finished, Ledger, Round, RunConfig, best_of_n, methods
from specrej.arms import REGISTRY, ArmKind, ArmSpecError, parse_arm, parse_arms, race_arms
from specrej.analysis.compare import Ratio, Tally, compare, first_match


# ---------------------------------------------------------------- arm specs

def test_specs_parse_with_ids_and_typed_values():
    arms = parse_arms(["bon", "sr:alpha=0.5", "sr:alpha=0.9,decision=interval,interval=16,keep_finished=yes"])
    assert [a.id for a in arms] == ["bon", "sr", "sr2"]
    assert arms[2].overrides == (("alpha", 0.9), ("decision", "interval"), ("interval", 16), ("keep_finished", True))
    assert arms[1].label == "Speculative Rejection (alpha=0.5)" and arms[0].label == "Best-of-N"
    assert arms[2].spec == "sr:alpha=0.9,decision=interval,interval=16,keep_finished=true"
    cfg = arms[2].config(RunConfig(prompt="p", alpha=0.3))
    assert (cfg.alpha, cfg.decision, cfg.interval, cfg.keep_finished) == (0.9, "interval", 16, True)
    assert parse_arms()[0].id == "bon" and [a.id for a in parse_arms()] == ["bon", "sr"]


@pytest.mark.parametrize("spec, needle", [
    ("xx", "unknown method 'xx'"), ("", "empty"), ("sr:alpha", "'alpha' is not key=value"),
    ("sr:beta=1", "does not take 'beta'"), ("bon:alpha=0.5", "does not take 'alpha'"),
    ("sr:alpha=lots", "alpha='lots' is not a number"), ("sr:interval=2.5", "interval='2.5' is not an integer"),
    ("sr:keep_finished=maybe", "keep_finished='maybe' is not true or false"), ("sr:alpha=", "alpha has no value"),
    ("sr:alpha=0.5,alpha=0.6", "alpha is set twice"), ("sr:", "nothing after ':'"),
])
def test_bad_specs_name_the_bad_key_or_value(spec, needle):
    with pytest.raises(ArmSpecError, match=needle.replace("(", r"\(")):
        parse_arm(spec)


def test_values_runconfig_refuses_name_the_arm_and_the_value():
    (arm,) = parse_arms(["sr:alpha=1.5"])
    with pytest.raises(ArmSpecError, match=r"arm 'sr:alpha=1.5': alpha=1.5 is outside"):
        arm.config(RunConfig(prompt="p"))
    (arm,) = parse_arms(["sr:decision=sometimes"])
    with pytest.raises(ArmSpecError, match="decision='sometimes' is unknown"):
        arm.config(RunConfig(prompt="p"))


def test_registry_entries_are_checked():
    with pytest.raises(ValueError, match="RunConfig"):
        ArmKind("x", "X", ("colour",))


def test_looks_give_each_arm_of_a_method_its_own_colour_and_check_their_chart():
    from components.looks import DEFAULT, Look, colour, look

    arms = parse_arms(["bon", "sr:alpha=0.5", "sr:alpha=0.9", "bon:n=4"])
    assert len({colour(a) for a in arms}) == 4
    assert look("sr").rounds(1) == "1 decision" and look("bon").rounds(2) == "2 passes"
    assert look("nope") is DEFAULT
    with pytest.raises(ValueError, match="chart"):
        Look(("#000000",), "pie")


# ---------------------------------------------------------------- the comparison

def _fin(arm, winner, cands, flops, tokens=100, wall=1.0):
    led = Ledger(generated_tokens=tokens, generator_flops=flops, wall_s=wall)
    return Finished(arm, next(c for c in cands if c.id == winner), tuple(cands), 1, led)


def test_ratios_are_worded_both_ways():
    assert Ratio(100, 130).words("compute") == "1.3x less compute"
    assert Ratio(102, 100).words("compute") == "1.02x more compute"   # not "1.0x less"
    assert Ratio(100, 100.01).words("compute") == "the same compute"
    assert Ratio(1, 250).words() == "250x less" and Ratio(0, 5).words() == "n/a"
    assert Ratio(100, 130).value == pytest.approx(1.3)


def test_compare_kept_winner_first_match_and_spearman():
    f = lambda i, s, status="finished", rp=None: Candidate(i, "", 5, status, s, ((2, s / 2), (5, s)), rp, "eos")  # noqa: E731
    bon = _fin("bon", 2, [f(0, 0.1), f(1, 0.5), f(2, 0.9), f(3, 0.3)], flops=200, tokens=200)
    sr_cands = [f(0, 0.1, "pruned", 0), f(1, 0.5), Candidate(2, "", 2, "pruned", 0.2, ((2, 0.2),), 0, None),
                Candidate(3, "", 2, "pruned", 0.4, ((2, 0.4),), 0, None)]
    sr = _fin("sr", 1, sr_cands, flops=120, tokens=80)
    live = tuple(dataclasses.replace(c, finish_reason=None, status="kept" if c.id == 1 else "pruned", round_pruned=None
                                     if c.id == 1 else 0) for c in sr_cands)
    decision = Round(arm="sr", index=0, position=2, candidates=live, threshold=0.5, n_kept=1, n_pruned=3, forced=False,
                     ledger=Ledger())
    c = compare(sr, bon, rounds=[decision], baseline_curve=[(50, None), (100, 0.3), (150, 0.5), (200, 0.9)])
    assert c.kept_baseline_winner is False and c.baseline_winner_round_pruned == 0
    assert c.baseline_winner_partial == (2, 0.2) and not c.same_winner
    assert c.flops.words("compute") == "1.67x less compute" and c.tokens.words() == "2.5x less"
    assert c.baseline_matched_flops == 150   # the first point whose best reached SR's 0.5
    assert c.reward_gap == pytest.approx(0.5 - 0.9)
    (d,) = c.decisions
    assert d.n_live == 4 and d.spearman is not None
    assert json.loads(json.dumps(c.to_dict()))["flops"]["words"] == "1.67x less"
    assert first_match([(1, 0.1)], 0.5) is None
    assert first_match([(1, 0.36899999)], 0.369) == 1   # the same text scored in another batch
    assert compare(sr, bon).curve_given is False


# ---------------------------------------------------------------- races over any arms

PROMPT = "Give me three tips for staying healthy."


def test_race_arms_relabels_events_and_validates_first(tiny_lm, length_reward):
    base = RunConfig(prompt=PROMPT, n=6, max_new_tokens=8, budget=300, progress_every=0)
    tally = Tally()
    for ev in race_arms(tiny_lm, length_reward, base, ["bon", "sr:alpha=0.5", "sr:alpha=0.8"]):
        tally.add(ev)
    assert set(tally.finished) == {"bon", "sr", "sr2"}
    assert set(tally.compare_all("bon")) == {"sr", "sr2"}
    with pytest.raises(ArmSpecError, match="sr2|alpha=2"):
        race_arms(tiny_lm, length_reward, base, ["bon", "sr", "sr:alpha=2"])


@pytest.fixture
def third_method(monkeypatch):
    """A tiny third method: Best-of-1 (the first candidate alone), registered like any method."""
    def best_of_one(lm, reward, cfg):
        return best_of_n(lm, reward, dataclasses.replace(cfg, n=1))

    monkeypatch.setitem(methods.METHODS, "first", best_of_one)
    monkeypatch.setitem(REGISTRY, "first", ArmKind("first", "First answer", ()))
    return "first"


def test_cli_races_three_arms_and_a_registered_third_method(tiny_lm_dir, tiny_reward_dir, third_method, tmp_path,
                                                             capsys):
    from specrej.cli import build_parser, main

    assert "First answer" in " ".join(build_parser().format_help().split())   # argparse wraps lines anywhere
    out = tmp_path / "trace.json"
    rc = main(["--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}", "--prompt", PROMPT, "--n", "6",
               "--max-new-tokens", "8", "--budget", "300", "--arms", "bon", "sr:alpha=0.5", "first",
               "--json", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "== First answer [first]" in printed and "== Speculative Rejection (alpha=0.5) [sr]" in printed
    assert "== First answer against Best-of-N" in printed
    assert "x less" in printed or "x more" in printed or "the same" in printed
    data = json.loads(out.read_text())
    assert [a["id"] for a in data["arms"]] == ["bon", "sr", "first"]
    finished = {e["arm"] for e in data["events"] if e["event"] == "finished"}
    assert finished == {"bon", "sr", "first"} and set(data["comparison"]) == {"sr", "first"}


def test_cli_bad_arm_is_a_clear_error(capsys):
    from specrej.cli import main

    assert main(["--prompt", PROMPT, "--arms", "bon", "sr:alpha=x"]) == 2
    assert "alpha='x' is not a number" in capsys.readouterr().err
    assert main(["--prompt", PROMPT, "--arms", "bon", "sr:alpha=1.5"]) == 2
    assert "alpha=1.5" in capsys.readouterr().err


def test_continuous_batching_best_of_n_asks_for_a_backend_that_refills(tiny_lm, length_reward):
    """bonc adds rows to a running batch; the transformers engine's rows share one length, so it says
    to use the vLLM backend (its run there: tests/test_vllm.py)."""
    cfg = RunConfig(prompt="hi", n=4, max_new_tokens=4, budget=200, seed=0, progress_every=0)
    with pytest.raises(ValueError, match="vLLM backend"):
        next(methods.best_of_n_refill(tiny_lm, length_reward, cfg))
    assert REGISTRY["bonc"].method is methods.best_of_n_refill and parse_arm("bonc:n=8").kind.name.startswith("Best-of-N")
