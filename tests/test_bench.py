"""The benchmark: its accounting and aggregation on hand-made numbers, then tiny end-to-end runs
(in-process, and sharded over two processes by ``accelerate launch``)."""
from __future__ import annotations

import json
import math
import os
import sys
import subprocess
from pathlib import Path

import pytest
import torch

from specrej import Candidate, Ledger, Round, RunConfig, best_of_n, run_to_completion, speculative_rejection
from specrej.bench import aggregate, bok_compute, load_prompts, main
from specrej.compare import decision_rank, live_at_decision
from specrej.bench.reference import speculative_rejection_reference_style

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ hand-made numbers
def _bon(scores, tokens=(10, 10, 10, 10), prompt_tokens=0, gen_flops=400.0, reward_flops=0.0, wall=4.0):
    led = {"prompt_tokens": prompt_tokens, "generated_tokens": sum(tokens), "generator_flops": gen_flops,
           "reward_flops": reward_flops, "flops": gen_flops + reward_flops, "wall_s": wall}
    return {"scores": list(scores), "tokens": list(tokens), "winner": max(range(len(scores)), key=scores.__getitem__),
            "ledger": led}


def _sr(alpha, score, flops, wall, winner=0, kept=True, rhos=(0.5,)):
    return {"alpha": alpha, "score": score, "winner": winner, "rounds": len(rhos), "kept_bon_winner": kept,
            "ledger": {"flops": flops, "wall_s": wall},
            "decisions": [{"index": i, "position": 8 * (i + 1), "n_live": 4, "n_kept": 2, "forced": False,
                           "spearman": r} for i, r in enumerate(rhos)]}


def test_best_of_k_compute_is_a_prefix_of_the_run():
    # 2 x params = 1000 FLOPs per token; 5 prompt tokens; candidates wrote 10, 20, 30, 40 tokens
    bon = _bon([0, 1, 2, 3], tokens=(10, 20, 30, 40), prompt_tokens=5, gen_flops=1000.0 * 105, reward_flops=500.0,
               wall=10.0)
    c2 = bok_compute(bon, 2)
    assert c2["generated_tokens"] == 30
    assert c2["flops"] == pytest.approx(1000 * (5 + 30) + 500 * 30 / 100)      # prompt once + their tokens + share
    assert c2["wall_s"] == pytest.approx(10.0 * c2["flops"] / (105_000 + 500))  # wall by share of FLOPs
    full = bok_compute(bon, 4)
    assert full == {"flops": 105_500.0, "wall_s": 10.0, "generated_tokens": 100}  # the run's own ledger
    for bad in (0, 5):
        with pytest.raises(ValueError):
            bok_compute(bon, bad)


def test_aggregate_curve_interpolated_speedup_and_lower_bound():
    records = [
        {"bon": _bon([0, 1, 2, 3]), "sr": [_sr(0.5, 2.0, 200.0, 2.0, winner=2, kept=False, rhos=(0.5, 1.0)),
                                             _sr(0.9, 3.3, 100.0, 1.0, winner=3, rhos=(None,))]},
        {"bon": _bon([3, 2, 1, 0]), "sr": [_sr(0.5, 3.0, 200.0, 2.0, winner=0, rhos=(-0.5,)),
                                             _sr(0.9, 3.0, 100.0, 1.0, winner=0, rhos=(0.25,))]},
    ]
    agg = aggregate(records, [1, 2, 4], [0.5, 0.9])
    bon = {b["n"]: b for b in agg["bon"]}
    # Best-of-1: gains (0-3)/3 and 0 -> 100 * (1 - 0.5); Best-of-2: -2/3 and 0; Best-of-4 is the reference
    assert bon[1]["improvement_score"] == pytest.approx(50.0)
    assert bon[2]["improvement_score"] == pytest.approx(100 * (1 - 1 / 3))
    assert bon[4]["improvement_score"] == pytest.approx(100.0)
    assert [bon[k]["relative_flops"] for k in (1, 2, 4)] == pytest.approx([0.25, 0.5, 1.0])
    assert [bon[k]["relative_wall"] for k in (1, 2, 4)] == pytest.approx([0.25, 0.5, 1.0])
    assert bon[4]["method"].endswith("(ref)")

    sr = {s["alpha"]: s for s in agg["sr"]}
    a = sr[0.5]   # gains -1/3 and 0 -> 83.33, halfway (in score) between Best-of-2 and Best-of-4
    assert a["improvement_score"] == pytest.approx(100 * (1 - 1 / 6))
    assert a["relative_flops"] == pytest.approx(0.5)
    # log-interpolation: Best-of-N needs sqrt(0.5 * 1.0) of the reference's compute; SR spends 0.5
    assert a["speedup_flops"] == {"value": pytest.approx(math.sqrt(0.5) / 0.5), "lower_bound": False}
    assert a["speedup_wall"]["value"] == pytest.approx(math.sqrt(0.5) / 0.5)
    assert a["kept_bon_winner"] == 0.5 and a["same_winner"] == 0.5 and a["mean_rounds"] == 1.5
    assert [d["mean_spearman"] for d in a["rank_correlation"]] == pytest.approx([0.0, 1.0])
    assert [d["prompts"] for d in a["rank_correlation"]] == [2, 1]

    b = sr[0.9]   # beats the largest N on prompt 1: the speed-up is only a lower bound
    assert b["improvement_score"] == pytest.approx(105.0)
    assert b["speedup_flops"] == {"value": pytest.approx(1.0 / 0.25), "lower_bound": True}
    assert b["rank_correlation"][0]["mean_spearman"] == pytest.approx(0.25)   # None is left out

    with pytest.raises(ValueError):
        aggregate([], [1, 2], [0.5])


