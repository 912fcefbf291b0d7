"""Rejection rules: the paper's reference rule, a calibrated rule, its fit, its arm, and the
simulator against the live method for every rule."""
from __future__ import annotations

import math

import pytest

from specrej import RunConfig, speculative_rejection
from specrej.arms import ArmSpecError, parse_arm
from specrej.bench.coupled import PrefixScorer, collect
from specrej.bench.fit_rule import fit, logistic, samples
from specrej.bench.simulate import simulate_sr
from specrej.core.events import Finished, Round
from specrej.core.decisions import MemoryFull, decision_rule, rule_for
from specrej.core.rules import FEATURES, RULES, CalibratedRule, Contender, PaperRule, features, get_rule

PROMPT = "Give me three tips for staying healthy."


def pool():
    return [Contender(3, 0.5, 8, False, -1.0, 2.0), Contender(1, 0.9, 8, False, -2.0, 1.0),
            Contender(2, 0.5, 5, True, -0.5, 3.0), Contender(0, 0.1, 8, False, -0.1, 4.0)]


def test_paper_rule_keeps_the_highest_partial_rewards_ties_by_id():
    rule = get_rule("paper")
    assert isinstance(rule, PaperRule)
    assert rule.rank(pool(), 8) == [1, 2, 3, 0]
    assert not rule.uses_token_stats
    with pytest.raises(ValueError, match="unknown"):
        get_rule("nope")


def test_features_are_standardised_within_the_pool():
    rows = features(pool(), 8)
    assert len(rows) == 4 and all(len(r) == len(FEATURES) for r in rows)
    for j in range(3):                                  # score, logprob, self-certainty: mean 0, sd 1
        col = [r[j] for r in rows]
        assert sum(col) == pytest.approx(0.0, abs=1e-12)
        assert math.sqrt(sum(v * v for v in col) / 4) == pytest.approx(1.0)
    assert [r[3] for r in rows] == [0.0, 0.0, 1.0, 0.0]  # finished
    assert rows[2][4] == pytest.approx(math.log(5 / 8)) and rows[0][4] == 0.0
    # a missing statistic (a reward that does not keep them) is 0, not an error
    bare = [Contender(i, float(i), 4, False) for i in range(3)]
    assert [r[1] for r in features(bare, 4)] == [0.0, 0.0, 0.0]


def test_calibrated_rule_ranks_by_its_weights_at_the_nearest_length():
    # at 8 tokens: by log-probability alone; at 64: by the partial reward alone
    rule = CalibratedRule("t", (8, 64), ((0, 1, 0, 0, 0), (1, 0, 0, 0, 0)))
    assert rule.rank(pool(), 8) == [0, 2, 3, 1]
    assert rule.rank(pool(), 10) == rule.rank(pool(), 8)         # nearer 8 than 64 on a log scale
    assert rule.rank(pool(), 48) == [1, 2, 3, 0]                 # nearer 64: the paper's order
    assert rule.uses_token_stats and not CalibratedRule("s", (8,), ((1, 0, 0, 1, 1),)).uses_token_stats
    assert rule.rank(list(reversed(pool())), 8) == rule.rank(pool(), 8)   # order of the pool does not matter
    assert CalibratedRule.from_dict(rule.to_dict()) == rule
    with pytest.raises(ValueError, match="entries"):
        CalibratedRule("bad", (8,), ((1, 2),))


def test_the_decision_policy_keeps_the_head_of_its_rules_ranking():
    by_logprob = CalibratedRule("t", (8,), ((0, 1, 0, 0, 0),))
    live, finished = [c for c in pool() if not c.finished], [c for c in pool() if c.finished]
    paper = MemoryFull(0.5).select(live, finished, cap=10)
    assert paper.kept == (1, 2) and paper.kept_live == (1,)            # the two highest partial rewards
    calibrated = MemoryFull(0.5, rule=by_logprob).select(live, finished, cap=10)
    assert calibrated.kept == (0, 2) and calibrated.kept_live == (0,)  # the two highest log-probabilities
    assert calibrated.threshold == 0.1                                 # the lowest kept partial reward
    forced = MemoryFull(0.0, rule=by_logprob).select(live, finished, cap=1)
    assert forced.forced and forced.kept_live == (0,) and forced.pruned[-2:] == (3, 1)   # lowest ranked go first
    assert MemoryFull(0.5, rule=by_logprob).uses_token_stats
    assert decision_rule(alpha=0.5, decision="interval", interval=4, rule="calibrated").rule is RULES["calibrated"]
    assert rule_for(RunConfig(prompt="x", rule="calibrated")) == MemoryFull(0.5, rule=RULES["calibrated"])
    with pytest.raises(ValueError, match="unknown"):
        decision_rule(alpha=0.5, rule="nope")


def test_logistic_finds_the_informative_feature():
    # the label is 1 exactly when x0 > 0; x1 is noise that never decides it
    xs = [[x0 / 10, ((7 * i) % 11 - 5) / 5] for i, x0 in enumerate(range(-20, 21))]
    ys = [1 if x[0] > 0 else 0 for x in xs]
    w, b = logistic(xs, ys, l2=0.1)
    assert w[0] > 5 * abs(w[1]) and w[0] > 1
    assert all((w[0] * x[0] + w[1] * x[1] + b > 0) == bool(y) for x, y in zip(xs, ys) if abs(x[0]) > 0.3)


