"""This machine's decoding step, measured: the times a ``StepCost`` prices a race with.

``time_steps`` runs real decoding steps of the LM's own backend at one batch size (one warm-up step, then
``steps`` timed ones); ``measure`` does it at several sizes and keeps the fastest of each (the machine,
not its load), as a ``StepCost``; with ``reads``, also what the rivals' extra reads add to a step (the top-k
log-probabilities, every layer's hidden states), timed in turn with the plain step (``time_paired``). The app calibrates with it before a race, the CLI stores it in a
recording, the bench's ``decode_sweep`` adds rooflines to the same timings.
"""
from __future__ import annotations

import statistics
import time

import torch

from . import Sampling
from ..core.budget import KVBudget, sharing
from ..core.cost import RIVAL_READS, StepCost, reads_of

CALIBRATION_ROWS = (1, 8, 32, 128)
__all__ = ["CALIBRATION_ROWS", "READ_STEPS", "RIVAL_READS", "measure", "time_paired", "time_steps"]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_clocks() -> tuple[float, float]:
    """(this thread's CPU seconds, this process's CPU seconds): with one torch thread the step runs on the calling
    thread, so its CPU time is the step without the waits a busy machine adds; with more, the process's CPU time
    over (threads x wall time) is the share of its threads' cores the step held (``Sample.share``)."""
    return time.thread_time(), time.process_time()


@torch.inference_mode()
def time_steps(lm, ids: list[int], rows: int, steps: int, sampling: Sampling = Sampling(),
               cpu: list | None = None) -> tuple[list[float], int]:
    """(seconds of each of ``steps`` decoding steps at ``rows`` rows after one warm-up, KV slots held then).
    ``cpu``: a list that gets each timed step's (thread CPU seconds, process CPU seconds) (``cpu_clocks``)."""
    backend = lm.backend
    eng = backend(lm, ids, sampling=sampling, seed=0, n_total=rows, max_new_tokens=steps + 3, stats=False)
    r = eng.start(list(range(rows)))
    r.step()
    times = []
    for _ in range(steps):
        _sync(lm.device)
        c = cpu_clocks()
        t = time.perf_counter()
        r.step()
        _sync(lm.device)
        times.append(time.perf_counter() - t)
        if cpu is not None:
            c2 = cpu_clocks()
            cpu.append((c2[0] - c[0], c2[1] - c[1]))
    held = KVBudget(0, len(ids), sharing(lm, backend)).held(r.lengths())   # only its slot arithmetic
    r.release()
    eng.release()
    return times, held


@torch.inference_mode()
def time_paired(lm, ids: list[int], rows: int, steps: int, reads: tuple[str, ...] = (),
                sampling: Sampling = Sampling(), clock=time.perf_counter,
                cpu: list | None = None) -> dict[str, list[float]]:
    """Seconds of ``steps`` decoding steps at ``rows`` rows of the plain step (key ``""``) and of the step that
    also reads each of ``reads`` (``core.cost.read_key``: "top-20", "hidden"), taken in turn (the order rotating
    each round), so a drift in the machine's speed hits every side alike: one engine each, the same model,
    dtype, threads and backend, one warm-up step each (which builds a compiled step's variant). ``clock``: wall
    time by default; ``time.process_time`` counts the CPU's work only (on one thread, a shared machine's waits
    left out: ``scripts/read_cost.py --clock cpu``). ``cpu``: a list that gets each plain step's (thread, process)
    CPU seconds (``cpu_clocks``)."""
    keys = ("",) + tuple(k for k in reads if k)
    backend, engines, batches = lm.backend, {}, {}
    for key in keys:
        engines[key] = backend(lm, ids, sampling=sampling, seed=0, n_total=rows, max_new_tokens=steps + 3,
                               stats=False, reads=reads_of(key))
        batches[key] = engines[key].start(list(range(rows)))
        batches[key].step()
    times: dict[str, list[float]] = {k: [] for k in keys}
    for i in range(steps):
        for key in keys[i % len(keys):] + keys[:i % len(keys)]:
            _sync(lm.device)
            c = cpu_clocks()
            t = clock()
            batches[key].step()
            _sync(lm.device)
            times[key].append(clock() - t)
            if cpu is not None and not key:
                c2 = cpu_clocks()
                cpu.append((c2[0] - c[0], c2[1] - c[1]))
    for key in keys:
        batches[key].release()
        engines[key].release()
    return times


READ_STEPS = 7   # steps of each side a read's ratio is the median of (at least; a ratio of two steps is noisy)


def measure(lm, rows: tuple[int, ...] = CALIBRATION_ROWS, *, steps: int = 3, prompt: str = "Hello",
            reads: tuple[str, ...] = (), cpu: dict | None = None) -> StepCost:
    """The fastest of ``steps`` decoding steps at each batch size in ``rows``; with ``reads`` (e.g.
    ``RIVAL_READS``), each extra read's step too, in turn with the plain one (``time_paired``, at least
    ``READ_STEPS`` of each), kept as the median over the pairs of (read step / plain step), at least 1
    (``StepCost.reads``). The median of paired ratios, not a ratio of the fastest of each: load slows either
    side of a ratio, so its noise is two-sided, and a pair's two steps run back to back under the same load.
    ``cpu``: a dict that gets, for each of ``rows``, the plain step's [(wall, thread CPU, process CPU) seconds, ...]
    (what the app judges the load of a measurement by: ``components/session/profile.Sample``)."""
    ids = lm.render(prompt)
    clocks = {r: [] for r in rows}
    if not reads:
        walls = {r: time_steps(lm, ids, r, steps, cpu=clocks[r])[0] for r in rows}
    else:
        timed = [time_paired(lm, ids, r, max(steps, READ_STEPS), reads, cpu=clocks[r]) for r in rows]
        walls = {r: t[""] for r, t in zip(rows, timed)}
    if cpu is not None:
        cpu.update({r: [(w, *c) for w, c in zip(walls[r], clocks[r])] for r in rows})
    if not reads:
        return StepCost(tuple(rows), tuple(min(walls[r]) for r in rows))
    return StepCost(tuple(rows), tuple(min(walls[r]) for r in rows),
                    tuple((k, tuple(max(1.0, statistics.median(a / b for a, b in zip(t[k], t[""]))) for t in timed))
                          for k in reads if k))
