"""The machine profile and what a race will take on it: so a lecturer gets the same experiment every time, and knows
before it starts whether it ends in time. Measured at start-up, refreshed only while the page is idle; a click
reads it and never waits for a measurement (``planner.plan``).

On the app's torch thread, during the warm-up (``AppContext.warm``) and then while idle (``keep_fresh``):

1. **The quiet step** (``AppContext.quiet_step``): this machine's decoding step at 1, 8, 32 and 128 rows, with
   the rivals' extra reads: what the machine does when *quiet*, never the load of a moment. Each measurement is a
   ``context.Sample`` with the load it ran under (the 1-minute load average, other processes' runnable tasks, and
   the share of its threads' cores it held: CPU time over threads x wall time). The quiet step is the best of them
   (``context.quiet_of``): those taken quiet at the quiet thread count; a server started under load measures at
   one thread (the worker follows the free cores) and keeps that thread's CPU time, the step without the waits;
   one taken under load never makes it slower. The samples are kept across starts (``SPECREJ_PROFILE_FILE``),
   so a busy start states what an earlier quiet one measured, and an idle refresh that finds the machine quiet
   measures again at the quiet count.
2. **A probe** (``refresh``; about half a second when quiet): two steps at 8 and at 32 rows. Their time over the
   quiet step is the *load factor* (other work on the cores, as on a shared Space). On a busy machine
   two OpenMP threads wait on each other at every barrier (``shared/PERF_NOTES.md``: 6x slower at 8
   rows with two other processes spinning, against 2.4x for one thread), so when the probe is slow it
   is repeated with one thread and the faster count prices the races; the races themselves run with the threads
   the worker's ``FreeCores`` gives them at each step. The profile says when it ran and under what load, and how
   quiet its quiet step's best measurement was (``MachineProfile.when``).

At a click (``fit``, pure): the race's decoding time bounded from above (``specrej.core.cost.race_seconds``) at the
profiled step times, times what past races here took over that bound (reward scoring, frames). Load never
changes the race: N, the decision tokens, the answers' length and the budget stay as asked. When the estimate is
past the deployment's time limit the race does not start live (the planner plays the labelled recording of that
same race where one exists, or says what would fit).

The profiled step times also price the verdict (``specrej.analysis.verdict``): Best-of-N's curve in seconds on this
machine. Nothing here knows Gradio.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from dataclasses import dataclass

from specrej import RunConfig
from components.session import budget as kv_rule
from specrej.core.cost import StepCost, race_seconds

from components.session.context import QUIET_SHARE, AppContext, MachineProfile, Sample
from components.session.worker import torch_worker

log = logging.getLogger("specrej.app")
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
    measured: str = ""        # when the profile's probe ran and under what load (``MachineProfile.when``)

    @property
    def fits(self) -> bool:
        """It should end well before the time limit (or nothing was estimated)."""
        return not self.estimate_s or not self.limit_s or self.estimate_s <= LIVE_SHARE * self.limit_s

    def estimate(self, cfg: RunConfig, *, sr_auto: bool, methods: tuple[str, ...] = ("bon", "sr")) -> float:
        """The expected time of another race of these arms (methods) at this prompt, at the step times now (0
        when none is known)."""
        kv = kv_rule.slots(cfg.budget, self.prompt_len, self.shared)
        if not self.estimate_s or kv is None:
            return 0.0
        return self.overhead * race_seconds(kv, dataclasses.replace(cfg, budget=kv.total), self.cost,
                                             sr_auto=sr_auto, methods=methods)

    def late(self, elapsed_s: float) -> bool:
        """The race runs plainly past its estimate."""
        return bool(self.estimate_s) and elapsed_s > LATE * self.estimate_s + LATE_SLACK_S


# ---------------------------------------------------------------- lecture mode: the rehearsal is the lecture

TOLERANCE = 1.2   # lecture mode: a race starts live when its estimate now is at most this times its stated time


@dataclass(frozen=True)
class LecturePlan:
    """How a race chosen in lecture mode plays (``lecture_plan``): ``live``, or ``recording`` (its labelled
    recording at ``speed`` times the recorded pace: 1 unless the recording is longer than the limit allows), or
    ``too_long`` (no recording and no time for it live); ``stated_s`` is the time the page states before it
    starts and then shows: the quiet live time, or the recording's own."""

    mode: str
    stated_s: float
    speed: float = 1.0
    target_s: float = 0.0    # the most the live race may be expected to take (stated x TOLERANCE, within the limit)


