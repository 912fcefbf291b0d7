"""A rival's own extra reads priced in the verdict's time (issue 40.5): DeepConf's steps read the top-k
log-probabilities, ST-BoN's every layer's hidden states; the step-time table measures each beside the plain
step (``StepCost.reads``) and a rival's steps are priced at its own measured step, while Best-of-N's and
Speculative Rejection's prices do not move. Hand-made numbers first, then the engine on a tiny model."""
from __future__ import annotations

import math

import pytest

from specrej.core.settings import DeepConfSettings

from specrej import Candidate, Finished, Ledger, Round
from specrej.analysis.verdict import from_race
from specrej.core.cost import StepCost, read_key, read_kwargs, read_words, reads_of


def step(rows: int) -> float:
    """The made-up machine of test_verdict: 1 s a step plus 0.1 s a row."""
    return 1.0 + 0.1 * rows


# the same machine as a measured table (linear between 1 and 4 rows, the last slope beyond), and with DeepConf's
# top-20 read measured at 1.5x the plain step at both sizes and ST-BoN's hidden states at 2x and 1.25x
PLAIN = StepCost((1, 4), (1.1, 1.4))
READS = StepCost((1, 4), (1.1, 1.4), (("top-20", (1.5, 1.5)), ("hidden", (2.0, 1.25))))


def test_read_keys_and_words():
    assert read_key() == "" and read_key(("top-20",)) == "top-20" and read_key(("hidden",)) == "hidden"
    assert read_key(("hidden", "top-5")) == read_key(("top-5", "hidden")) == "top-5+hidden"   # the order never matters
    assert read_kwargs("top-20") == {"conf_topk": 20} and read_kwargs(("hidden",)) == {"hidden": True}
    assert read_kwargs("") == {} and read_kwargs(read_key(("top-5", "hidden"))) == {"conf_topk": 5, "hidden": True}
    assert reads_of("top-5+hidden") == ("top-5", "hidden") and reads_of("") == ()
    assert read_words("top-20") == "the top-20 log-probabilities" and "hidden states" in read_words("hidden")
    with pytest.raises(ValueError):
        read_kwargs("top-0")


def test_a_step_that_reads_more_is_priced_at_its_measured_ratio():
    assert [PLAIN.step(r) for r in (1, 2, 4, 6)] == pytest.approx([step(r) for r in (1, 2, 4, 6)])
    top = READS.reading("top-20")
    assert [top.step(r) for r in (1, 2, 4, 6)] == pytest.approx([1.5 * step(r) for r in (1, 2, 4, 6)])
    hid = READS.reading("hidden")   # 2.2 s at 1 row, 1.75 s at 4: the fit never prices more rows cheaper
    assert hid.step(1) == pytest.approx(1.75) and hid.step(4) == pytest.approx(1.75)
    assert READS.reading("") is READS and READS.reading("top-5") is None and PLAIN.reading("hidden") is None
    assert READS.read_keys == ("top-20", "hidden")
    # the plain step is the same with or without reads measured beside it
    assert [READS.step(r) for r in range(1, 9)] == [PLAIN.step(r) for r in range(1, 9)]


def test_reads_travel_with_the_table():
    assert READS.scaled(2.0).reads == READS.reads and READS.scaled(2.0).step(1) == pytest.approx(2.2)
    other = StepCost((1, 4), (1.0, 1.5), (("top-20", (1.2, 1.8)),))
    m = READS.merged(other)
    assert m.seconds == (1.0, 1.4) and dict(m.reads) == {"top-20": pytest.approx((1.35, 1.65)), "hidden": (2.0, 1.25)}
    assert StepCost.from_record(READS.to_record()) == READS
    assert PLAIN.to_record() == {"rows": [1, 4], "seconds": [1.1, 1.4]}   # a recording without reads, as before
    for bad in ((0.9, 1.0), (1.0,), (1.0, math.nan)):
        with pytest.raises(ValueError):
            StepCost((1, 4), (1.1, 1.4), (("top-20", bad),))


