"""Hub-style loading on tiny models the tests build, and every reward kind."""
from __future__ import annotations

import math

import pytest
import torch

from specrej import CallableReward, RewardError, load_generator, load_reward
from specrej.engine.models import ModelSpecError, resolve_spec
from specrej.rewards import ConfidenceReward, HFRewardModel, TokenStats, checked


def test_generator_loads_from_a_folder_with_its_chat_template(tiny_lm_dir):
    lm = load_generator(tiny_lm_dir, dtype="fp32")
    ids = lm.render("Hello there")
    text = lm.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>user\nHello there<|im_end|>") and text.endswith("assistant\n")
    assert lm.eos_ids == {lm.tokenizer.convert_tokens_to_ids("<|im_end|>")}
    assert lm.device.type == "cpu" and lm.model.dtype == lm.dtype == torch.float32
    assert lm.kv_bytes_per_slot == 2 * 2 * 2 * 8 * 4  # k+v, layers, kv heads, head dim, fp32
    assert lm.shares_prefix   # a Llama: the shared-prefix attention is installed
    assert load_generator(tiny_lm_dir, dtype="fp32") is lm  # loaded once per process and dtype
    bf16 = load_generator(tiny_lm_dir, dtype="bf16")
    assert bf16.dtype == torch.bfloat16 and bf16.kv_bytes_per_slot == lm.kv_bytes_per_slot // 2


def protocol_members(proto) -> set[str]:
    return set(proto.__annotations__) | {k for k in vars(proto) if not k.startswith("_")}


def test_the_generator_is_a_language_model_found_through_the_backend_registry(tiny_lm_dir):
    from specrej.backends import BACKENDS, LanguageModel, load_lm
    from specrej.backends.hf import Engine

    lm = load_lm(tiny_lm_dir, backend="transformers", dtype="fp32")
    assert lm is load_generator(tiny_lm_dir, dtype="fp32") and lm.backend is Engine
    assert not [m for m in protocol_members(LanguageModel) if not hasattr(lm, m)]
    assert set(BACKENDS) == {"transformers", "vllm"}
    with pytest.raises(ValueError, match="backend 'tgi' is unknown; choose one of transformers, vllm"):
        load_lm(tiny_lm_dir, backend="tgi")


def test_dtype_choice(monkeypatch):
    from specrej.engine import precision

    monkeypatch.delenv(precision.DTYPE_ENV, raising=False)
    cpu = torch.device("cpu")
    assert precision.resolve("fp32", cpu) == torch.float32 and precision.resolve("bf16", cpu) == torch.bfloat16
    assert precision.resolve("auto", torch.device("cuda")) == torch.bfloat16
    monkeypatch.setenv(precision.DTYPE_ENV, "bf16")
    assert precision.resolve(None, cpu) == torch.bfloat16 and precision.resolve("fp32", cpu) == torch.float32
    monkeypatch.setenv(precision.DTYPE_ENV, "fp8")
    with pytest.raises(ValueError, match="SPECREJ_DTYPE='fp8' is unknown"):
        precision.resolve(None, cpu)
    with pytest.raises(ValueError, match="dtype='half' is unknown"):
        precision.resolve("half", cpu)
    # a CPU without bf16 matrix instructions stays in fp32 without probing
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(precision, "bf16_speedup", lambda: pytest.fail("probed a CPU without bf16 instructions"))
    precision.cpu_prefers_bf16.cache_clear()
    assert precision.resolve("auto", cpu) == torch.float32
    # with them, the probe decides
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"amx_bf16"})
    for speedup, expected in ((3.0, torch.bfloat16), (0.7, torch.float32)):
        monkeypatch.setattr(precision, "bf16_speedup", lambda s=speedup: s)
        precision.cpu_prefers_bf16.cache_clear()
        assert precision.resolve("auto", cpu) == expected
    precision.cpu_prefers_bf16.cache_clear()


