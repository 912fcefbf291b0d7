"""What a race will take on this machine: so a lecturer gets the same experiment every time, and knows before it
starts whether it ends in time. Pure: it reads the machine profile (``context.MachineProfile``), measured by the
start-up room (``startup.py``: the quiet step, the best of its measurements, never the load of a moment; a probe
of the load, refreshed only while the page is idle), and never measures; a click never waits for a measurement
(``planner.plan``).

At a click (``fit``): the race's decoding time bounded from above (``specrej.core.cost.race_seconds``) at the
profiled step times, times what past races here took over that bound (reward scoring, frames). Load never
changes the race: N, the decision tokens, the answers' length and the budget stay as asked. When the estimate is
past the deployment's time limit the race does not start live (the planner plays the labelled recording of that
same race where one exists, or says what would fit). Lecture mode's choice (``lecture_plan``) states a time the
room will see; after a race, what it took over its bound is learnt (``learn``).

The profiled step times also price the verdict (``specrej.analysis.verdict``): Best-of-N's curve in seconds on this
machine. Nothing here knows Gradio.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from specrej import RunConfig
from specrej.core.cost import StepCost, race_seconds

from components.session import budget as kv_rule
from components.session.context import AppContext, MachineProfile

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

    @property
    def quiet_s(self) -> float:
        """The time the page states for this race live: its estimate on this machine when quiet (the profile's
        quiet step), never scaled by the load its last probe met (a moment's: issue 61, a server started at load
        4.8 stated 30.6 s for a race that took 16.3 s). 0: not estimated."""
        return self.estimate_s / max(1.0, self.load)

    def late(self, elapsed_s: float) -> bool:
        """The race runs plainly past the time the page stated (``quiet_s``): other work takes its cores now."""
        return bool(self.estimate_s) and elapsed_s > LATE * self.quiet_s + LATE_SLACK_S


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
    when quiet: ``profile.quiet_of``), within ``LIVE_SHARE`` of the limit, and plays live when its estimate now is
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


def learn(ctx: AppContext, fitted: Fit, seconds: float, clock: dict | None = None) -> None:
    """After a race ran to the end: what it took over its decode-time bound, for the next fit (a running
    mean that moves a third of the way, kept within 0.5-3). Not from a race that waited for its cores
    (``clock``: its ``origin.Clock`` record, ``waited``): other work's time is not the race's overhead."""
    if fitted.estimate_s <= 0 or seconds <= 0 or (clock or {}).get("waited"):
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
