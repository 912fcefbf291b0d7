"""The paper's protocol on a tiny model: SR opens with the batch that fills the budget and is read
against the order-statistics Best-of-N curve in FLOPs, decode steps and (modelled) wall time."""
from __future__ import annotations

import pytest
import torch

from specrej import RunConfig
from specrej.bench.protocol import aggregate, measure_pass, opening_batch, run_prompt, summary
from specrej.core.cost import StepCost

PROMPT = "Give me three tips for staying healthy."


@pytest.fixture(scope="module")
def records(tiny_lm, length_reward):
    base = RunConfig(prompt="-", max_new_tokens=24, seed=2, progress_every=0)
    P = len(tiny_lm.render(PROMPT))
    shared = tiny_lm.shares_prefix
    budget = (P + 24 * 6) if shared else 3 * (P + 24)
    rows = [{"id": f"p{i}", "kind": "", "prompt": p} for i, p in enumerate([PROMPT, "Explain how a rainbow forms."])]
    recs = [run_prompt(tiny_lm, length_reward, r, base, n_ref=16, points=[(0.5, 4), (0.8, 4)], budget=budget)
            for r in rows]
    passes = [measure_pass(tiny_lm, RunConfig(prompt=PROMPT, n=16, max_new_tokens=24), rows=b)
              for b in (1, recs[0]["rows_per_pass"])]
    return recs, StepCost.from_passes(passes)


def test_first_batch_fills_the_budget_at_the_first_decision(tiny_lm, records):
    recs, _ = records
    for r in recs:
        for s in r["sr"]:
            assert s["n"] == opening_batch(tiny_lm, r["budget"], r["prompt_tokens"], 4)
            first = s["decisions"][0]["position"]
            assert first >= 4                                  # the first decision comes at T or just after
            one_more = opening_batch(tiny_lm, r["budget"] + r["prompt_tokens"] + 4, r["prompt_tokens"], 4)
            assert one_more > s["n"]                           # one more row would not have fitted at T
            assert s["steps"] >= first
        assert len(r["bon"]["scores"]) == 16


def test_aggregate_reads_every_measure_off_the_curve(tiny_lm, records):
    recs, model = records
    agg = aggregate(recs, gen_params=tiny_lm.n_params, step_model=model)
    assert agg["bon"][-1]["improvement"] == pytest.approx(100.0)
    assert agg["bon"][-1]["rel_steps"] == pytest.approx(1.0)
    for p in agg["sr"]:
        for m in ("flops", "steps", "wall"):
            assert p[f"speedup_{m}"]["value"] > 0
            assert p[f"rel_{m}"] > 0
    rows = summary(agg)
    assert rows[0]["method"] == "bon" and [r["alpha"] for r in rows[1:]] == [0.5, 0.8]
    for r in rows:
        for key in ("method", "alpha", "first_decision", "improvement", "rel_flops", "rel_wall",
                    "speedup_flops", "speedup_steps", "speedup_wall"):
            assert key in r


def test_capped_intervals_refill_and_the_simulator_in_the_aggregate(tiny_lm, records):
    recs, model = records
    agg = aggregate(recs, gen_params=tiny_lm.n_params, step_model=model)
    assert [b["k"] for b in agg["bon"]] == list(range(1, 17))            # the curve on every k
    assert agg["bon_ref"]["steps_refill"] <= agg["bon_ref"]["steps"]
    for p in agg["sr"]:
        assert p["improvement_capped"] <= min(p["improvement"], 100.0) + 1e-9
        lo, hi = p["improvement_ci90"]
        assert lo <= p["improvement"] <= hi
        lo, hi = p["improvement_capped_ci90"]
        assert lo <= p["improvement_capped"] <= hi <= 100.0 + 1e-9
        # SR's steps are the same against either baseline; refilling makes Best-of-N faster, so SR's
        # speed-up against it is never larger
        assert p["speedup_steps_refill"]["value"] <= p["speedup_steps"]["value"] + 1e-9
        assert p["source"] == "run" and p["drift"]["compared"] > 0
    for r in recs:
        for s in r["sr"]:
            if s["n"] <= 16:   # the simulator can replay it from the coupled Best-of-16 run
                assert s["simulator_agrees"], (r["id"], s["alpha"])
            assert s["drift"]["text_differs"] == 0 or tiny_lm.dtype != torch.float32
    rows = summary(agg)
    assert rows[0]["speedup_steps_refill"] == pytest.approx(agg["bon_ref"]["steps_refill"] / agg["bon_ref"]["steps"])