def lecture_plan(estimate_s: float, load: float, limit_s: float, recorded_s: float | None) -> LecturePlan:
    """Lecture mode's choice, a pure function of the measurement (``estimate_s``: the race's expected time now;
    ``load``: this machine's slowdown against quiet), the deployment's time limit and the race's recording
    (``recorded_s``: its recorded time; None when there is none).

    A live race states its time on this machine when quiet (estimate / load, the quiet step being the machine
    when quiet: ``context.quiet_of``), within ``LIVE_SHARE`` of the limit, and plays live when its estimate now is
    within ``TOLERANCE`` of that (stated: the estimate now, which is what it will show). Otherwise its recording
    plays at its own recorded pace and states the recorded time (issue 61: a recording stretched to the quiet
    time of a server profiled under load played a 19.0 s race in 86.7 s); only a recording longer than
    ``LIVE_SHARE`` of the limit plays faster, to end within it. Without a recording, live while the estimate is
    within ``LIVE_SHARE`` of the limit (stated: the estimate now, said plainly), else ``too_long``. Decided before
    the race starts: no wait to see whether it falls behind."""
    cap = LIVE_SHARE * limit_s if limit_s else float("inf")
    if estimate_s <= 0:    # nothing estimated (a GPU, a busy torch thread): live, as asked
        return LecturePlan("live", 0.0)
    quiet_s = estimate_s / max(1.0, load)
    stated = min(quiet_s, cap)
    target = min(TOLERANCE * stated, cap)
    if estimate_s <= target:
        return LecturePlan("live", estimate_s, target_s=target)
    if recorded_s is not None and recorded_s > 0:
        shown = min(recorded_s, cap)
        return LecturePlan("recording", shown, speed=recorded_s / shown, target_s=target)
    if estimate_s <= cap:
        return LecturePlan("live", estimate_s, target_s=cap)
    return LecturePlan("too_long", estimate_s, target_s=target)


class Probed(list):
    """A probe's step times (seconds at each of PROBE_ROWS), with the share of its threads' cores it held
    (``context.Sample.share``; None: not known)."""

    share: float | None = None


def _probe(lm, threads: int) -> list[float]:
    """On the torch thread: the fastest of two decoding steps at each of PROBE_ROWS, at ``threads`` (a
    ``Probed``)."""
    import torch

    from specrej.backends.steptime import measure

    torch.set_num_threads(threads)
    clocks: dict = {}
    out = Probed(measure(lm, PROBE_ROWS, steps=2, cpu=clocks).seconds)
    out.share = Sample.taken(StepCost(PROBE_ROWS, tuple(out)), clocks, threads).share
    return out


