"""Give memory back to the system after a run.

A run allocates and frees many large tensors (KV caches, logits, the lab's sample batches); glibc's
allocator keeps much of the freed memory in its arenas, so an idle server stayed at two or three
times the memory it needed. ``release()`` collects garbage and asks glibc to return free pages
(``malloc_trim(0)``); elsewhere (musl, macOS, Windows) it only collects. Call it when a run ends.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import platform

_trim = None
if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
    try:
        _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        _trim = None

TRIMS = {"count": 0}   # how many times memory was returned (the tests read it)


def release() -> bool:
    """Collect garbage and return the allocator's free memory to the system; True if trimmed."""
    gc.collect()
    if _trim is None:
        return False
    _trim(0)
    TRIMS["count"] += 1
    return True


def rss_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc``), else None."""
    try:
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
