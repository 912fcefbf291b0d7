"""The protocols between the methods and an inference engine, and the registry of engines.

``LanguageModel`` is the generator the methods read (its tokenizer, sizes and backend); a
``BackendFactory`` builds a ``Backend`` per prompt, which hands out a ``Batch`` of rows. A backend
turns one prompt into many sampled continuations. It knows tokens, not rewards, rounds or budgets;
the methods (``specrej.methods``) decide which rows live, with the scheduling core
(``specrej.core``), whose budget turns the rows' lengths into KV slots. Implementations:

- ``hf.Engine``: the transformers engine (the default; CPU or one GPU), ``hf.LM``'s backend;
- ``specrej.bench.reference.RefEngine``: that engine re-prefilling at every decision, as the
  paper's reference code does (for the bench's comparison);
- ``vllm.VllmEngine``: vLLM's ``LLMEngine`` (paged KV cache, prefix caching), ``vllm.VllmLM``'s backend;
- ``replay.Replay``: a recorded run replayed (the simulator).

``BACKENDS`` names the engines a user picks (``--backend``, SPECREJ_BACKEND): name -> the loader
of its ``LanguageModel``; ``load_lm`` loads through it.

The life of a prompt: ``factory(lm, prompt_ids, ...)`` prefills it once -> ``start(ids)`` gives a
``Batch`` of rows (candidate ids; candidate c draws its randomness from (seed, c) alone, so it
writes the same text in every method) -> ``step()`` samples one token per row and returns the
rows that ended -> ``keep(positions)`` prunes -> ``release()``. This module is torch-free.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

BACKEND_ENV = "SPECREJ_BACKEND"


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 50


@dataclass(frozen=True)
class Done:
    """A row that ended this step."""

    cand: int
    tokens: list[int]
    reason: str  # "eos" | "stop" | "length"
    mean_logprob: float
    mean_self_certainty: float
    confidences: tuple[float, ...] = ()   # its token confidences, one per token (an engine built with a "top-<k>" read)
    coe: tuple[float, ...] = ()           # its hidden-state chain's feature after each token (built with hidden)


class Batch(Protocol):
    """The rows decoding now. ``ids[i]`` is row i's candidate id, ``tokens[i]`` what it wrote;
    every row has generated ``generated`` tokens."""

    ids: list[int]
    tokens: list[list[int]]
    generated: int

    def __len__(self) -> int: ...

    def step(self) -> list[Done]:
        """Sample one token for every row; rows that end (EOS, a stop string, max_new_tokens) leave
        the batch and are returned."""

    def keep(self, positions: Sequence[int]) -> None:
        """Prune: keep only the rows at these positions, in this order; the others' memory is freed."""

    def release(self) -> None: ...

    def add(self, cand_ids: list[int]) -> None:
        """Refill: new rows join the running batch (only where the factory says ``refills``); they
        start at their own token 0 while the others go on, so ``generated`` is then the oldest row's
        length, and ``lengths`` differ."""

    def lengths(self) -> list[int]:
        """Tokens each row holds in the KV cache beyond the prompt (padding included where a backend
        pads). The backend reports these only: ``core.budget.KVBudget`` turns them into slots."""

    def stats(self, i: int) -> tuple[float, float]:
        """Row i's mean log-probability and mean self-certainty so far (NaN when not kept)."""

    def confidences(self, i: int) -> Sequence[float]:
        """Row i's token confidence for every token it wrote (DeepConf's): minus the mean of the k highest
        log-probabilities of the untempered distribution it sampled that token from, k = the factory's
        ``"top-<k>"`` read. Only from a backend built with ``reads=("top-<k>",)`` (else empty)."""

    def coe(self, i: int) -> Sequence[float]:
        """Row i's Chain-of-Embedding feature after every token it wrote (ST-BoN's consistency reads it): after
        t tokens, the hidden states of every layer averaged over the t positions fed so far (the prompt's last
        and the row's first t - 1 tokens), then the mean over layers l of |h_l - h_l+1| / |h_0 - h_L| minus
        angle(h_l, h_l+1) / angle(h_0, h_L). Only from a backend built with ``reads=("hidden",)`` (else empty)."""


class Backend(Protocol):
    """One prompt, prefilled once. Built by a ``BackendFactory``."""

    extra_prefill_tokens: int     # tokens prefilled again after the prompt (the ledger charges them)
    engine_steps: int             # steps the engine ran for this prompt (the ledger's ``steps``): its rows'
                                  # decoding steps; vLLM's own count also has its prefill and scheduling steps

    def start(self, cand_ids: list[int]) -> Batch: ...

    def release(self) -> None: ...

    def peak_memory_bytes(self, peak_slots: int) -> int:
        """Peak memory of the run's KV cache (or, on a GPU, all it allocated), for the ledger."""


