"""The captured step (specrej/engine/captured.py): the whole decoding step (sampling, statistics, every layer) over
buffers made when the rows start, one CUDA graph per row bucket on CUDA. Here on the device of ``device`` (a CPU
unless there is a GPU): on a CPU its body runs uncaptured (``SPECREJ_GRAPH=1``) and must write the tokens the
compiled step's own math writes; on CUDA the captured replay must write what the body writes eagerly."""
from __future__ import annotations

import pytest
import torch

from specrej import load_generator
from specrej.backends.hf import Engine, Sampling
from specrej.engine import captured, compiled

SAMPLED = Sampling(0.9, 0.95, 40)
PROMPT = "Explain how a rainbow forms."


@pytest.fixture(scope="module")
def lm32(tiny_lm_dir):
    return load_generator(tiny_lm_dir, dtype="fp32")


@pytest.fixture
def graph_on(monkeypatch):
    monkeypatch.setenv(captured.GRAPH_ENV, "1")
    yield
    captured._bodies.clear()


def decode(lm, ids, *, prune_at=0, keep=None, max_new=40, n_total=12, stats=False):
    eng = Engine(lm, lm.render(PROMPT), sampling=SAMPLED, seed=1, n_total=n_total, max_new_tokens=max_new)
    rows, out, steps = eng.start(ids), {}, 0
    while len(rows):
        out.update({d.cand: (d.tokens, d.mean_logprob, d.mean_self_certainty) if stats else d.tokens for d in rows.step()})
        steps += 1
        if steps == prune_at:
            rows.keep(keep)
    return out, eng.step_kind


def uncompiled_reference(lm, monkeypatch, ids, **kw):
    """The same rows on the compiled step's math uncompiled (``compiled.Step(compile_=False)``)."""
    monkeypatch.setenv(captured.GRAPH_ENV, "0")
    monkeypatch.setenv(compiled.COMPILE_ENV, "1")
    captured._bodies.clear()
    compiled.use(lm.model, compiled.Step(lm.model, compile_=False))
    try:
        out, kind = decode(lm, ids, **kw)
    finally:
        compiled._steps.pop(lm.model, None)
        monkeypatch.setenv(captured.GRAPH_ENV, "1")
    assert kind == "compiled"
    return out


def test_the_captured_step_writes_the_compiled_steps_tokens_and_statistics(lm32, graph_on, monkeypatch):
    """On the compiled step's row-wise attention (a CPU's; CUDA's matmuls are checked on the logits below)."""
    real = captured.Body
    monkeypatch.setattr(captured, "Body", lambda model: real(model, attention="rowwise"))
    got, kind = decode(lm32, list(range(12)), stats=True)
    assert kind == "captured"
    want = uncompiled_reference(lm32, monkeypatch, list(range(12)), stats=True)
    assert set(got) == set(range(12))
    assert {c: t for c, (t, _, _) in got.items()} == {c: t for c, (t, _, _) in want.items()}
    for c in got:   # the statistics summed on the device as the host path sums them (fp32 terms: lse - mean cancels to ~1e-2)
        assert got[c][1] == pytest.approx(want[c][1], rel=1e-6, abs=1e-6)
        assert got[c][2] == pytest.approx(want[c][2], rel=1e-6, abs=1e-6)


def test_a_candidate_writes_the_same_tokens_in_any_bucket_after_a_prune_and_alone(lm32, graph_on):
    everyone, kind = decode(lm32, list(range(12)))
    assert kind == "captured"
    for batch in ([0, 1, 2, 3], list(range(4, 12)), [10], [2, 11, 6]):   # buckets 4, 8, 2, 4
        assert decode(lm32, batch)[0] == {c: everyone[c] for c in batch}, batch
    assert decode(lm32, list(range(12)), prune_at=6, keep=[9, 1, 4])[0] == {c: everyone[c] for c in (1, 4, 9)}
    assert decode(lm32, list(range(12)), prune_at=3, keep=[7])[0] == {7: everyone[7]}


