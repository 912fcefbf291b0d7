"""The captured step's memory plan (issue 60, 3): buffers sized from the race's admission, bucket padding and every
arm's buffers counted, a relayout that never holds the old buffers and the new at once, ``select`` a layer at a time.
The plan is arithmetic, so the paper's race on a 141 GB device (an H200, Llama-3-8B) is checked here on a CPU."""
from __future__ import annotations

import weakref
from pathlib import Path

import pytest
import torch

from specrej import load_generator
from specrej.backends.hf import Engine, Sampling
from specrej.core.budget import KVBudget
from specrej.engine import captured, memplan
from specrej.engine.memplan import LLAMA3_8B, arm_budget, plan, relayout_peak

ROOT = Path(__file__).resolve().parent.parent
GB = 10**9
H200 = 141 * GB
WEIGHTS_8B = 8_030_261_248 * 2          # Llama-3-8B's parameters in bf16
FREE_8B = H200 - WEIGHTS_8B - 1 * GB     # less the CUDA context and cuBLAS
PROMPT = 24


def test_padding_wastes_at_most_an_eighth_of_the_rows_from_1_to_4096():
    sizes = memplan.CAPTURE_SIZES
    assert sizes[:8] == (1, 2, 3, 4, 5, 6, 7, 8) and sizes[-1] >= memplan.AUTO_MAX_ROWS
    assert list(sizes) == sorted(set(sizes))
    waste = [memplan.padding_waste(n) for n in range(1, 2049)]
    assert max(waste) <= 0.12   # (bucket - n) / bucket
    assert all(memplan.bucket_for(n) / n <= 1.125 for n in range(1, 4097))
    assert memplan.padding_factor() <= 1.125
    assert len(sizes) <= 90     # captures a race can make: about vLLM's 67
    assert memplan.bucket_for(1, minimum=2) == 2 and memplan.bucket_for(5000) % 256 == 0


