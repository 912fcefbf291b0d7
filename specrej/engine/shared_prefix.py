"""The prompt's KV cache stored once, shared by every row (Hydragen / cascade attention).

Contract: all rows of a pass continue one prompt. ``SharedPrefixCache`` keeps the prompt's keys
and values once per layer (``[1, kv_heads, P, head_dim]``) and, per row, only the tokens that
row generated (``[rows, kv_heads, g, head_dim]``, grown in place like ``engine.GrowingLayer``).
Attention is split in two and merged by log-sum-exp:

  prefix part:  every row's queries against the one prefix: on CUDA one matmul with the rows
                folded into the query axis (``[kv_heads, rows x groups x q, d] @ [kv_heads, d, P]``);
                on a CPU a matmul broadcast over rows, so that a row's result does not depend on
                the batch size (see ``shared_prefix_attention``);
  per-row part: each row's queries against its own generated tokens (causal within them);
  merge:        lse = logaddexp(lse_p, lse_r); out = o_p e^(lse_p - lse) + o_r e^(lse_r - lse).

It plugs into ``transformers`` through its extension points, not a fork of the model:
``AttentionInterface`` / ``AttentionMaskInterface`` register ``ATTN_NAME`` (sdpa's mask; sdpa
itself whenever no shared cache is passed, so the model behaves as before everywhere else), and
the cache is passed to the attention as the keyword ``shared_prefix`` (the model forwards extra
keywords down to its attention function). The cache reports ``P + g`` as its length, so the
model's positions (RoPE) continue after the prompt.

Families with the plain attention this needs: Llama, Mistral, Qwen2, Qwen3 (full attention, no
sliding window). Others keep a copy of the prompt per row (``supports`` says which).
"""
from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.cache_utils import Cache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .kvcache import GrowingLayer
from .packed import lone_row_padded

ATTN_NAME = "specrej_shared_prefix"
FAMILIES = {"llama", "mistral", "qwen2", "qwen3"}


def supports(model) -> bool:
    """True for Llama/Mistral/Qwen2/Qwen3-style causal LMs with full attention in every layer."""
    c = model.config
    if getattr(c, "model_type", None) not in FAMILIES or not getattr(model, "_supports_attention_backend", True):
        return False
    if any(t != "full_attention" for t in (getattr(c, "layer_types", None) or ())):
        return False
    window = getattr(c, "sliding_window", None)
    if window is not None and getattr(c, "use_sliding_window", True):
        return False
    return True


