"""What made a result, by content: sha256 digests of the generator's and the reward's weights and tokenizers.

A name ("embedded", a folder) says where weights were read, not which weights they were: re-saved in place, the
same folder holds other weights. Results a paper cites carry these digests (``origin.provenance(lm=, reward=)``,
every ``race_many`` row), and a resumed run refuses rows whose digests or dtype differ (``many.race_many``).

How a digest is taken, cheapest first:
  - a model loaded from a folder or a file (``load_generator``, ``load_reward("hf:<folder>")``, the preference
    reward's embedder): sha256 over the folder's weight files and ``config.json`` (names and contents), each
    file read once per process while its size and modification time stay the same;
  - a hub id: the same over its snapshot in the local hub cache, where it is there;
  - a model object (``load_generator(model, tokenizer=...)``, a pipeline): sha256 over its state dict (each
    tensor's name, dtype, shape and bytes), taken again only where a parameter was changed in place;
  - a tokenizer: sha256 over its whole definition (a fast tokenizer's JSON: vocabulary, merges, normalizer),
    its special tokens and its chat template;
  - a Python reward: sha256 over its source code (its bytecode where the source cannot be read).
A reward with no weights and no code of the caller's (sentiment, instructions, confidence) has no digest: its
code is specrej's own, whose version provenance records.

This module reads files and tensors; it imports torch only where a state dict is hashed (already loaded then).
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import threading
import weakref
from pathlib import Path

__all__ = ["folder_digest", "state_dict_digest", "tokenizer_digest", "generator_fingerprint", "reward_fingerprint",
           "differences"]

#: the files a model's weights live in (``save_pretrained``'s, PyTorch's, GGUF) and the config that shapes them
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".msgpack", ".h5")
CHUNK = 1 << 22   # bytes read at a time

_lock = threading.Lock()
_files: dict[tuple, str] = {}                       # (real path, size, mtime ns) -> the file's sha256
_objects: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # module -> (parameters' versions, digest)
_tokenizers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _file_sha(path: Path) -> str:
    st = path.stat()
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _files:
            return _files[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    with _lock:
        _files[key] = h.hexdigest()
    return _files[key]


def weight_files(source) -> list[Path]:
    """The files ``folder_digest`` reads: a file itself, or a folder's weight files and config.json (sorted)."""
    path = Path(source).expanduser()
    if path.is_file():
        return [path]
    if not path.is_dir():
        return []
    return sorted(f for f in path.iterdir() if f.is_file() and not f.name.startswith(".")
                  and (f.name.endswith(WEIGHT_SUFFIXES) or f.name == "config.json"))


def folder_digest(source) -> tuple[str, int] | None:
    """(sha256 over a file's or a folder's weight files and config.json, how many files), or None where there are
    no weight files there."""
    files = weight_files(source)
    if not any(f.name.endswith(WEIGHT_SUFFIXES) for f in files):
        return None
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + _file_sha(f).encode() + b"\n")
    return h.hexdigest(), len(files)


def _hub_folder(repo_id: str) -> str | None:
    """A hub id's snapshot in the local hub cache (no network), or None."""
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(repo_id, local_files_only=True)
    except Exception:   # not cached, no huggingface_hub, an offline error: hash the object instead
        return None


def _versions(model) -> tuple:
    try:
        return tuple(t._version for t in model.state_dict().values())
    except (RuntimeError, AttributeError):   # inference tensors keep no version counter
        return ()


def state_dict_digest(model) -> str:
    """sha256 over a torch module's state dict: each tensor's name, dtype, shape and bytes, in name order."""
    import torch

    stamp = _versions(model)
    with _lock:
        held = _objects.get(model)
    if held is not None and stamp and held[0] == stamp:
        return held[1]
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach()
        h.update(f"{name}|{str(t.dtype).replace('torch.', '')}|{tuple(t.shape)}\n".encode())
        if t.numel():
            h.update(t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().data)
    digest = h.hexdigest()
    with _lock:
        _objects[model] = (stamp, digest)
    return digest


