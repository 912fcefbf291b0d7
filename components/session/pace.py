"""How fast this machine decodes right now, and the race that fits: so a Run always concludes.

Before a race, on the app's torch thread:

1. **The quiet step** (``AppContext.quiet_step``): this machine's decoding step at 1, 8, 32 and 128 rows,
   measured once per generator (the fastest seen is kept: the machine at its quietest).
2. **A probe** (about half a second when quiet): two steps at 8 and at 32 rows now. Their time over the
   quiet step is the *load factor* (other work on the cores, as on a shared Space). On a busy machine
   two OpenMP threads wait on each other at every barrier (``shared/PERF_NOTES.md``: 6x slower at 8
   rows with two other processes spinning, against 2.4x for one thread), so when the probe is slow it
   is repeated with one thread and the faster count is kept for the race.
3. **The fit**: the race's decoding time bounded from above (``specrej.core.cost.race_seconds``) at the
   step times now, times what past races here took over that bound (reward scoring, frames). When it
   exceeds the target, every answer is shortened by the same share (``core.cost.shorten``: the same
   rows at every step, the same decisions at earlier tokens) until it fits: the race shrinks before it
   starts rather than being cut at the limit. The page says what was shortened and why.

The step times now also price the verdict (``specrej.verdict``): Best-of-N's curve in seconds on this
machine as it is during the race. Nothing here knows Gradio.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from specrej import RunConfig
from specrej.backends import planned_budget
from specrej.core.budget import KVBudget, sharing
from specrej.core.cost import StepCost, fit_scale, race_seconds, shorten

from .context import AppContext
from .worker import torch_worker

PROBE_ROWS = (8, 32)
SLOW = 1.6            # a probe this many times the quiet step: try one thread
_overhead_lock = threading.Lock()


@dataclass(frozen=True)
class Fit:
    cfg: RunConfig            # the race to run (``cfg`` as asked, or shortened)
    asked: RunConfig          # as asked
    cost: StepCost            # the step times now (quiet x load), for the verdict
    load: float               # the probe's time over the quiet step's (1 = quiet)
    threads: int              # torch threads the race runs with
    estimate_s: float         # the race's expected time as run
    scale: float              # 1: as asked; below: every answer shortened to this share

    @property
    def shortened(self) -> bool:
        return self.scale < 1.0

    def words(self) -> str:
        """What the fit did, for the status line ('' when nothing was changed)."""
        if not self.shortened:
            return ""
        a, c = self.asked, self.cfg
        busy = f"this machine is {self.load:.1f}x slower than when quiet (other work on its cores), so " \
            if self.load >= 1.3 else ""
        return (f"Fitted to this machine: {busy}every answer was shortened to {c.max_new_tokens} tokens "
                f"(from {a.max_new_tokens}), with the memory budget and the first decision in proportion, "
                f"so the race ends in about {self.estimate_s:.0f} s. The same rows decode at every step.")


def _probe(lm, threads: int) -> list[float]:
    """On the torch thread: the fastest of two decoding steps at each of PROBE_ROWS, at ``threads``."""
    import torch

    from specrej.steptime import measure

    torch.set_num_threads(threads)
    return list(measure(lm, PROBE_ROWS, steps=2).seconds)


def measure(ctx: AppContext, model: str, lm) -> tuple[StepCost, float, int]:
    """(the step times now, the load factor, the threads to race with), on the torch thread."""
    import os

    import torch

    quiet = ctx.quiet_step(model, lm)
    most = max(1, min(os.cpu_count() or 1, torch.get_num_threads() if ctx.threads is None else ctx.threads))
    ctx.threads = most
    ref = [quiet.step(r) for r in PROBE_ROWS]

    def load_of(times):
        return max(t / q for t, q in zip(times, ref))

    best_threads, best = most, torch_worker().call(_probe, lm, most)
    if load_of(best) > SLOW and most > 1:
        one = torch_worker().call(_probe, lm, 1)
        if max(one) < max(best):
            best_threads, best = 1, one
    torch_worker().call(torch.set_num_threads, best_threads)
    load = load_of(best)
    if load < 1.0:   # quieter than the calibration: keep the faster times
        ctx.step_costs[model] = quiet = quiet.scaled(load)
        load = 1.0
    return quiet.scaled(load), load, best_threads


def fit(ctx: AppContext, model: str, cfg: RunConfig, *, sr_auto: bool, target_s: float | None = None,
        allow_shorten: bool = True, busy: bool | None = None) -> Fit | None:
    """Measure this machine now and size the race at ``cfg`` to ``target_s`` (the context's target).
    While other runs are in flight (``busy``, default: ``ctx.active``) the torch thread is theirs and a probe
    would time them, not the machine: the last measurement stands (None before the first one)."""
    if ctx.active if busy is None else busy:
        quiet = ctx.step_costs.get(model)
        if quiet is None or ctx.last_load is None:
            return None
        lm = None
        cost, load, threads = quiet.scaled(ctx.last_load), ctx.last_load, ctx.threads or 1
    else:
        lm = ctx.generator(model)
        cost, load, threads = measure(ctx, model, lm)
        ctx.last_load = load
    target = ctx.race_target_s if target_s is None else target_s
    budget = planned_budget(cfg.budget)   # None on a GPU: fast enough that nothing needs fitting
    if budget is None:
        return Fit(cfg, cfg, cost, load, threads, 0.0, 1.0)
    if lm is None:   # no probe: the race runs as asked, priced at the last step times
        return Fit(cfg, cfg, cost, load, threads, 0.0, 1.0)
    prompt_len = len(torch_worker().call(lm.render, cfg.prompt))
    shared = sharing(lm, lm.backend)
    base = dataclasses.replace(cfg, budget=budget)
    kv = KVBudget(budget, prompt_len, shared)

    def seconds_at(scale: float) -> float:
        c = shorten(base, scale, kv.shared_slots) if scale < 1 else base
        return ctx.overhead * race_seconds(KVBudget(c.budget, prompt_len, shared), c, cost, sr_auto=sr_auto)

    try:
        scale = fit_scale(seconds_at, target) if allow_shorten else 1.0
        run = shorten(base, scale, kv.shared_slots) if scale < 1 else cfg
        estimate = seconds_at(scale)
    except ValueError:   # a setting the budget cannot run: the race itself says what to change
        return Fit(cfg, cfg, cost, load, threads, 0.0, 1.0)
    return Fit(run, cfg, cost, load, threads, estimate, scale)


def learn(ctx: AppContext, fitted: Fit, seconds: float) -> None:
    """After a race ran to the end: what it took over its decode-time bound, for the next fit (a running
    mean that moves a third of the way, kept within 0.5-3)."""
    if fitted.estimate_s <= 0 or seconds <= 0:
        return
    ratio = seconds / (fitted.estimate_s / ctx.overhead)
    with _overhead_lock:
        ctx.overhead = min(3.0, max(0.5, ctx.overhead + (ratio - ctx.overhead) / 3))