def install(model) -> bool:
    """Route the model's attention through ``ATTN_NAME`` when ``supports(model)``; returns whether it did."""
    if not supports(model):
        return False
    AttentionInterface.register(ATTN_NAME, shared_prefix_attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
    model.set_attn_implementation(ATTN_NAME)
    return model.config._attn_implementation == ATTN_NAME


class SharedPrefixLayer(GrowingLayer):
    """One layer: the prompt's keys/values once (``prefix_*``, batch 1) and each row's own tokens."""

    def __init__(self, prefix_keys: torch.Tensor, prefix_values: torch.Tensor, rows: int):
        assert prefix_keys.shape[0] == 1, "the prefix is stored once: batch size 1"
        self.prefix_keys, self.prefix_values = prefix_keys, prefix_values   # [1, kv_heads, P, d]
        b, h, _, d = prefix_keys.shape
        empty = prefix_keys.new_empty(rows, h, self.CHUNK, d)
        super().__init__(empty, torch.empty_like(empty), length=0)

    @property
    def prefix_len(self) -> int:
        return self.prefix_keys.shape[-2]

    def get_seq_length(self) -> int:
        return self.prefix_len + self._len   # positions continue after the prompt

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0


class SharedPrefixCache(Cache):
    """A cache whose layers share one prompt prefix: ``prefix`` is the batch-1 prompt cache."""

    def __init__(self, prefix: Cache, rows: int):
        layers = [SharedPrefixLayer(layer.keys, layer.values, rows) for layer in prefix.layers]
        super().__init__(layers=layers)

    @property
    def prefix_len(self) -> int:
        return self.layers[0].prefix_len

    def own_length(self) -> int:
        """Tokens each row holds beyond the shared prefix."""
        return self.layers[0]._len


def _row_causal_bias(q: int, g: int, device, groups: int) -> torch.Tensor:
    """Additive mask for q new tokens at the end of g per-row keys: [groups x q, g] (0 or -inf)."""
    qpos = torch.arange(g - q, g, device=device).repeat(groups)          # query i sits at key position g-q+i
    allowed = torch.arange(g, device=device)[None, :] <= qpos[:, None]
    return torch.zeros(allowed.shape, device=device).masked_fill_(~allowed, float("-inf"))


def _part(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float,
          bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of q [..., m, d] over k, v [..., n, d] (broadcast over leading axes);
    returns (output fp32, log-sum-exp fp32 [..., m, 1])."""
    s = torch.matmul(q, k.transpose(-1, -2)).float() * scaling
    if bias is not None:
        s = s + bias
    m = s.amax(-1, keepdim=True)
    p = (s - m).exp()
    total = p.sum(-1, keepdim=True)
    return torch.matmul(p.to(v.dtype), v).float() / total, m + total.log()


def shared_prefix_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask, scaling: float, dropout: float = 0.0, shared_prefix=None, **kwargs):
    """Attention with a shared prefix when the call carries a ``SharedPrefixCache``; sdpa otherwise.

    query: [rows, heads, q, d] (after RoPE); key/value: [rows, kv_heads, g, d], the rows' own tokens
    (the current ones included). Returns ([rows, q, heads, d], None) like transformers' attention functions.
    """
    layer = shared_prefix.layers[module.layer_idx] if isinstance(shared_prefix, SharedPrefixCache) else None
    if layer is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, **kwargs)
    b, h, q, d = query.shape
    kvh, g = key.shape[1], key.shape[-2]
    groups = h // kvh
    # heads kv*groups + j share kv head kv (as repeat_kv lays them out): fold the groups into the query axis
    qg = query.reshape(b, kvh, groups * q, d)                              # [rows, kv_heads, groups x q, d]
    if query.device.type == "cuda":
        # prefix part, Hydragen's way: the rows join the query axis, one matmul against the single prefix
        qp = qg.transpose(0, 1).reshape(1, kvh, b * groups * q, d)        # [1, kv_heads, rows x groups x q, d]
        o_p, lse_p = _part(qp, layer.prefix_keys, layer.prefix_values, scaling)
        o_p = o_p.view(kvh, b, groups * q, d).transpose(0, 1)              # [rows, kv_heads, groups x q, d]
        lse_p = lse_p.view(kvh, b, groups * q, 1).transpose(0, 1)
    else:
        # prefix part on a CPU: a matmul broadcast over rows (the same FLOPs; the one prefix stays in
        # cache). Folded, the GEMM's M would be rows x groups, and the CPU kernels round differently for
        # different M, so a row's attention would depend on how many rows share its batch; per row,
        # M = groups x q whatever the batch. (Other ops still round by batch size in bf16: docs/library.md.)
        o_p, lse_p = lone_row_padded(lambda rows: _part(rows, layer.prefix_keys, layer.prefix_values, scaling), qg)
    # per-row part: causal within the new tokens when several arrive at once
    bias = _row_causal_bias(q, g, query.device, groups) if q > 1 else None
    o_r, lse_r = _part(qg, key, value, scaling, bias)
    # merge by log-sum-exp; not torch.logaddexp: its log1p rounds the tail of a vectorised loop differently
    # from the rest on a CPU, so the last row of some batch sizes would get other values (exp, log don't)
    top = torch.maximum(lse_p, lse_r)
    lse = top + ((lse_p - top).exp() + (lse_r - top).exp()).log()
    out = o_p * (lse_p - lse).exp() + o_r * (lse_r - lse).exp()           # [rows, kv_heads, groups x q, d]
    out = out.to(query.dtype).reshape(b, h, q, d).transpose(1, 2).contiguous()
    return out, None