class BackendFactory(Protocol):
    """A Backend class: builds one per prompt, and says what budget and sharing its LM allows."""

    name: str                     # "transformers", "vllm", ... (the trace's "backend")
    allow_sharing: bool           # may rows hold the prompt's slots once?
    exclusive: bool               # does a step advance every request the engine holds (vLLM)? Then arms
                                  # on one engine run one after the other (methods.race, sequential)
    refills: bool                 # can a running batch take new rows (``Batch.add``)? A paged KV cache
                                  # (vLLM) can; the transformers engine's rows share one length (no
                                  # padding, no attention mask), so it cannot

    def __call__(self, lm, prompt_ids: list[int], *, sampling: Sampling, seed: int, n_total: int,
                 max_new_tokens: int, stop: tuple[str, ...] = (), share_prefix: bool | None = None,
                 stats: bool = True, reads: tuple[str, ...] = ()) -> Backend: ...

    def from_config(self, lm, prompt_ids: list[int], cfg, *, n_total: int | None = None,
                    share_prefix: bool | None = None, stats: bool = True, reads: tuple[str, ...] = ()) -> Backend:
        """The backend for a ``RunConfig``'s sampling, seed, length and stop strings (its ``budget``: the slots the run
        was admitted, as the methods pass it; a backend that lays out its buffers ahead sizes them from it).
        ``reads``: what its steps read beyond the logits, by name (``core.cost.read_kwargs``): ``"top-<k>"``, its
        rows report token confidences (``Batch.confidences``, DeepConf); ``"hidden"``, their hidden-state chain's
        feature (``Batch.coe``, ST-BoN). A backend that cannot raises ValueError saying so."""

    def default_budget(self, lm) -> int:
        """KV slots a run gets when its config names no budget."""


class LanguageModel(Protocol):
    """The generator as the methods, the budget and the ledger read it (``hf.LM``, ``vllm.VllmLM``)."""

    name: str                     # its spec (the trace's "model")
    tokenizer: object             # the Hugging Face tokenizer (the bench's reference engine re-tokenises)
    eos_ids: frozenset[int]       # tokens that end an answer
    shares_prefix: bool           # can rows hold the prompt's KV slots once (``core.budget.sharing``)?

    @property
    def n_params(self) -> int:
        """Parameters (the ledger's FLOPs, ``core.cost.flops``)."""

    @property
    def max_positions(self) -> int | None:
        """The model's context length (None: unknown); ``KVBudget.check`` refuses longer runs."""

    @property
    def kv_bytes_per_slot(self) -> int:
        """Bytes of one token's keys and values in every layer (the ledger's peak memory)."""

    @property
    def dtype(self): ...          # torch.dtype of the weights (the trace's "dtype")

    @property
    def device(self): ...         # torch.device it runs on (a CPU gets ``core.budget.cpu_budget``)

    @property
    def backend(self) -> "BackendFactory":
        """The engine it runs on (the methods' default ``engine``)."""

    def render(self, prompt: str) -> list[int]:
        """Token ids of the prompt through the chat template (as is for base models)."""

    def decode(self, ids: list[int]) -> str:
        """Text of these token ids, special tokens skipped."""


def _load_transformers(spec, *, trust_remote_code: bool = False, dtype: str | None = None,
                       kv_slots: int | None = None, tokenizer=None) -> LanguageModel:
    from .hf import load_generator

    return load_generator(spec, tokenizer=tokenizer, trust_remote_code=trust_remote_code, dtype=dtype)


def _load_vllm(spec, *, trust_remote_code: bool = False, dtype: str | None = None,
               kv_slots: int | None = None, tokenizer=None) -> LanguageModel:
    from .vllm import load_vllm_generator

    if not isinstance(spec, (str, os.PathLike)) or tokenizer is not None:
        from ..engine.models import ModelSpecError

        where = getattr(getattr(getattr(spec, "model", spec), "config", None), "name_or_path", "") or "<folder>"
        raise ModelSpecError(f"the vllm backend loads its own weights from a folder or hub id, not a loaded "
                             f"{type(spec).__name__}: give the path ({where!r}), or use the transformers backend "
                             "for a loaded model.")
    spec = os.fspath(spec)

    return load_vllm_generator(spec, dtype={"fp32": "float32", "bf16": "bfloat16"}.get(dtype or "", "auto"),
                               kv_slots=kv_slots)


BACKENDS: dict[str, Callable[..., LanguageModel]] = {"transformers": _load_transformers, "vllm": _load_vllm}


def planned_budget(budget: int | None) -> int | None:
    """The budget a run will get, known before its model loads: its own; else on a CPU the CPU budget
    (every backend's default there, ``core.budget.cpu_budget``); None on a GPU, where the loaded backend
    sizes it from free memory (``BackendFactory.default_budget``)."""
    import torch

    from ..core.budget import granted_budget

    return granted_budget(budget, on_gpu=budget is None and torch.cuda.is_available())


def load_lm(spec="embedded", *, backend: str | None = None, trust_remote_code: bool = False,
            dtype: str | None = None, kv_slots: int | None = None, tokenizer=None) -> LanguageModel:
    """The generator ``spec`` on ``backend`` (a name in ``BACKENDS``; default: SPECREJ_BACKEND, else
    transformers). The methods then run on that backend (``lm.backend``). ``kv_slots``: vLLM on a CPU
    sizes its KV pool to hold this many slots (the race's budget). ``spec`` may also be an already-loaded
    model with its ``tokenizer`` (or a text-generation pipeline), on the transformers backend
    (``hf.loaded_generator``); a ``LanguageModel`` already built is returned as it is."""
    if _is_language_model(spec):
        return spec
    name = (backend or os.environ.get(BACKEND_ENV, "") or "transformers").strip().lower()
    if name not in BACKENDS:
        raise ValueError(f"backend {name!r} is unknown; choose one of {', '.join(BACKENDS)} ({BACKEND_ENV}).")
    return BACKENDS[name](spec, trust_remote_code=trust_remote_code, dtype=dtype, kv_slots=kv_slots,
                          tokenizer=tokenizer)


def _is_language_model(obj) -> bool:
    """A ``LanguageModel`` already built (``hf.LM``, ``vllm.VllmLM``, a replay's), not a spec or a raw model."""
    return all(hasattr(obj, a) for a in ("backend", "render", "decode", "eos_ids", "tokenizer"))
