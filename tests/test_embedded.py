"""End to end on the embedded real models (SmolLM2-135M-Instruct from GGUF, all-MiniLM-L6-v2).

Model-heavy: marked ``slow`` (``pytest -m "not slow"`` leaves them out)."""
from __future__ import annotations

import json
import math

import pytest

from specrej import RunConfig, best_of_n, load_generator, load_reward, run_to_completion, speculative_rejection
from specrej.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded():
    # fp32: exact coupling across batches of different sizes is a property of fp32 here; in bf16 the
    # CPU's kernels round a row differently for different row counts and ~5% of candidates drift
    # (docs/library.md, coupled randomness; the bench's engine section measures it in the dtype in use)
    return load_generator("embedded", dtype="fp32"), load_reward("embedded")


def test_real_text_finite_scores_and_fewer_tokens(embedded):
    lm, reward = embedded
    prompt = "Give me three tips for staying healthy."
    p = len(lm.render(prompt))
    cfg = RunConfig(prompt=prompt, n=8, alpha=0.5, max_new_tokens=28, budget=p + 8 * 8, seed=1)
    sr = run_to_completion(speculative_rejection(lm, reward, cfg))
    bon = run_to_completion(best_of_n(lm, reward, cfg))
    for f in (sr, bon):
        assert sum(c.isalpha() for c in f.winner.text) > 20  # real words, not junk
        assert all(math.isfinite(c.score) for c in f.candidates if c.score is not None)
    assert sr.rounds >= 1
    assert sr.ledger.generated_tokens < bon.ledger.generated_tokens
    # coupled randomness: every candidate SR finished is exactly its Best-of-N self
    bon_text = {c.id: c.text for c in bon.candidates}
    assert all(c.text == bon_text[c.id] for c in sr.candidates if c.status == "finished")


def test_cli_prints_winners_and_writes_a_trace(embedded, tmp_path, capsys):
    out = tmp_path / "trace.json"
    code = main(["--prompt", "Name a fruit.", "--method", "both", "--n", "4", "--alpha", "0.5",
                 "--max-new-tokens", "16", "--budget", "160", "--json", str(out), "--quiet"])
    text = capsys.readouterr().out
    assert code == 0
    assert "Speculative Rejection" in text and "Best-of-N" in text and "FLOPs:" in text
    trace = json.loads(out.read_text())
    finished = [e for e in trace["events"] if e["event"] == "finished"]
    assert {e["arm"] for e in finished} == {"sr", "bon"}
    assert trace["config"]["n"] == 4


def test_cli_races_three_arms_on_the_embedded_models(embedded, tmp_path, capsys):
    out = tmp_path / "three.json"
    code = main(["--prompt", "Give me three tips for staying healthy.", "--arms", "bon", "sr:alpha=0.5",
                 "sr:alpha=0.9", "--n", "6", "--max-new-tokens", "16", "--budget", "300", "--json", str(out),
                 "--quiet"])
    text = capsys.readouterr().out
    assert code == 0
    for head in ("== Best-of-N [bon]", "== Speculative Rejection (alpha=0.5) [sr]",
                 "== Speculative Rejection (alpha=0.9) [sr2]", "(alpha=0.9) against Best-of-N"):
        assert head in text, text
    trace = json.loads(out.read_text())
    assert {e["arm"] for e in trace["events"] if e["event"] == "finished"} == {"bon", "sr", "sr2"}
    assert [a["config"]["alpha"] for a in trace["arms"]][1:] == [0.5, 0.9]


def test_cli_bad_input_is_a_clear_error(capsys):
    assert main(["--prompt", "  ", "--quiet"]) == 2
    assert "prompt is empty" in capsys.readouterr().err
