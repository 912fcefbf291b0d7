"""The engine against a naive reference, and its sampling step; the shared prompt cache
against the copied one; coupling in the dtype the engine picks."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from transformers import DynamicCache

from specrej import load_generator
from specrej.backends.hf import Engine, Sampling, coupled_uniforms, next_logits, sample
from specrej.engine.shared_prefix import SharedPrefixCache
from specrej.core.budget import KVBudget
from conftest import cache_slots

GREEDY, SAMPLED = Sampling(1.0, 1.0, 1), Sampling(0.9, 0.95, 40)
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
PROMPTS = ["Explain how a rainbow forms.", "Give me three tips for staying healthy.", "hi"]


@pytest.fixture(scope="module")
def lm32(tiny_lm_dir):
    """The tiny model in fp32, where shared and copied prompt caches must write identical tokens."""
    return load_generator(tiny_lm_dir, dtype="fp32")


def decode(lm, prompt: str, ids: list[int], sampling: Sampling, *, share: bool, n_total: int = 8,
           max_new: int = 16, seed: int = 0, prune_at: int = 0, keep: list[int] | None = None) -> dict[int, list[int]]:
    """Decode candidates ``ids`` in one batch (pruning to positions ``keep`` after ``prune_at`` steps);
    return each finished candidate's tokens."""
    eng = Engine(lm, lm.render(prompt), sampling=sampling, seed=seed, n_total=n_total, max_new_tokens=max_new,
                 share_prefix=share)
    rows, out, steps = eng.start(ids), {}, 0
    while len(rows):
        out.update({d.cand: d.tokens for d in rows.step()})
        steps += 1
        if steps == prune_at:
            rows.keep(keep)
    return out


def test_sampling_top_k_one_is_greedy():
    logits = torch.randn(5, 40)
    u = torch.rand(5, dtype=torch.float64)
    assert torch.equal(sample(logits, u, Sampling(1.0, 1.0, 1)), logits.argmax(-1))
    assert torch.equal(sample(logits, u, Sampling(1.0, 1e-6, 0)), logits.argmax(-1))


def test_sampling_follows_the_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]])).expand(20000, 3)
    u = torch.rand(20000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(sample(logits, u, Sampling(1.0, 1.0, 0)), minlength=3).float() / 20000
    assert torch.allclose(counts, torch.tensor([0.5, 0.3, 0.2]), atol=0.02)
    # top_p=0.6 keeps {0.5, 0.3}, renormalised
    counts = torch.bincount(sample(logits, u, Sampling(1.0, 0.6, 0)), minlength=3).float() / 20000
    assert counts[2] == 0 and abs(counts[0] - 0.625) < 0.02


def test_coupled_uniforms_depend_only_on_seed_candidate_position():
    a = coupled_uniforms(7, 3, torch.tensor([0, 5, 9]), 10)
    b = coupled_uniforms(7, 3, torch.tensor([9, 5]), 10)
    assert a[2] == b[0] and a[1] == b[1]
    assert not torch.equal(a, coupled_uniforms(7, 4, torch.tensor([0, 5, 9]), 10))
    assert not torch.equal(a, coupled_uniforms(8, 3, torch.tensor([0, 5, 9]), 10))


@pytest.mark.parametrize("share", [True, False])
def test_greedy_engine_matches_naive_generate(lm32, share):
    """Engine (KV cache shared or copied, batched rows, pruning) == plain transformers generate, greedy."""
    tiny_lm = lm32
    ids = tiny_lm.render("Explain how a rainbow forms.")
    eng = Engine(tiny_lm, ids, sampling=GREEDY, seed=0, n_total=4, max_new_tokens=12, share_prefix=share)
    rows = eng.start([0, 1, 2, 3])
    rows.step()
    rows.step()
    rows.keep([1, 3])  # prune two rows mid-way: the survivors must not notice
    while len(rows):
        done = rows.step()
    with torch.inference_mode():
        ref = tiny_lm.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                     use_cache=False, eos_token_id=sorted(tiny_lm.eos_ids), pad_token_id=0)
    expected = ref[0, len(ids):].tolist()
    assert [d.tokens for d in done] == [expected, expected]
    assert {d.cand for d in done} == {1, 3}


