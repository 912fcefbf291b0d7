"""Issue 51 (3, 4, 7): already-loaded models and tokenizers as generator and reward, many prompts
(``race_many``, the CLI's ``--prompts``: one row a prompt, resumable), and the flat per-candidate table."""
from __future__ import annotations

import json

import pytest

SETTINGS = {"n": 4, "max_new_tokens": 8, "budget": 200, "seed": 3}
PROMPTS = ["Explain how a rainbow forms.", "Write a haiku about the sea.", "Give me three tips for staying healthy."]


@pytest.fixture(scope="module")
def objects(tiny_lm_dir, tiny_reward_dir):
    """The tiny models as a researcher holds them: loaded by transformers itself, not by specrej."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    lm = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    rm = AutoModelForSequenceClassification.from_pretrained(tiny_reward_dir)
    return lm, rm, tok


def _race(lm, reward, prompt=PROMPTS[0], **settings):
    from specrej import RunConfig, Tally, race_arms

    tally = Tally()
    for event in race_arms(lm, reward, RunConfig(prompt=prompt, **{**SETTINGS, **settings}), ["bon", "sr"]):
        tally.add(event)
    return tally


# ---------------------------------------------------------------------------------- loaded objects
def test_loaded_model_and_tokenizer_are_a_generator_and_a_reward(objects):
    from specrej import load_generator, load_reward
    from specrej.backends import load_lm

    model, reward_model, tok = objects
    lm = load_generator(model, tokenizer=tok)
    assert lm.model is model and lm.tokenizer is tok
    assert tok.eos_token_id in lm.eos_ids
    assert lm.shares_prefix   # a Llama: the prompt's cache is shared, as for the same model loaded by path
    assert load_lm(model, tokenizer=tok).model is model
    assert load_generator(lm) is lm and load_lm(lm) is lm
    reward = load_reward(reward_model, tokenizer=tok)
    assert reward.model is reward_model and reward.name.startswith("hf:")
    assert reward.n_params == sum(p.numel() for p in reward_model.parameters())
    tally = _race(lm, reward)
    assert set(tally.finished) == {"bon", "sr"}
    scores = [c.score for c in tally.finished["bon"].candidates]
    assert len(scores) == SETTINGS["n"] and all(isinstance(s, float) for s in scores)
    # the reward over the object scores as the same weights loaded by path do
    by_path = load_reward(f"hf:{reward_model.config.name_or_path}")
    texts = [c.text for c in tally.finished["bon"].candidates]
    assert reward.score(PROMPTS[0], texts).scores == pytest.approx(by_path.score(PROMPTS[0], texts).scores, abs=1e-5)


def test_pipelines_are_accepted(objects):
    from transformers import pipeline

    from specrej import load_generator, load_reward

    model, reward_model, tok = objects
    lm = load_generator(pipeline("text-generation", model=model, tokenizer=tok))
    assert lm.model is model and lm.tokenizer is tok
    reward = load_reward(pipeline("text-classification", model=reward_model, tokenizer=tok))
    assert reward.model is reward_model


def test_loaded_objects_of_the_wrong_kind_are_refused_with_what_to_give(objects):
    from specrej import ModelSpecError, RewardError, as_reward, load_generator, load_reward

    model, reward_model, tok = objects
    with pytest.raises(ModelSpecError, match="load_reward"):
        load_generator(reward_model, tokenizer=tok)      # a classification head writes no text
    with pytest.raises(ModelSpecError, match="tokenizer=tokenizer"):
        load_generator(model)                            # no tokenizer to render the prompt with
    with pytest.raises(RewardError, match="load_generator"):
        load_reward(model, tokenizer=tok)                # a causal LM has no score head
    with pytest.raises(RewardError, match=r"load_reward\(model, tokenizer=tokenizer\)"):
        as_reward(reward_model)                          # callable, with a .score layer: no reward by itself
    with pytest.raises(ModelSpecError, match="loaded model with its tokenizer"):
        load_generator(12)


# ---------------------------------------------------------------------------------- race_many
def test_race_many_writes_one_row_a_prompt_and_a_rerun_skips_them(tiny_lm, length_reward, tmp_path, monkeypatch,
                                                                   capsys):
    import specrej.many as many
    from specrej import race_many, read_rows

    out = tmp_path / "results.jsonl"
    rows = race_many(PROMPTS[:2], tiny_lm, length_reward, SETTINGS, ["bon", "sr"], out=out)
    assert [r["prompt"] for r in rows] == PROMPTS[:2]
    assert "prompts" in capsys.readouterr().err        # the progress bar, on stderr
    lines = out.read_text().splitlines()
    assert [json.loads(line)["prompt"] for line in lines] == PROMPTS[:2]
    row = json.loads(lines[0])
    assert set(row["arms"]) == {"bon", "sr"} and row["baseline"] == "bon"
    for arm in row["arms"].values():
        assert {"winner", "score", "generated_tokens", "flops", "wall_s", "steps"} <= set(arm)
        assert arm["flops"] > 0 and arm["steps"] > 0
    assert set(row["comparison"]) == {"sr"} and "kept_baseline_winner" in row["comparison"]["sr"]
    assert row["provenance"]["specrej"] and row["provenance"]["torch"] and row["provenance"]["time_utc"]
    assert row["settings"]["config"]["n"] == SETTINGS["n"] and row["settings"]["arms"] == ["bon", "sr"]
    # the same race as one race_arms call: the row is the race's
    tally = _race(tiny_lm, length_reward, PROMPTS[0])
    assert row["arms"]["sr"]["winner"] == tally.finished["sr"].winner.id
    assert row["arms"]["bon"]["score"] == pytest.approx(tally.finished["bon"].winner.score)

    raced = []
    real = many.race_one
    monkeypatch.setattr(many, "race_one", lambda lm, reward, cfg, arms: raced.append(cfg.prompt) or real(
        lm, reward, cfg, arms))
    rows = race_many(PROMPTS, tiny_lm, length_reward, SETTINGS, ["bon", "sr"], out=out, progress=False)
    assert raced == [PROMPTS[2]]                       # only the prompt the file did not hold
    assert [r["prompt"] for r in rows] == PROMPTS and rows[0] == row
    assert [r["prompt"] for r in read_rows(out)] == PROMPTS

    with out.open("a") as f:                           # a run killed while writing a row
        f.write('{"prompt": "Explain how a rai')
    raced.clear()
    race_many(PROMPTS + ["Hello!"], tiny_lm, length_reward, SETTINGS, ["bon", "sr"], out=out, progress=False)
    assert raced == ["Hello!"]
    assert [r["prompt"] for r in read_rows(out)] == PROMPTS + ["Hello!"]
    assert all(json.loads(line) for line in out.read_text().splitlines())

    with pytest.raises(ValueError, match=r"other settings \(n=4 there, 5 here\)"):
        race_many(PROMPTS, tiny_lm, length_reward, {**SETTINGS, "n": 5}, ["bon", "sr"], out=out, progress=False)


def test_race_many_reads_a_jsonl_file_and_checks_every_prompt_first(tiny_lm, length_reward, tmp_path):
    from specrej import race_many, read_prompts

    src = tmp_path / "prompts.jsonl"
    src.write_text(json.dumps({"prompt": PROMPTS[0], "id": 7}) + "\n\n" + json.dumps(PROMPTS[1]) + "\n")
    assert read_prompts(src) == PROMPTS[:2]
    rows = race_many(src, tiny_lm, length_reward, SETTINGS, ["bon", "sr"], progress=False, candidates=True)
    assert [r["prompt"] for r in rows] == PROMPTS[:2]
    assert {(c["arm"], c["id"]) for c in rows[0]["candidates"]} == {(a, i) for a in ("bon", "sr") for i in range(4)}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(PROMPTS[0]) + "\n" + json.dumps({"text": "no prompt key"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: an object without a \"prompt\" key"):
        read_prompts(bad)
    with pytest.raises(ValueError, match=r"prompt 2 \('   '\): prompt is empty"):
        race_many([PROMPTS[0], "   "], tiny_lm, length_reward, SETTINGS, progress=False)


# ---------------------------------------------------------------------------------- the CLI
def test_cli_races_a_prompts_file_into_a_results_file(tiny_lm_dir, tiny_reward_dir, tmp_path, capsys):
    from specrej.cli import main

    src, out = tmp_path / "prompts.jsonl", tmp_path / "results.jsonl"
    src.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS[:2]) + json.dumps(PROMPTS[2]) + "\n")
    argv = ["--prompts", str(src), "--out", str(out), "--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}",
            "--arms", "bon", "sr:alpha=0.5", "--n", "4", "--max-new-tokens", "8", "--budget", "200"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["prompt"] for r in rows] == PROMPTS
    assert rows[0]["settings"]["reward"] == f"hf:{tiny_reward_dir}"
    assert rows[0]["provenance"]["command"].startswith("python -m specrej --prompts")
    assert all(p[:20] in printed for p in PROMPTS) and "3 result rows" in printed
    assert main(argv) == 0                                 # the rerun races nothing and writes nothing
    assert out.read_text().count("\n") == 3
    assert main(["--prompts", str(src), "--prompt", "one prompt"]) == 2
    assert "leave out --prompt" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- the flat table
def test_to_rows_is_one_flat_row_per_candidate_per_arm(tiny_lm, length_reward):
    from specrej.core.events import ROW_KEYS

    tally = _race(tiny_lm, length_reward, budget=56)   # a budget that makes Speculative Rejection prune
    rows = tally.to_rows()
    pruned = [r for r in rows if r["status"] == "pruned"]
    assert pruned and all(r["arm"] == "sr" and r["round_pruned"] == 0 and r["finish_reason"] is None
                          for r in pruned)
    assert len(rows) == 2 * SETTINGS["n"]
    assert all(tuple(r) == ROW_KEYS for r in rows)
    for arm, f in tally.finished.items():
        mine = [r for r in rows if r["arm"] == arm]
        assert [r["id"] for r in mine] == sorted(c.id for c in f.candidates)
        assert [r["id"] for r in mine if r["winner"]] == [f.winner.id]
        assert f.to_rows() == mine
        for r in mine:
            c = next(c for c in f.candidates if c.id == r["id"])
            assert (r["score"], r["tokens"], r["finish_reason"], r["round_pruned"], r["text"], r["status"]) == (
                c.score, c.tokens, c.finish_reason, c.round_pruned, c.text, c.status)
    json.dumps(rows)                                       # plain values
    try:
        import pandas
    except ImportError:   # pandas is optional: the rows are plain dicts either way
        return
    frame = pandas.DataFrame(rows)
    assert frame.shape == (len(rows), len(ROW_KEYS))
    assert frame.groupby("arm")["winner"].sum().to_dict() == {"bon": 1, "sr": 1}