def tokenizer_digest(tokenizer) -> str | None:
    """sha256 over a tokenizer's definition, its special tokens and its chat template; None for no tokenizer."""
    if tokenizer is None:
        return None
    try:
        with _lock:
            if tokenizer in _tokenizers:
                return _tokenizers[tokenizer]
    except TypeError:   # not weak-referenceable: no cache
        pass
    backend = getattr(tokenizer, "backend_tokenizer", None)
    try:
        body = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    except Exception:
        body = repr(type(tokenizer))
    extra = json.dumps({"special": sorted(map(str, getattr(tokenizer, "all_special_tokens", []) or [])),
                        "chat_template": getattr(tokenizer, "chat_template", None)}, sort_keys=True, default=str)
    digest = hashlib.sha256((body + "\n" + extra).encode()).hexdigest()
    try:
        with _lock:
            _tokenizers[tokenizer] = digest
    except TypeError:
        pass
    return digest


def model_digest(model, source: str | None) -> dict:
    """``{"sha256", "of"}`` for a model's weights: its source's files where it was loaded from a folder, a file or
    a cached hub id (``of``: "3 files"), else its state dict (``of``: "state dict")."""
    folder = source
    if source is not None and not Path(source).expanduser().exists():
        folder = _hub_folder(source)
    found = folder_digest(folder) if folder is not None else None
    if found is not None:
        return {"sha256": found[0], "of": f"{found[1]} file{'s' if found[1] != 1 else ''}"}
    return {"sha256": state_dict_digest(model), "of": "state dict"}


def generator_fingerprint(lm) -> dict:
    """The generator's weights (``model_digest``), its tokenizer (with its chat template) and its dtype."""
    model = getattr(lm, "model", None)
    out = {"name": str(getattr(lm, "name", lm)),
           "dtype": str(getattr(lm, "dtype", None)).replace("torch.", "") if hasattr(lm, "dtype") else None}
    if model is not None and hasattr(model, "state_dict"):
        out.update(model_digest(model, getattr(lm, "source", None)))
    else:   # another backend (vLLM): its weights by its name's files, where they are local
        found = folder_digest(out["name"]) if out["name"] else None
        out.update({"sha256": found[0], "of": f"{found[1]} files"} if found else {"sha256": None, "of": None})
    out["tokenizer_sha256"] = tokenizer_digest(getattr(lm, "tokenizer", None))
    return out


def _code_digest(fn) -> str | None:
    target = getattr(fn, "__func__", fn)
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        code = getattr(target, "__code__", None) or getattr(getattr(target, "__call__", None), "__code__", None)
        if code is None:
            return None
        text = repr((code.co_code, code.co_consts, code.co_names))
    return hashlib.sha256(text.encode()).hexdigest()


def reward_fingerprint(reward) -> dict:
    """The reward's weights (a reward model's, the preference reward's embedder's), its tokenizer, and the code of a
    reward written in Python (a function, or an object's ``score``); ``sha256`` None where it has no weights."""
    inner = getattr(reward, "reward", reward)   # as_reward's wrapper holds the caller's object
    out = {"name": str(getattr(reward, "name", None) or type(inner).__name__)}
    holder = getattr(inner, "embedder", None) or inner
    model = getattr(holder, "model", None)
    if model is not None and hasattr(model, "state_dict"):
        out.update(model_digest(model, getattr(holder, "source", None)))
        out["tokenizer_sha256"] = tokenizer_digest(getattr(holder, "tokenizer", None))
    else:
        out.update({"sha256": None, "of": None})
    if not type(inner).__module__.startswith("specrej."):   # the caller's own code
        out["code_sha256"] = _code_digest(inner.score if hasattr(inner, "score") else inner)
    elif hasattr(inner, "fn"):   # CallableReward: the function it wraps
        out["code_sha256"] = _code_digest(inner.fn)
    return out


def differences(there: dict | None, here: dict) -> list[str]:
    """What differs between the fingerprints a row was made with (``there``: its provenance's ``weights``) and
    these, in words: ``["the generator's weights (sha256 1a2b3c4d… there, 5e6f7a8b… here)", ...]``."""
    if not there:
        return ["no weight digests there (rows written before specrej recorded them): which weights made them "
                "cannot be told"]
    out = []
    for who in ("generator", "reward"):
        a, b = there.get(who) or {}, here.get(who) or {}
        for key, words in (("sha256", "weights"), ("tokenizer_sha256", "tokenizer"), ("code_sha256", "code"),
                           ("dtype", "dtype")):
            if a.get(key) != b.get(key):
                show = (lambda v: f"{v[:12]}…" if isinstance(v, str) and len(v) > 20 else repr(v))
                out.append(f"the {who}'s {words} ({show(a.get(key))} there, {show(b.get(key))} here)")
    return out
