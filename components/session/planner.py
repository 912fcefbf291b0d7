"""One planner: what a Run does, decided at the click in well under a second, with nothing measured.

``plan(ctx, request, profile) -> Plan`` reads the request (checked field by field), this deployment's settings
(``AppContext``: limits, models, recordings) and the machine profile (``context.MachineProfile``: measured at
start-up and refreshed only while the page is idle, ``pace.keep_fresh``). It resolves the arms, admits each arm
once at this prompt (``specrej.core.budget.admit``: the KV budget and prompt sharing resolved), estimates the race
on the profile (``pace.fit``) and decides one thing:

- ``live``: race it here (``Plan.fit`` prices its verdict and states its expected time);
- ``recording``: play the labelled recording of this very race, at ``speed`` (lecture mode, paced to the time
  stated before it starts; or at its recorded pace where the live race would pass the time limit), ``fallback``
  saying why on the page;
- ``refuse``: ``message`` says what to change (bad input, a race that does not fit, or too long with no
  recording);
- ``warm``: the server is still warming up (models loading, the step compiling, the profile being measured): the
  executor waits for it, then plans again.

It never calls the torch thread: the generator is the one already loaded (``Models.cached``) and the prompt is
tokenised here (``prompt_tokens``). The executor (``stream.execute``) plays a Plan. Nothing here knows Gradio.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from specrej.core.budget import Admission, admit, sharing
from specrej.core.config import AUTO

from components.deploy.limits import PolicyError
from components.session import pace, recordings
from components.session.context import AppContext, MachineProfile
from components.state.request import RunRequest

LIVE, RECORDING, REFUSE, WARM = "live", "recording", "refuse", "warm"
log = logging.getLogger("specrej.app")


@dataclass(frozen=True)
class Plan:
    """What a Run does (``plan``). ``prep``: the checked race (``stream.Prepared``); ``admissions``: each arm's one
    admission at this prompt (empty when the generator is not loaded yet: the race admits as it starts);
    ``fit``: the race on the machine profile (None before the first measurement: the verdict counts steps)."""

    action: str
    request: RunRequest | None = None
    prep: object = None
    admissions: tuple[Admission, ...] = ()
    fit: pace.Fit | None = None
    recording: Path | None = None
    speed: float = 1.0
    fallback: dict | None = None
    message: str = ""
    switch_s: float = 0.0       # a live race with a recording switches to it past this many seconds (0: the limit's)
    planned_s: float = 0.0      # how long deciding took (the benchmark prints it)


_tokens_lock = threading.Lock()
_tokens: dict[tuple[int, str], int] = {}   # (id of the generator, prompt) -> tokens; generators live for the process


def prompt_tokens(lm, prompt: str) -> int:
    """The prompt's length in tokens through the chat template, off the torch thread (tokenising reads no
    tensor), remembered per generator and prompt (the last 256)."""
    key = (id(lm), prompt)
    with _tokens_lock:
        if key not in _tokens:
            if len(_tokens) >= 256:
                _tokens.pop(next(iter(_tokens)))
            _tokens[key] = len(lm.render(prompt))
        return _tokens[key]


def admissions(prep, lm) -> tuple[Admission, ...]:
    """Each arm's admission at this prompt (``admit``: n='auto' resolved, the rows checked at full length and
    for the first tokens); BudgetError (naming the fix, quoting the settings as sent) where one cannot run."""
    prompt_len = prompt_tokens(lm, prep.cfg.prompt)
    shared, engine = sharing(lm, lm.backend), lm.backend
    out = []
    for arm in prep.arms:
        cfg = arm.config(prep.cfg)
        a = admit(cfg, budget=cfg.budget if cfg.budget is not None else engine.default_budget(lm),
                  prompt_len=prompt_len, shared=shared, max_positions=lm.max_positions)
        a.granted()   # raises BudgetError with the words
        out.append(a)
    return tuple(out)


def plan(ctx: AppContext, request, profile: MachineProfile | None = None) -> Plan:
    """What this Run does, decided now (see the module). ``request``: a RunRequest or the raw values by name."""
    from components.session.stream import prepare, too_long   # the request's checks and words (stream imports us)

    t0 = time.perf_counter()

    def done(action: str, **kw) -> Plan:
        return Plan(action, planned_s=time.perf_counter() - t0, **kw)

    try:
        request, prep = prepare(ctx, request, fits=False)
    except (ValueError, TypeError, PolicyError) as e:   # bad input: say what to change, start nothing
        return done(REFUSE, message=str(e))
    if ctx.warming:
        return done(WARM, request=request, prep=prep)
    profile = profile or ctx.machine.profile()
    lm = ctx.loaded.cached(prep.model_spec)
    if lm is None:   # another generator, not loaded yet: the race loads it, admits its arms and says what fails
        return done(LIVE, request=request, prep=prep)
    try:
        admitted = admissions(prep, lm)
    except (ValueError, PolicyError) as e:   # BudgetError: the words name the fix
        return done(REFUSE, request=request, prep=prep, message=str(e))
    except Exception as e:   # a prompt the tokenizer refuses: the race says it as it starts
        return done(LIVE, request=request, prep=prep, message=f"{type(e).__name__}: {e}")
    sr_auto = any(dict(a.overrides).get("n") == AUTO for a in prep.arms if a.kind.about.auto_n)
    limit = float(ctx.limits.max_run_seconds)
    try:
        fitted = pace.fit(profile, prep.model_spec, prep.cfg, prompt_len=admitted[0].kv.prompt_len,
                          shared=admitted[0].kv.shared, limit_s=limit, sr_auto=sr_auto,
                          methods=tuple(a.method for a in prep.arms))
    except Exception:   # a method with no cost model (a registered one): live, nothing estimated
        log.warning("could not estimate the race", exc_info=True)
        fitted = None
    live = dict(request=request, prep=prep, admissions=admitted, fit=fitted)
    if fitted is None or not fitted.estimate_s:
        return done(LIVE, **live)
    recording = recording_of(ctx, prep, lm) if request.fit else None   # fit off: never a recording instead
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


def recording_of(ctx: AppContext, prep, lm) -> Path | None:
    """The labelled recording of this very race, when one was made (``recordings.PAGE_RACES``)."""
    if ctx.page_races is None:
        return None
    key = recordings.race_key(prep.model_spec, prep.reward_spec, prep.cfg, prep.arms,
                              prep.race_kw.get("stop_when_matched", False), dtype_name(lm))
    return recordings.find_race(key, ctx.page_races)


def dtype_name(lm) -> str:
    """'float32', 'bfloat16': the generator's dtype as a recording names it."""
    return str(lm.dtype).replace("torch.", "")


def recorded_seconds(recording: Path | None) -> float | None:
    """The recorded race's own time (None without a readable recording)."""
    if recording is None:
        return None
    try:
        return recordings.meta_of(recording)[1] or None
    except (OSError, ValueError, recordings.RecordingError):
        return None


def replanned(ctx: AppContext, p: Plan) -> Plan:
    """``p`` planned again (after the warm-up it waited for)."""
    return plan(ctx, p.request)