def test_paged_baseline_intervals_oracle_and_fates_in_the_aggregate(tiny_lm, length_reward):
    """Simulated points whose first batch (12 to 14 rows) the coupled Best-of-16 runs hold, so each has its
    oracle ceiling; and Best-of-N's third baseline, the paged KV cache."""
    base = RunConfig(prompt="-", max_new_tokens=24, seed=2, progress_every=0)
    P = len(tiny_lm.render(PROMPT))
    budget = (P + 12 * 4) if tiny_lm.shares_prefix else 12 * (P + 4)
    rows = [{"id": f"p{i}", "kind": "", "prompt": p} for i, p in enumerate([PROMPT, "Explain how a rainbow forms.",
                                                                             "Write a haiku about the sea."])]
    recs = [run_prompt(tiny_lm, length_reward, r, base, n_ref=16, points=[(0.5, 4), (0.8, 4)], budget=budget,
                       live=()) for r in rows]
    agg = aggregate(recs, gen_params=tiny_lm.n_params, step_model=None)
    assert agg["bon_ref"]["steps_paged"] > 0 and agg["bon"][-1]["rel_steps_paged"] == pytest.approx(1.0)
    assert all(r["kv_shared"] == tiny_lm.shares_prefix for r in recs)
    for p in agg["sr"]:
        for m in ("steps", "steps_refill", "steps_paged"):
            ci = p[f"speedup_{m}_ci90"]   # the speed-up at each end of the improvement's interval
            assert ci["low"] <= p[f"speedup_{m}"]["value"] <= ci["high"]
        # the oracle ceiling: the best final reward SR's first batch drew, reached through the same loop
        assert p["source"] == "simulated" and p["n"] <= 16
        assert p["gap_to_oracle"] == pytest.approx(p["oracle_improvement"] - p["improvement"])
        assert p["gap_to_oracle"] >= -1e-9
        counts = p["winner_fate_counts"]
        assert counts["kept"] + counts["pruned"] + counts["never_drawn"] == len(recs)
        assert counts["pruned"] == sum(counts["pruned_at_decision"].values())
        assert counts["kept"] / len(recs) == p["kept_bon_winner"]
        assert [f["id"] for f in p["winner_fates"]] == [r["id"] for r in recs]
    for r in recs:
        final, n_ref = r["bon"]["scores"], r["bon"]["n"]
        for s in r["sr"]:
            assert s["oracle"]["score"] == pytest.approx(max(final[:s["n"]]))
            assert s["oracle"]["score"] >= s["score"] - 1e-9
            fate = s["winner_fate"]
            assert (fate["fate"] == "never_drawn") == (r["bon"]["winner"] >= s["n"])
            assert (fate["fate"] == "kept") == s["kept_bon_winner"]
    rows = summary(agg)
    assert rows[0]["speedup_steps_paged"] == pytest.approx(agg["bon_ref"]["steps_paged"] / agg["bon_ref"]["steps"])
    assert all(len(r["speedup_steps_paged_ci90"]) == 2 for r in rows[1:])


