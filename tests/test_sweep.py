"""Issue 64 (4): ``specrej.sweep``: seeds x alpha x N over a prompt list, one ``race_many`` row each, resumable, and
a summary whose speed-ups carry bootstrap intervals over prompts and seeds."""
from __future__ import annotations

import json

import pytest

SETTINGS = {"n": 6, "max_new_tokens": 10, "budget": 100}
PROMPTS = ["Explain how a rainbow forms.", "Write a haiku about the sea."]


def test_nested_bootstrap_resamples_prompts_then_seeds():
    from specrej.sweeps import nested_bootstrap

    assert nested_bootstrap([[2.0, 2.0], [2.0]]) == (2.0, 2.0)
    lo, hi = nested_bootstrap([[1.0, 1.2], [3.0, 2.8], [2.0, 2.1]])
    assert 1.0 <= lo < 2.0 < hi <= 3.0
    assert nested_bootstrap([[1.0, 1.2], [3.0, 2.8]], seed=5) == nested_bootstrap([[1.0, 1.2], [3.0, 2.8]], seed=5)
    with pytest.raises(ValueError):
        nested_bootstrap([[]])


def test_sweep_races_the_grid_once_and_summarizes_with_intervals(tiny_lm, length_reward, tmp_path, monkeypatch):
    import specrej.many as many
    from specrej import read_rows, sweep

    out = tmp_path / "sweep.jsonl"
    s = sweep(PROMPTS, tiny_lm, length_reward, SETTINGS, ["bon", "sr"], seeds=(0, 1), alphas=(0.3, 0.7), out=out,
              progress=False)
    assert len(s.rows) == 8 and len(read_rows(out)) == 8
    assert {(r["prompt"], r["sweep"]["seed"], r["sweep"]["alpha"], r["sweep"]["n"]) for r in s.rows} == {
        (p, seed, a, 6) for p in PROMPTS for seed in (0, 1) for a in (0.3, 0.7)}
    for r in s.rows:   # each row raced with its own setting, tied to its weights
        assert r["settings"]["config"]["seed"] == r["sweep"]["seed"]
        assert r["settings"]["config"]["alpha"] == r["sweep"]["alpha"]
        assert len(r["provenance"]["weights"]["generator"]["sha256"]) == 64 and "load" in r["provenance"]
    assert [(x["alpha"], x["arm"], x["races"], x["prompts"], x["seeds"]) for x in s.summary] == [
        (0.3, "sr", 4, 2, 2), (0.7, "sr", 4, 2, 2)]
    for x in s.summary:
        for metric in ("steps", "flops", "wall"):
            m = x[metric]
            assert m["low"] <= m["speedup"] <= m["high"], (metric, m)
        assert x["reward_gap"]["low"] <= x["reward_gap"]["mean"] <= x["reward_gap"]["high"]
    table = s.table()
    assert "steps speed-up (90% CI)" in table and table.count("\n| 0.") == 2
    # the same grid again: nothing raced; a third seed: only its rows
    raced = []
    real = many.race_one
    monkeypatch.setattr(many, "race_one", lambda lm, reward, cfg, arms: raced.append((cfg.prompt, cfg.seed, cfg.alpha))
                        or real(lm, reward, cfg, arms))
    again = sweep(PROMPTS, tiny_lm, length_reward, SETTINGS, ["bon", "sr"], seeds=(0, 1), alphas=(0.3, 0.7), out=out,
                  progress=False)
    assert raced == [] and [json.dumps(r, sort_keys=True) for r in again.rows] == [
        json.dumps(r, sort_keys=True) for r in read_rows(out)]
    sweep(PROMPTS, tiny_lm, length_reward, SETTINGS, ["bon", "sr"], seeds=(0, 1, 2), alphas=(0.3,), out=out,
          progress=False)
    assert sorted(raced) == sorted((p, 2, 0.3) for p in PROMPTS)


def test_a_bad_setting_is_refused_before_any_model_work(length_reward):
    from specrej import sweep

    with pytest.raises(ValueError, match=r"sweep setting alpha=1.5"):
        sweep(PROMPTS, "no-such/model-anywhere", length_reward, SETTINGS, seeds=(0,), alphas=(1.5,))


def test_the_cli_sweeps_a_prompts_file(tiny_lm_dir, tmp_path, capsys):
    from specrej.cli import main

    src, out = tmp_path / "prompts.jsonl", tmp_path / "sweep.jsonl"
    src.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    argv = ["--prompts", str(src), "--out", str(out), "--sweep", "--seeds", "0", "1", "--alphas", "0.5",
            "--model", tiny_lm_dir, "--reward", "sentiment", "--n", "6", "--max-new-tokens", "10", "--budget", "100",
            "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "steps speed-up (90% CI)" in printed and "| 0.5 | 6 | sr | 4 (2 prompts x 2 seeds)" in printed
    assert "4 result rows" in printed and len(out.read_text().splitlines()) == 4
    assert main(["--prompts", str(src), "--seeds", "0"]) == 2
    assert "--seeds and --alphas go with --sweep" in capsys.readouterr().err
    assert main(["--sweep"]) == 2
    assert "--sweep goes with --prompts" in capsys.readouterr().err
