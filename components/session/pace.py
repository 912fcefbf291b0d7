"""How fast this machine decodes right now, and how long the race as asked will take: so a lecturer gets the
same experiment every time, and knows before it starts whether it ends in time.

Before a race, on the app's torch thread:

1. **The quiet step** (``AppContext.quiet_step``): this machine's decoding step at 1, 8, 32 and 128 rows,
   measured once per generator (the fastest seen is kept: the machine at its quietest).
2. **A probe** (about half a second when quiet): two steps at 8 and at 32 rows now. Their time over the
   quiet step is the *load factor* (other work on the cores, as on a shared Space). On a busy machine
   two OpenMP threads wait on each other at every barrier (``shared/PERF_NOTES.md``: 6x slower at 8
   rows with two other processes spinning, against 2.4x for one thread), so when the probe is slow it
   is repeated with one thread and the faster count is kept for the race.
3. **The estimate**: the race's decoding time bounded from above (``specrej.core.cost.race_seconds``) at
   the step times now, times what past races here took over that bound (reward scoring, frames). Load
   never changes the race: N, the decision tokens, the answers' length and the budget stay as asked. When
   the estimate is past the deployment's time limit the race does not start live (``stream.updates`` plays
   the labelled recording of that same race where one exists, or says what would fit).

The step times now also price the verdict (``specrej.analysis.verdict``): Best-of-N's curve in seconds on this
machine as it is during the race. Nothing here knows Gradio.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specrej import RunConfig
from specrej.backends import planned_budget
from specrej.core.budget import KVBudget, sharing
from specrej.core.about import ABOUTS, GENERIC
from specrej.core.cost import RIVAL_READS, StepCost, race_seconds

from components.session.context import AppContext
from components.session.worker import torch_worker

PROBE_ROWS = (8, 32)
SLOW = 1.6            # a probe this many times the quiet step: try one thread


LIVE_SHARE = 0.8      # a race starts live when its estimate is at most this share of the time limit
LATE = 1.3            # "running late": past this many times the estimate ...
LATE_SLACK_S = 3.0    # ... plus this many seconds (frames and reward scoring jitter)


@dataclass(frozen=True)
class Fit:
    """This machine, measured just before a race, and what the race at ``cfg`` (as asked) is expected to take."""

    cfg: RunConfig            # the race to run: as asked (load never changes it)
    cost: StepCost            # the step times now (quiet x load), for the verdict
    load: float               # the probe's time over the quiet step's (1 = quiet)
    threads: int              # torch threads the race runs with
    estimate_s: float         # the race's expected time now (0: not estimated, e.g. on a GPU)
    limit_s: float = 0.0      # the deployment's time limit (0: none known)
    prompt_len: int = 0       # the rendered prompt's tokens, and whether its cache is shared across rows:
    shared: bool = False      # what another race at this prompt is estimated with (``estimate``)
    overhead: float = 1.0     # races here took this times their decode-time bound

    @property
    def fits(self) -> bool:
        """It should end well before the time limit (or nothing was estimated)."""
        return not self.estimate_s or not self.limit_s or self.estimate_s <= LIVE_SHARE * self.limit_s

    def estimate(self, cfg: RunConfig, *, sr_auto: bool, methods: tuple[str, ...] = ("bon", "sr")) -> float:
        """The expected time of another race of these arms (methods) at this prompt, at the step times now (0
        when none is known)."""
        budget = planned_budget(cfg.budget)
        if not self.estimate_s or budget is None:
            return 0.0
        kv = KVBudget(budget, self.prompt_len, self.shared)
        return self.overhead * race_seconds(kv, dataclasses.replace(cfg, budget=budget), self.cost, sr_auto=sr_auto,
                                             methods=methods)

    def late(self, elapsed_s: float) -> bool:
        """The race runs plainly past its estimate."""
        return bool(self.estimate_s) and elapsed_s > LATE * self.estimate_s + LATE_SLACK_S


# ---------------------------------------------------------------- lecture mode: the rehearsal is the lecture

TOLERANCE = 1.2   # lecture mode: a race starts live when its estimate now is at most this times its stated time


@dataclass(frozen=True)
class LecturePlan:
    """How a race chosen in lecture mode plays (``lecture_plan``): ``live``, or ``recording`` (its labelled
    recording at ``speed`` times the recorded pace), or ``too_long`` (no recording and no time for it live);
    ``stated_s`` is the time the page states before it starts, the same whatever the load."""

    mode: str
    stated_s: float
    speed: float = 1.0
    target_s: float = 0.0    # the most the live race may be expected to take (stated x TOLERANCE, within the limit)


def lecture_plan(estimate_s: float, load: float, limit_s: float, recorded_s: float | None) -> LecturePlan:
    """Lecture mode's choice, a pure function of the measurement (``estimate_s``: the race's expected time now;
    ``load``: this machine's slowdown against quiet), the deployment's time limit and the race's recording
    (``recorded_s``: its recorded time; None when there is none).

    The stated time is the race's time on this machine when quiet (estimate / load), within ``LIVE_SHARE`` of
    the limit: a rehearsal on a quiet machine and the lecture on a busy one state the same time. The race
    plays live when its estimate now is within ``TOLERANCE`` of that; otherwise its recording plays paced to
    the stated time (``speed`` = recorded / stated), so it ends when the live race would have; without a
    recording, live while the estimate is within ``LIVE_SHARE`` of the limit (stated: the estimate now, said
    plainly), else ``too_long``. Decided before the race starts: no wait to see whether it falls behind."""
    cap = LIVE_SHARE * limit_s if limit_s else float("inf")
    if estimate_s <= 0:    # nothing estimated (a GPU, a busy torch thread): live, as asked
        return LecturePlan("live", 0.0)
    quiet_s = estimate_s / max(1.0, load)
    stated = min(quiet_s, cap)
    target = min(TOLERANCE * stated, cap)
    if estimate_s <= target:
        return LecturePlan("live", estimate_s, target_s=target)
    if recorded_s is not None and recorded_s > 0:
        return LecturePlan("recording", stated, speed=recorded_s / stated, target_s=target)
    if estimate_s <= cap:
        return LecturePlan("live", estimate_s, target_s=cap)
    return LecturePlan("too_long", estimate_s, target_s=target)


PATIENCE_S = 3.0  # lecture mode: a probe (about half a second when quiet) not answered by then says the machine
                  # is too busy to race live; the race's recording plays at once rather than after a dead wait
TOO_SLOW = "too slow"   # ``stream.measure_and_fit``'s answer when it stopped waiting for the probe


def busy_plan(quiet_s: float, limit_s: float, recorded_s: float) -> LecturePlan:
    """Lecture mode when the probe did not answer within ``PATIENCE_S``: the recording, paced to the race's
    time on this machine when quiet (``quiet_s``, from its calibration step, no probe), within the limit."""
    cap = LIVE_SHARE * limit_s if limit_s else float("inf")
    stated = min(quiet_s, cap) if quiet_s > 0 else min(recorded_s, cap)
    return LecturePlan("recording", stated, speed=recorded_s / stated, target_s=min(TOLERANCE * stated, cap))


def quiet_fit(ctx: AppContext, model: str, cfg: RunConfig, *, sr_auto: bool,
              methods: tuple[str, ...] = ("bon", "sr")) -> Fit | None:
    """The race at ``cfg`` estimated on this machine when quiet (its calibration step, load 1, no probe): what
    lecture mode states when the probe is too slow to wait for. On the torch thread (it renders the prompt);
    None where nothing is estimated (a GPU) or the budget cannot run the race."""
    budget = planned_budget(cfg.budget)
    if budget is None:
        return None
    lm = ctx.generator(model)
    quiet = ctx.quiet_step(model, lm)
    prompt_len = len(torch_worker().call(lm.render, cfg.prompt))
    with ctx.machine.lock:
        threads, overhead = ctx.machine.threads, ctx.machine.overhead
    probe = Fit(cfg, quiet, 1.0, threads or 1, 1.0, float(ctx.limits.max_run_seconds), prompt_len,
                sharing(lm, lm.backend), overhead)
    try:
        return dataclasses.replace(probe, estimate_s=probe.estimate(cfg, sr_auto=sr_auto, methods=methods))
    except ValueError:
        return None


def _probe(lm, threads: int) -> list[float]:
    """On the torch thread: the fastest of two decoding steps at each of PROBE_ROWS, at ``threads``."""
    import torch

    from specrej.backends.steptime import measure

    torch.set_num_threads(threads)
    return list(measure(lm, PROBE_ROWS, steps=2).seconds)


def measure(ctx: AppContext, model: str, lm) -> tuple[StepCost, float, int]:
    """(the step times now, the load factor, the threads to race with), on the torch thread."""
    import os

    import torch

    quiet = ctx.quiet_step(model, lm)
    with ctx.machine.lock:
        known = ctx.machine.threads
        most = ctx.machine.threads = ctx.threads or max(1, min(os.cpu_count() or 1,
                                                               torch.get_num_threads() if known is None else known))
    ref = [quiet.step(r) for r in PROBE_ROWS]

    def load_of(times):
        return max(t / q for t, q in zip(times, ref))

    best_threads, best = most, torch_worker().call(_probe, lm, most)
    if load_of(best) > SLOW and most > 1 and not ctx.threads:   # SPECREJ_THREADS: that many, whatever the load
        one = torch_worker().call(_probe, lm, 1)
        if max(one) < max(best):
            best_threads, best = 1, one
    torch_worker().call(torch.set_num_threads, best_threads)
    load = load_of(best)
    if load < 1.0:   # quieter than the calibration: keep the faster times
        with ctx.machine.lock:
            ctx.machine.step_costs[model] = quiet = quiet.scaled(load)
        load = 1.0
    return quiet.scaled(load), load, best_threads


def fit(ctx: AppContext, model: str, cfg: RunConfig, *, sr_auto: bool, busy: bool | None = None,
        methods: tuple[str, ...] = ("bon", "sr")) -> Fit | None:
    """Measure this machine now and estimate the race at ``cfg``. While other runs are in flight (``busy``,
    default: ``ctx.machine.busy()``) the torch thread is theirs and a probe would time them, not the machine: the last
    measurement stands (None before the first one), and the estimate is left out."""
    limit = float(ctx.limits.max_run_seconds)
    m = ctx.machine
    if m.busy() if busy is None else busy:
        with m.lock:
            quiet, last_load, threads = m.step_costs.get(model), m.last_load, m.threads
        if quiet is None or last_load is None:
            return None
        return Fit(cfg, quiet.scaled(last_load), last_load, threads or 1, 0.0, limit)
    lm = ctx.generator(model)
    if any(ABOUTS.get(m, GENERIC).rival for m in methods):   # a rival races: its steps' extra reads, measured once
        ctx.quiet_step(model, lm, RIVAL_READS)
    cost, load, threads = measure(ctx, model, lm)
    with m.lock:
        m.last_load, overhead = load, m.overhead
    budget = planned_budget(cfg.budget)   # None on a GPU: fast enough that nothing needs estimating
    if budget is None:
        return Fit(cfg, cost, load, threads, 0.0, limit)
    prompt_len = len(torch_worker().call(lm.render, cfg.prompt))
    probe = Fit(cfg, cost, load, threads, 1.0, limit, prompt_len, sharing(lm, lm.backend), overhead)
    try:
        estimate = probe.estimate(cfg, sr_auto=sr_auto, methods=methods)
    except ValueError:   # a setting the budget cannot run: the race itself says what to change
        estimate = 0.0
    return dataclasses.replace(probe, estimate_s=estimate)


def learn(ctx: AppContext, fitted: Fit, seconds: float) -> None:
    """After a race ran to the end: what it took over its decode-time bound, for the next fit (a running
    mean that moves a third of the way, kept within 0.5-3)."""
    if fitted.estimate_s <= 0 or seconds <= 0:
        return
    m = ctx.machine
    with m.lock:
        ratio = seconds / (fitted.estimate_s / m.overhead)
        m.overhead = min(3.0, max(0.5, m.overhead + (ratio - m.overhead) / 3))