def test_simulated_points_match_the_ones_that_ran(tiny_lm, length_reward):
    """live=(): every point replayed from the coupled run gives what running it gave."""
    base = RunConfig(prompt="-", max_new_tokens=24, seed=2, progress_every=0)
    P = len(tiny_lm.render(PROMPT))
    budget = (P + 12 * 4) if tiny_lm.shares_prefix else 12 * (P + 4)
    row = {"id": "p", "kind": "", "prompt": PROMPT}
    kw = dict(n_ref=16, points=[(0.5, 4), (0.8, 4)], budget=budget)
    ran = run_prompt(tiny_lm, length_reward, row, base, **kw)
    sim = run_prompt(tiny_lm, length_reward, row, base, live=(), **kw)
    for a, b in zip(ran["sr"], sim["sr"]):
        assert a["source"] == "run" and b["source"] == "simulated" and b["wall_s"] is None
        for key in ("winner", "steps", "generated_tokens", "rounds", "kept_bon_winner", "winner_fate", "oracle"):
            assert a[key] == b[key], key
        assert a["score"] == pytest.approx(b["score"])


def test_table_and_figure(tiny_lm, records, tmp_path):
    from specrej.bench.report import paper_png, paper_table

    recs, model = records
    agg = aggregate(recs, gen_params=tiny_lm.n_params, step_model=model)
    meta = {"prompt_set": "t", "model": "tiny", "reward": "variety", "max_new_tokens": 24, "budget": 1, "seed": 2}
    text = paper_table(agg, meta)
    assert "Best-of-16" in text and "SR paper a=0.5 T=4" in text and "MODELLED" in text
    assert "x paged" in text and "oracle" in text and "Best-of-16's winner: kept" in text
    assert paper_png(agg, "t", tmp_path / "f.png") and (tmp_path / "f.png").stat().st_size > 10_000


def test_n_auto_fills_the_budget_at_the_first_decision(tiny_lm, length_reward):
    from specrej import best_of_n, run_to_completion, speculative_rejection
    from specrej.arms import parse_arm
    from specrej.core.budget import BudgetError
    from specrej.core.events import Round

    P = len(tiny_lm.render(PROMPT))
    shared = tiny_lm.shares_prefix
    budget = P + 20 * 6 if shared else 20 * (P + 6)
    cfg = RunConfig(prompt=PROMPT, n="auto", first_decision=6, alpha=0.5, max_new_tokens=24, budget=budget,
                    progress_every=0)
    events = list(speculative_rejection(tiny_lm, length_reward, cfg))
    assert len(events[-1].candidates) == 20                       # 20 rows fill the budget at 6 tokens
    assert next(e for e in events if isinstance(e, Round)).position == 6
    with pytest.raises(ValueError, match="bon:n=128"):
        run_to_completion(best_of_n(tiny_lm, length_reward, cfg))
    with pytest.raises(BudgetError, match="first_decision"):
        run_to_completion(speculative_rejection(tiny_lm, length_reward, RunConfig(
            prompt=PROMPT, n="auto", first_decision=6, max_new_tokens=24, budget=P + 2)))
    arm = parse_arm("sr:alpha=0.5,n=auto,first_decision=32")
    assert dict(arm.overrides) == {"alpha": 0.5, "n": "auto", "first_decision": 32}


