"""The benchmark: decisions and prompt sets on hand-made data, then tiny end-to-end runs of the paper's
protocol (in-process, and sharded over two processes by ``accelerate launch``). The protocol's curve
and aggregation are tested in test_curve.py and test_protocol.py."""
from __future__ import annotations

import json
import os
import sys
import subprocess
from pathlib import Path

import pytest
import torch

from specrej import Candidate, Ledger, Round, RunConfig, best_of_n, run_to_completion, speculative_rejection
from specrej.bench import load_prompts, main
from specrej.analysis.compare import decision_rank, live_at_decision
from specrej.bench.reference import speculative_rejection_reference_style

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ hand-made numbers
def _cand(i, status, score, round_pruned=None, finish=None):
    return Candidate(i, "", 3, status, score, ((3, score),), round_pruned, finish)


def test_decision_correlation_uses_only_rows_live_at_that_decision():
    cands = (
        _cand(0, "kept", 0.9), _cand(1, "pruned", 0.1, round_pruned=1), _cand(2, "kept", 0.5),
        _cand(3, "pruned", 0.3, round_pruned=0),          # pruned earlier: not part of this decision
        _cand(4, "finished", 0.8, finish="eos"),          # finished: its score is final, not partial
        _cand(5, "pruned", 0.95, round_pruned=1, finish="eos"),
    )
    r = Round(arm="sr", index=1, position=16, candidates=cands, threshold=0.5, n_kept=3, n_pruned=2, forced=False,
              ledger=Ledger())
    assert [c.id for c in live_at_decision(r)] == [0, 1, 2]
    final = dict(enumerate([1.0, 0.0, 0.5, 9.0, 9.0, 9.0]))
    out = decision_rank(r, final)
    assert out.spearman == pytest.approx(1.0) and out.n_live == 3 and out.position == 16
    assert decision_rank(r, dict(enumerate([0.0, 1.0, 0.5, 0, 0, 0]))).spearman == pytest.approx(-1.0)
    assert decision_rank(r, dict(enumerate([0.5, 0.0, 1.0, 0, 0, 0]))).spearman == pytest.approx(0.5)
    assert decision_rank(r, {0: 1.0, 1: 0.0}).n_live == 2   # only candidates the baseline finished


def test_load_prompts_by_name_and_from_files(tmp_path):
    quick = load_prompts("quick")
    assert len(quick) == 12 and all(set(r) == {"id", "kind", "prompt"} for r in quick)
    assert len(load_prompts("default")) >= 60
    (tmp_path / "p.json").write_text(json.dumps(["Say hi.", {"prompt": "Say bye.", "id": "x"}]))
    rows = load_prompts(str(tmp_path / "p.json"))
    assert [r["prompt"] for r in rows] == ["Say hi.", "Say bye."] and rows[1]["id"] == "x"
    (tmp_path / "p.jsonl").write_text('{"prompt": "One."}\n\n{"prompt": "Two.", "kind": "factual"}\n')
    assert [r["kind"] for r in load_prompts(str(tmp_path / "p.jsonl"))] == ["", "factual"]
    for bad in ("no-such-set", str(tmp_path / "p.jsonl") + ".missing"):
        with pytest.raises(ValueError):
            load_prompts(bad)
    (tmp_path / "empty.json").write_text('[{"prompt": " "}]')
    with pytest.raises(ValueError):
        load_prompts(str(tmp_path / "empty.json"))


# ------------------------------------------------------------------ tiny end-to-end runs
TINY_PROMPTS = [{"id": "a", "kind": "advice", "prompt": "Give me three tips for staying healthy."},
                {"id": "b", "kind": "creative", "prompt": "Write a haiku about the sea."}]


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in TINY_PROMPTS) + "\n")
    return str(path)


def _tiny_args(tiny_lm_dir, tiny_reward_dir, prompt_file, out):
    # budget 100: the ~40-token prompt once, then a handful of rows fill it after a few tokens, so
    # Speculative Rejection decides (and opens with more rows than Best-of-N fits at full length)
    return ["--model", tiny_lm_dir, "--reward", tiny_reward_dir, "--prompts", prompt_file, "--n-ref", "8",
            "--points", "0.5@4,0.75@4", "--max-new-tokens", "12", "--budget", "100", "--out", str(out)]