def _cand(i, status, score, round_pruned=None, finish=None):
    return Candidate(i, "", 3, status, score, ((3, score),), round_pruned, finish)


def test_decision_correlation_uses_only_rows_live_at_that_decision():
    cands = (
        _cand(0, "kept", 0.9), _cand(1, "pruned", 0.1, round_pruned=1), _cand(2, "kept", 0.5),
        _cand(3, "pruned", 0.3, round_pruned=0),          # pruned earlier: not part of this decision
        _cand(4, "finished", 0.8, finish="eos"),          # finished: its score is final, not partial
        _cand(5, "pruned", 0.95, round_pruned=1, finish="eos"),
    )
    r = Round("sr", 1, 16, cands, 0.5, 3, 2, False, Ledger())
    assert [c.id for c in live_at_decision(r)] == [0, 1, 2]
    final = dict(enumerate([1.0, 0.0, 0.5, 9.0, 9.0, 9.0]))
    out = decision_rank(r, final)
    assert out.spearman == pytest.approx(1.0) and out.n_live == 3 and out.position == 16
    assert decision_rank(r, dict(enumerate([0.0, 1.0, 0.5, 0, 0, 0]))).spearman == pytest.approx(-1.0)
    assert decision_rank(r, dict(enumerate([0.5, 0.0, 1.0, 0, 0, 0]))).spearman == pytest.approx(0.5)
    assert decision_rank(r, {0: 1.0, 1: 0.0}).n_live == 2   # only candidates the baseline finished


def test_load_prompts_by_name_and_from_files(tmp_path):
    quick = load_prompts("quick")
    assert len(quick) == 6 and all(set(r) == {"id", "kind", "prompt"} for r in quick)
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
    # budget 100: the ~40-token prompt once, then 8 rows fill it after a handful of tokens, so
    # Speculative Rejection decides
    return ["--model", tiny_lm_dir, "--reward", tiny_reward_dir, "--prompts", prompt_file, "--ns", "2,4,8",
            "--alphas", "0.5,0.75", "--max-new-tokens", "12", "--budget", "100", "--out", str(out)]


def test_bench_end_to_end_on_tiny_models(tiny_lm_dir, tiny_reward_dir, prompt_file, tmp_path, capsys):
    args = _tiny_args(tiny_lm_dir, tiny_reward_dir, prompt_file, tmp_path) + [
        "--threads", str(torch.get_num_threads()), "--engine-rows", "4", "--engine-length", "6",
        "--sweep", "1,4", "--repeats", "1"]
    result = main(args)
    printed = capsys.readouterr().out
    assert "Best-of-8 (ref)" in printed and "SR alpha=0.5" in printed and "engine / generate" in printed
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["efficiency"] == json.loads(json.dumps(result["efficiency"]))
    assert (tmp_path / "bench.html").stat().st_size > 10_000
    assert (tmp_path / "bench.png").read_bytes()[:4] == b"\x89PNG"  # matplotlib is in requirements.txt

    eff = result["efficiency"]
    assert [b["n"] for b in eff["bon"]] == [2, 4, 8] and eff["bon"][-1]["improvement_score"] == pytest.approx(100)
    assert [b["relative_flops"] for b in eff["bon"]] == sorted(b["relative_flops"] for b in eff["bon"])
    for rec in result["prompts"]:
        assert len(rec["bon"]["scores"]) == 8 and rec["bon"]["ledger"]["generated_tokens"] == sum(rec["bon"]["tokens"])
        for sr in rec["sr"]:
            assert sr["decisions"], "the budget must force at least one decision"
            if sr["kept_bon_winner"]:   # coupled randomness: the same text, so the same final score
                assert sr["score"] == pytest.approx(max(rec["bon"]["scores"]))
            assert sr["score"] <= max(rec["bon"]["scores"]) + 1e-6
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


def test_best_of_k_is_the_prefix_of_best_of_n(tiny_lm, length_reward):
    """What the curve relies on: a Best-of-k run writes candidates 0..k-1 of a Best-of-N run."""
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
    assert ref.ledger.generator_flops == 2.0 * tiny_lm.n_params * (ref.ledger.prompt_tokens + ref.ledger.generated_tokens)
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
    assert "Best-of-8 (ref)" in proc.stdout
    # the same numbers as one process computes (coupled randomness does not depend on the shard)
    single = main(_tiny_args(tiny_lm_dir, tiny_reward_dir, prompt_file, tmp_path / "one")
                  + ["--no-engine", "--threads", str(torch.get_num_threads())])
    for a, b in zip(saved["efficiency"]["sr"], single["efficiency"]["sr"]):
        assert a["improvement_score"] == pytest.approx(b["improvement_score"])
    for a, b in zip(saved["prompts"], single["prompts"]):
        assert a["bon"]["scores"] == pytest.approx(b["bon"]["scores"])
