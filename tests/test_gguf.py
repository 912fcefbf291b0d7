"""GGUF loading on a cache miss: a tiny Llama written as GGUF by the ``gguf`` package (some
tensors Q8_0-quantised, q/k permuted the way llama.cpp's converter does), dequantised into a
fresh ``SPECREJ_CACHE`` and loaded back; a second load is a cache hit."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from specrej import RunConfig, best_of_n, load_generator, run_to_completion  # noqa: E402
from specrej.engine.models import _dequantised_copy  # noqa: E402

QUANTISED = ("ffn_gate", "ffn_up", "ffn_down")   # Q8_0; every other tensor is F32
PROMPT = "Give me three tips for staying healthy."


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (transformers reverses it)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path, model, tok) -> dict[str, np.ndarray]:
    """Write ``model`` (a tiny LlamaForCausalLM) and ``tok`` as a llama GGUF; return the weights
    a correct loader must produce, by Hugging Face name."""
    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]) if getattr(c, "rope_parameters", None)
                         else float(c.rope_theta))
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(len(tok))
    tokens = tok.convert_ids_to_tokens(list(range(len(tok))))
    special = set(tok.all_special_ids)
    merges = json.loads(tok.backend_tokenizer.to_str())["model"]["merges"]
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in special else 1 for i in range(len(tokens))])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    w.add_unk_token_id(tok.unk_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_add_bos_token(False)
    w.add_chat_template(tok.chat_template)

    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    parts = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(c.num_hidden_layers):
        for hf, g in parts.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{g}.weight"
    expected = {}
    for hf, g in names.items():
        data = sd[hf]
        if ".attn_q." in g:
            data = _permute(data, c.num_attention_heads)
        elif ".attn_k." in g:
            data = _permute(data, c.num_key_value_heads)
        if g.split(".")[-2] in QUANTISED:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(g, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            expected[hf] = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(data.shape)
        else:
            w.add_tensor(g, np.ascontiguousarray(data, dtype=np.float32))
            expected[hf] = sd[hf]
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tiny_lm_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(tiny_lm_dir)
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.F32-Q8_0.gguf"
    expected = write_tiny_gguf(path, model, tok)
    return path, expected, model


def test_a_gguf_is_dequantised_into_an_empty_cache_and_loads_as_the_model_it_holds(tiny_gguf, tiny_lm,
                                                                                   length_reward, tmp_path,
                                                                                   monkeypatch):
    path, expected, original = tiny_gguf
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECREJ_CACHE", str(cache))
    assert not cache.exists()
    lm = load_generator(str(path), dtype="fp32")         # a cache miss: dequantise, save, load
    folders = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(folders) == 1 and folders[0].name.startswith("tiny-llama.F32-Q8_0-")
    assert (folders[0] / "config.json").is_file() and list(folders[0].glob("*.safetensors"))
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]   # no half-written copy left
    assert json.loads((folders[0] / "config.json").read_text()).get("quantization_config") is None

    got = {k: v.float().numpy() for k, v in lm.model.state_dict().items()}
    for name, want in expected.items():
        assert np.allclose(got[name], want, atol=1e-6), name     # q/k un-permuted, Q8_0 dequantised
    quantised = [k for k in expected if any(f"mlp.{q.split('_')[1]}_proj" in k for q in QUANTISED)]
    assert quantised and all(not np.array_equal(expected[k], original.state_dict()[k].numpy()) for k in quantised)

    # the tokenizer came from the GGUF's metadata: the same ids and chat template as the original
    assert lm.render(PROMPT) == tiny_lm.render(PROMPT) and lm.eos_ids == tiny_lm.eos_ids
    # and the model computes what the original computes with the dequantised weights
    ref = type(original)(original.config)
    ref.load_state_dict({k: torch.from_numpy(v) for k, v in expected.items()}, strict=False)
    ids = torch.tensor([lm.render(PROMPT)])
    with torch.inference_mode():
        assert torch.allclose(lm.model(ids).logits, ref.eval()(ids).logits, atol=1e-4)
    cfg = RunConfig(prompt=PROMPT, n=3, max_new_tokens=6, budget=400, progress_every=0)
    assert run_to_completion(best_of_n(lm, length_reward, cfg)).winner.tokens >= 1

    # a second load of the same file is a cache hit: nothing is dequantised again
    from transformers import AutoModelForCausalLM

    mtime = os.path.getmtime(folders[0] / "config.json")
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("a cache hit must not load the GGUF again"))
    assert _dequantised_copy(path) == folders[0]
    assert os.path.getmtime(folders[0] / "config.json") == mtime
