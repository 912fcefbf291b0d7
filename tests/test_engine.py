"""The engine against a naive reference, and its sampling step."""
from __future__ import annotations

import torch

from specrej.engine import Engine, Sampling, coupled_uniforms, sample


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


def test_greedy_engine_matches_naive_generate(tiny_lm):
    """Engine (KV cache, batched rows, pruning) == plain transformers generate, greedy."""
    ids = tiny_lm.render("Explain how a rainbow forms.")
    eng = Engine(tiny_lm, ids, sampling=Sampling(1.0, 1.0, 1), seed=0, n_total=4, max_new_tokens=12)
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
