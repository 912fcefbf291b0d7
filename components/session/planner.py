"""One planner: what a press of any play button does, decided at the click in well under a second, with nothing
measured. ``plan(ctx, press, values) -> Plan``; the executor (``stream.execute``) plays a Plan, ``app.py`` only wires.

The presses (``Press``): Run (and Shift+Enter), Replay (and step mode's replay), Paper scale, "Run it live", and a
Run the full queue (or a visitor's cap) had no place for. A plan reads the press's values (checked field by field),
this deployment's settings (``AppContext``: limits, models, recordings) and the machine profile
(``context.MachineProfile``: measured during the warm-up and refreshed only while the page is idle,
``startup.keep_fresh``), and decides one thing:

- ``live``: race it here (``Plan.fit`` prices its verdict and states its expected time); each arm admitted once at
  this prompt (``specrej.core.budget.admit``: the KV budget and prompt sharing resolved) and raced on that admission;
- ``recording``: play a recording (which: ``recording``; at what pace: ``speed``; why: ``fallback``, said on the
  page): a Replay's, Paper scale's while the paper's setting does not fit live, the labelled recording of this very
  race in lecture mode (paced to the time stated before it starts), where the live race would pass the time limit,
  or where the queue is full;
- ``settings``: Paper scale's settings only (the paper's setting fits live: Run runs it); ``settings, then live``:
  "Run it live" sets a recording's settings and the page's own Run races them;
- ``refuse``: ``message`` says what to change (bad input, a race that does not fit, too long with no recording, a
  full queue);
- ``warm``: the server is still warming up (models loading, the step compiling, the profile being measured): a Run
  waits for it and is planned again (``wait``); any other press is answered at once with ``message``.

It never calls the torch thread for a Run: the generator is the one already loaded (``Models.cached``) and the
prompt is tokenised here (``budget.prompt_tokens``). Nothing here knows Gradio.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from specrej import RunConfig
from specrej.core.budget import Admission, admit, sharing
from specrej.core.config import AUTO

from components.deploy.limits import PolicyError
from components.session import budget as kv_rule
from components.session import pace, paper, recordings
from components.session.context import AppContext, MachineProfile
from components.state.request import RunRequest
from components.state.shared import CLASSROOM, PaperPlan

LIVE, RECORDING, REFUSE, WARM = "live", "recording", "refuse", "warm"
SETTINGS, SETTINGS_THEN_LIVE = "settings", "settings, then live"
log = logging.getLogger("specrej.app")


class Press(str, Enum):
    """What was pressed: each play button, and a Run moved by the full queue (``deploy.clients.FullQueue``)."""

    RUN = "run"                 # Run, Shift+Enter, the second step of "Run it live": the request's race
    REPLAY = "replay"           # an example prompt's recorded paper-scale race (in step mode too), at a pace
    PAPER = "paper-scale"       # the paper's setting where it fits live; else scaled down, its recording meanwhile
    LIVE = "run-live"           # "Run it live": the shown recording's settings set on the page (then Run)
    FULL_QUEUE = "full-queue"   # a Run the full queue or a cap had no place for: its race's recording, at once


@dataclass(frozen=True)
class Prepared:
    """A request that passed every check: what the race needs."""

    model_spec: str
    reward_spec: str
    cfg: RunConfig
    arms: tuple
    x_axis: str
    race_kw: dict          # extra keyword arguments of ``events_fn`` (remote code, stop once matched, dtype)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a press does (``plan``). ``prep``: the checked race; ``admissions``: each arm's one admission at this
    prompt (empty when the generator is not loaded yet: the race admits as it starts); ``fit``: the race on the
    machine profile (None before the first measurement: the verdict counts steps); ``paper``: the settings Paper
    scale or "Run it live" sets on the page, ``same_race`` the fields of the page's own recorded race."""

    action: str
    press: Press = Press.RUN
    request: RunRequest | None = None
    prep: Prepared | None = None
    admissions: tuple[Admission, ...] = ()
    fit: pace.Fit | None = None
    recording: Path | None = None
    speed: float = 1.0
    step: bool = False          # a recording played in step mode, or for a room (a live race: its request's)
    lecture: bool = False
    fallback: dict | None = None
    message: str = ""
    wait: bool = False          # warm: wait for the warm-up, then plan again (a Run)
    paper: PaperPlan | None = None
    same_race: dict | None = None
    prompt: str = ""            # the prompt pressed for (Paper scale) or of the recording (Run it live)
    switch_s: float = 0.0       # a live race with a recording switches to it past this many seconds (0: the limit's)
    planned_s: float = 0.0      # how long deciding took (the benchmark prints it)

    @property
    def plays(self) -> bool:
        """Something plays into the page's charts and status (else the press only sets the page's settings)."""
        return self.action not in (SETTINGS, SETTINGS_THEN_LIVE)


