"""``GPU``: ``spaces.GPU`` on Hugging Face Spaces, a no-op decorator elsewhere.

On ZeroGPU ``spaces`` must be imported before torch, so ``app.py`` imports this module first.
The no-op handles both ``@GPU`` and ``@GPU(duration=...)``.
"""
from __future__ import annotations

import os

try:  # pragma: no cover - depends on the platform
    import spaces  # noqa: F401

    GPU = spaces.GPU
    HAS_SPACES = True
except ImportError:
    HAS_SPACES = False

    def GPU(fn=None, **_kwargs):
        if fn is None:
            return lambda f: f
        return fn

ZERO_GPU = bool(os.environ.get("SPACES_ZERO_GPU"))