def test_bench_end_to_end_on_tiny_models(tiny_lm_dir, tiny_reward_dir, prompt_file, tmp_path, capsys):
    args = _tiny_args(tiny_lm_dir, tiny_reward_dir, prompt_file, tmp_path) + [
        "--threads", str(torch.get_num_threads()), "--engine-rows", "4", "--engine-length", "6",
        "--sweep", "1,4", "--repeats", "1"]
    result = main(args)
    printed = capsys.readouterr().out
    assert "Best-of-8" in printed and "engine / generate" in printed
    assert "SR paper a=0.5 T=4" in printed and "SR calibrated a=0.5 T=4" in printed
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["protocol"] == json.loads(json.dumps(result["protocol"]))
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"  # matplotlib is in requirements.txt

    # the summary: one row per method, the columns
    methods = [r["method"] for r in saved["summary"]]
    assert methods[:5] == ["bon", "sr", "sr", "sr", "sr"] and {"deepconf", "stbon"} <= set(methods[5:])
    assert set(methods[5:]) <= {"deepconf", "stbon"}   # the rivals' rows beside SR's rules
    for row in saved["summary"]:
        assert {"method", "rule", "alpha", "first_decision", "source", "improvement", "improvement_ci90",
                "improvement_capped", "improvement_capped_ci90", "rel_flops", "rel_wall", "speedup_flops",
                "speedup_steps", "speedup_steps_refill", "speedup_wall"} <= set(row)
    # the paper's rule beside the new one, at the same points
    assert [(r["rule"], r["alpha"]) for r in saved["summary"][1:5]] == [
        ("paper", 0.5), ("paper", 0.75), ("calibrated", 0.5), ("calibrated", 0.75)]
    assert saved["meta"]["dtype"] == "float32" and saved["meta"]["rules"] == ["paper", "calibrated"]
    proto = result["protocol"]
    assert proto["bon"][-1]["k"] == 8 and proto["bon"][-1]["improvement"] == pytest.approx(100)
    steps = [b["rel_steps"] for b in proto["bon"]]
    assert all(b >= a - 1e-9 for a, b in zip(steps, steps[1:]))   # more candidates never take fewer steps
    assert proto["step_model"] and all(s > 0 for _, s in proto["step_model"])
    for rec in result["prompts"]:
        assert len(rec["bon"]["scores"]) == 8 and rec["bon"]["ledger"]["generated_tokens"] == sum(rec["bon"]["tokens"])
        for sr in rec["sr"]:
            assert sr["decisions"], "the budget must force at least one decision"
            assert sr["n"] > rec["rows_per_pass"]        # SR opens with more rows than Best-of-N fits
    eng = result["engine"]
    assert eng["vs_generate"]["engine"]["tokens"] > 0 and eng["vs_generate"]["generate"]["tokens"] > 0
    assert eng["matmul"]["flops_per_s"] > 0 and [s["rows"] for s in eng["decode_sweep"]] == [1, 4]
    assert eng["bandwidth"]["bytes_per_s"] > 0 and eng["matmul"]["dtype"] == eng["dtype"]
    c = eng["coupling"]
    assert c["compared"] == sum(c["batches"]) and 0 <= c["diverged"] == len(c["diverged_at_tokens"]) <= c["compared"]
    for s in eng["decode_sweep"]:   # the roofline is the larger of the memory and compute bounds
        assert s["roofline_s"] == max(s["memory_s"], s["compute_s"]) and s["vs_roofline"] > 0
    ref = eng["vs_reference"]
    assert ref["reference_style"]["ledger"]["prompt_tokens"] > ref["engine"]["ledger"]["prompt_tokens"]


def test_points_parse_or_say_what_is_wrong():
    from specrej.bench.run import parse_points

    assert parse_points("0.5@16, 0.9@8") == [(0.5, 16), (0.9, 8)]
    for bad in ("0.5", "1.5@16", "0.5@0", "a@b", ""):
        with pytest.raises(SystemExit):
            parse_points(bad)