def plan(ctx: AppContext, press: Press, values, profile: MachineProfile | None = None, *, waiting: int = 0,
         capped: str | None = None) -> Plan:
    """What this press does, decided now (see the module). ``values``: a Run's RunRequest or its raw values (by
    name or in field order); Replay's and Paper scale's ``prompt``, ``pace``, ``step``, ``lecture``; "Run it
    live"'s ``prompt`` and ``view`` (the recording shown). ``waiting`` and ``capped``: the full queue's length and
    the cap's words (a Run moved by the guard)."""
    t0 = time.perf_counter()

    def done(action: str, **kw) -> Plan:
        return Plan(action=action, press=Press(press), planned_s=time.perf_counter() - t0, **kw)

    press = Press(press)
    if press is Press.RUN:
        return _run(ctx, values, profile, done)
    if press is Press.FULL_QUEUE:
        return _full_queue(ctx, values, done, waiting, capped)
    values = dict(values)
    if press is Press.REPLAY:
        try:
            path, speed = recordings.replay_of(values.get("prompt"), values.get("pace"), ctx.limits.max_prompt_chars)
        except ValueError as e:
            return done(REFUSE, message=str(e))
        return done(RECORDING, recording=path, speed=speed, step=values.get("step") is True,
                    lecture=values.get("lecture") is True)
    if press is Press.LIVE:
        view = values.get("view")
        shown = getattr(view, "recording", None) or {}
        if shown.get("page_race") and isinstance(shown.get("request"), dict):   # the page's own race, as it ran
            return done(SETTINGS_THEN_LIVE, same_race=shown["request"], prompt=view.cfg.prompt)
    if ctx.warming:   # answered at once: no worker thread waits for the warm-up (issue 61)
        return done(WARM, message=pace.warming_words(ctx))
    try:
        prompt, speed = recordings.check_replay(values.get("prompt"), "inf" if press is Press.LIVE
                                                else values.get("pace"), ctx.limits.max_prompt_chars)
        scaled = paper.plan(ctx, prompt, profile or ctx.machine.profile())
    except (ValueError, OSError) as e:   # a bad field, a model that cannot load (PolicyError too)
        return done(REFUSE, message=str(e))
    if press is Press.LIVE:   # the recording's protocol at the largest setting that fits here
        return done(SETTINGS_THEN_LIVE, paper=scaled, prompt=prompt)
    played = None if scaled.fits or scaled.replay_prompt is None else recordings.find(scaled.replay_prompt)
    if played is None:   # it fits live (Run runs it), or nothing to play meanwhile: the settings only
        return done(SETTINGS, paper=scaled, prompt=prompt)
    return done(RECORDING, paper=scaled, prompt=prompt, recording=played, speed=speed,
                step=values.get("step") is True, lecture=values.get("lecture") is True)


