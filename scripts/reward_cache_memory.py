"""Memory growth of ``load_reward`` over many distinct preference texts (issue 26).

``PYTHONPATH=. python scripts/reward_cache_memory.py [N]`` (from the repository root): loads the
embedded preference reward once, then N (default 300) distinct preference texts, and prints the
process's resident memory before and after and how many rewards the library keeps. One process, one
thread (torch), no server. Measured (issue 26): before the bound, 300 texts +20.1 MB and 301 rewards
kept, 1200 texts +27.7 MB; with it, +19.0 MB and 4 kept, 1200 texts +23.1 MB. Most of the growth is
the encoder's own first calls on new token lengths, which levels off (about +23 MB), not the cache.
"""
from __future__ import annotations

import gc
import sys

import torch

from components.deploy.memory import release, rss_bytes
from specrej import load_reward
from specrej import rewards


def kept() -> int:
    caches = [getattr(rewards, name) for name in ("_loaded", "_preferences") if hasattr(rewards, name)]
    return sum(len(c) for c in caches)


def main(n: int = 300) -> None:
    torch.set_num_threads(1)
    load_reward("preference:warm up the embedder")
    release()
    before = rss_bytes()
    for i in range(n):
        load_reward(f"preference:answer number {i}: concise, friendly, with example {i * 7919 % 1000}")
    gc.collect()
    release()
    after = rss_bytes()
    print(f"{n} distinct preference texts: RSS {before / 2**20:.1f} MB -> {after / 2**20:.1f} MB "
          f"(+{(after - before) / 2**20:.1f} MB); rewards kept: {kept()}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