def test_base_model_without_chat_template_gets_the_prompt_as_is(tiny_lm_dir, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    base = tmp_path / "base"
    shutil.copytree(tiny_lm_dir, base)
    tok = AutoTokenizer.from_pretrained(base)
    tok.chat_template = None
    tok.save_pretrained(base)
    for f in base.glob("chat_template*"):
        f.unlink()
    lm = load_generator(str(base))
    assert lm.tokenizer.decode(lm.render("Hello there")) == "Hello there"


def test_hf_reward_model_reads_the_conversation_through_its_template(tiny_reward_dir):
    rm = load_reward("hf:" + tiny_reward_dir)
    assert isinstance(rm, HFRewardModel) and rm.n_params > 0
    out = checked(rm, "Give me tips", ["Drink water.", "Sleep well and walk every day.", ""])
    assert len(out.scores) == 3 and all(math.isfinite(s) for s in out.scores)
    assert out.tokens_read > 0
    # batched and one-by-one scores agree (padding is handled)
    single = [checked(rm, "Give me tips", [r]).scores[0] for r in ["Drink water.", "Sleep well and walk every day."]]
    assert out.scores[:2] == pytest.approx(single, abs=1e-4)
    assert load_reward(tiny_reward_dir) is not None  # a bare folder is an hf reward too


def test_remote_code_is_off_unless_asked(tiny_reward_dir, monkeypatch):
    import transformers

    seen = []
    real = transformers.AutoModelForSequenceClassification.from_pretrained

    def spy(*a, **kw):
        seen.append(kw.get("trust_remote_code"))
        return real(*a, **kw)

    monkeypatch.setattr(transformers.AutoModelForSequenceClassification, "from_pretrained", spy)
    HFRewardModel(tiny_reward_dir)
    HFRewardModel(tiny_reward_dir, trust_remote_code=True)
    assert seen == [False, True]


def test_preference_reward_prefers_matching_text():
    rw = load_reward("preference:a friendly answer about cooking pasta", relevance=0.0)
    out = checked(rw, "How do I cook pasta?", ["Boil salted water, add the pasta and cook it for ten minutes. Enjoy!",
                                               "The stock market closed lower on Tuesday."])
    assert out.scores[0] > out.scores[1] and out.tokens_read > 0 and rw.n_params > 20_000_000
    with_relevance = load_reward("preference:a friendly answer about cooking pasta", relevance=1.0)
    out2 = checked(with_relevance, "How do I cook pasta?", ["Boil water and cook the pasta."])
    assert out2.scores[0] > checked(rw, "How do I cook pasta?", ["Boil water and cook the pasta."]).scores[0]


def test_sentiment_reward():
    rw = load_reward("sentiment")
    good, bad = checked(rw, "p", ["What a wonderful, happy day!", "This is awful and sad."]).scores
    assert good > 0 > bad


def test_confidence_rewards_use_engine_statistics():
    stats = [TokenStats(-0.5, 2.0), TokenStats(-2.0, 1.0)]
    assert checked(load_reward("confidence"), "p", ["a", "b"], stats).scores == [-0.5, -2.0]
    assert checked(load_reward("self-certainty"), "p", ["a", "b"], stats).scores == [2.0, 1.0]
    with pytest.raises(RewardError):
        ConfidenceReward().score("p", ["a"], None)


def test_callable_reward_and_bad_scores():
    assert checked(load_reward(lambda p, rs: [len(r) for r in rs]), "p", ["ab", "c"]).scores == [2.0, 1.0]
    with pytest.raises(RewardError, match="non-finite"):
        checked(CallableReward(lambda p, rs: [float("nan")] * len(rs)), "p", ["a"])
    with pytest.raises(RewardError, match="returned 1 scores for 2"):
        checked(CallableReward(lambda p, rs: [1.0]), "p", ["a", "b"])


@pytest.mark.parametrize("spec", ["", "   ", "no such model", "./missing-folder/x.gguf", "a/b/c"])
def test_unknown_model_specs(spec):
    with pytest.raises(ModelSpecError):
        resolve_spec(spec)


def test_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ModelSpecError, match="config.json"):
        resolve_spec(str(tmp_path))


@pytest.mark.parametrize("spec", ["", "bogus", "bogus:thing", "hf:"])
def test_unknown_reward_specs(spec):
    with pytest.raises(RewardError):
        load_reward(spec)


def test_empty_preference_text_is_refused():
    with pytest.raises(RewardError, match="preference text is empty"):
        load_reward("preference", preference="   ")


def test_without_the_wheel_the_embedder_comes_from_the_hub(monkeypatch):
    from specrej import rewards

    monkeypatch.setattr(rewards, "wheel_folder", lambda name: None)
    monkeypatch.delenv("SPECREJ_EMBEDDER", raising=False)
    tried = []

    def offline(self, source):
        tried.append(source)
        raise OSError("offline")

    monkeypatch.setattr(rewards._Embedder, "__init__", offline)
    with pytest.raises(RewardError, match="requirements-embedded.txt"):
        rewards._Embedder.get()
    assert tried == [rewards.EMBEDDER_HUB_ID]
