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
    for batch in ([0, 1, 2, 3], list(range(4, 12)), [10], [2, 11, 6]):   # buckets 4, 8, 2, 3
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
    monkeypatch.setattr(captured.Graphed, "_positions", lambda self, rows, freed=0, admitted=True: 5 if rows > 4 else 40)
    got, _ = decode(lm32, list(range(12)), prune_at=4, keep=[3, 8])
    assert got == {3: everyone[3], 8: everyone[8]}
    assert made[0].relayouts == 1 and made[0].T == 40 and made[0].rows == 2


def test_the_prompt_too_long_for_the_buffers_says_so(lm32, graph_on, monkeypatch):
    monkeypatch.setattr(captured.Graphed, "_positions", lambda self, rows, freed=0, admitted=True: 3)
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


def test_buckets_are_capture_sizes_from_two():
    assert [captured.bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 17, 33, 1000, 1024, 1025)] == [
        2, 2, 3, 4, 5, 8, 9, 18, 36, 1024, 1024, 1152]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_the_captured_replay_writes_what_the_body_writes_eagerly(lm32, graph_on, monkeypatch):
    everyone, kind = decode(lm32, list(range(12)), prune_at=5, keep=[0, 3, 4, 11])
    assert kind == "captured"
    real = captured.Graphed.__init__

    def uncaptured(self, *a, **kw):
        real(self, *a, **dict(kw, capture=False))

    monkeypatch.setattr(captured.Graphed, "__init__", uncaptured)
    assert decode(lm32, list(range(12)), prune_at=5, keep=[0, 3, 4, 11])[0] == everyone


# ---- capture-safe (issue 60, 1): nothing in the captured body reads the device from the host

aten = torch.ops.aten
_HOST_READS = {aten._local_scalar_dense.default, aten.item.default, aten.is_nonzero.default, aten.equal.default,
               aten.nonzero.default, aten.masked_select.default, aten._unique2.default, aten.unique_dim.default,
               aten.unique_consecutive.default, aten.repeat_interleave.Tensor}


def capture_refusal(func, args, kwargs) -> str | None:
    """Why ``torch.cuda.graph`` would refuse this op, or None: a read of a device value on the host (a 0-d index, a
    data-dependent shape, a comparison whose answer is a Python bool), a boolean mask as an index, a tensor made
    from host data inside the step, or a copy between devices."""
    if func in _HOST_READS:
        return f"{func} reads the device on the host"
    if func is aten.lift_fresh.default:
        return f"{func}: a tensor made from host data inside the step (a copy to the device)"
    if func in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default):
        for ix in args[1]:
            if ix is not None and ix.dtype in (torch.bool, torch.uint8):
                return f"{func} with a boolean mask (a nonzero on the host)"
    if func in (aten._to_copy.default, aten.copy_.default):
        src = args[1] if func is aten.copy_.default else args[0]
        dst = args[0].device if func is aten.copy_.default else kwargs.get("device", src.device)
        if torch.device(dst) != src.device:
            return f"{func} from {src.device} to {dst} (a copy between host and device)"
    return None


