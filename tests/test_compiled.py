"""The compiled decoding step (specrej/engine/compiled.py): the same model as the eager forward, row-wise exact,
switchable (the GPU check's CPU dry run: tests/test_gpu_check.py)."""
from __future__ import annotations

import copy
import logging

import pytest
import torch

from specrej.engine import compiled, packed
from specrej import load_generator
from specrej.backends.hf import Engine, Sampling, next_logits

SAMPLED = Sampling(0.9, 0.95, 40)
pytestmark = pytest.mark.usefixtures("compiled_on")   # the suite decodes eagerly elsewhere (conftest)


@pytest.fixture(scope="module")
def lm32(tiny_lm_dir):
    return load_generator(tiny_lm_dir, dtype="fp32")


def decode(lm, ids, *, n_total=12, max_new=40, prune_at=0, keep=None, prompt="Explain how a rainbow forms."):
    eng = Engine(lm, lm.render(prompt), sampling=SAMPLED, seed=1, n_total=n_total, max_new_tokens=max_new)
    rows, out, steps = eng.start(ids), {}, 0
    while len(rows):
        out.update({d.cand: d.tokens for d in rows.step()})
        steps += 1
        if steps == prune_at:
            rows.keep(keep)
    return out, eng.step_kind


def test_the_compiled_step_computes_the_models_logits(lm32, device):
    """Logits of several steps (past one buffer chunk, so the buffers grow) against transformers' own forward."""
    ids = lm32.render("Give me three tips for staying healthy.")
    eng = Engine(lm32, ids, sampling=SAMPLED, seed=0, n_total=3, max_new_tokens=100)
    assert eng.step_kind == "compiled"
    rows = eng.start([0, 1, 2])
    toks = torch.tensor([[5, 9, 17]] * (compiled.CHUNK + 3), device=device).t()   # [rows, steps]
    with torch.inference_mode():
        got = torch.stack([rows.cache.feed(toks[:, i]) for i in range(toks.shape[1])], 1)
        full = torch.cat([torch.tensor([ids] * 3, device=device), toks], 1)
        ref = lm32.model(input_ids=full).logits[:, len(ids):].float()
    assert rows.cache.own.shape[4] == 2 * compiled.CHUNK
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)


def assert_coupled(lm):
    """The same tokens whatever the batch, after a prune, and alone; on the compiled step."""
    everyone, kind = decode(lm, list(range(12)))
    assert kind == "compiled"
    for batch in ([0, 1, 2, 3], list(range(4, 12)), [10], [2, 11, 6]):
        assert decode(lm, batch)[0] == {c: everyone[c] for c in batch}, (lm.model.dtype, batch)
    pruned, _ = decode(lm, list(range(12)), prune_at=6, keep=[1, 4, 9])
    assert pruned == {c: everyone[c] for c in (1, 4, 9)}
    alone, _ = decode(lm, list(range(12)), prune_at=3, keep=[7])      # a lone row is never run alone
    assert alone == {7: everyone[7]}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_a_candidate_writes_the_same_tokens_in_any_batch_when_compiled(tiny_lm_dir, dtype):
    """Coupling on the compiled step, in both dtypes, on whatever CPU runs the test: bf16 linears run prepacked
    in bf16 where this CPU's oneDNN takes bf16 (AVX-512, AMX), in fp32 otherwise (AVX2 only), and the step says
    which."""
    lm = load_generator(tiny_lm_dir, dtype=dtype)
    assert_coupled(lm)
    step = compiled.step_for(lm.model)
    refused = packed.prepack_refused(torch.bfloat16) if dtype == "bf16" else None
    assert step.linears.startswith("oneDNN fp32" if dtype == "fp32" or refused else "oneDNN bf16")
    assert ("cannot prepack bf16" in step.linears) == bool(refused), step.linears


def test_on_a_cpu_that_cannot_prepack_bf16_the_step_compiles_with_fp32_linears(tiny_lm_dir, monkeypatch, caplog):
    """A CPU without AVX-512 (oneDNN's bf16 prepacking refused, as a Zen 3 EPYC refuses it; the probe patched):
    the bf16 model still decodes on the compiled step, coupled, its linears in fp32, and the log says why."""
    reason = "mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or avx512bw"
    real = packed.prepack_refused
    monkeypatch.setattr(compiled, "prepack_refused", lambda dt: reason if dt == torch.bfloat16 else real(dt))
    lm = load_generator(tiny_lm_dir, dtype="bf16")
    with caplog.at_level(logging.WARNING, "specrej.engine.compiled"):
        assert_coupled(lm)
    step = compiled.step_for(lm.model)
    assert step.linears.startswith("oneDNN fp32") and reason in step.linears
    assert "linears run in fp32" in caplog.text and "decoding eagerly" not in caplog.text
    assert {v[3] for k, v in compiled._WEIGHTS.items() if k in step._keys} == {torch.float32}
    # the same model: its logits match transformers' own bf16 forward to bf16's precision
    ids = lm.render("Explain how a rainbow forms.")
    eng = Engine(lm, ids, sampling=SAMPLED, seed=0, n_total=2, max_new_tokens=4)
    rows = eng.start([0, 1])
    tok = torch.tensor([5, 9])
    with torch.inference_mode():
        got = rows.cache.feed(tok)
        ref = lm.model(input_ids=torch.cat([torch.tensor([ids] * 2), tok[:, None]], 1)).logits[:, -1].float()
    assert torch.allclose(got, ref, atol=0.15, rtol=0.05), (got - ref).abs().max()