def _cand(i, tokens, score, status, finish="eos", round_pruned=None):
    return Candidate(id=i, text=f"answer {i}", tokens=tokens, status=status, score=score, finish_reason=finish,
                     round_pruned=round_pruned)


def _race(reads: str):
    """test_verdict's race: Best-of-N's 4 answers of 2 tokens in passes of 2; the challenger decodes 4 rows,
    then 2 (2.6 s plain), its steps reading ``reads``."""
    bon = tuple(_cand(i, 2, s, "finished") for i, s in enumerate([0.1, 0.5, 0.3, 0.9]))
    rounds = [Round(arm="bon", index=j, position=2, candidates=bon, threshold=None, n_kept=2, n_pruned=0,
                    forced=False, ledger=Ledger()) for j in range(2)]
    led = Ledger(prompt_tokens=5, generated_tokens=8, generator_flops=2.0 * 13)
    bon_fin = Finished(arm="bon", winner=bon[3], candidates=bon, rounds=2, ledger=led)
    ch = (_cand(0, 1, 0.2, "pruned", None, 0), _cand(1, 1, 0.4, "pruned", None, 0), _cand(2, 2, 0.3, "finished"),
          _cand(3, 2, 0.9, "finished"))
    ch_fin = Finished(arm="rival", winner=ch[3], candidates=ch, rounds=1,
                      ledger=Ledger(generator_flops=30.0, reads=reads))
    return ch_fin, bon_fin, rounds


def test_a_rivals_modelled_time_includes_its_extra_reads():
    # DeepConf-style: every step 1.5x -> 2.6 s x 1.5 = 3.9 s; Best-of-N's curve is priced at the plain step
    v = from_race(*_race("top-20"), READS)
    assert v.seconds == pytest.approx(3.9) and v.bon_seconds == pytest.approx(4.8)
    assert v.read_factor == pytest.approx(1.5) and v.reads == "top-20"
    assert v.reads_words() == ("Its steps include the top-20 log-probabilities it reads (measured on this machine: 1.50x "
                               "the plain steps' time).")
    # ST-BoN-style: a step of 4 rows 1.75 s, then one of 2 rows 1.75 s (never cheaper than more rows) = 3.5 s
    h = from_race(*_race("hidden"), READS.step)   # the bound step of a table counts as the table (the page's)
    assert h.seconds == pytest.approx(3.5) and h.read_factor == pytest.approx(3.5 / 2.6)
    # not measured (a GPU table, an older recording): the plain step, and the page says so
    n = from_race(*_race("hidden"), PLAIN)
    assert n.seconds == pytest.approx(2.6) and n.read_factor is None and "not priced" in n.reads_words()
    # scoring still adds on top of the read-priced decoding
    ch, bon, rounds = _race("top-20")
    from dataclasses import replace
    s = from_race(replace(ch, ledger=replace(ch.ledger, reward_s=0.5)), bon, rounds, READS, scoring=True)
    assert s.seconds == pytest.approx(3.9 + 0.5)


def test_best_of_n_and_speculative_rejection_prices_do_not_move():
    """A challenger that reads nothing extra gets the verdict it got before the reads were measured, number for
    number, whether priced by the function, the plain table or the table with reads."""
    race = _race("")
    before = from_race(*race, step).to_dict()
    for price in (PLAIN, READS, READS.step):
        after = from_race(*race, price).to_dict()
        assert after == before and after["read_factor"] is None and after["reads"] == ""
    assert from_race(*race, READS).reads_words() == ""


