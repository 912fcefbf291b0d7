"""This machine's decoding step, measured: the times a ``StepCost`` prices a race with.

``time_steps`` runs real decoding steps of the LM's own backend at one batch size (one warm-up step, then
``steps`` timed ones); ``measure`` does it at several sizes and keeps the fastest of each (the machine,
not its load), as a ``StepCost``. The app calibrates with it before a race, the CLI stores it in a
recording, the bench's ``decode_sweep`` adds rooflines to the same timings.
"""
from __future__ import annotations

import time

import torch

from . import Sampling
from ..core.budget import KVBudget, sharing
from ..core.cost import StepCost

CALIBRATION_ROWS = (1, 8, 32, 128)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def time_steps(lm, ids: list[int], rows: int, steps: int, sampling: Sampling = Sampling()) -> tuple[list[float], int]:
    """(seconds of each of ``steps`` decoding steps at ``rows`` rows after one warm-up, KV slots held then)."""
    backend = lm.backend
    eng = backend(lm, ids, sampling=sampling, seed=0, n_total=rows, max_new_tokens=steps + 3, stats=False)
    r = eng.start(list(range(rows)))
    r.step()
    times = []
    for _ in range(steps):
        _sync(lm.device)
        t = time.perf_counter()
        r.step()
        _sync(lm.device)
        times.append(time.perf_counter() - t)
    held = KVBudget(0, len(ids), sharing(lm, backend)).held(r.lengths())   # only its slot arithmetic
    r.release()
    eng.release()
    return times, held


def measure(lm, rows: tuple[int, ...] = CALIBRATION_ROWS, *, steps: int = 3, prompt: str = "Hello") -> StepCost:
    """The fastest of ``steps`` decoding steps at each batch size in ``rows``."""
    ids = lm.render(prompt)
    return StepCost(tuple(rows), tuple(min(time_steps(lm, ids, r, steps)[0]) for r in rows))