def test_buffers_too_small_for_the_race_are_laid_out_again_for_the_rows_alive(lm32, graph_on, monkeypatch):
    """Where the device's memory holds fewer positions than the race's longest answer, the buffers hold what fits
    and are laid out again once the rows were pruned: the same tokens, a relayout counted."""
    everyone, _ = decode(lm32, list(range(12)))
    made = []
    real = captured.Graphed.__init__

    def init(self, *a, **kw):
        made.append(self)
        real(self, *a, **kw)

    monkeypatch.setattr(captured.Graphed, "__init__", init)
    monkeypatch.setattr(captured.Graphed, "_fits", lambda self, rows: 5 if rows > 4 else 40)
    got, _ = decode(lm32, list(range(12)), prune_at=4, keep=[3, 8])
    assert got == {3: everyone[3], 8: everyone[8]}
    assert made[0].relayouts == 1 and made[0].T == 40 and made[0].rows == 2


def test_the_prompt_too_long_for_the_buffers_says_so(lm32, graph_on, monkeypatch):
    monkeypatch.setattr(captured.Graphed, "_fits", lambda self, rows: 3)
    with pytest.raises(torch.cuda.OutOfMemoryError, match="do not fit"):
        decode(lm32, list(range(12)))


@pytest.mark.parametrize("attention", ["rowwise", "matmul"])
def test_the_body_computes_the_models_logits(lm32, attention):
    """Both attentions (row-wise: a CPU's; matmuls: CUDA's) against transformers' own forward, several steps."""
    ids = lm32.render("Give me three tips for staying healthy.")
    eng = Engine(lm32, ids, sampling=SAMPLED, seed=0, n_total=3, max_new_tokens=8)
    body = captured.Body(lm32.model, attention=attention)
    dev = lm32.device
    pre = compiled.prompt_kv(eng.prompt_cache)
    L, _, kvh, P, d = pre.shape
    own = pre.new_zeros(L, 2, 4, kvh, 8, d)
    toks = torch.tensor([[5, 9, 17, 17]] * 6, device=dev).t()                   # [rows, steps]
    with torch.inference_mode():
        got = torch.stack([body.forward(toks[:, i], torch.tensor(P + i, device=dev), torch.tensor(i, device=dev),
                                        own, pre) for i in range(toks.shape[1])], 1)
        full = torch.cat([torch.tensor([ids] * 4, device=dev), toks], 1)
        ref = lm32.model(input_ids=full).logits[:, len(ids):].float()
    body.release()
    assert torch.allclose(got, ref, atol=1e-4, rtol=1e-4)


def test_off_by_default_on_a_cpu_and_never_for_the_rivals_reads(lm32, monkeypatch):
    monkeypatch.delenv(captured.GRAPH_ENV, raising=False)
    captured._bodies.clear()
    if lm32.device.type == "cpu":
        assert captured.body_for(lm32.model) is None
    monkeypatch.setenv(captured.GRAPH_ENV, "1")
    ids = lm32.render(PROMPT)
    for reads in (("top-20",), ("hidden",)):   # DeepConf's and ST-BoN's reads: the compiled or eager step
        eng = Engine(lm32, ids, sampling=SAMPLED, seed=1, n_total=4, max_new_tokens=4, reads=reads)
        assert eng.step_kind != "captured"
    captured._bodies.clear()


def test_buckets_are_powers_of_two_from_two():
    assert [captured.bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 1000, 1024, 1025)] == [2, 2, 4, 4, 8, 8, 16, 1024,
                                                                                      1024, 2048]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_captured_replay_writes_what_the_body_writes_eagerly(lm32, graph_on, monkeypatch):
    everyone, kind = decode(lm32, list(range(12)), prune_at=5, keep=[0, 3, 4, 11])
    assert kind == "captured"
    real = captured.Graphed.__init__

    def uncaptured(self, *a, **kw):
        real(self, *a, **dict(kw, capture=False))

    monkeypatch.setattr(captured.Graphed, "__init__", uncaptured)
    assert decode(lm32, list(range(12)), prune_at=5, keep=[0, 3, 4, 11])[0] == everyone
