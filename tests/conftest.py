"""Shared fixtures: tiny real models that the tests build and save themselves.

``tiny_lm_dir`` is a 2-layer Llama with a 300-token BPE tokenizer (with a chat template);
``tiny_reward_dir`` a 2-layer Llama sequence-classification reward model on the same
tokenizer. Both are saved with ``save_pretrained`` and loaded back the hub way
(``from_pretrained`` on the folder), exercising the same code as a real model.
"""
from __future__ import annotations

import os
import socket

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CORPUS = [
    "Give me three tips for staying healthy.", "Drink water, sleep well and walk every day.",
    "Explain how a rainbow forms.", "Sunlight bends in raindrops and splits into colours.",
    "Write a haiku about the sea.", "Waves fold on the shore, salt wind sings, gulls drift away.",
    "The quick brown fox jumps over the lazy dog.", "Hello! How can I help you today?",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>",
                                   bos_token="<|im_start|>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _llama_config(tok, **extra):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                       pad_token_id=tok.pad_token_id, **extra)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    tok = build_tokenizer()
    model = LlamaForCausalLM(_llama_config(tok))
    path = tmp_path_factory.mktemp("tiny-lm")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_reward_dir(tmp_path_factory):
    import torch
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(1)
    tok = build_tokenizer()
    model = LlamaForSequenceClassification(_llama_config(tok, num_labels=1))
    path = tmp_path_factory.mktemp("tiny-reward")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_lm(tiny_lm_dir):
    from specrej import load_generator

    return load_generator(tiny_lm_dir)


@pytest.fixture(scope="session")
def length_reward():
    """A deterministic callable reward: longer, more varied text scores higher."""
    from specrej import CallableReward

    return CallableReward(lambda prompt, rs: [len(set(r)) + 0.01 * len(r) for r in rs], name="variety")


def launch_local(demo) -> str:
    """Launch an app (``app.build_demo``) in-process on a free loopback port; return its URL."""
    import app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, url, _ = app.launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return url
