"""The transformers backend: ``LM`` (a loaded model and its tokenizer, from ``load_generator``) and the
batched decoder both methods share, ``Engine``.

Contract: the engine turns one prompt into many sampled continuations. It knows nothing about
rewards, rounds or budgets; the methods decide which rows live. It knows tokens, not text,
except to check stop strings.

Phases (numbered in the code):
  1. prefill the prompt once, at batch size 1;
  2. hand that cache to every row of a pass (``start``): all rows share the prompt, so they
     always have equal length: no padding, no attention mask. Where the model allows it
     (``lm.shares_prefix``), the prompt's cache is stored once and rows hold only their own
     tokens (``shared_prefix.SharedPrefixCache``); elsewhere each row gets a copy. Either way the
     rows' layers append in place instead of ``torch.cat`` (``kvcache.GrowingLayer``);
  3. decode: every ``step`` samples one token for every live row, moves rows that end (EOS,
     a stop string, ``max_new_tokens``) out of the batch, and runs one forward pass for the rest;
  4. prune: ``keep(indices)`` drops rows from the KV cache by index. Survivors are never
     re-tokenised or re-prefilled.

Coupled randomness: row r of candidate c at position t samples by inverse CDF with a uniform
drawn from a generator seeded by (seed, t) and indexed by c, so the draw depends only on
(seed, candidate id, position): candidate c writes the same text in every method and batch.
"""
from __future__ import annotations

import copy
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..core.budget import cpu_budget
from ..core.config import RunConfig
from ..core.cost import read_options
from ..engine import captured, compiled, memplan, precision
from ..engine.kvcache import cache_of, grow_in_place, with_cache
from ..engine import shared_prefix
from ..engine.models import (EMBEDDED, ModelSpecError, default_device, generator_refusal, load_weights,
                             render_chat, resolve_spec, source_key)
from ..engine.packed import PackedLinear, lone_row_padded
from ..engine.shared_prefix import SharedPrefixCache
from . import Done, Sampling