def test_the_paper_race_fits_a_141_gb_device_both_arms_at_once_in_either_order():
    """Best-of-2048 at 256 tokens in passes and Speculative Rejection at n=auto, each admitted one arm's share
    (``arm_budget``, what ``Engine.default_budget`` grants on a GPU): each pass's buffers, padded to their capture
    size, hold the positions the admission grants, and both arms' buffers fit at once."""
    budget = arm_budget(FREE_8B, LLAMA3_8B, arms=2)
    kv = KVBudget(budget, PROMPT, shared=True)
    own = budget - PROMPT
    bon_rows = kv.rows_per_pass(2048, 256)
    passes = -(-2048 // bon_rows)
    assert 1 < passes <= 3
    sr_rows = kv.auto_n(8)
    assert sr_rows == memplan.AUTO_MAX_ROWS
    for first, second in (((bon_rows, 256), (sr_rows, 256)), ((sr_rows, 256), (bon_rows, 256))):
        a = plan(FREE_8B, LLAMA3_8B, *first, budget=own, prefix=PROMPT)
        b = plan(FREE_8B - a.bytes, LLAMA3_8B, *second, budget=own, prefix=PROMPT)
        assert a.fits and b.fits
        assert a.bytes + b.bytes <= FREE_8B * memplan.HEADROOM
    bon = plan(FREE_8B, LLAMA3_8B, bon_rows, 256, budget=own, prefix=PROMPT)
    assert bon.positions == 256   # a whole pass without a relayout
    assert bon.kv_bytes <= 1.125 * own * LLAMA3_8B.slot_bytes   # the padding, at most an eighth more
    sr = plan(FREE_8B, LLAMA3_8B, sr_rows, 256, budget=own, prefix=PROMPT)
    assert sr.positions == own // sr_rows + 1 and sr.positions > 8   # past the first decision
    # the old way: half the free memory at that moment per arm, powers of two: the second arm does not fit
    half = FREE_8B // 2 // LLAMA3_8B.slot_bytes
    old_rows = KVBudget(half, PROMPT, True).rows_per_pass(2048, 256)
    assert 2048 * 255 * LLAMA3_8B.slot_bytes > FREE_8B // 2 and old_rows > 1024


def test_speculative_rejection_relayouts_through_its_decisions_never_hold_old_and_new_at_once():
    """SR at n=auto on the 8B config: each decision halves the rows (alpha 0.5) once their positions are used up;
    each relayout is planned with the old buffers counted as free and fits the arm's memory without holding the
    old keys and values and the new at once."""
    budget = arm_budget(FREE_8B, LLAMA3_8B, arms=2)
    own = budget - PROMPT
    rows = KVBudget(budget, PROMPT, True).auto_n(8)
    arm_free = FREE_8B // 2   # this arm's half: the other arm's buffers live beside it
    old = plan(arm_free, LLAMA3_8B, rows, 256, budget=own, prefix=PROMPT)
    fed, relayouts = old.positions, 0
    while fed < 256 and rows > 1:
        rows = round(rows * 0.5)
        new = plan(arm_free, LLAMA3_8B, rows, 256, budget=own, prefix=PROMPT)   # the old buffers counted as free
        assert new.fits and new.positions > fed, (rows, new, fed)
        peak = relayout_peak(old, new, LLAMA3_8B.layers)
        assert peak < old.kv_bytes + new.kv_bytes and peak <= arm_free * memplan.HEADROOM
        old, fed, relayouts = new, new.positions, relayouts + 1
    assert fed >= 256 and relayouts <= 4


def test_a_plan_holds_what_memory_holds_and_says_when_nothing_fits():
    p = plan(20 * GB, LLAMA3_8B, 1000, 256)
    assert p.fits and 0 < p.positions < 256 and p.bytes <= 20 * GB * memplan.HEADROOM
    assert plan(None, LLAMA3_8B, 1000, 256).positions == 256   # a CPU: nothing checked
    tiny = plan(1 * GB, LLAMA3_8B, 4096, 256)
    assert not tiny.fits and "exceed" in tiny.why
    assert plan(64 * GB, LLAMA3_8B, 10, 256, arms=2).bytes <= 32 * GB


# ---- the plan in the captured step (a CPU: the body uncaptured, positions from the admitted slots)

@pytest.fixture(scope="module")
def lm32(tiny_lm_dir):
    return load_generator(tiny_lm_dir, dtype="fp32")


@pytest.fixture
def graph_on(monkeypatch):
    monkeypatch.setenv(captured.GRAPH_ENV, "1")
    yield
    captured._bodies.clear()


def made_graphs(monkeypatch) -> list:
    made, real = [], captured.Graphed.__init__

    def init(self, *a, **kw):
        made.append(self)
        real(self, *a, **kw)

    monkeypatch.setattr(captured.Graphed, "__init__", init)
    return made


def test_the_buffers_hold_what_the_admission_grants_and_a_relayout_moves_a_layer_at_a_time(lm32, graph_on, monkeypatch):
    """An engine admitted 24 own slots for 3 rows: 9 positions (8 granted, the last token's write); pruned to
    one row it lays out again for all 24 of its answer: the old blocks freed one by one as the new ones are made, the old graphs
    first; the tokens are those of an engine given no budget."""
    ids = lm32.render("Explain how a rainbow forms.")
    s = Sampling(0.9, 0.95, 40)

    def run(budget):
        eng = Engine(lm32, ids, sampling=s, seed=1, n_total=3, max_new_tokens=24, budget=budget)
        rows, out, steps = eng.start([0, 1, 2]), {}, 0
        while len(rows):
            out.update({d.cand: d.tokens for d in rows.step()})
            steps += 1
            if steps == 8:
                rows.keep([1])
        return out

    want = run(None)
    made = made_graphs(monkeypatch)
    events = []
    real_relayout = captured.Graphed._relayout

    def watched(self):
        olds = list(self.own)
        for i, o in enumerate(olds):
            weakref.finalize(o, events.append, ("freed", i))
        self.graphs[99] = object()   # a stand-in graph: freed before anything new is made
        real_new = self.pre.new_zeros

        def new_zeros(*shape, **kw):
            assert not self.graphs and self._pool is None
            events.append(("made", len([e for e in events if e[0] == "made"])))
            return real_new(*shape, **kw)

        self.pre.new_zeros = new_zeros
        del olds
        try:
            real_relayout(self)
        finally:
            del self.pre.new_zeros

    monkeypatch.setattr(captured.Graphed, "_relayout", watched)
    got = run(len(ids) + 24)
    g = made[0]
    assert got == want
    assert g.budget == 24 and g.relayouts == 1 and g.rows == 2 and g.T == 24   # one row runs as two (MIN_BUCKET)
    L = lm32.model.config.num_hidden_layers
    made_ev = [i for i, e in enumerate(events) if e[0] == "made"]
    freed_ev = [i for i, e in enumerate(events) if e[0] == "freed"]
    assert len(made_ev) == L and len(freed_ev) == L
    for k in range(1, L):   # layer k's new block is made only after layer k-1's old block was freed
        assert freed_ev[k - 1] < made_ev[k]


def test_select_gathers_a_layer_at_a_time(lm32, graph_on, monkeypatch):
    """The prune's gather: no temporary larger than one layer's kept rows."""
    made = made_graphs(monkeypatch)
    eng = Engine(lm32, lm32.render("Hello"), sampling=Sampling(0.9, 0.95, 40), seed=1, n_total=8, max_new_tokens=6)
    rows = eng.start(list(range(8)))
    rows.step()
    g = made[0]
    one_layer = g.own[0][:, :3].numel()
    biggest = []

    class Watch(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.index.Tensor and out.dim() == 5:   # keys and values (not the logits)
                biggest.append(out.numel())
            return out

    with torch.inference_mode(), Watch():
        g.select([5, 0, 2])
    assert len(biggest) == len(g.own) and max(biggest) <= one_layer


def test_a_gpus_default_budget_is_one_arms_share_of_the_plan(monkeypatch):
    """``Engine.default_budget`` on a GPU (its free memory faked: an H200 holding the 8B weights): the slots
    ``arm_budget`` grants each of a two-arm race, for the shape read off the model's config."""
    import json
    from types import SimpleNamespace

    from transformers import AutoConfig

    spec = {k: v for k, v in json.loads((ROOT / "assets/configs/llama-3-8b.json").read_text()).items()
            if not k.startswith("_")}
    config = AutoConfig.for_model(**spec)
    assert memplan.Shape.of(config, 2) == LLAMA3_8B and LLAMA3_8B.slot_bytes == 131072
    lm = SimpleNamespace(device=torch.device("cuda", 0), model=SimpleNamespace(config=config, dtype=torch.bfloat16))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (FREE_8B, H200))
    got = Engine.default_budget(lm)
    assert got == arm_budget(FREE_8B, LLAMA3_8B, arms=2)
    assert 2 * got * LLAMA3_8B.slot_bytes * memplan.padding_factor() < FREE_8B / 2   # the old rule gave each arm half