def _run(ctx: AppContext, request, profile: MachineProfile | None, done) -> Plan:
    try:
        request, prep = prepare(ctx, request)
    except (ValueError, TypeError, PolicyError) as e:   # bad input: say what to change, start nothing
        return done(REFUSE, message=str(e))
    mode = dict(request=request, prep=prep, step=request.step, lecture=request.lecture)
    if ctx.warming:
        return done(WARM, wait=True, **mode)
    profile = profile or ctx.machine.profile()
    lm = ctx.loaded.cached(prep.model_spec)
    if lm is None:   # another generator, not loaded yet: the race loads it, admits its arms and says what fails
        return done(LIVE, **mode)
    try:
        admitted = admissions(prep, lm)
    except (ValueError, PolicyError) as e:   # BudgetError: the words name the fix
        return done(REFUSE, message=str(e), **mode)
    except Exception as e:   # a prompt the tokenizer refuses: the race says it as it starts
        return done(LIVE, message=f"{type(e).__name__}: {e}", **mode)
    sr_auto = any(dict(a.overrides).get("n") == AUTO for a in prep.arms if a.kind.about.auto_n)
    limit = float(ctx.limits.max_run_seconds)
    try:
        fitted = pace.fit(profile, prep.model_spec, prep.cfg, prompt_len=admitted[0].kv.prompt_len,
                          shared=admitted[0].kv.shared, limit_s=limit, sr_auto=sr_auto,
                          methods=tuple(a.method for a in prep.arms))
    except Exception:   # a method with no cost model (a registered one): live, nothing estimated
        log.warning("could not estimate the race", exc_info=True)
        fitted = None
    live = dict(admissions=admitted, fit=fitted, **mode)
    if fitted is None or not fitted.estimate_s:
        return done(LIVE, **live)
    recording = recording_of(ctx, prep) if request.fit else None   # fit off: never a recording instead
    facts = {"estimate_s": fitted.estimate_s, "limit_s": fitted.limit_s, "load": fitted.load,
             "profile": profile.when()}
    if request.lecture:   # the same choice, and the same stated time, whatever the load at the click
        lp = pace.lecture_plan(fitted.estimate_s, fitted.load, fitted.limit_s, recorded_seconds(recording))
        if lp.mode == "recording":
            return done(RECORDING, **live, recording=recording, speed=lp.speed,
                        fallback={"reason": "lecture", "stated_s": lp.stated_s, **facts})
        if lp.mode == "too_long":
            return done(REFUSE, **live, message=too_long(fitted, prep))
        # live, to end about when stated: a race that runs past its target (the load rose after the profile) plays
        # its recording from there, rather than keep the room waiting up to the limit
        switch = lp.target_s + pace.LATE_SLACK_S   # the slack: frames and scoring jitter (a race of a second)
        return done(LIVE, **live, recording=recording, switch_s=switch if recording is not None else 0.0)
    if not fitted.fits:   # it would not end in time: its recording at its own pace, else what would fit
        if recording is None:
            return done(REFUSE, **live, message=too_long(fitted, prep))
        return done(RECORDING, **live, recording=recording, speed=1.0, fallback={"reason": "too_long", **facts})
    return done(LIVE, **live, recording=recording)


def _full_queue(ctx: AppContext, values, done, waiting: int, capped: str | None) -> Plan:
    """The recording of the race ``values`` ask for, at once, with the reason (the queue was full, or ``capped``:
    the cap's words); else refused with those words. Asks nothing of the torch thread (a full queue's runs hold it)."""
    try:
        request, prep = prepare(ctx, values)
        recording = recording_of(ctx, prep)
    except (ValueError, TypeError, PolicyError, OSError):   # values the race refuses: no recording, no error
        recording = None
    if recording is None:
        return done(REFUSE, message=capped or full_message(waiting, run_s=ctx.limits.max_run_seconds,
                                                           at_once=ctx.concurrency))
    why = {"reason": "capped", "why": capped} if capped else {"reason": "queue_full", "waiting": waiting}
    return done(RECORDING, request=request, prep=prep, recording=recording, speed=math.inf, fallback=why)


def replanned(ctx: AppContext, p: Plan) -> Plan:
    """``p`` planned again (after the warm-up it waited for)."""
    return plan(ctx, p.press, p.request)


# ---------------------------------------------------------------- the request's checks

def prepare(ctx: AppContext, request) -> tuple[RunRequest, Prepared]:
    """Every check on a request before anything loads or is measured: ``request`` (a RunRequest, or the raw
    values by name) field by field against this deployment's limits (``RunRequest.parse``), the model and
    reward offered here, each arm's settings and the race's memory as a whole. ValueError (a FieldError ...) or
    PolicyError with a message that names what to change. Whether each arm's rows fit its budget at this prompt
    needs the model: ``admissions``, asked once a race."""
    if isinstance(request, RunRequest):
        request.check_limits(ctx.limits)
    else:
        request = RunRequest.parse(request, ctx.limits)
    model_spec, reward_spec = ctx.resolve(request.model, request.reward, request.preference)
    if ctx.policy.allow_remote_code:
        ctx.policy.check(model_spec, trust_remote_code=True)
    cfg = request.config(ctx.progress_every)
    arms = request.arms(ctx.arms)
    for arm in arms:
        ctx.limits.check(arm.config(cfg))   # an arm's own N, and the rows an 'auto' start opens with
    ctx.limits.check_race([arm.config(cfg) for arm in arms])   # every arm's cache, held at once
    kw = {"trust_remote_code": True} if ctx.policy.allow_remote_code else {}
    kw["dtype"] = ctx.dtype
    if request.stop_when_matched:
        kw["stop_when_matched"] = True
    return request, Prepared(model_spec, reward_spec, cfg, arms, request.x_axis, kw)