def test_a_coupled_run_larger_than_n_ref_replays_a_first_batch_beyond_it(tiny_lm, length_reward):
    """Best-of-N_ref is the run's first n_ref candidates; a first batch larger than N_ref (but within the
    run) is replayed from the run instead of run for real (how T = 8's ~250 rows replay from Best-of-256)."""
    from specrej.bench.coupled import PrefixScorer, collect
    from specrej.bench.simulate import simulate_sr

    base = RunConfig(prompt="-", max_new_tokens=24, seed=2, progress_every=0)
    P = len(tiny_lm.render(PROMPT))
    budget = (P + 12 * 4) if tiny_lm.shares_prefix else 12 * (P + 4)   # 12 rows fill it at 4 tokens
    big = collect(tiny_lm, RunConfig(prompt=PROMPT, n=16, max_new_tokens=24, seed=2))
    rec = run_prompt(tiny_lm, length_reward, {"id": "p", "kind": "", "prompt": PROMPT}, base, n_ref=8,
                     points=[(0.5, 4)], budget=budget, live=(), coupled=big)
    final = PrefixScorer(tiny_lm, length_reward, big).final()
    assert rec["bon"]["n"] == 8 and rec["bon"]["scores"] == final[:8] and len(rec["bon"]["tokens"]) == 8
    assert rec["bon"]["winner"] == max(range(8), key=lambda c: (final[c], -c))
    (entry,) = rec["sr"]
    assert entry["n"] == opening_batch(tiny_lm, budget, P, 4) > 8 and entry["source"] == "simulated"
    sim = simulate_sr(big, PrefixScorer(tiny_lm, length_reward, big), budget=budget, alpha=0.5, n0=entry["n"],
                      max_new_tokens=24, shared=tiny_lm.shares_prefix, n_ref=8)
    assert (entry["winner"], entry["steps"], entry["winner_fate"]) == (sim.winner, sim.steps, sim.bon_winner_fate.to_dict())
    assert entry["oracle"] is not None
    with pytest.raises(ValueError, match="fewer than n_ref"):
        run_prompt(tiny_lm, length_reward, {"id": "p", "prompt": PROMPT}, base, n_ref=32, points=[(0.5, 4)],
                   budget=budget, live=(), coupled=big)


def _gpu(seconds_at) -> "GpuStep":
    from specrej.analysis.gpu_steps import GpuStep

    rows = (1, 8, 32, 128)
    return GpuStep("NVIDIA H200", "tiny", 1, "bfloat16", "cudagraphs", "2026-12-03", "2.11.0",
                   StepCost(rows, tuple(seconds_at(r) for r in rows)))


def test_the_bench_prices_its_decode_steps_on_a_measured_gpu_step(tiny_lm, records):
    """With a GPU step (``specrej.analysis.gpu_steps``), each point's steps are priced at it: a flat price gives the
    decode-step speed-up; a price linear in rows gives each point's time worked by hand from its rows per step,
    which sum to its generated tokens."""
    from specrej.bench.protocol import unrle
    from specrej.bench.report import paper_table

    recs, model = records
    assert aggregate(recs, gen_params=tiny_lm.n_params, step_model=model)["gpu"] is None
    flat = aggregate(recs, gen_params=tiny_lm.n_params, step_model=model, gpu=_gpu(lambda r: 0.004))
    for p in flat["sr"]:
        assert p["speedup_gpu"]["value"] == pytest.approx(p["speedup_steps"]["value"])
        assert p["speedup_gpu"]["lower_bound"] == p["speedup_steps"]["lower_bound"]
    a, b = 0.002, 0.0005
    lin = aggregate(recs, gen_params=tiny_lm.n_params, step_model=model, gpu=_gpu(lambda r: a + b * r))
    for j, p in enumerate(lin["sr"]):
        profiles = [unrle(r["sr"][j]["profile"]) for r in recs]
        assert [sum(x) for x in profiles] == [r["sr"][j]["generated_tokens"] for r in recs]
        assert [len(x) for x in profiles] == [r["sr"][j]["steps"] for r in recs]
        assert p["gpu_s"] == pytest.approx(sum(a * len(x) + b * sum(x) for x in profiles))
    assert lin["gpu"]["on"] == "on an H200" and "CUDA graphs" in lin["gpu"]["measured"]
    rows = summary(lin)
    assert rows[0]["speedup_gpu"] == 1.0 and all(r["speedup_gpu"] > 0 for r in rows[1:])
    text = paper_table(lin, {"prompt_set": "t", "model": "tiny", "reward": "len", "max_new_tokens": 24,
                             "budget": recs[0]["budget"], "seed": 2})
    assert "Priced on an H200, measured" in text
    assert f"{lin['sr'][0]['speedup_gpu']['value']:.2f}x" in text
