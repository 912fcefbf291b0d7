"""``analysis.paging`` against vLLM's own scheduler: vLLM v1's ``Scheduler`` (the CPU build installed here) driven
directly, with no model and no weights (a minimal Llama config.json for its ``ModelConfig``, a KV cache of N blocks,
each scheduled request handed one sampled token per step, distinct for every answer so that no two answers share a
block by accident), over answers of known lengths: every answer ends at the same step as the simulation says.

Where the prompt ends on a block boundary (48 tokens, blocks of 16), vLLM's fresh requests recompute the prompt's
last block into a copy each, while a resumed request shares a cached copy (which one depends on the block pool's
eviction order): the simulation counts a copy per answer, so there it over-counts Best-of-N's steps (never
under-counts); pinned below."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specrej.analysis.paging import vllm_schedule
from specrej.core.budget import KVBudget

vllm = pytest.importorskip("vllm")
ROOT = Path(__file__).resolve().parents[1]
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": 49152,
          "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2,
          "tie_word_embeddings": True, "head_dim": 32}


def vllm_ends(folder: Path, lengths, prompt_len: int, blocks: int, block_size: int) -> list[int]:
    """The step at which vLLM's Scheduler finishes each answer (queued in order, ignore_eos, max_tokens = its
    length), with ``blocks`` usable KV blocks and prefix caching on (vLLM's default)."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    n = len(lengths)
    model = ModelConfig(model=str(folder), dtype="float32", seed=0, max_model_len=2048, skip_tokenizer_init=True)
    sched = SchedulerConfig(max_num_seqs=max(256, n), max_num_batched_tokens=8192, max_model_len=2048,
                            enable_chunked_prefill=True, is_encoder_decoder=False)
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=True)
    config = VllmConfig(model_config=model, scheduler_config=sched, cache_config=cache)
    kv = KVCacheConfig(num_blocks=blocks + 1, kv_cache_tensors=[], kv_cache_groups=[   # + vLLM's null block
        KVCacheGroupSpec(["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1,
                                                      dtype=torch.float32))])
    cache.num_gpu_blocks = blocks + 1
    s = Scheduler(vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
                  block_size=block_size)
    hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(block_size, hash_fn)
    prompt = list(range(1000, 1000 + prompt_len))
    for i, L in enumerate(lengths):
        s.add_request(Request(request_id=str(i), prompt_token_ids=prompt, pooling_params=None, block_hasher=hasher,
                              sampling_params=SamplingParams(max_tokens=L, ignore_eos=True, temperature=0.0)))
    ends, step = {}, 0
    while s.has_unfinished_requests():
        step += 1
        out = s.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in ids:   # a token only where this step finishes the request's prefill; distinct per answer
            req = s.requests[rid]
            done = req.num_computed_tokens + out.num_scheduled_tokens[rid] >= req.num_tokens
            sampled.append([10000 + int(rid) * 300 + len(req.output_token_ids)] if done else [])
        s.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: j for j, r in enumerate(ids)},
                                                    sampled_token_ids=sampled))
        for rid in ids:
            if rid not in ends and rid not in s.requests:
                ends[rid] = step
        assert step < 100_000
    return [ends[str(i)] for i in range(n)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    d = tmp_path_factory.mktemp("llama")
    (d / "config.json").write_text(json.dumps(CONFIG))
    return d


def graded(i: int) -> dict:
    return json.loads((ROOT / "assets" / "bench" / "graded.json").read_text(encoding="utf-8"))["prompts"][i]


def test_the_hand_worked_case_is_what_vllm_schedules(folder):
    """``test_paging.test_three_answers_by_hand``: lengths 6, 3, 2, a 4-token prompt, 4 blocks of 4 slots."""
    ours = vllm_schedule([6, 3, 2], [0, 1, 2], KVBudget(16, 4, True), 4)
    assert vllm_ends(folder, [6, 3, 2], 4, 4, 4) == list(ours.ends) == [6, 3, 4]


@pytest.mark.parametrize("i", [0, 5])
def test_a_graded_prompt_is_what_vllm_schedules(folder, i):
    """The 32 answers of a committed graded prompt (52 or 59 prompt tokens, 512 slots = 32 blocks of 16), in
    candidate order: every answer's end step is vLLM's (prompt 5: 27 preemptions on the way)."""
    rec = graded(i)
    lengths, P = rec["bon"]["tokens"], rec["prompt_tokens"]
    assert P % 16
    ours = vllm_schedule(lengths, list(range(len(lengths))), KVBudget(rec["budget"], P, True), 16)
    assert vllm_ends(folder, lengths, P, rec["budget"] // 16, 16) == list(ours.ends)


def test_a_prompt_on_a_block_boundary_is_over_counted_never_under(folder):
    """Graded prompt 1 (48 tokens: 3 whole blocks): vLLM 152 steps, the simulation 179 (one order)."""
    rec = graded(1)
    lengths, P = rec["bon"]["tokens"], rec["prompt_tokens"]
    assert P % 16 == 0
    ours = vllm_schedule(lengths, list(range(len(lengths))), KVBudget(rec["budget"], P, True), 16)
    theirs = vllm_ends(folder, lengths, P, rec["budget"] // 16, 16)
    assert max(theirs) <= max(ours.ends)