def test_rows_release_on_empty_keep(tiny_lm):
    ids = tiny_lm.render("hi")
    rows = Engine(tiny_lm, ids, sampling=Sampling(), seed=0, n_total=3, max_new_tokens=5).start([0, 1, 2])
    rows.step()
    rows.keep([])
    assert len(rows) == 0 and rows.cache is None


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("prompt", PROMPTS[:2])
def test_shared_prompt_cache_writes_the_same_tokens_as_copies(lm32, sampling, prompt):
    """fp32: storing the prompt's cache once changes nothing, before and after a prune."""
    assert lm32.shares_prefix
    kw = dict(ids=list(range(6)), max_new=20, prune_at=5, keep=[0, 2, 3, 5])
    shared = decode(lm32, prompt, sampling=sampling, share=True, **kw)
    copied = decode(lm32, prompt, sampling=sampling, share=False, **kw)
    assert shared == copied and sorted(shared) == [0, 2, 3, 5]


def test_shared_prefix_attention_matches_the_plain_path(lm32):
    """One forward pass of several new tokens per row (causal among them) on the shared cache ==
    the same pass on per-row copies through transformers' own sdpa path."""
    model, p_ids = lm32.model, lm32.render(PROMPTS[0])
    with torch.inference_mode():
        dev = lm32.device
        _, prefix = next_logits(lm32, torch.tensor([p_ids], device=dev), None)
        rows = 3
        new = torch.tensor([[5, 9, 17], [40, 41, 42], [7, 7, 8]], device=dev)     # [rows, 3 new tokens]
        shared = SharedPrefixCache(prefix, rows)
        got = model(input_ids=new[:, :1], past_key_values=shared, shared_prefix=shared).logits
        got2 = model(input_ids=new[:, 1:], past_key_values=shared, shared_prefix=shared).logits
        plain = DynamicCache(config=model.config)
        full = torch.tensor([p_ids] * rows, device=dev)
        ref = model(input_ids=torch.cat([full, new], 1), past_key_values=plain).logits[:, len(p_ids):]
    assert shared.get_seq_length() == len(p_ids) + 3 and shared.own_length() == 3
    assert torch.allclose(torch.cat([got, got2], 1), ref, atol=1e-5, rtol=1e-4)


def test_rows_report_the_lengths_their_cache_holds_and_the_budget_counts_the_shared_prompt_once(lm32):
    p = len(lm32.render(PROMPTS[0]))
    for share, per_row_prompt in ((True, 0), (False, p)):
        eng = Engine(lm32, lm32.render(PROMPTS[0]), sampling=SAMPLED, seed=0, n_total=5, max_new_tokens=4,
                     share_prefix=share)
        kv = KVBudget(10_000, p, share)
        rows = eng.start([0, 1, 2, 3, 4])
        assert rows.lengths() == [0] * 5 and kv.held(rows.lengths()) == cache_slots(rows) == (p - per_row_prompt) + 5 * per_row_prompt
        assert kv.row_slots_after_step(0, rows.generated, 4) == per_row_prompt + 1
        rows.step()
        rows.step()
        rows.keep([1, 3])
        assert rows.lengths() == [2, 2] and kv.held(rows.lengths()) == cache_slots(rows)
        assert cache_slots(rows) == (p - per_row_prompt) + 2 * (per_row_prompt + 2)
        assert kv.row_slots_after_step(2, rows.generated, 4) == per_row_prompt + 3
        rows.step()   # the 4th (last) token is never fed back: it takes no slot
        assert kv.row_slots_after_step(3, rows.generated, 4) == per_row_prompt + 3
        assert eng.engine_steps == 3


