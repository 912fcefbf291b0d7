"""The engine's per-candidate statistics against a direct ``log_softmax`` of the model's own
logits, and the generic ``model(..., logits_to_keep=1)`` head path (the one CUDA and heads that
are not a plain ``lm_head`` take) against the plain-head shortcut and a naive ``generate``."""
from __future__ import annotations

import math

import pytest
import torch

from specrej import RunConfig, load_reward, run_to_completion, speculative_rejection
from specrej.backends import hf as engine_mod
from specrej.backends.hf import Engine, Rows, Sampling, next_logits

PROMPT = "Explain how a rainbow forms."


@pytest.fixture(scope="module")
def lm32(tiny_lm_dir):
    """The tiny model in fp32, where the statistics can be checked to 1e-4 (bf16 rounds more)."""
    from specrej import load_generator

    return load_generator(tiny_lm_dir, dtype="fp32")


def direct_stats(lm, prompt_ids: list[int], tokens: list[int]) -> tuple[float, float]:
    """Mean log p(token) and mean KL(uniform || p), from one no-cache forward over prompt + tokens."""
    with torch.inference_mode():
        logits = lm.model(torch.tensor([prompt_ids + tokens]), use_cache=False).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt_ids) - 1: len(prompt_ids) - 1 + len(tokens)], -1)  # [t, vocab]
    lp = logp[torch.arange(len(tokens)), torch.tensor(tokens)].mean().item()
    sc = (-math.log(logp.shape[-1]) - logp.mean(-1)).mean().item()   # KL(u || p) = sum u (log u - log p)
    return lp, sc


def test_statistics_match_a_direct_log_softmax(lm32):
    tiny_lm = lm32
    ids = tiny_lm.render(PROMPT)
    eng = Engine(tiny_lm, ids, sampling=Sampling(0.9, 0.95, 50), seed=4, n_total=6, max_new_tokens=14)
    rows = eng.start(list(range(6)))
    done = []
    for step in range(14):
        if not len(rows):
            break
        done += rows.step()
        if step == 4:
            for i in range(len(rows)):   # partial statistics, what a decision scores
                lp, sc = direct_stats(tiny_lm, ids, rows.tokens[i])
                assert rows.stats(i) == pytest.approx((lp, sc), abs=1e-4)
            rows.keep([len(rows) - 1, 0])   # prune and reorder: statistics follow their rows
    while len(rows):
        done += rows.step()
    assert len(done) >= 2
    for d in done:
        lp, sc = direct_stats(tiny_lm, ids, d.tokens)
        assert d.mean_logprob == pytest.approx(lp, abs=1e-4)
        assert d.mean_self_certainty == pytest.approx(sc, abs=1e-4)
        assert d.mean_logprob < 0 < d.mean_self_certainty   # a log-probability, a divergence


@pytest.mark.parametrize("kind,field", [("confidence", "mean_logprob"), ("self-certainty", "mean_self_certainty")])
def test_confidence_rewards_score_finished_candidates_by_the_engine_statistics(lm32, monkeypatch, kind, field):
    tiny_lm = lm32
    finished: dict = {}
    real = Rows.step

    def spy(self):
        out = real(self)
        for d in out:
            finished[d.cand] = d
        return out

    monkeypatch.setattr(Rows, "step", spy)
    ids = tiny_lm.render(PROMPT)
    cfg = RunConfig(prompt=PROMPT, n=6, alpha=0.5, max_new_tokens=10, budget=6 * (len(ids) + 5), seed=2,
                    progress_every=0)
    f = run_to_completion(speculative_rejection(tiny_lm, load_reward(kind), cfg))
    done = [c for c in f.candidates if c.status == "finished"]
    assert done
    for c in done:
        lp, sc = direct_stats(tiny_lm, ids, finished[c.id].tokens)
        assert c.score == pytest.approx(lp if field == "mean_logprob" else sc, abs=1e-4)
    best = max(done, key=lambda c: (c.score, -c.id))
    assert f.winner.id == best.id


@pytest.fixture(params=["plain head", "generic head"])
def head_path(request, tiny_lm, monkeypatch):
    """Run the engine on one head path; record the keyword arguments of full-model calls."""
    calls: list[dict] = []
    if request.param == "generic head":
        monkeypatch.setattr(engine_mod, "_PLAIN_HEAD", frozenset())
    real_forward = type(tiny_lm.model).forward

    def spy(self, *a, **kw):
        calls.append(kw)
        return real_forward(self, *a, **kw)

    monkeypatch.setattr(type(tiny_lm.model), "forward", spy)
    return request.param, calls


def test_both_head_paths_give_the_same_logits_and_greedy_text_as_generate(tiny_lm, head_path):
    name, calls = head_path
    ids = tiny_lm.render(PROMPT)
    eng = Engine(tiny_lm, ids, sampling=Sampling(1.0, 1.0, 1), seed=0, n_total=3, max_new_tokens=10)
    if name == "generic head":
        assert calls and all(kw.get("logits_to_keep") == 1 for kw in calls)
    else:
        assert not calls   # the shortcut runs the decoder and the head itself
    with torch.inference_mode():
        full = tiny_lm.model.model(input_ids=torch.tensor([ids])).last_hidden_state[:, -1]
        expected = tiny_lm.model.lm_head(full).float()
    assert torch.allclose(eng.prompt_logits, expected, atol=1e-5)
    rows = eng.start([0, 1, 2])
    rows.step()
    rows.keep([2, 0])
    done = []
    while len(rows):
        done += rows.step()
    with torch.inference_mode():
        ref = tiny_lm.model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False, use_cache=False,
                                     eos_token_id=sorted(tiny_lm.eos_ids), pad_token_id=0)
    want = ref[0, len(ids):].tolist()
    assert [d.tokens for d in done] == [want, want] and {d.cand for d in done} == {0, 2}


def test_next_logits_generic_path_keeps_only_the_last_position(tiny_lm, monkeypatch):
    ids = torch.tensor([tiny_lm.render(PROMPT)])
    plain, _ = next_logits(tiny_lm, ids, None)
    monkeypatch.setattr(engine_mod, "_PLAIN_HEAD", frozenset())
    generic, _ = next_logits(tiny_lm, ids, None)
    assert generic.shape == plain.shape == (1, tiny_lm.vocab_size) and generic.dtype == torch.float32
    assert torch.allclose(generic, plain, atol=1e-5)