# ------------------------------------------------------------------ the engine (a tiny real model)
def test_the_engine_measures_each_extra_read_beside_the_plain_step(tiny_lm_dir):
    from specrej import load_generator
    from specrej.backends.steptime import RIVAL_READS, measure, time_paired

    lm = load_generator(tiny_lm_dir, dtype="fp32")
    t = time_paired(lm, lm.render("Hello"), 3, 4, RIVAL_READS)
    assert set(t) == {"", *RIVAL_READS}
    assert all(len(v) == 4 and all(0 < x < math.inf for x in v) for v in t.values())
    cost = measure(lm, rows=(1, 4), steps=2, reads=RIVAL_READS)
    assert cost.read_keys == RIVAL_READS and RIVAL_READS == ("top-20", "hidden")
    for key in RIVAL_READS:   # recorded, finite, never below the plain step
        own = cost.reading(key)
        assert all(1.0 <= r < math.inf for r in dict(cost.reads)[key])
        assert all(a >= b > 0 for a, b in zip(own.seconds, cost.seconds))
    assert StepCost.from_record(cost.to_record()) == cost
    assert measure(lm, rows=(1,), steps=1).reads == ()   # the plain calibration (the pace probe) reads nothing


def test_rival_reads_default_to_deepconfs_k():
    from specrej.backends.steptime import RIVAL_READS
    from specrej.core.config import RunConfig

    assert RIVAL_READS[0] == read_key((f"top-{DeepConfSettings().conf_topk}",))


def test_the_page_says_a_rivals_steps_include_its_reads(tiny_lm_dir, length_reward):
    """A race of Best-of-N, DeepConf and ST-BoN on a tiny model, priced at a table that measured the top-20 read
    (1.5x) but not the hidden states: DeepConf's verdict line says its steps include its top-20 at 1.50x, ST-BoN's
    that its hidden states are not priced; the time of each is its own step's."""
    from specrej import RunConfig, load_generator
    from specrej.arms import parse_arms, race_arms
    from components.panels import verdict_lines
    from components.state.view import RunView

    lm = load_generator(tiny_lm_dir, dtype="fp32")
    cfg = RunConfig(prompt="Name three colours of the sea.", n=8, max_new_tokens=12, progress_every=0,
                    settings=DeepConfSettings(warmup=2, window=4))
    specs = parse_arms(["bon", "deepconf", "stbon"])
    view = RunView(cfg, specs=specs)
    for e in race_arms(lm, length_reward, cfg, specs):
        view.apply(e)
    view.step = StepCost((1, 8), (0.01, 0.02), (("top-20", (1.5, 1.5)),))
    verdicts = view.verdicts()
    assert set(verdicts) == {a.id for a in specs[1:]}
    plain = StepCost((1, 8), (0.01, 0.02))
    text = {}
    for arm_id, v in verdicts.items():
        arm = view.arms[arm_id]
        text[arm.spec.method] = "\n".join(verdict_lines(view, arm, v))
        profile = arm.finished.rows_per_step
        own = view.step.reading(v.reads) or plain
        assert v.seconds == pytest.approx(sum(own.step(r) for r in profile) + arm.finished.ledger.reward_s)
    assert "Its steps include the top-20 log-probabilities it reads (measured on this machine: 1.50x" in text["deepconf"]
    assert "every layer's hidden states, not priced here" in text["stbon"]


def test_the_measured_read_cost_is_carried_into_a_real_races_verdict(tiny_lm_dir, length_reward):
    """This machine's step measured with the rivals' reads on the tiny model (finite, at least the plain step),
    then a real race of Best-of-N, DeepConf and ST-BoN priced at it: each rival's verdict time is its own
    measured step's (its ledger names its read), with the ratio kept; Speculative Rejection's, at the plain step."""
    from specrej import RunConfig, load_generator
    from specrej.arms import parse_arms, race_arms
    from specrej.backends.steptime import RIVAL_READS, measure
    from specrej.core.cost import StepCost as Cost

    lm = load_generator(tiny_lm_dir, dtype="fp32")
    cost = measure(lm, rows=(1, 8), steps=2, reads=RIVAL_READS)
    assert cost.read_keys == RIVAL_READS
    assert all(math.isfinite(r) and r >= 1.0 for _, ratios in cost.reads for r in ratios)
    cfg = RunConfig(prompt="Name three colours of the sea.", n=8, max_new_tokens=12, progress_every=0,
                    settings=DeepConfSettings(warmup=2, window=4))
    fins, bon_rounds = {}, []
    for e in race_arms(lm, length_reward, cfg, parse_arms(["bon", "sr", "deepconf", "stbon"])):
        if isinstance(e, Finished):
            fins[e.arm] = e
        elif isinstance(e, Round) and e.arm == "bon":
            bon_rounds.append(e)
    plain = Cost(cost.rows, cost.seconds)
    for arm in ("sr", "deepconf", "stbon"):
        ch = fins[arm]
        v = from_race(ch, fins["bon"], bon_rounds, cost)
        assert v is not None and v.reads == ch.ledger.reads
        own = cost.reading(ch.ledger.reads)
        assert v.seconds == pytest.approx(sum(own.step(r) for r in ch.rows_per_step))
        assert v.bon_seconds == from_race(ch, fins["bon"], bon_rounds, plain).bon_seconds   # Best-of-N: the plain step
        if arm == "sr":
            assert v.read_factor is None and v.reads_words() == ""
        else:
            assert math.isfinite(v.read_factor) and v.read_factor >= 1.0 and "measured on this machine" in v.reads_words()


