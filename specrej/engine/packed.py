"""Linear layers with their weights prepacked for oneDNN (CPU, fp32): a faster decoding step.

Why: a decoding step is ~200 small-M matmuls (M = the rows decoding). ``F.linear`` hands MKL/oneDNN
a plain ``[out, in]`` weight, which the kernel re-lays out (packs) on every call; the packing pass
reads every weight from memory once more per step. Prepacking once at load is what inductor's
``freezing`` does on CPUs. Measured on the project's 2-core machine (AMD EPYC, AVX2, fp32, quiet,
paired steps of one engine): 32 rows 165 -> 136 ms a step, 128 rows 599 -> 493 ms; the numbers
and the script are in docs/performance.md (the engine).

What it keeps: the model's forward (transformers' own code) and its parameters (``weight`` is the
same tensor, so tied embeddings, ``n_params`` and saving are unchanged); only the matmul kernel
changes. oneDNN computes each row of the output with the same blocking whatever the number of
rows, so a candidate's logits do not depend on the batch it decodes in: the engine's coupling
tests (the same candidate writes the same tokens in batches of other sizes) hold in fp32.

Off with ``SPECREJ_PACKED=0``; never used on CUDA, for other dtypes, or where oneDNN is missing.
"""
from __future__ import annotations

import functools
import os

import torch

PACKED_ENV = "SPECREJ_PACKED"
BATCH_HINT = 128   # oneDNN picks its blocking for this many rows; any row count works


def lone_row_padded(fn, x: torch.Tensor):
    """``fn(x)`` (a tensor or a tuple of them, rows first) with a lone row of ``x`` padded to two and cut
    back: CPU kernels take another path for a single row (a matrix-vector product, a reduction split
    across threads) that rounds differently, so the last candidate alive would get other bits than in
    a batch, and coupling would break."""
    if x.shape[0] != 1:
        return fn(x)
    out = fn(torch.cat([x, torch.zeros_like(x)]))
    return tuple(o[:1] for o in out) if isinstance(out, tuple) else out[:1]


@functools.cache
def prepack_refused(dtype: torch.dtype) -> str | None:
    """Why oneDNN cannot prepack a weight of ``dtype`` on this CPU (None: it can), probed once on a small weight.

    fp32 prepacks on every x86-64 CPU; bf16 needs avx512bw/vl/dq or avx_ne_convert (an AVX2-only CPU, such as
    a Zen 3 EPYC, refuses it: "mkldnn_reorder_linear_weight: bf16 path needs the cpu support ...")."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return "oneDNN is missing from this torch"
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=dtype), BATCH_HINT)
    except RuntimeError as e:
        return (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return None


class PackedLinear(torch.nn.Module):
    """``nn.Linear`` whose forward runs oneDNN on a weight packed once (same parameters)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self._packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), BATCH_HINT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.requires_grad:   # training or another dtype: the plain path
            return torch.nn.functional.linear(x, self.weight, self.bias)
        shape = x.shape
        y = lone_row_padded(lambda x2: torch.ops.mkldnn._linear_pointwise(x2, self._packed, self.bias, "none", [], ""),
                            x.reshape(-1, shape[-1]))   # oneDNN's matrix-vector path for M = 1 rounds differently
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed=oneDNN"


def enabled(model: torch.nn.Module) -> bool:
    """Pack this model? CPU, fp32, oneDNN present, not switched off."""
    if os.environ.get(PACKED_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    p = next(model.parameters(), None)
    return (p is not None and p.device.type == "cpu" and p.dtype == torch.float32
            and torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


def pack(model: torch.nn.Module) -> int:
    """Replace every plain ``nn.Linear`` of ``model`` (the head included) by a ``PackedLinear``,
    in place, where ``enabled``; returns how many were packed."""
    if not enabled(model):
        return 0
    n = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(module, name, PackedLinear(child))
                n += 1
    return n
