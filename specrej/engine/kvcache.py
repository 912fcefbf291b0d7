"""KV-cache layers that grow in place instead of by ``torch.cat``."""
from __future__ import annotations

import functools
import inspect

import torch
from transformers.cache_utils import DynamicLayer


@functools.lru_cache(maxsize=None)
def cache_arg(cls: type) -> str:
    """The name a model class's ``forward`` takes its KV cache by: ``cache`` from transformers 5.24 on (where
    ``past_key_values``, in and out, warns on every run that it goes in 5.40), ``past_key_values`` before."""
    try:
        return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"
    except (TypeError, ValueError):
        return "past_key_values"


def with_cache(model, cache) -> dict:
    """``{name: cache}`` for a call of ``model`` (or its ``generate``), by the name its transformers takes."""
    return {cache_arg(type(model)): cache}


def cache_of(out):
    """The KV cache a model's output carries (``out.cache``, or ``out.past_key_values`` before transformers 5.24),
    read without the deprecated alias's warning."""
    return out.cache if "cache" in getattr(out, "__dataclass_fields__", {}) else out.past_key_values


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are views into buffers with spare room.

    Why: ``DynamicLayer.update`` appends with ``torch.cat``, copying the whole cache every step
    (at 32 rows and ~130 tokens that is ~380 MB of memory traffic per step, as much as the
    weights). Here a step writes one token in place and the buffers grow by ``CHUNK`` tokens
    only when full, so the copy happens once per ``CHUNK`` steps. Spare room costs at most
    ``CHUNK`` slots per row beyond what the methods' budget counts.
    """

    _layer_type = None   # never register in transformers' layer-type mapping
    CHUNK = 16

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int | None = None):
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        # buffers: [rows, heads, capacity, dim]; the first ``length`` tokens are in use (all by default)
        self._k, self._v = keys, values
        self._len = keys.shape[-2] if length is None else length
        self._view()

    def _view(self) -> None:
        self.keys, self.values = self._k[..., :self._len, :], self._v[..., :self._len, :]

    def _reserve(self, extra: int) -> None:
        if self._len + extra <= self._k.shape[-2]:
            return
        cap = self._len + extra + self.CHUNK
        for name in ("_k", "_v"):
            old = getattr(self, name)
            new = old.new_empty(*old.shape[:-2], cap, old.shape[-1])
            new[..., :self._len, :] = old[..., :self._len, :]
            setattr(self, name, new)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        self._reserve(n)
        self._k[..., self._len:self._len + n, :] = key_states
        self._v[..., self._len:self._len + n, :] = value_states
        self._len += n
        self._view()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self._len

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0:
            self._len = max(0, self._len + tokens_to_remove)
            self._view()
        elif tokens_to_remove > 0:
            super().crop(tokens_to_remove)   # raises, as DynamicLayer does

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k, self._v = self._k.repeat_interleave(repeats, 0), self._v.repeat_interleave(repeats, 0)
        self._view()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._view()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx.to(self._k.device))

    def reset(self) -> None:
        self._len = 0
        self._view()


def grow_in_place(cache) -> None:
    """Swap every plain ``DynamicLayer`` of ``cache`` for a ``GrowingLayer`` holding the same tensors."""
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys is not None and layer.keys.numel():
            cache.layers[i] = GrowingLayer(layer.keys, layer.values)
