"""Issue 64 (1): after ``warm_up`` a race compiles nothing, at any length: the compiled step's own-token axis (grown
by ``compiled.CHUNK``), its rows and its prompt length are dynamic from the first build, so no race pays for a
compile inside its clock (before: the first race past 32 new tokens recompiled ``_start_fn`` on 't_axis')."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from specrej import load_generator, warm_up
from specrej.backends.hf import Engine, Sampling
from specrej.engine import compiled

pytestmark = pytest.mark.usefixtures("compiled_on")


def compiles() -> int:
    """Graphs dynamo has compiled so far in this process (a recompile is one more; with ``fullgraph=True`` the
    frame counters stay empty, the graph count does not)."""
    return counters["stats"]["unique_graphs"]


def test_no_compile_inside_a_race_at_any_length_after_warm_up(tiny_lm_dir):
    lm = load_generator(tiny_lm_dir, dtype="fp32")
    warm_up(lm)
    assert compiled.step_for(lm.model) is not None
    before = compiles()
    prompts = ["Explain how a rainbow forms.", "Give me three tips for staying healthy, please, in short words."]
    for max_new, rows, prompt in ((16, 3, prompts[0]), (48, 5, prompts[1]), (64, 2, prompts[0]),
                                  (256, 7, prompts[1])):
        eng = Engine(lm, lm.render(prompt), sampling=Sampling(0.9, 0.95, 40), seed=1, n_total=rows,
                     max_new_tokens=max_new)
        assert eng.step_kind == "compiled"
        cache = eng.start(list(range(rows))).cache
        with torch.inference_mode():
            tok = torch.arange(5, 5 + rows)
            for _ in range(max_new):   # every position a race of this length reaches, whatever the model samples
                cache.feed(tok)
        assert cache.own_length() == max_new
        assert compiles() == before, f"a race of {max_new} tokens compiled {compiles() - before} frame(s)"