def measure(ctx: AppContext, model: str, lm) -> tuple[StepCost, float, int]:
    """(the step times now, the load factor, the threads to race with), on the torch thread. A probe faster than
    the quiet step improves it (kept as a sample: a faster step is no load's doing); one taken quiet at the quiet
    thread count when the quiet step was measured at fewer (a server started under load) measures it again."""
    import torch

    quiet = ctx.quiet_step(model, lm)
    most = ctx.quiet_threads()
    with ctx.machine.lock:
        ctx.machine.threads = ctx.machine.threads or most
    ref = [quiet.step(r) for r in PROBE_ROWS]

    def load_of(times):
        return max(t / q for t, q in zip(times, ref))

    best_threads, best = most, torch_worker().call(_probe, lm, most)
    first = best
    if load_of(best) > SLOW and most > 1 and not ctx.threads:   # SPECREJ_THREADS: that many, whatever the load
        one = torch_worker().call(_probe, lm, 1)
        if max(one) < max(best):
            best_threads, best = 1, one
    if ctx.threads or not ctx.follow_cores:   # else the worker sets the threads at each job (``FreeCores``)
        torch_worker().call(torch.set_num_threads, best_threads)
    load = load_of(best)
    quiet_now = getattr(first, "share", None) is not None and first.share >= QUIET_SHARE
    if lm is not None and quiet_now and most > 1 and ctx.machine.quiet_threads(model) not in (None, most):
        quiet = ctx.loaded.sample(ctx, model, lm, threads=most)   # quiet now at the quiet count: measured there
        ref = [quiet.step(r) for r in PROBE_ROWS]
        load = load_of(best)
    if load < 1.0:   # quieter than the quiet step: keep the faster times, as a sample of their own
        faster = Sample(quiet.scaled(load), best_threads, 1.0, time.time(),
                        os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
        quiet = ctx.machine.add_sample(model, faster, most)
        load = 1.0
    return quiet.scaled(load), load, best_threads


def fit(profile: MachineProfile, model: str, cfg: RunConfig, *, prompt_len: int, shared: bool, limit_s: float,
        sr_auto: bool, methods: tuple[str, ...] = ("bon", "sr")) -> Fit | None:
    """The race at ``cfg`` on this machine as profiled (``Machine.profile``: measured at start-up, refreshed only
    while idle), with a prompt of ``prompt_len`` tokens: a pure function, no measurement (the planner's). None
    before the first measurement of ``model``'s step; an estimate of 0 where nothing is estimated (a GPU, a budget
    that cannot run the race: the race itself then says what to change)."""
    quiet = profile.step(model)
    if quiet is None or profile.load is None:
        return None
    load, threads = profile.load, profile.threads or 1
    cost = quiet.scaled(load)
    if kv_rule.planned(cfg.budget) is None:   # a GPU: fast enough that nothing needs estimating
        return Fit(cfg, cost, load, threads, 0.0, limit_s, measured=profile.when(model))
    probe = Fit(cfg, cost, load, threads, 1.0, limit_s, prompt_len, shared, profile.overhead, profile.when(model))
    try:
        estimate = probe.estimate(cfg, sr_auto=sr_auto, methods=methods)
    except ValueError:
        estimate = 0.0
    return dataclasses.replace(probe, estimate_s=estimate)


def refresh(ctx: AppContext, model: str, lm) -> float:
    """Probe this machine now (``measure``) and keep it as the profile the planner reads, with when and under what
    load it ran: at start-up (the warm-up) and, after that, only while the page is idle (``keep_fresh``)."""
    cost, load, threads = measure(ctx, model, lm)
    with ctx.machine.lock:
        ctx.machine.last_load = load
        ctx.machine.measured_at = time.time()
        ctx.machine.measured_loadavg = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return load


REFRESH_S = 600.0    # SPECREJ_PROFILE_REFRESH_S: the profile is refreshed at most this often ...
IDLE_S = 60.0        # ... and only once no run has started or ended for this long


def keep_fresh(ctx: AppContext, every_s: float = REFRESH_S, idle_s: float = IDLE_S,
               stop: threading.Event | None = None) -> threading.Thread:
    """A daemon thread that refreshes the profile (``refresh``) every ``every_s`` seconds, only while the page is
    idle (no run for ``idle_s``): the load at the moment of a click never decides what the room sees."""
    stop = stop or threading.Event()

    def loop() -> None:
        while not stop.wait(min(every_s, idle_s) / 2):
            with ctx.machine.lock:
                at = ctx.machine.measured_at
            if ctx.warming or at is None or time.time() - at < every_s or ctx.machine.idle_for() < idle_s:
                continue
            lm = ctx.loaded.cached(ctx.default_model)
            if lm is None:
                continue
            try:
                torch_worker().call(refresh, ctx, ctx.default_model, lm)
            except Exception:   # never the page's problem: the last profile stands
                log.warning("could not refresh the machine profile", exc_info=True)

    thread = threading.Thread(target=loop, name="specrej-profile", daemon=True)
    thread.stop = stop
    thread.start()
    return thread


def learn(ctx: AppContext, fitted: Fit, seconds: float) -> None:
    """After a race ran to the end: what it took over its decode-time bound, for the next fit (a running
    mean that moves a third of the way, kept within 0.5-3)."""
    if fitted.estimate_s <= 0 or seconds <= 0:
        return
    m = ctx.machine
    with m.lock:
        ratio = seconds / (fitted.estimate_s / m.overhead)
        m.overhead = min(3.0, max(0.5, m.overhead + (ratio - m.overhead) / 3))


# ---------------------------------------------------------------- while the server warms up

def warming_words(ctx: AppContext) -> str:
    """What a page event that needs the warmed-up server answers at once while it warms up (nothing waits for the
    warm-up on a worker thread: 45 such calls held every Gradio thread, issue 61): how long it may still take,
    from what the last start here took (the profile file)."""
    left = ctx.loaded.warming_left()
    if left is None:
        when = "about a minute on a quiet 2-core machine, longer under load or the first time the step compiles"
    elif left > 0:
        when = f"about {left:.0f} s more (the last start here took {ctx.loaded.ready_s:.0f} s)"
    else:
        when = f"any moment now (the last start here took {ctx.loaded.ready_s:.0f} s)"
    return (f"**Warming up:** this server has just started and is still loading the models, compiling the decoding "
            f"step and measuring this machine: {when}. Press this again then; a Run pressed now starts when ready.")