def test_models_without_the_shared_attention_refuse_to_share(lm32):
    copied = dataclasses.replace(lm32, shares_prefix=False)
    eng = Engine(copied, copied.render("hi"), sampling=SAMPLED, seed=0, n_total=2, max_new_tokens=3)
    assert eng.kv_sharing == "copied" and not isinstance(eng.start([0, 1]).cache, SharedPrefixCache)
    with pytest.raises(ValueError, match="cannot share"):
        Engine(copied, copied.render("hi"), sampling=SAMPLED, seed=0, n_total=2, max_new_tokens=3, share_prefix=True)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_a_candidate_writes_the_same_tokens_in_any_batch(tiny_lm, prompt):
    """Coupling, in the dtype the engine picks (bf16 where the CPU has it): candidate c's tokens do
    not depend on the batch's size or on which other candidates share it."""
    n = 12
    everyone = decode(tiny_lm, prompt, list(range(n)), SAMPLED, share=tiny_lm.shares_prefix, n_total=n, max_new=24)
    for batch in ([0, 1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], [1, 3, 5, 7, 9, 11], [10], [2, 11, 6]):
        part = decode(tiny_lm, prompt, batch, SAMPLED, share=tiny_lm.shares_prefix, n_total=n, max_new=24)
        assert part == {c: everyone[c] for c in batch}, f"{tiny_lm.dtype}: batch {batch} diverged"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_rows_attention_and_statistics_do_not_depend_on_its_place_in_the_batch(threads):
    """The shared-prefix attention and the token statistics at the embedded model's shapes (9 heads,
    3 KV heads, d 64, 49,152-token vocabulary): the last row of a batch of 125, 33 or 1 rows gets
    the same bits as in a batch of 128. CPU kernels round a vectorised loop's tail (torch.logaddexp's
    log1p) and a lone row's reductions (split across threads) differently; the simulator's replay of a
    coupled run relies on these bits (a near-tie in a rule's ranking flipped once on an AVX-512 CPU)."""
    from specrej.backends.hf import Rows
    from specrej.engine.shared_prefix import SharedPrefixLayer, shared_prefix_attention

    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        layer = SharedPrefixLayer(torch.randn(1, 3, 42, 64), torch.randn(1, 3, 42, 64), rows=128)
        cache = SharedPrefixCache.__new__(SharedPrefixCache)
        cache.layers = [layer]
        module = type("Attn", (), {"layer_idx": 0})()
        q, k, v = torch.randn(128, 9, 1, 64), torch.randn(128, 3, 17, 64), torch.randn(128, 3, 17, 64)

        def attend(n):
            return shared_prefix_attention(module, q[:n], k[:n], v[:n], None, 0.125, shared_prefix=cache)[0]

        def stats(n, logits, tok):
            rows = type("R", (), {})()
            rows.logits, rows.engine = logits[:n].contiguous(), type("E", (), {"log_vocab": math.log(49152)})()
            rows.lp_sum = rows.sc_sum = torch.zeros(n, dtype=torch.float64)
            Rows._accumulate_stats(rows, tok[:n])
            return rows.lp_sum, rows.sc_sum

        full = attend(128)
        logits, tok = torch.randn(128, 49152) * 4, torch.randint(0, 49152, (128,))
        full_stats = stats(128, logits, tok)
        for n in (125, 33, 2, 1):
            assert torch.equal(attend(n), full[:n]), n
            lp, sc = stats(n, logits, tok)
            assert torch.equal(lp, full_stats[0][:n]) and torch.equal(sc, full_stats[1][:n]), n
    finally:
        torch.set_num_threads(old)


@cuda
def test_on_cuda_the_engine_runs_bf16_with_the_prompt_shared(tiny_lm):
    assert tiny_lm.device.type == "cuda" and tiny_lm.dtype == torch.bfloat16 and tiny_lm.shares_prefix
    out = decode(tiny_lm, PROMPTS[0], [0, 1, 2, 3], SAMPLED, share=True, n_total=4, max_new=8, prune_at=3, keep=[1, 2])
    assert sorted(out) == [1, 2] and all(0 < len(t) <= 8 for t in out.values())


def test_the_kv_cache_goes_by_the_name_the_installed_transformers_takes():
    """Issue 51 (6): transformers 5.24 renamed a model's KV-cache argument and output field from past_key_values to
    cache, and warned on every run that the engine used the old name. The engine passes and reads whichever name the
    model's forward takes (the lock's 5.19 the old, 5.25 the new: scripts/wheel_check.sh races on the newest)."""
    from dataclasses import dataclass

    from specrej.engine.kvcache import cache_arg, cache_of, with_cache

    class New:
        def forward(self, input_ids=None, cache=None, use_cache=None):
            pass

    class Old:
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            pass

    assert with_cache(New(), "kv") == {"cache": "kv"} and with_cache(Old(), "kv") == {"past_key_values": "kv"}
    assert cache_arg(New) == "cache"

    @dataclass
    class OutNew:
        cache: object = None

        @property
        def past_key_values(self):
            raise AssertionError("the deprecated alias was read")

    @dataclass
    class OutOld:
        past_key_values: object = None

    assert cache_of(OutNew(cache="kv")) == "kv" and cache_of(OutOld(past_key_values="kv")) == "kv"