def test_a_recording_keeps_the_rivals_reads_and_its_replay_prices_them(tiny_lm_dir, tiny_reward_dir, tmp_path,
                                                                      capsys):
    """`python -m specrej record` of Best-of-N against DeepConf and ST-BoN measures this machine's step with the
    rivals' reads (``step_cost.reads`` in the meta); the replay (``recordings.view_for``) prices each rival at its
    own measured step and its verdict line says so, naming the recording's machine."""
    from specrej.cli import main
    from specrej.record import load, paced
    from components.panels import verdict_lines
    from components.session.recordings import view_for

    out = tmp_path / "rec.json.gz"
    rc = main(["record", "--out", str(out), "--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}",
               "--prompt", "Name three colours of the sea.", "--arms", "bon:n=8", "deepconf:n=8,warmup=2,window=4",
               "stbon:n=8", "--max-new-tokens", "10", "--budget", "600", "--quiet"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err[-2000:]
    rec = load(out)
    kept = rec.meta["step_cost"]
    assert [k for k, _ in kept["reads"]] == ["top-20", "hidden"]
    assert all(math.isfinite(r) and r >= 1.0 for _, ratios in kept["reads"] for r in ratios)
    view = view_for(rec)
    assert view.step.read_keys == ("top-20", "hidden")
    for e in paced(rec, speed=math.inf):
        view.apply(e)
    verdicts = view.verdicts()
    assert {view.arms[a].spec.method for a in verdicts} == {"deepconf", "stbon"}
    for arm_id, v in verdicts.items():
        arm = view.arms[arm_id]
        own = view.step.reading(v.reads)
        assert v.reads == arm.finished.ledger.reads and own is not None
        base = view.arms[view.baseline]   # priced at the rival's own step (a recording keeps no step profile)
        assert v.seconds == pytest.approx(from_race(arm.finished, base.finished, base.round_events, own,
                                                    scoring=True).seconds)
        text = "\n".join(verdict_lines(view, arm, v))
        assert f"Its steps include {read_words(v.reads)} it reads (measured on the recording's machine: " in text


def test_every_backend_takes_the_reads_as_one_option_and_no_read_of_its_own():
    """A method names what its steps read (``run.prefill(reads=("top-20",))``); every backend takes that one option,
    so a new read changes no backend's signature (issue 48: they took ``conf_topk`` and ``hidden`` each)."""
    import inspect

    from specrej.backends.hf import Engine
    from specrej.backends.replay import Replay
    from specrej.backends.vllm import VllmEngine
    from specrej.bench.reference import RefEngine
    from specrej.methods.run import _Run

    for fn in (Engine.__init__, Engine.from_config, Replay.__call__, Replay.from_config,
               VllmEngine.from_config, RefEngine.from_config, _Run.prefill):
        params = inspect.signature(fn).parameters
        assert "reads" in params and not {"conf_topk", "hidden"} & set(params), fn.__qualname__
    with pytest.raises(ValueError, match="unknown extra read 'logits-of-layer-3'"):
        read_key(("logits-of-layer-3",))
