"""Which dtype the generator runs in: ``auto`` | ``fp32`` | ``bf16`` (``SPECREJ_DTYPE``).

``auto`` is bf16 on CUDA. On a CPU it is bf16 only where the CPU has bf16 matrix instructions
(``amx_bf16`` or ``avx512_bf16`` in /proc/cpuinfo) *and* a short probe at load time (matmuls of
a decoding step's shapes, ~0.1 s) runs faster in bf16 than in fp32; fp32 otherwise. Without
those instructions bf16 is emulated and slower, and the probe would only confirm it.
"""
from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import torch

DTYPE_ENV = "SPECREJ_DTYPE"
CHOICES = {"auto": None, "fp32": torch.float32, "bf16": torch.bfloat16}
BF16_FLAGS = ("amx_bf16", "avx512_bf16")
MIN_SPEEDUP = 1.2   # bf16 must beat fp32 by this much in the probe to be chosen


def requested(dtype: str | None = None) -> str:
    """The dtype asked for: the argument, else ``SPECREJ_DTYPE``, else ``auto``; raises on unknown names."""
    name = (dtype or os.environ.get(DTYPE_ENV) or "auto").strip().lower()
    aliases = {"float32": "fp32", "bfloat16": "bf16"}
    name = aliases.get(name, name)
    if name not in CHOICES:
        source = "dtype" if dtype else DTYPE_ENV
        raise ValueError(f"{source}={dtype or os.environ.get(DTYPE_ENV)!r} is unknown: use auto, fp32 or bf16.")
    return name


def resolve(dtype: str | None, device: torch.device) -> torch.dtype:
    """The torch dtype to load the generator in on ``device``."""
    name = requested(dtype)
    if CHOICES[name] is not None:
        return CHOICES[name]
    if device.type == "cuda":
        return torch.bfloat16
    return torch.bfloat16 if cpu_prefers_bf16() else torch.float32


def cpu_flags() -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (None where there is no such file)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@functools.cache
def cpu_prefers_bf16() -> bool:
    flags = cpu_flags()
    if flags is not None and not any(f in flags for f in BF16_FLAGS):
        return False
    return bf16_speedup() >= MIN_SPEEDUP


@functools.cache
def bf16_speedup(rows: int = 32, size: int = 1024, reps: int = 5) -> float:
    """fp32 time / bf16 time of a decoding step's matmul (rows x size @ size x 4 size), best of ``reps``."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, size, generator=gen)
    w = torch.randn(4 * size, size, generator=gen)

    def best(dtype: torch.dtype) -> float:
        a, b = x.to(dtype), w.to(dtype)
        torch.nn.functional.linear(a, b)   # warm-up: kernel selection
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            torch.nn.functional.linear(a, b)
            times.append(time.perf_counter() - t)
        return min(times)

    with torch.inference_mode():
        return best(torch.float32) / best(torch.bfloat16)


def short_name(dtype: torch.dtype) -> str:
    """``bfloat16``, ``float32``: the name the ledger and the trace record."""
    return str(dtype).replace("torch.", "")
