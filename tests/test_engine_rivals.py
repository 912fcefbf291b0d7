"""The engine's reads for the rivals (token confidences, the hidden-state chain's feature) and coupling: in
fp32, candidate i writes the same tokens in Best-of-N, DeepConf and ST-BoN, whatever rows decode beside it."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from specrej import RunConfig, load_generator
from specrej.arms import race_arms
from specrej.backends.hf import (
    Engine,
    Sampling,
    coe_features,
    next_logits,
    next_logits_hidden,
)
from specrej.core.events import Finished
from specrej.core.settings import DeepConfSettings
from specrej.methods import METHODS, run_to_completion

PROMPT = "Name three colours of the sea."


@pytest.fixture(scope="module")
def lm32(tiny_lm_dir):
    return load_generator(tiny_lm_dir, dtype="fp32")


def test_the_hidden_path_gives_the_plain_paths_logits_and_every_layer(lm32):
    ids = torch.tensor([lm32.render(PROMPT)])
    plain, _ = next_logits(lm32, ids, None)
    logits, _, layers = next_logits_hidden(lm32, ids, None)
    assert torch.equal(plain, logits)
    assert layers.shape == (1, lm32.model.config.num_hidden_layers + 1, lm32.model.config.hidden_size)


def test_token_confidence_is_minus_the_mean_top_k_log_probability(lm32):
    eng = Engine(lm32, lm32.render(PROMPT), sampling=Sampling(), seed=0, n_total=2, max_new_tokens=3, reads=("top-5",))
    rows = eng.start([0, 1])
    logits = rows.logits.clone()
    rows.step()
    want = -torch.log_softmax(logits[0].double(), -1).topk(5).values.mean()
    assert rows.confidences(0)[0] == pytest.approx(float(want), rel=1e-5)
    assert len(rows.confidences(1)) == 1 and rows.coe(0) == []


def test_coe_feature_by_hand():
    # two layers + embeddings: h0 = (1, 0), h1 = (1, 1), h2 = (0, 1); |h0 - h2| = sqrt 2, angle(h0, h2) = pi/2;
    # steps: |(0, 1)| = 1, angle 45 deg; |(1, 0)| = 1, angle 45 deg -> mean of (1/sqrt2 - 1/2) twice
    h = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]])
    assert float(coe_features(h)[0]) == pytest.approx(1 / math.sqrt(2) - 0.5, rel=1e-5)


@pytest.mark.parametrize("method,extra", [("deepconf", {"settings": DeepConfSettings(warmup=2, window=4)}),
                                          ("stbon", {})])
def test_a_rival_writes_best_of_ns_tokens_for_every_candidate_it_writes(lm32, length_reward, method, extra):
    base = RunConfig(prompt=PROMPT, n=6, max_new_tokens=16, budget=12 + 6 * 20, progress_every=0, **extra)
    bon = run_to_completion(METHODS["bon"](lm32, length_reward, base))
    # Best-of-N above decodes all 6 in one pass; DeepConf here in passes of the 2 rows that fit at full length
    # (15 own slots each beside the prompt held once), ST-BoN 6 rows then 1: other batches, the same tokens
    small = RunConfig(**{**vars(base), "budget": len(lm32.render(PROMPT)) + 30})
    fin = run_to_completion(METHODS[method](lm32, length_reward, small))
    if method == "deepconf":
        assert max(fin.rows_per_step) == 2
    ref = {c.id: c for c in bon.candidates}
    written = [c for c in fin.candidates if c.tokens]
    assert written
    for c in written:
        assert ref[c.id].text.startswith(c.text) if c.status == "pruned" else ref[c.id].text == c.text
        if c.status == "finished":
            assert c.score == ref[c.id].score
    assert fin.winner.status == "finished" and fin.rows_per_step and fin.ledger.steps == len(fin.rows_per_step)


def test_a_race_of_all_four_arms_on_one_engine(lm32, length_reward):
    from specrej.arms import parse_arms
    from specrej.cli import summary
    from specrej.analysis.compare import Tally

    cfg = RunConfig(prompt=PROMPT, n=8, max_new_tokens=12, progress_every=0,
                    settings=DeepConfSettings(warmup=2, window=4))
    events = list(race_arms(lm32, length_reward, cfg, ["bon", "sr", "deepconf", "stbon"]))
    fins = {e.arm: e for e in events if isinstance(e, Finished)}
    tally = Tally()
    for e in events:
        tally.add(e)
    text = summary(parse_arms(["bon", "sr", "deepconf", "stbon"]), tally)   # the CLI names what each decision ranked
    blocks = [b for b in text.split("== ")[1:] if " against " in b.split("\n")[0]]
    ranked = {}
    for label, signal, word in (("Speculative Rejection", "partial reward", "decision"),
                                ("DeepConf", "group confidence", "stop"), ("ST-BoN", "consistency", "truncation")):
        block = next(b for b in blocks if b.startswith(label))
        lines = [x for x in block.splitlines() if "Spearman" in x]
        assert all(x.strip().startswith(f"{word} ") for x in lines), block   # in its own words, counted from 1
        assert " 0 at token" not in block, block
        assert all(f"Spearman({signal}, final reward)" in x for x in lines), block
        ranked[label] = len(lines)
    assert ranked["DeepConf"] and ranked["ST-BoN"], text   # the rivals decided on their own signals
    tight = Tally()   # a budget that makes Speculative Rejection decide: its decisions rank the partial reward
    for e in race_arms(lm32, length_reward, replace(cfg, budget=100), ["bon", "sr"]):
        tight.add(e)
    lines = [x for x in summary(parse_arms(["bon", "sr"]), tight).splitlines() if "Spearman" in x]
    assert lines and all("Spearman(partial reward, final reward)" in x for x in lines)
    assert set(fins) == {"bon", "sr", "deepconf", "stbon"}
    # what each arm's steps read beyond the logits, in its ledger (the verdict prices the rivals' reads)
    assert {a: f.ledger.reads for a, f in fins.items()} == {"bon": "", "sr": "", "deepconf": "top-20",
                                                            "stbon": "hidden"}
    bon = {c.id: c.score for c in fins["bon"].candidates}
    for arm in ("sr", "deepconf", "stbon"):   # every winner is one of Best-of-N's answers, with its reward
        assert fins[arm].winner.score == bon[fins[arm].winner.id]


def test_the_why_box_says_when_the_judge_reads_a_rivals_own_signal(lm32, length_reward):
    """Under self-certainty (DeepConf's token confidence over the whole vocabulary) the page says DeepConf is judged
    by what it decides with; under a reward no rival decides with it says nothing of the kind."""
    from specrej.arms import parse_arms
    from specrej.rewards import REWARDS
    from components.panels import why_markdown
    from components.state.view import RunView

    cfg = RunConfig(prompt=PROMPT, n=8, max_new_tokens=12, progress_every=0,
                    settings=DeepConfSettings(warmup=2, window=4))
    events = list(race_arms(lm32, length_reward, cfg, ["bon", "deepconf", "stbon"]))
    texts = {}
    for kind in ("self-certainty", "preference"):
        view = RunView(cfg, reward_label=REWARDS[kind].label, specs=parse_arms(["bon", "deepconf", "stbon"]))
        for e in events:
            view.apply(e)
        texts[kind] = why_markdown(view)
    note = "The judge reads this method's own signal"
    assert texts["self-certainty"].count(note) == 1, texts["self-certainty"]   # DeepConf's box, not ST-BoN's
    assert "DeepConf's token confidence taken over the whole vocabulary" in texts["self-certainty"]
    assert note not in texts["preference"] and texts["preference"]


def test_the_clis_counts_read_as_english():
    """'2 passes' (Best-of-N's round word is 'pass': the CLI wrote '2 passs'), '1 pass', '3 stops'."""
    from specrej.cli import _count

    assert [_count(2, "pass"), _count(1, "pass"), _count(3, "stop"), _count(0, "truncation")] == \
        ["2 passes", "1 pass", "3 stops", "0 truncations"]