@pytest.fixture(scope="module")
def coupled(tiny_lm):
    return collect(tiny_lm, RunConfig(prompt=PROMPT, n=16, max_new_tokens=24, seed=5))


def test_fit_on_coupled_runs(tiny_lm, length_reward, coupled):
    scorer = PrefixScorer(tiny_lm, length_reward, coupled)
    xs, ys = samples(coupled, scorer, 8, top=0.25)
    assert len(xs) == 16 and sum(ys) == 4                        # top quarter of 16 by final reward
    best = max(range(16), key=lambda c: (scorer.final()[c], -c))
    assert ys[best] == 1
    rule = fit([coupled], [scorer], name="t", positions=(4, 8), top=0.25, fitted_on=("p",))
    assert rule.positions == (4, 8) and all(len(w) == len(FEATURES) for w in rule.weights)
    assert rule.fitted_on == ("p",)
    # the fitted weight on the partial reward is positive: early length/variety predicts the final reward
    assert rule.weights[-1][0] > 0


def test_saved_runs_replay_every_rule_exactly(tiny_lm, length_reward, coupled, tmp_path):
    """fit_rule evaluate reads saved runs: they keep every statistic to the bit, so each rule's replay
    from the file is the bench's (a run rounded to 4 decimals once moved a 12-prompt score by 1.5)."""
    from specrej.bench.coupled import load_runs, save_runs

    save_runs([coupled], tmp_path / "runs.json.gz", {"n": coupled.n})
    _, (back,) = load_runs(tmp_path / "runs.json.gz")
    assert back == coupled
    kw = dict(budget=24 * 8 + 64, alpha=0.5, n0=16, max_new_tokens=24)
    for rule in ("paper", "calibrated"):
        assert (simulate_sr(back, PrefixScorer(tiny_lm, length_reward, back), rule=rule, **kw)
                == simulate_sr(coupled, PrefixScorer(tiny_lm, length_reward, coupled), rule=rule, **kw))


def test_rule_is_an_arm_setting(monkeypatch):
    arm = parse_arm("sr:alpha=0.5,rule=paper")
    assert dict(arm.overrides)["rule"] == "paper"
    assert arm.config(RunConfig(prompt="x")).rule == "paper"
    with pytest.raises(ArmSpecError, match="unknown"):
        parse_arm("sr:rule=nope").config(RunConfig(prompt="x"))
    with pytest.raises(ArmSpecError, match="does not take"):
        parse_arm("bon:rule=paper")
    monkeypatch.setitem(RULES, "t", CalibratedRule("t", (8,), ((1, 0, 0, 0, 0),)))
    assert RunConfig(prompt="x", rule="t").rule == "t"


@pytest.mark.parametrize("rule", ["paper", "by-logprob", "by-length", "mixed"])
@pytest.mark.parametrize("alpha,extra", [(0.5, 6), (0.8, 10)])
def test_simulation_matches_the_live_method_for_every_rule(tiny_lm, length_reward, coupled, monkeypatch, rule,
                                                          alpha, extra):
    monkeypatch.setitem(RULES, "by-logprob", CalibratedRule("by-logprob", (8,), ((0, 1, 0, 0, 0),)))
    monkeypatch.setitem(RULES, "by-length", CalibratedRule("by-length", (8,), ((0.1, 0, 0, -1, 1),)))
    monkeypatch.setitem(RULES, "mixed", CalibratedRule("mixed", (6, 24), ((1, 0.5, -0.5, 0.2, 0), (0.3, -1, 0, 0, 0))))
    P = coupled.prompt_tokens
    shared = tiny_lm.shares_prefix
    budget = P + 16 * extra if shared else 16 * (P + extra)
    cfg = RunConfig(prompt=PROMPT, n=16, alpha=alpha, max_new_tokens=24, budget=budget, seed=5, progress_every=0,
                    rule=rule)
    events = list(speculative_rejection(tiny_lm, length_reward, cfg))
    fin = events[-1]
    assert isinstance(fin, Finished)
    rounds = [e for e in events if isinstance(e, Round)]
    sim = simulate_sr(coupled, PrefixScorer(tiny_lm, length_reward, coupled), budget=budget, alpha=alpha, n0=16,
                      max_new_tokens=24, shared=shared, rule=rule)
    assert sim.winner == fin.winner.id
    assert sim.score == pytest.approx(fin.winner.score)
    assert sim.generated_tokens == fin.ledger.generated_tokens
    assert sim.rounds == fin.rounds == len(rounds)
    pruned_live = [{c.id for c in r.candidates if c.status == "pruned" and c.round_pruned == r.index} for r in rounds]
    assert [d["position"] for d in sim.decisions] == [r.position for r in rounds]
    assert len(pruned_live) == sim.rounds


def test_the_apps_request_carries_the_rule():
    from components.state.request import RunRequest

    assert RunRequest(prompt="x", rule="calibrated").config(0).rule == "calibrated"
    assert RunRequest(prompt="x").config(0).rule == "paper"
    for bad in ("nope", None):   # issue 32: a missing rule is refused, naming the field, not read as the default
        with pytest.raises(ValueError, match="rule .*one of: paper"):
            RunRequest(prompt="x", rule=bad)