class CaptureGuard(torch.utils._python_dispatch.TorchDispatchMode):
    """Fails on the first op a CUDA graph capture refuses (``capture_refusal``), naming it; counts the ops."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        why = capture_refusal(func, args, kwargs)
        if why:
            raise AssertionError(f"not capture-safe: {why}")
        self.ops += 1
        return func(*args, **kwargs)


def test_the_guard_refuses_what_a_capture_refuses():
    """The guard itself: the ops the captured step must never run fail under it, plain device ops pass."""
    x, g = torch.arange(12.0).view(3, 4), torch.tensor(1)
    cols = torch.tensor([0, 1])
    for bad in (lambda: x[g, cols], lambda: x[x > 3], lambda: x.sum().item(), lambda: x.nonzero(),
                lambda: bool(x.sum()), lambda: torch.equal(x, x), lambda: x.unique(), lambda: torch.tensor([1, 2])):
        with CaptureGuard(), pytest.raises(AssertionError, match="not capture-safe"):
            bad()
    cols = torch.tensor([0, 1])
    with CaptureGuard() as guard:
        x[g.view(1), cols]
        torch.where(torch.arange(4) < g, 0.0, float("-inf"))
    assert guard.ops > 0


@pytest.mark.parametrize("sampling", [SAMPLED, Sampling(1.0, 1.0, 0)], ids=["top-k-top-p", "full-vocabulary"])
def test_the_captured_body_is_capture_safe_across_a_prune_and_a_relayout(lm32, graph_on, monkeypatch, sampling):
    """Every op of ``Graphed.run`` (the body a CUDA graph captures) with CUDA's matmul attention, for both samplings,
    before and after a prune and a relayout: none reads the device on the host. On a CPU nothing is captured, so
    without this test a host read shows up only on a GPU, as a failed capture."""
    real_body, real_run = captured.Body, captured.Graphed.run
    monkeypatch.setattr(captured, "Body", lambda model: real_body(model, attention="matmul"))
    made, guards = [], []

    def guarded_run(self, b):
        made.append(self) if self not in made else None
        with CaptureGuard() as guard:
            real_run(self, b)
        guards.append(guard.ops)

    monkeypatch.setattr(captured.Graphed, "run", guarded_run)
    monkeypatch.setattr(captured.Graphed, "_positions", lambda self, rows, freed=0, admitted=True: 5 if rows > 4 else 40)
    eng = Engine(lm32, lm32.render(PROMPT), sampling=sampling, seed=1, n_total=12, max_new_tokens=12)
    rows, steps, finished = eng.start(list(range(12))), 0, {}
    while len(rows):
        finished.update({d.cand: d.tokens for d in rows.step()})
        steps += 1
        if steps == 4:
            rows.keep([3, 8, 5])   # a prune: bucket 12 -> 3, then the relayout at position 5
    assert eng.step_kind == "captured" and made[0].relayouts == 1 and made[0].rows == 3
    assert len(guards) == steps and min(guards) > 0 and {3, 5, 8} <= set(finished)


# ---- never a failed race because of capture (issue 60, 2)

def test_a_failed_capture_finishes_the_race_on_the_same_tokens_and_says_why(lm32, graph_on, monkeypatch, caplog):
    """The capture made to raise on its second bucket (after a prune): the pass finishes uncaptured over the same
    buffers with the tokens an uncaptured run writes; the reason is logged once with its traceback; the model's
    next engines take the compiled step; the engine's ledger note says what ran and why."""
    want, _ = decode(lm32, list(range(12)), prune_at=5, keep=[0, 3, 4, 11])
    pair, _ = decode(lm32, [0, 1])
    compiled.use(lm32.model, compiled.Step(lm32.model, compile_=False))   # the fallback: the compiled step's math
    real_init, calls = captured.Graphed.__init__, []

    def capturing(self, *a, **kw):
        real_init(self, *a, **dict(kw, capture=True))

    def capture(self, b, restore):
        calls.append(b)
        if len(calls) == 1:   # the first bucket "captures": it runs as the graph would
            return type("Replay", (), {"replay": lambda _: self.run(b)})()
        self.run(b)           # a warm-up that ran, then the capture refuses: the buffers must be restored
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(captured.Graphed, "__init__", capturing)
    monkeypatch.setattr(captured.Graphed, "_capture", capture)
    caplog.set_level("ERROR", logger="specrej.engine.captured")
    eng = Engine(lm32, lm32.render(PROMPT), sampling=SAMPLED, seed=1, n_total=12, max_new_tokens=40)
    rows, out, steps = eng.start(list(range(12))), {}, 0
    while len(rows):
        out.update({d.cand: d.tokens for d in rows.step()})
        steps += 1
        if steps == 5:
            rows.keep([0, 3, 4, 11])
    assert out == want
    assert calls == [12, 4]
    failed = [r for r in caplog.records if "capturing the decoding step failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info and "not permitted when stream is capturing" in failed[0].getMessage()
    assert captured.failure(lm32.model) and captured.body_for(lm32.model) is None
    assert eng.step_note.startswith("captured body, uncaptured (capture failed: RuntimeError")
    again, second = eng.start([0, 1]), {}   # the same engine's next pass (Best-of-N's next batch): the compiled step
    assert eng.step_kind == "compiled" and "capture failed" in eng.step_note
    while len(again):
        second.update({d.cand: d.tokens for d in again.step()})
    assert second == pair
    later = Engine(lm32, lm32.render(PROMPT), sampling=SAMPLED, seed=1, n_total=12, max_new_tokens=4)
    assert later.step_kind == "compiled"
    assert len([r for r in caplog.records if "capturing the decoding step failed" in r.getMessage()]) == 1
    captured._failed.clear()
    compiled._steps.pop(lm32.model, None)


def test_a_race_whose_capture_fails_records_what_ran_in_its_ledger_and_on_the_page(lm32, graph_on, monkeypatch):
    """Through the library: Speculative Rejection and Best-of-N race to the end with every capture failing; each
    ledger (the trace's) says which step ran and why, and the result panel says so in words."""
    from specrej import RunConfig, as_reward, race, speculative_rejection, best_of_n
    from specrej.core.events import Finished
    from components import panels
    from components.state.view import RunView

    real_init = captured.Graphed.__init__
    monkeypatch.setattr(captured.Graphed, "__init__", lambda self, *a, **kw: real_init(self, *a, **dict(kw, capture=True)))

    def refuse(self, b, restore):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(captured.Graphed, "_capture", refuse)
    compiled.use(lm32.model, compiled.Step(lm32.model, compile_=False))
    reward = as_reward(lambda prompt, texts: [float(len(t)) for t in texts])
    cfg = RunConfig(prompt=PROMPT, n=6, max_new_tokens=12, budget=32 + 6 * 12, first_decision=4, seed=3)
    view = RunView(cfg, model_label="m", reward_label="r")
    done = {}
    for ev in race({"bon": best_of_n(lm32, reward, cfg), "sr": speculative_rejection(lm32, reward, cfg)}):
        view.apply(ev)
        if isinstance(ev, Finished):
            done[ev.arm] = ev
    try:
        assert set(done) == {"bon", "sr"}
        steps = {a: f.ledger.step for a, f in done.items()}
        assert all("capture failed: RuntimeError: operation not permitted" in s for s in steps.values()), steps
        assert "capture failed" in done["sr"].ledger.to_dict()["step"]
        md = panels.summary_markdown(view)
        assert "The race went on without the CUDA graph" in md and "capture failed" in md
    finally:
        captured._failed.clear()
        compiled._steps.pop(lm32.model, None)


# ---- attention over the filled positions only (issue 60, 4)

def test_each_step_attends_to_its_filled_positions_rounded_to_a_window_with_the_same_tokens(lm32, graph_on, monkeypatch):
    """Past one window (``captured.WINDOW`` positions) the layers read the filled positions rounded up to a window,
    not the whole buffer; the tokens are those of a step that reads every position; on CUDA a graph is captured
    per (bucket, window)."""
    def run(window):
        monkeypatch.setattr(captured, "WINDOW", window)
        seen, real = [], captured.Body.forward

        def forward(self, tok, pos, g, own, pre):
            seen.append((own[0].shape[1], own[0].shape[3]))
            return real(self, tok, pos, g, own, pre)

        monkeypatch.setattr(captured.Body, "forward", forward)
        keys = []

        def capture(self, b, restore):   # as a graph would: the key it is captured under, then the step itself
            keys.append((b, self.window()))
            return type("Replay", (), {"replay": lambda _, b=b: self.run(b)})()

        monkeypatch.setattr(captured.Graphed, "_capture", capture)
        real_init = captured.Graphed.__init__
        monkeypatch.setattr(captured.Graphed, "__init__",
                            lambda self, *a, **kw: real_init(self, *a, **dict(kw, capture=True)))
        out, kind = decode(lm32, [0, 1, 2], max_new=40, n_total=3, prune_at=20, keep=[2, 0])
        monkeypatch.undo()
        monkeypatch.setenv(captured.GRAPH_ENV, "1")
        return out, seen, keys

    want, every, _ = run(10**6)
    got, seen, keys = run(16)
    assert got == want
    assert {w for _, w in every} == {40}                       # one window as large as the buffer: every position
    assert [w for _, w in seen[:34]] == [16] * 16 + [32] * 16 + [40] * 2   # filled positions, rounded up to 16
    assert keys == [(3, 16), (3, 32), (2, 32), (2, 40)]        # a graph per bucket and window
    captured._failed.clear()


def test_the_fused_weights_are_the_models_own_not_a_copy():
    """``compiled.fuse_in_place`` (CUDA's Step fuses q/k/v and gate/up so): the model's parameters become views of the
    fused tensor (one copy of the weights, not two), the model computes the same logits, and a second Step reuses it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=64)).eval()
    ids = torch.tensor([[1, 5, 9, 3]])
    with torch.inference_mode():
        want = model(input_ids=ids).logits
    a = model.model.layers[0].self_attn
    before = [p.detach().clone() for p in (a.q_proj.weight, a.k_proj.weight, a.v_proj.weight)]
    with torch.inference_mode():
        w = compiled.fuse_in_place((a.q_proj, a.k_proj, a.v_proj))
    assert torch.equal(w, torch.cat(before))
    ptr = w.untyped_storage().data_ptr()
    assert all(p.untyped_storage().data_ptr() == ptr for p in (a.q_proj.weight, a.k_proj.weight, a.v_proj.weight))
    again = compiled.fuse_in_place((a.q_proj, a.k_proj, a.v_proj))
    assert again.untyped_storage().data_ptr() == ptr and torch.equal(again, w)
    assert isinstance(a.q_proj.weight, torch.nn.Parameter) and not a.q_proj.weight.is_inference()
    got = model(input_ids=ids).logits   # outside inference mode too
    assert torch.equal(got.detach(), want)


def test_the_fused_body_computes_what_the_plain_body_computes_and_compiles_nothing_after_its_warm_up(lm32):
    """``Body(fuse=True)`` (CUDA's matmul attention): its pieces compiled by inductor (dynamic shapes), warmed on dummy
    sizes; the logits of a few steps at two other row counts and windows match the plain body's (fused reductions:
    close, not bit-equal), and compile nothing more (no compile inside a race)."""
    from torch._dynamo.utils import counters

    attention = "matmul"
    ids = lm32.render("Give me three tips for staying healthy.")
    eng = Engine(lm32, ids, sampling=SAMPLED, seed=0, n_total=3, max_new_tokens=8)
    plain = captured.Body(lm32.model, attention=attention, fuse=False)
    fused = captured.Body(lm32.model, attention=attention, fuse=True)
    assert fused.warm() > 0 and fused.warm() == 0.0 and plain.warm() == 0.0
    dev = lm32.device
    frames = counters["stats"]["unique_graphs"]
    with torch.inference_mode():   # as the engine makes its buffers
        pre = compiled.prompt_kv(eng.prompt_cache)
        L, _, kvh, P, d = pre.shape
        for rows, T, spare in ((2, 6, 0), (5, 11, 3)):   # a window as long as the buffer, and shorter
            outs = []
            for body in (plain, fused):
                own = [pre.new_zeros(2, rows + spare, kvh, T + spare, d)[:, :rows, :, :T] for _ in range(L)]
                toks = torch.arange(rows * 4, device=dev).view(4, rows) % 50 + 3
                outs.append(torch.stack([body.forward(toks[i], torch.tensor(P + i, device=dev),
                                                      torch.tensor(i, device=dev), own, pre) for i in range(4)]))
            assert torch.allclose(outs[0], outs[1], atol=1e-4, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] == frames
    plain.release()
    fused.release()