def admissions(prep: Prepared, lm) -> tuple[Admission, ...]:
    """Each arm's admission at this prompt (``admit`` at the budget it is granted, ``budget.granted``: n='auto'
    resolved, the rows checked at full length and for the first tokens); BudgetError (naming the fix, quoting the
    settings as sent) where one cannot run."""
    prompt_len = kv_rule.prompt_tokens(lm, prep.cfg.prompt)
    shared = sharing(lm, lm.backend)
    out = []
    for arm in prep.arms:
        cfg = arm.config(prep.cfg)
        a = admit(cfg, budget=kv_rule.granted(cfg.budget, lm), prompt_len=prompt_len, shared=shared,
                  max_positions=lm.max_positions)
        a.granted()   # raises BudgetError with the words
        out.append(a)
    return tuple(out)


def too_long(fitted: pace.Fit, prep: Prepared) -> str:
    """Why a race does not start live, and the smaller races that would: the visitor chooses."""
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    small = dataclasses.replace(prep.cfg, **{k: v for k, v in CLASSROOM.items() if k in fields})
    small_s = fitted.estimate(small, sr_auto=CLASSROOM["sr_start"] == "auto")
    busy = (f" (this machine is {fitted.load:.1f}x slower than when quiet: other work shares its cores)"
            if fitted.load >= 1.3 else "")
    classroom = (f"the Classroom preset (N = {CLASSROOM['n']}, {CLASSROOM['max_new_tokens']} tokens) would take "
                 f"about {small_s:.0f} s; " if 0 < small_s <= pace.LIVE_SHARE * fitted.limit_s else "")
    return (f"live, this race would take about {fitted.estimate_s:.0f} s here{busy}, past this deployment's "
            f"time limit of {fitted.limit_s:.0f} s, and there is no recording of this exact race. Choose a smaller "
            f"race: {classroom}fewer answers (N) or fewer new tokens shorten it; or try again when the machine is "
            "quieter. Nothing was changed for you.")


def full_message(waiting: int, *, run_s: float, at_once: int) -> str:
    """Why a Run was not queued: how many runs wait, and when a place may free (each run takes at most
    ``run_s`` seconds, ``at_once`` of them at a time)."""
    next_s = run_s / max(at_once, 1)
    all_min = math.ceil(waiting * run_s / max(at_once, 1) / 60)
    return (f"The queue is full: {waiting} runs are waiting, each up to {run_s:.0f} s, {at_once} at a time. A place "
            f"frees in at most about {next_s:.0f} s, and the queue clears in about {all_min} min: try again then. "
            "Meanwhile an example prompt's Replay plays its recorded race at once.")


# ---------------------------------------------------------------- the page's own races, recorded

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}   # SPECREJ_DTYPE -> the dtype a recording names


def race_key(ctx: AppContext, prep: Prepared, lm=None) -> dict | None:
    """The one key of ``prep``'s race among the recordings (``recordings.race_key``), its dtype named as a
    recording names it ('float32'): the loaded generator's (``lm``, else the one already loaded), else the
    deployment's setting (a full queue asks nothing of the torch thread); None where neither says it (SPECREJ_DTYPE
    auto, the generator not loaded yet)."""
    lm = lm if lm is not None else ctx.loaded.cached(prep.model_spec)
    dtype = str(lm.dtype).replace("torch.", "") if lm is not None else DTYPES.get(ctx.dtype)
    if dtype is None:
        return None
    return recordings.race_key(prep.model_spec, prep.reward_spec, prep.cfg, prep.arms,
                               bool(prep.race_kw.get("stop_when_matched", False)), dtype)


def recording_of(ctx: AppContext, prep: Prepared) -> Path | None:
    """The labelled recording of this very race, when one was made (``recordings.PAGE_RACES``)."""
    key = race_key(ctx, prep) if ctx.page_races is not None else None
    return None if key is None else recordings.find_race(key, ctx.page_races)


def recorded_seconds(recording: Path | None) -> float | None:
    """The recorded race's own time (None without a readable recording)."""
    if recording is None:
        return None
    try:
        return recordings.meta_of(recording)[1] or None
    except (OSError, ValueError, recordings.RecordingError):
        return None