@dataclass
class LM:
    """A causal LM and its tokenizer, ready for the engine (a ``backends.LanguageModel``)."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    eos_ids: frozenset[int]
    shares_prefix: bool = False   # the shared-prefix attention is installed: rows can share the prompt's cache
    source: str | None = None     # the folder, file or hub id the weights were read from (None: an object's)

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_positions(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    @property
    def kv_bytes_per_slot(self) -> int:
        """Bytes of KV cache one token of one row takes (keys and values, every layer)."""
        c = self.model.config
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
        elem = torch.finfo(self.model.dtype).bits // 8
        return 2 * c.num_hidden_layers * kv_heads * head_dim * elem

    @property
    def backend(self):
        """The transformers engine (``Engine``, below)."""
        return Engine

    def render(self, prompt: str) -> list[int]:
        """Token ids of the prompt through the chat template (as is for base models)."""
        return render_chat(self.tokenizer, prompt)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


_lock = threading.Lock()
# (resolved path or hub id, trust_remote_code, dtype) -> (the files' sizes and modification times, the LM)
_loaded: dict[tuple, tuple[tuple, LM]] = {}


def load_generator(spec=EMBEDDED, *, tokenizer=None, trust_remote_code: bool = False,
                   dtype: str | None = None) -> LM:
    """Load (once per process, model files and dtype) the generator named by ``spec``.

    ``spec``: "embedded", a hub id, a folder (a ``str`` or a ``Path``) or a ``.gguf`` file; or an already-loaded
    model: a transformers causal LM with its ``tokenizer=``, or a text-generation ``pipeline`` (its model and
    tokenizer); an ``LM`` is returned as it is. A loaded model is used as it is (``loaded_generator``).

    The cache knows a folder or a ``.gguf`` file by its resolved path (``folder/``, ``./folder`` and a link to it
    are one) and by its files' sizes and modification times: weights saved again in place load anew, and the
    stale copy is dropped from the cache. ``unload()`` empties it. A model that cannot write text (an encoder,
    a classification head) is refused with what to load instead (``ModelSpecError``).

    ``dtype``: "auto" (default, or ``SPECREJ_DTYPE``), "fp32" or "bf16"; see ``precision``."""
    if isinstance(spec, LM):
        return spec
    if is_loaded_model(spec):
        return loaded_generator(spec, tokenizer=tokenizer, dtype=dtype)
    if tokenizer is not None:
        raise ModelSpecError(f"tokenizer= goes with a loaded model; the generator {spec!r} loads its own tokenizer.")
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    torch_dtype = precision.resolve(dtype, default_device())
    source, gguf = resolve_spec(spec)
    where, stamp = source_key(str(Path(source) / gguf) if gguf else source)
    key = (where, trust_remote_code, torch_dtype)
    with _lock:
        held = _loaded.get(key)
        if held is None or held[0] != stamp:
            _loaded.pop(key, None)   # a stale copy goes before the new one loads (one model in memory, not two)
            model, tokenizer, eos, shares = load_weights(spec, trust_remote_code, torch_dtype)
            held = _loaded[key] = (stamp, LM(name=spec, model=model, tokenizer=tokenizer, eos_ids=eos,
                                             shares_prefix=shares, source=str(Path(source) / gguf) if gguf else source))
        return held[1]


def is_loaded_model(obj) -> bool:
    """Whether ``obj`` is an already-loaded model (a torch module, e.g. a transformers ``PreTrainedModel``) or a
    transformers ``Pipeline`` (which holds one), rather than a spec to load."""
    return isinstance(obj, torch.nn.Module) or is_pipeline(obj)


def is_pipeline(obj) -> bool:
    """Whether ``obj`` is a transformers ``Pipeline`` (known by its class, without importing transformers)."""
    return any(c.__name__ == "Pipeline" and c.__module__.startswith("transformers.")
               for c in type(obj).__mro__)


def loaded_generator(model, *, tokenizer=None, dtype: str | None = None, name: str | None = None) -> LM:
    """An ``LM`` over a model the caller already loaded: a transformers causal LM (``AutoModelForCausalLM``,
    ``LlamaForCausalLM``, ...) with its ``tokenizer``, or a text-generation ``pipeline`` (its ``model`` and
    ``tokenizer``; a ``tokenizer=`` given wins).

    The model is used as it is, on its own device and in its own dtype (``dtype``, where given, must be the
    model's: convert it yourself, e.g. ``model.to(torch.float32)``): it is put in eval mode and, for the families
    that allow it (Llama, Mistral, Qwen2, Qwen3), its attention is routed through the shared-prefix attention
    (``engine.shared_prefix``: plain sdpa for every call that passes no shared cache, so the model computes as
    before elsewhere). Its layers are not replaced: the prepacked CPU kernels a model loaded by path gets
    (``engine.packed``) are left out, so the object's step may be slower on a CPU in fp32, and its last bits may
    differ from the same weights loaded by path. A model that cannot write text (an encoder, a classification
    head) is refused with what to load instead (``ModelSpecError``); so is one without a tokenizer."""
    if is_pipeline(model):
        task = getattr(model, "task", "") or ""
        if task and task != "text-generation":
            raise ModelSpecError(f"a {task!r} pipeline is not a generator: give a text-generation pipeline "
                                 "(pipeline('text-generation', model=...)) or the causal LM and its tokenizer"
                                 + (" (a text-classification pipeline is a reward: load_reward(pipe))"
                                    if task in ("text-classification", "sentiment-analysis") else "") + ".")
        tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
        model = model.model
    if not isinstance(model, torch.nn.Module) or getattr(model, "config", None) is None:
        raise ModelSpecError(f"{type(model).__name__} is not a transformers model: give a causal LM loaded with "
                             "from_pretrained (or built from a config) and its tokenizer.")
    config = model.config
    path = str(getattr(config, "name_or_path", "") or "")
    name = name or path or type(model).__name__
    refusal = generator_refusal(config, name, archs=[type(model).__name__])
    if refusal is not None:
        raise ModelSpecError(refusal)
    if tokenizer is None:
        raise ModelSpecError("a loaded model needs its tokenizer: load_generator(model, tokenizer=tokenizer)"
                             + (f" (e.g. AutoTokenizer.from_pretrained({path!r}))." if path else "."))
    if not callable(getattr(tokenizer, "decode", None)) or not callable(tokenizer):
        raise ModelSpecError(f"tokenizer= must be a transformers tokenizer, not {type(tokenizer).__name__}.")
    params = next(model.parameters(), None)
    if params is None:
        raise ModelSpecError(f"model {name!r} has no parameters: it is not a loaded language model.")
    if dtype is not None and precision.requested(dtype) != "auto":
        wanted = precision.resolve(dtype, params.device)
        if wanted != params.dtype:
            raise ModelSpecError(f"model {name!r} is loaded in {str(params.dtype).replace('torch.', '')}, not "
                                 f"{dtype}: a loaded model runs in its own dtype; convert it first (model.to("
                                 f"{wanted})) or leave dtype out.")
    model.eval()
    eos = set()
    for ids in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                getattr(config, "eos_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if ids is not None:
            eos.update(ids if isinstance(ids, (list, tuple)) else [ids])
    shares = shared_prefix.install(model)
    return LM(name=name, model=model, tokenizer=tokenizer, eos_ids=frozenset(eos), shares_prefix=shares)


def unload() -> int:
    """Forget every generator ``load_generator`` holds; the number forgotten. A model still referenced
    elsewhere (an ``LM`` a caller keeps) lives on; the next ``load_generator`` loads from the files again."""
    with _lock:
        count = len(_loaded)
        _loaded.clear()
    return count


def coupled_uniforms(seed: int, position: int, cand_ids: torch.Tensor, n_total: int) -> torch.Tensor:
    """Uniforms in [0, 1) that depend only on (seed, candidate id, position). cand_ids: [rows]."""
    g = torch.Generator().manual_seed((seed * 1_000_003 + position * 7_919 + 1) % (2**63 - 1))
    return torch.rand(n_total, generator=g, dtype=torch.float64)[cand_ids.cpu()]


def logits_to_probs(logits: torch.Tensor, s: Sampling) -> tuple[torch.Tensor, torch.Tensor]:
    """Filtered, sorted probabilities and their token ids. logits: [rows, vocab]."""
    logits = logits.float()
    # Select first, then divide by the temperature: the order (and the divided values) are the
    # same, and only top_k values per row are divided instead of the whole vocabulary.
    if 0 < s.top_k < logits.shape[-1]:
        values, idx = logits.topk(s.top_k, dim=-1)           # sorted, descending
    else:
        values, idx = logits.sort(dim=-1, descending=True)
    probs = (values / s.temperature).softmax(-1)               # [rows, k]
    if s.top_p < 1.0:
        before = probs.cumsum(-1) - probs                       # mass strictly before each token
        probs = probs.masked_fill(before >= s.top_p, 0.0)       # the first token always stays
    return probs, idx


def sample(logits: torch.Tensor, u: torch.Tensor, s: Sampling) -> torch.Tensor:
    """Inverse-CDF sample one token per row. u: [rows] in [0, 1). Returns [rows] token ids."""
    probs, idx = logits_to_probs(logits, s)
    cdf = probs.cumsum(-1)
    target = (u.to(cdf.device, cdf.dtype) * cdf[:, -1]).unsqueeze(-1)   # [rows, 1]
    j = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[-1] - 1)
    return idx.gather(-1, j).squeeze(-1)


# Causal LMs whose logits are exactly ``lm_head(last_hidden_state)`` (no softcapping or scaling).
_PLAIN_HEAD = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}


def next_logits(lm: LM, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, object]:
    """Run the model on input_ids ([rows, len]) and return (last position's logits [rows, vocab] fp32, cache).

    Speed trick (CPU only): for a plain head, the vocab projection is computed by the head's
    prepacked oneDNN kernel where the model was packed (``packed.py``), else as ``W @ h.T``
    instead of ``F.linear(h, W)``. Same math; with few rows and a large vocabulary (49152 x 576
    for SmolLM2) oneDNN's skinny-GEMM path for ``h @ W.T`` measured ~2.5x slower in isolation; a
    whole 32-row decoding step measured ~8% faster (identical tokens).
    """
    model = lm.model
    head = model.get_output_embeddings()
    # a shared-prefix cache goes to the attention function too (it reads the prompt's part there)
    extra = {"shared_prefix": cache} if isinstance(cache, SharedPrefixCache) else {}
    if (lm.device.type == "cpu" and type(model).__name__ in _PLAIN_HEAD
            and isinstance(head, (torch.nn.Linear, PackedLinear)) and head.bias is None):
        out = (dec := model.get_decoder())(input_ids=input_ids, **with_cache(dec, cache), use_cache=True, **extra)
        h = out.last_hidden_state[:, -1]                          # [rows, hidden]
        if isinstance(head, PackedLinear):                        # prepacked (packed.py): its own kernel
            return head(h).float(), cache_of(out)
        return torch.mm(head.weight, h.t()).t().float(), cache_of(out)
    out = model(input_ids=input_ids, **with_cache(model, cache), use_cache=True, logits_to_keep=1, **extra)
    return out.logits[:, -1].float(), cache_of(out)


def next_logits_hidden(lm: LM, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, object, torch.Tensor]:
    """``next_logits`` that also returns every layer's hidden state at the last position, [rows, layers + 1,
    hidden] fp32 (the embeddings first, the final normed state last), for ST-BoN's consistency, on the
    eager path (the compiled step returns the same states: ``compiled.Step(..., hidden=True)``). Only for an
    engine built with ``hidden=True``: the logits are computed as ``next_logits`` computes them (the same head,
    the same kernel), so the sampled tokens stay those of every other arm."""
    model = lm.model
    head = model.get_output_embeddings()
    extra = {"shared_prefix": cache} if isinstance(cache, SharedPrefixCache) else {}
    if (lm.device.type == "cpu" and type(model).__name__ in _PLAIN_HEAD
            and isinstance(head, (torch.nn.Linear, PackedLinear)) and head.bias is None):
        out = (dec := model.get_decoder())(input_ids=input_ids, **with_cache(dec, cache), use_cache=True,
                                  output_hidden_states=True, **extra)
        h = out.last_hidden_state[:, -1]                          # [rows, hidden]
        logits = head(h).float() if isinstance(head, PackedLinear) else torch.mm(head.weight, h.t()).t().float()
    else:
        out = model(input_ids=input_ids, **with_cache(model, cache), use_cache=True, logits_to_keep=1,
                    output_hidden_states=True, **extra)
        logits = out.logits[:, -1].float()
    layers = torch.stack([x[:, -1] for x in out.hidden_states], dim=1).float()   # [rows, layers + 1, hidden]
    return logits, cache_of(out), layers


def coe_features(mean_states: torch.Tensor) -> torch.Tensor:
    """Chain-of-Embedding feature of each row (ST-BoN, following its paper's code): ``mean_states`` [rows,
    layers + 1, hidden] -> [rows]: the mean over layers of |h_l - h_l+1| / |h_0 - h_L| minus
    angle(h_l, h_l+1) / angle(h_0, h_L)."""
    h = mean_states.float()
    eps = 1e-8
    h0, hl = h[:, 0], h[:, -1]

    def angle(a, b):
        cos = (a * b).sum(-1) / (a.norm(dim=-1).clamp_min(eps) * b.norm(dim=-1).clamp_min(eps))
        return torch.acos(cos.clamp(-1.0 + 1e-7, 1.0 - 1e-7))

    scale_m = (h0 - hl).norm(dim=-1).clamp_min(eps)               # [rows]
    scale_a = angle(h0, hl).clamp_min(eps)
    step_m = (h[:, :-1] - h[:, 1:]).norm(dim=-1)                  # [rows, layers]
    step_a = angle(h[:, :-1], h[:, 1:])
    return (step_m / scale_m[:, None] - step_a / scale_a[:, None]).mean(-1)


class Engine:
    """One prompt, prefilled once; hands out batches of rows (``Rows``).

    ``stats=False`` skips the per-step token statistics (for rewards that do not read them).
    ``extra_prefill_tokens`` counts tokens prefilled again after the prompt (an engine that
    re-prefills, such as the bench's reference-style one, adds to it; the ledger charges them)."""

    name = "transformers"
    allow_sharing = True        # rows may hold the prompt's cache once (where ``lm.shares_prefix``)
    exclusive = False           # each Engine has its own cache: arms interleave freely
    refills = False             # rows share one length (no padding): a running batch takes no new rows
    extra_prefill_tokens = 0
    engine_steps = 0            # decoding steps its rows took (every pass's)

    @classmethod
    def from_config(cls, lm: LM, prompt_ids: list[int], cfg: RunConfig, *, n_total: int | None = None,
                    share_prefix: bool | None = None, stats: bool = True, reads: tuple[str, ...] = ()) -> "Engine":
        """The engine for ``cfg``'s sampling, seed, length and stop strings."""
        return cls(lm, prompt_ids, **cls.settings(cfg, n_total=n_total), share_prefix=share_prefix, stats=stats,
                   reads=reads)

    @staticmethod
    def settings(cfg: RunConfig, *, n_total: int | None = None) -> dict:
        """The engine's keyword arguments that ``cfg`` sets: sampling, seed, candidates, length, stop strings."""
        return dict(sampling=Sampling(cfg.temperature, cfg.top_p, cfg.top_k), seed=cfg.seed,
                    n_total=cfg.n if n_total is None else n_total, max_new_tokens=cfg.max_new_tokens, stop=cfg.stop,
                    budget=cfg.budget)

    @staticmethod
    def default_budget(lm: LM) -> int:
        """On a GPU, one arm's share of the free memory in KV slots (``memplan.arm_budget``: the slots each arm of a
        two-arm race may hold, with every arm's logits, step and bucket padding counted); on CPU, ``cpu_budget()``."""
        if lm.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(lm.device)
            shape = memplan.Shape.of(lm.model.config, torch.finfo(lm.model.dtype).bits // 8)
            return memplan.arm_budget(free, shape, arms=memplan.RACE_ARMS)
        return cpu_budget()

    def peak_memory_bytes(self, peak_slots: int) -> int:
        if self.lm.device.type == "cuda":
            return int(torch.cuda.max_memory_allocated(self.lm.device))
        return peak_slots * self.lm.kv_bytes_per_slot

    @torch.inference_mode()
    def __init__(self, lm: LM, prompt_ids: list[int], *, sampling: Sampling, seed: int,
                 n_total: int, max_new_tokens: int, stop: tuple[str, ...] = (),
                 share_prefix: bool | None = None, stats: bool = True, reads: tuple[str, ...] = (),
                 budget: int | None = None):
        """``share_prefix``: store the prompt's cache once (default: whenever ``lm.shares_prefix``).
        ``stats``: keep the per-row token statistics (mean log-probability, self-certainty) that
        the confidence rewards read; off, ``Done`` and ``Rows.stats`` report NaN. ``reads``: ``"top-<k>"`` keeps
        every row's token confidences at k (DeepConf's, ``Rows.confidences``); ``"hidden"`` every row's
        hidden-state chain feature (ST-BoN's, ``Rows.coe``; the forward then runs ``next_logits_hidden``).
        ``budget``: the KV slots the run was admitted (the captured step's buffers are sized from it, ``memplan``)."""
        conf_topk, hidden = read_options(reads)
        self.budget = budget
        self.lm, self.sampling, self.seed = lm, sampling, seed
        self.n_total, self.max_new_tokens, self.stop = n_total, max_new_tokens, stop
        self.share_prefix = lm.shares_prefix if share_prefix is None else bool(share_prefix)
        if self.share_prefix and not lm.shares_prefix:
            raise ValueError(f"model {lm.name!r} cannot share the prompt's cache across rows")
        self.stats, self.conf_topk, self.hidden = stats, int(conf_topk), bool(hidden)
        self.prompt_len = len(prompt_ids)
        # 1. prefill once, batch size 1
        ids = torch.tensor([prompt_ids], device=lm.device)
        self.prompt_hidden = None
        if self.hidden:
            self.prompt_logits, self.prompt_cache, self.prompt_hidden = next_logits_hidden(lm, ids, None)
        else:
            self.prompt_logits, self.prompt_cache = next_logits(lm, ids, None)   # [1, vocab]
        self.log_vocab = math.log(self.prompt_logits.shape[-1])
        self._stop_tail = max((len(s) for s in stop), default=0) + 2
        # the whole step captured (``captured.py``: CUDA by default) where the prompt is stored once, nothing reads
        # the layers' states or the top-k, and the model allows it; else the compiled step (``compiled.py``)
        graphable = self.share_prefix and not self.conf_topk and not self.hidden
        self.graph = captured.body_for(lm.model) if graphable else None
        self._uniforms = None
        self.step = compiled.step_for(lm.model) if self.share_prefix and self.graph is None else None
        # why the captured step failed in this process (this engine then decodes without it), else None
        self.fell_back: str | None = captured.failure(lm.model) if graphable else None

    @classmethod
    def warm_up(cls, lm) -> None:
        """Build ``lm``'s decoding step now (compiled where it can be: tens of seconds the first time on a CPU),
        the one-off cost its first engine paid inside that arm's clock."""
        if cls.allow_sharing and getattr(lm, "shares_prefix", False):
            body = captured.body_for(lm.model)
            if body is None:
                compiled.step_for(lm.model)
            else:
                body.warm()   # its fused pieces where SPECREJ_FUSE=1 (else nothing: a race captures its graphs)

    @property
    def step_kind(self) -> str:
        """How the rows decode: "captured" (``captured.Graphed``: the whole step, a CUDA graph on CUDA), "compiled"
        (``compiled.Step``) or "eager" (transformers' forward)."""
        return "captured" if self.graph is not None else "compiled" if self.step is not None else "eager"

    @property
    def step_note(self) -> str:
        """``step_kind``, and where capturing failed, that it fell back and why (what a ledger records)."""
        if self.fell_back is None:
            return self.step_kind
        kind = "captured body, uncaptured" if self.graph is not None else self.step_kind
        return f"{kind} (capture failed: {self.fell_back.splitlines()[0][:160]})"

    def uniforms(self) -> torch.Tensor:
        """Every position's coupled uniforms ([max_new_tokens, n_total] fp64 on the device), made once."""
        if self._uniforms is None:
            every = torch.arange(self.n_total)
            self._uniforms = torch.stack([coupled_uniforms(self.seed, t, every, self.n_total)
                                          for t in range(self.max_new_tokens)]).to(self.lm.device)
        return self._uniforms

    @property
    def kv_sharing(self) -> str:
        return "shared" if self.share_prefix else "copied"

    @torch.inference_mode()
    def start(self, cand_ids: list[int], feed: "Feed | None" = None) -> "Rows":
        """Rows for these candidates. ``feed``: how the rows' sampled tokens go into the model (default
        ``feed_tokens``; the bench's reference engine feeds left-padded rows with a mask)."""
        # 2. share the prompt's cache with every row of this pass (or copy it to each)
        if self.graph is not None and captured.failure(self.lm.model) is not None:   # capture failed in this process
            self.graph, self.fell_back = None, captured.failure(self.lm.model)
            self.step = compiled.step_for(self.lm.model)
        if self.graph is not None and feed is None:   # the captured step's own buffers and sampling
            return GraphRows(self, list(cand_ids))
        if self.step is not None and feed is None:   # the compiled step's own static buffers
            cache = compiled.StaticRows(self.step, self.prompt_cache, len(cand_ids))
            feed = feed_static_hidden if self.hidden else feed_static
        elif self.share_prefix:
            cache = SharedPrefixCache(self.prompt_cache, len(cand_ids))
        else:
            cache = copy.deepcopy(self.prompt_cache)
            cache.batch_repeat_interleave(len(cand_ids))
            grow_in_place(cache)
        logits = self.prompt_logits.expand(len(cand_ids), -1).clone()
        return Rows(self, list(cand_ids), cache, logits, feed or (feed_hidden if self.hidden else feed_tokens))

    def release(self) -> None:
        self.prompt_cache = self.prompt_logits = self.prompt_hidden = self._uniforms = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def feed_tokens(rows: "Rows", tok: torch.Tensor) -> tuple[torch.Tensor, object]:
    """The engine's feed: one token per row (tok: [rows]) into the rows' cache; returns the next-token
    logits [rows, vocab] and the cache."""
    return next_logits(rows.engine.lm, tok[:, None], rows.cache)


def feed_static(rows: "Rows", tok: torch.Tensor) -> tuple[torch.Tensor, object]:
    """The compiled step's feed: one token per row into its ``compiled.StaticRows``."""
    return rows.cache.feed(tok), rows.cache


def feed_static_hidden(rows: "Rows", tok: torch.Tensor) -> tuple[torch.Tensor, object]:
    """``feed_static`` for an engine built with ``reads=("hidden",)`` (as ``feed_hidden``)."""
    logits, layers = rows.cache.feed(tok, hidden=True)
    rows.hidden_sum += layers.double()
    return logits, rows.cache


def feed_hidden(rows: "Rows", tok: torch.Tensor) -> tuple[torch.Tensor, object]:
    """``feed_tokens`` for an engine built with ``reads=("hidden",)``: the fed tokens' hidden states of every layer
    join the rows' running sum (``Rows.coe`` reads its mean)."""
    logits, cache, layers = next_logits_hidden(rows.engine.lm, tok[:, None], rows.cache)
    rows.hidden_sum += layers.double()
    return logits, cache


Feed = Callable[["Rows", torch.Tensor], tuple[torch.Tensor, object]]


class Rows:
    """The rows decoding now: candidate ids, tokens, KV cache and next-token logits."""

    def __init__(self, engine: Engine, cand_ids: list[int], cache, logits: torch.Tensor, feed: Feed = feed_tokens):
        self.engine, self.feed = engine, feed
        self.ids = cand_ids
        self.tokens: list[list[int]] = [[] for _ in cand_ids]
        self.cache, self.logits = cache, logits                   # logits: [rows, vocab]
        self.generated = 0                                        # equal for every row
        n = len(cand_ids)
        self.lp_sum = torch.zeros(n, dtype=torch.float64)
        self.sc_sum = torch.zeros(n, dtype=torch.float64)
        self.conf: list[list[float]] = [[] for _ in cand_ids]     # token confidences (engine.conf_topk > 0)
        self.coe_: list[list[float]] = [[] for _ in cand_ids]     # chain features (engine.hidden)
        # the sum of every layer's hidden states over the positions fed so far: the prompt's last, then each row's
        self.hidden_sum = (engine.prompt_hidden.double().expand(n, -1, -1).clone() if engine.hidden else None)

    def __len__(self) -> int:
        return len(self.ids)

    def lengths(self) -> list[int]:
        """Tokens each row holds beyond the prompt: every row has fed the tokens it generated."""
        return [self.generated] * len(self.ids)

    def stats(self, i: int) -> tuple[float, float]:
        if not self.engine.stats:
            return math.nan, math.nan
        g = max(self.generated, 1)
        return float(self.lp_sum[i]) / g, float(self.sc_sum[i]) / g

    def confidences(self, i: int) -> list[float]:
        return self.conf[i]

    def coe(self, i: int) -> list[float]:
        return self.coe_[i]

    @torch.inference_mode()
    def step(self) -> list[Done]:
        """3. sample one token for every row, retire rows that end, forward the rest."""
        e, n = self.engine, len(self.ids)
        assert n > 0 and self.logits.shape[0] == n
        ids_t = torch.tensor(self.ids)
        u = coupled_uniforms(e.seed, self.generated, ids_t, e.n_total)
        tok = sample(self.logits, u, e.sampling)                  # [rows]
        if e.stats:
            self._accumulate_stats(tok)
        if e.conf_topk:
            self._accumulate_confidence()
        if e.hidden:   # positions 0 .. generated - 1 fed so far: their mean chain, before this token is fed
            for i, f in enumerate(coe_features(self.hidden_sum / (self.generated + 1)).tolist()):
                self.coe_[i].append(f)
        self.generated += 1
        e.engine_steps += 1
        tok_list = tok.tolist()
        done: list[Done] = []
        alive: list[int] = []
        for i, t in enumerate(tok_list):
            if reason := self._append(i, t):
                lp, sc = self.stats(i)
                done.append(Done(self.ids[i], self.tokens[i], reason, lp, sc, tuple(self.conf[i]),
                                 tuple(self.coe_[i])))
            else:
                alive.append(i)
        if len(alive) < n:
            self._select(alive)                                   # retire the rows that ended
            tok = tok[alive]
        if alive:
            self.logits, self.cache = self.feed(self, tok)
        return done

    def _append(self, i: int, t: int) -> str | None:
        """Row ``i`` takes token ``t`` (``generated`` already counts it); why the row ends now, or None."""
        e = self.engine
        self.tokens[i].append(t)
        if t in e.lm.eos_ids:
            return "eos"
        if e.stop and any(s in e.lm.decode(self.tokens[i][-e._stop_tail:]) for s in e.stop):
            return "stop"
        if self.generated >= e.max_new_tokens:
            return "length"
        return None

    def _accumulate_stats(self, tok: torch.Tensor) -> None:
        """Statistics for the confidence rewards, from logits we already have; two reductions
        instead of a full [rows, vocab] log_softmax: log p(tok) = logit(tok) - logsumexp, and
        KL(uniform || p) = logsumexp - mean(logits) - log(vocab)."""
        logits = self.logits                                      # [rows, vocab] fp32
        lse, mean = lone_row_padded(lambda x: (x.logsumexp(-1), x.mean(-1)), logits)   # [rows]
        self.lp_sum += (logits.gather(-1, tok[:, None]).squeeze(-1) - lse).double().cpu()
        self.sc_sum += (lse - mean - self.engine.log_vocab).double().cpu()

    def _accumulate_confidence(self) -> None:
        """DeepConf's token confidence of the distribution each row samples from now: minus the mean of its k
        highest log-probabilities (untempered), as logsumexp minus the mean of the k highest logits."""
        logits = self.logits                                      # [rows, vocab] fp32
        k = min(self.engine.conf_topk, logits.shape[-1])
        conf = lone_row_padded(lambda x: x.logsumexp(-1) - x.topk(k, dim=-1).values.mean(-1), logits).tolist()
        for i, c in enumerate(conf):
            self.conf[i].append(c)

    @torch.inference_mode()
    def keep(self, indices: list[int]) -> None:
        """4. prune: keep only these rows (positions in the batch), in this order."""
        self._select(indices)

    def _select(self, indices: list[int]) -> None:
        if not indices:
            self.release()
            return
        idx = torch.tensor(indices, device=self.logits.device)
        self.cache.batch_select_indices(idx)
        self.logits = self.logits[idx]
        self.ids = [self.ids[i] for i in indices]
        self.tokens = [self.tokens[i] for i in indices]
        cpu_idx = idx.cpu()
        self.lp_sum, self.sc_sum = self.lp_sum[cpu_idx], self.sc_sum[cpu_idx]
        self.conf = [self.conf[i] for i in indices]
        self.coe_ = [self.coe_[i] for i in indices]
        if self.hidden_sum is not None:
            self.hidden_sum = self.hidden_sum[idx.to(self.hidden_sum.device)]

    def release(self) -> None:
        self.ids, self.tokens = [], []
        self.cache = None
        self.logits = torch.empty(0, 0)
        self.lp_sum = self.sc_sum = torch.zeros(0, dtype=torch.float64)
        self.conf, self.coe_, self.hidden_sum = [], [], None


class GraphRows(Rows):
    """Rows on the captured step (``captured.Graphed``): sampling, statistics and the forward in one step on the
    device, one copy to the host a step (tokens and statistics); the host keeps the tokens' bookkeeping, as
    ``Rows.step`` does."""

    def __init__(self, engine: Engine, cand_ids: list[int]):
        e = engine
        vocab = e.prompt_logits.shape[-1]
        own = None if e.budget is None else max(1, e.budget - e.prompt_len)   # the prompt's slots are held once
        graphed = captured.Graphed(e.graph, e.prompt_cache, e.prompt_logits, cand_ids, uniforms=e.uniforms(),
                                   sample=lambda logits, u: sample(logits, u, e.sampling),
                                   max_new_tokens=e.max_new_tokens, budget=own,
                                   full_sort=not 0 < e.sampling.top_k < vocab)
        super().__init__(engine, cand_ids, graphed, torch.empty(0, 0), feed=None)
        self.sums: list[tuple[float, float]] = [(0.0, 0.0)] * len(cand_ids)   # each row's, as of the last step

    def stats(self, i: int) -> tuple[float, float]:
        if not self.engine.stats:
            return math.nan, math.nan
        g = max(self.generated, 1)
        return self.sums[i][0] / g, self.sums[i][1] / g

    @torch.inference_mode()
    def step(self) -> list[Done]:
        e, n = self.engine, len(self.ids)
        assert n > 0
        out = self.cache.step()
        if self.cache.failed is not None and e.fell_back is None:   # its capture failed: it ran uncaptured
            e.fell_back = self.cache.failed
        self.sums = [(lp, sc) for _, lp, sc in out]
        self.generated += 1
        e.engine_steps += 1
        done: list[Done] = []
        alive: list[int] = []
        for i, (t, _, _) in enumerate(out):
            if reason := self._append(i, t):
                lp, sc = self.stats(i)
                done.append(Done(self.ids[i], self.tokens[i], reason, lp, sc))
            else:
                alive.append(i)
        if len(alive) < n:
            self._select(alive)
        return done

    def _select(self, indices: list[int]) -> None:
        if not indices:
            self.release()
            return
        self.cache.select(indices)
        self.ids = [self.ids[i] for i in indices]
        self.tokens = [self.tokens[i] for i in indices]
        self.sums = [self.sums[i] for i in indices]