def test_best_of_k_is_the_prefix_of_best_of_n(tiny_lm, length_reward):
    """Coupling: a Best-of-k run writes candidates 0..k-1 of a Best-of-N run (so one run holds every k's draws)."""
    cfg = RunConfig(prompt="Write a haiku about the sea.", n=8, max_new_tokens=10, budget=400, progress_every=0)
    big = run_to_completion(best_of_n(tiny_lm, length_reward, cfg))
    small = run_to_completion(best_of_n(tiny_lm, length_reward, RunConfig(**{**cfg.__dict__, "n": 3})))
    assert [c.text for c in small.candidates] == [c.text for c in big.candidates[:3]]
    assert [c.score for c in small.candidates] == [c.score for c in big.candidates[:3]]


def test_reference_style_reprefills_and_charges_it(tiny_lm, length_reward):
    cfg = RunConfig(prompt="Write a haiku about the sea.", n=8, alpha=0.5, max_new_tokens=12, budget=380,
                    decision="interval", interval=4, progress_every=0)
    fast = run_to_completion(speculative_rejection(tiny_lm, length_reward, cfg))
    ref = run_to_completion(speculative_rejection_reference_style(tiny_lm, length_reward, cfg))
    prompt_len = len(tiny_lm.render(cfg.prompt))
    assert fast.rounds >= 1 and ref.rounds >= 1
    assert fast.ledger.prompt_tokens == prompt_len
    # every decision re-prefills the survivors: at least prompt + decided tokens for each kept row
    assert ref.ledger.prompt_tokens > prompt_len * 2
    # FLOPs (core.cost.FlopModel): every token, re-prefilled ones included, through the non-embedding weights, and
    # attention over at most the prompt and the whole answer
    from specrej.core.cost import flop_model_of

    fm = flop_model_of(tiny_lm)
    tokens = ref.ledger.prompt_tokens + ref.ledger.generated_tokens
    assert fm.tokens(tokens) < ref.ledger.generator_flops <= fm.tokens(tokens, tokens * (prompt_len + cfg.max_new_tokens))
    assert ref.ledger.peak_kv_slots <= cfg.budget
    assert sum(c.status == "finished" for c in ref.candidates) >= 1


def test_accelerate_launch_shards_prompts_over_two_processes(tiny_lm_dir, tiny_reward_dir, prompt_file, tmp_path):
    # accelerate is a requirement: its launcher runs from this interpreter (never skipped for PATH)
    out = tmp_path / "dist"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "specrej.bench",
           "--no-engine", "--threads", "1", *_tiny_args(tiny_lm_dir, tiny_reward_dir, prompt_file, out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    saved = json.loads((out / "bench.json").read_text())
    assert saved["meta"]["processes"] == 2
    assert [r["id"] for r in saved["prompts"]] == ["a", "b"]     # one prompt each, gathered in order
    assert "Best-of-8" in proc.stdout
    # the same numbers as one process computes (coupled randomness does not depend on the shard)
    single = main(_tiny_args(tiny_lm_dir, tiny_reward_dir, prompt_file, tmp_path / "one")
                  + ["--no-engine", "--threads", str(torch.get_num_threads())])
    for a, b in zip(saved["protocol"]["sr"], single["protocol"]["sr"]):
        assert a["improvement"] == pytest.approx(b["improvement"])
    for a, b in zip(saved["prompts"], single["prompts"]):
        assert a["bon"]["scores"] == pytest.approx(b["bon"]["scores"])


def test_auto_threads_leaves_the_busy_cores_alone(monkeypatch):
    from specrej.bench.run import auto_threads

    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert auto_threads(1, busy=0.1) == 2          # quiet: every core
    assert auto_threads(1, busy=1.2) == 1          # one core busy elsewhere
    assert auto_threads(2, busy=0.0) == 1          # two processes share the cores
    assert auto_threads(1, busy=5.0) == 1          # never fewer than one