def test_switched_off_or_unsupported_the_engine_decodes_eagerly_and_says_why(tiny_lm_dir, monkeypatch, caplog):
    monkeypatch.setenv(compiled.COMPILE_ENV, "0")
    lm = load_generator(tiny_lm_dir, dtype="fp32")
    model = type(lm.model)(copy.deepcopy(lm.model.config))   # a fresh model object: its step is not decided yet
    with caplog.at_level(logging.WARNING, "specrej.engine.compiled"):
        assert compiled.step_for(model) is None
    assert "decoding eagerly" in caplog.text and "SPECREJ_COMPILE=0" in caplog.text
    monkeypatch.delenv(compiled.COMPILE_ENV)
    model.config.model_type = "gpt2"
    assert compiled.unsupported(model) and "gpt2" in compiled.unsupported(model)
    eng = Engine(lm, lm.render("hi"), sampling=SAMPLED, seed=0, n_total=2, max_new_tokens=3, share_prefix=False)
    assert eng.step_kind == "eager"                        # the prompt copied per row: the eager path


def test_the_eager_fallback_writes_what_the_compiled_step_writes_on_the_tiny_model(lm32):
    """Both paths run the same model; on the tiny model (fp32) no token differs (on larger models the last
    bits of some logits may, which is why recordings name their step)."""
    compiled_out, _ = decode(lm32, list(range(6)))
    compiled.use(lm32.model, None)
    try:
        eager_out, kind = decode(lm32, list(range(6)))
    finally:
        compiled._steps.pop(lm32.model, None)
    assert kind == "eager" and eager_out == compiled_out


@pytest.mark.parametrize("layers, env, want", [(30, None, 3), (2, None, 2), (28, None, 2), (29, None, 1),
                                              (30, "5", 5), (30, "4", 3), (30, "1", 1), (30, "99", 30), (30, "x", 3)])
def test_a_graph_runs_the_largest_even_share_of_layers_up_to_the_setting(monkeypatch, layers, env, want):
    if env is None:
        monkeypatch.delenv(compiled.LAYERS_ENV, raising=False)
    else:
        monkeypatch.setenv(compiled.LAYERS_ENV, env)
    assert compiled.layers_per_graph(layers) == want


def test_one_layer_a_graph_and_two_write_the_same_tokens(lm32, monkeypatch):
    """A run of layers in one graph computes what one graph a layer computes, row by row (the tiny model's two
    layers: one graph of two, or two calls of one)."""
    monkeypatch.setenv(compiled.LAYERS_ENV, "2")
    compiled._steps.pop(lm32.model, None)
    two, kind = decode(lm32, list(range(6)))
    assert kind == "compiled" and compiled.step_for(lm32.model).group == 2
    monkeypatch.setenv(compiled.LAYERS_ENV, "1")
    compiled._steps.pop(lm32.model, None)
    one, _ = decode(lm32, list(range(6)))
    assert compiled.step_for(lm32.model).group == 1 and len(compiled.step_for(lm32.model).groups) == 2
    assert one == two


def test_the_compiled_step_gives_the_hidden_states_st_bon_reads(lm32, device):
    """Every layer's hidden state (ST-BoN's chain of embeddings) from the compiled step == the eager forward's."""
    from specrej.backends.hf import next_logits_hidden
    from specrej.engine.shared_prefix import SharedPrefixCache

    ids = lm32.render("Write a haiku about the sea.")
    eng = Engine(lm32, ids, sampling=SAMPLED, seed=0, n_total=3, max_new_tokens=8, reads=("hidden",))
    assert eng.step_kind == "compiled"
    rows = eng.start([0, 1, 2])
    shared = SharedPrefixCache(eng.prompt_cache, 3)
    tok = torch.tensor([5, 9, 17], device=device)
    with torch.inference_mode():
        for _ in range(3):
            got_logits, got = rows.cache.feed(tok, hidden=True)
            ref_logits, _, ref = next_logits_hidden(lm32, tok[:, None], shared)
            assert got.shape == ref.shape == (3, lm32.model.config.num_hidden_layers + 1, lm32.model.config.hidden_size)
            assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4) and torch.allclose(got_logits, ref_logits, atol=1e-4)
            tok = ref_logits.argmax(-1)
