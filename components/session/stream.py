"""The executor: a Plan (``planner.plan``) played into a stream of ``Update``s, live or recorded.

``execute(ctx, plan)`` plays every press's plan (``planner.plan``; ``updates(ctx, request)``: a Run outside the page,
planned and played): a refusal is one "Can't run" update; a recording plays through ``recordings.play``; a live
race (``live``) starts ``race_arms(...)`` over the run's arms (the context's arms, Best-of-N and Speculative
Rejection by default, plus a second Speculative Rejection setting when asked; interleaved by FLOPs spent: an
equal-compute race), feeds every event to a fresh ``RunView``, and yields an update per Round and Finished and at
most every ``ctx.min_frame_interval`` seconds for Progress events (presentation draws each:
``components/frames.draw``). Errors become a visible message in the status line, never a server error; an
out-of-memory error is retried once with half the budget (``retry.py``). Closing the generator (Stop, a closed
tab, a newer play) closes the race, which closes every arm and frees its memory in its ``finally``.

``race_events`` is the only function that touches the models; it yields plain frozen events,
so on ZeroGPU (``spaces.GPU``) it runs in the GPU process and only picklable data crosses over.
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Callable, Iterator

from specrej import Progress, RunConfig
from specrej.analysis.match import StopWhenMatched
from specrej.arms import DEFAULT_ARMS, ArmSpec, parse_arms, race_arms
from specrej.core.config import env_int
from specrej.origin import Clock
from specrej.record import Recorder, make_meta
from components.deploy.limits import PolicyError

from components.state.request import REQUEST_FIELDS
from components.state.update import Kind, Update
from components.state.view import RunState, RunView
from components.session.context import PREFERENCE, AppContext, get_models, model_label, reward_kind_label
from components.session import recordings
from components.deploy import memory
from components.session.gpu import GPU
from components.session.retry import OutOfMemory, retry_on_oom
from components.session.trace import write_traces
from components.session import pace, planner, startup
from components.session.worker import torch_worker

log = logging.getLogger("specrej.app")
GPU_DURATION = env_int("SPECREJ_GPU_DURATION", 120)
CATCH_UP_SECONDS = 1.0   # a live frame waits at most this long for the reader to catch up with the race


class RunTooLong(Exception):
    """The run passed the deployment's time limit."""


class FellBehind(Exception):
    """The live race fell so far behind its estimate that it would pass the time limit, and a recording of the
    same race exists: the page plays that instead of cutting the race at the limit."""


SWITCH_SHARE = 0.85   # a live race with a recording to fall back on switches to it at this share of the limit


# ---------------------------------------------------------------- the race

@GPU(duration=GPU_DURATION)
def race_events(model_spec: str, reward_spec: str, cfg: RunConfig, *, arms=DEFAULT_ARMS,
                trust_remote_code: bool = False, stop_when_matched: bool = False, dtype: str | None = None,
                admissions=None) -> Iterator:
    """Every arm's events, interleaved at equal compute. Loads (cached) models on first use.
    ``stop_when_matched``: the baseline (first arm) stops once it reaches the second arm's winner.
    ``admissions``: arm id -> the planner's admission of that arm (each arm admitted once a race)."""
    lm, reward = get_models(model_spec, reward_spec, trust_remote_code=trust_remote_code, dtype=dtype)
    arms = parse_arms(arms) if not all(isinstance(a, ArmSpec) and a.id for a in arms) else tuple(arms)
    referee = StopWhenMatched(arms[0].id, arms[1].id) if stop_when_matched and len(arms) > 1 else None
    yield from race_arms(lm, reward, cfg, arms, referee, admissions)


def reward_label(ctx: AppContext, key: str, preference: str) -> str:
    if key == PREFERENCE:
        return f"preference: {preference.strip()}"
    return next((label for label, k in ctx.rewards if k == key), reward_kind_label(key))


def _write(ctx: AppContext, view: RunView) -> str | None:
    """Write the run's trace (the download copy, and the operator's folder if set); never raises."""
    try:
        return write_traces(view, ctx.trace_dir, ctx.archive_dir)
    except Exception:
        log.exception("could not write the trace")
        return None


def new_view(ctx: AppContext, request, prep: planner.Prepared, fitted) -> RunView:
    """The run's view, priced at this machine's step times now when they were measured."""
    view = RunView(prep.cfg, model_label=model_label(prep.model_spec),
                   reward_label=reward_label(ctx, request.reward, request.preference), x_axis=prep.x_axis,
                   specs=prep.arms)
    view.fit, view.stepping, view.lecture = fitted, request.step, request.lecture
    view.request = {k: getattr(request, k) for k in REQUEST_FIELDS}   # the race as it ran, for its link
    if fitted is not None:
        view.step = fitted.cost
    return view


def race_updates(ctx: AppContext, view: RunView, prep: planner.Prepared, events_fn,
                 stop_requested: Callable[[], bool], fallback: Path | None = None,
                 admissions: tuple = (), switch_s: float = 0.0) -> Iterator[Update]:
    """One attempt at the race on ``view``: its start update, then a live update per Round and Finished and a
    few a second for Progress. Closing it closes the race on the torch thread. With a recording of this race
    (``fallback``) a race that falls behind switches to it (``FellBehind``): past ``switch_s`` seconds (lecture
    mode: the time stated, with its tolerance), else before the limit. ``admissions``: the
    planner's, one per arm, which the arms use instead of admitting again (not on a retry at a smaller budget)."""
    yield Update(Kind.START, view)
    kw = dict(prep.race_kw)
    if admissions and view.cfg == prep.cfg:
        kw["admissions"] = {arm.id: a for arm, a in zip(view.specs, admissions)}
    # every torch call of the race runs on the app's one torch thread (worker.py)
    events = torch_worker().stream(lambda: events_fn(prep.model_spec, prep.reward_spec, view.cfg, arms=view.specs,
                                                     **kw), cancelled=stop_requested)
    last = 0.0
    switch_at = min(switch_s or math.inf, SWITCH_SHARE * ctx.limits.max_run_seconds)
    try:
        for event in events:
            if stop_requested():
                return   # nobody reads this run any more: stop as Stop does
            view.apply(event)
            if fallback is not None and view.elapsed() > switch_at:
                raise FellBehind()
            if view.elapsed() > ctx.limits.max_run_seconds:
                raise RunTooLong(f"this deployment stops a run after {ctx.limits.max_run_seconds} s "
                                 "(SPECREJ_MAX_RUN_SECONDS).")
            now = time.perf_counter()
            if isinstance(event, Progress) and (now - last < ctx.min_frame_interval
                                                or events.ready() and now - last < CATCH_UP_SECONDS):
                continue  # a few frames a second is plenty, each drawn once the reader has caught up
            last = now
            if not view.done:
                yield Update(Kind.LIVE, view)   # the torch thread computes on while this frame is sent
    finally:
        # closes the race and every arm on the torch thread after its step in progress (their KV caches
        # are freed there, then memory is returned); not waited for: a cancel answers at once
        events.close(wait=False, then=memory.release)


WARMING = ("**Warming up:** this server has just started and is still loading the models and compiling the decoding "
           "step (once per start). This Run begins as soon as they are ready.")


def updates(ctx: AppContext, request, *, events_fn=race_events,
            stop_requested: Callable[[], bool] = lambda: False) -> Iterator[Update]:
    """A Run outside the page (the tests, the scripts): planned at once (``planner.plan``), then played."""
    yield from execute(ctx, planner.plan(ctx, planner.Press.RUN, request), events_fn=events_fn,
                       stop_requested=stop_requested)


def execute(ctx: AppContext, plan: planner.Plan, *, events_fn=race_events,
            stop_requested: Callable[[], bool] = lambda: False) -> Iterator[Update]:
    """The one executor: a Plan played into updates, live or recorded, until it ends (or the generator is closed).
    A plan that only sets the page's settings plays nothing (``Plan.plays``: the page shows them).

    Every outcome is an update: a refusal a "Can't run" status (nothing starts); a failure mid-run a status-only
    update (the charts keep what they showed) and a trace marked failed; a GPU out-of-memory error one retry with
    half the budget (``retry.retry_on_oom``), said on the page. ``stop_requested`` (what
    ``deploy.clients.Guard.on_start`` returns) is asked at every event: a run whose client cancelled it stops there."""
    if plan.action == planner.WARM and plan.wait:   # a server just started: its models load, its step compiles
        yield Update(Kind.WARMING, message=WARMING)
        while ctx.warming and not stop_requested():
            ctx.loaded.warm_thread.join(0.25)
        if stop_requested():
            return
        plan = planner.replanned(ctx, plan)
    if plan.action == planner.WARM:   # answered at once, and the page rests as it was
        yield Update(Kind.WARMING, message=plan.message, rests=True)
    elif plan.action == planner.REFUSE:
        yield Update(Kind.ERROR, message=plan.message)
    elif plan.action == planner.RECORDING:
        yield from recordings.play(plan.recording, plan.speed, min_frame_interval=ctx.min_frame_interval,
                                   step=plan.step, lecture=plan.lecture, fallback=plan.fallback,
                                   sleep=recordings.stoppable_sleep(stop_requested))
    elif plan.action == planner.LIVE:
        yield from live(ctx, plan, events_fn, stop_requested)
    elif plan.plays:
        yield Update(Kind.ERROR, message=f"nothing to play ({plan.action!r}).")


def live(ctx: AppContext, plan: planner.Plan, events_fn, stop_requested: Callable[[], bool]) -> Iterator[Update]:
    """The live race of a Plan: its updates, its trace written, what it took learnt for the next estimate; a race
    that falls behind, with a recording of it, switches to the recording (``FellBehind``)."""
    request, prep, fitted, recording = plan.request, plan.prep, plan.fit, plan.recording
    state = {"view": new_view(ctx, request, prep, fitted)}
    key = state["view"].run_id
    ctx.machine.started(key)
    clock = Clock()   # whether the race held its cores: only then does what it took teach the next estimate
    try:
        yield from retry_on_oom(lambda view: race_updates(ctx, view, prep, events_fn, stop_requested, recording,
                                                          plan.admissions, plan.switch_s),
                                state["view"], lambda v: state.update(view=v))
        view = state["view"]
        if not view.done and stop_requested():
            return   # cancelled: the finally marks the run stopped and writes its trace
        if not view.done:
            raise RuntimeError("the race ended before every method finished")
        view.trace_path = _write(ctx, view)
        if fitted is not None:
            pace.learn(ctx, fitted, view.elapsed(), clock.stop())
        yield Update(Kind.END, view)
    except FellBehind:   # the recording of this same race, at once, rather than a race cut at the limit
        view = state["view"]
        view.state, view.message = RunState.STOPPED, "fell behind: the recording of this race was played instead"
        yield from recordings.play(recording, math.inf, min_frame_interval=ctx.min_frame_interval,
                                   step=request.step, lecture=request.lecture,
                                   fallback={"reason": "behind", "estimate_s": fitted.estimate_s if fitted else 0.0,
                                             "limit_s": float(ctx.limits.max_run_seconds),
                                             "elapsed_s": view.elapsed(), "load": fitted.load if fitted else 1.0,
                                             "switch_s": plan.switch_s})
    except RunTooLong as e:  # not an error: the race so far is the result (the finally above freed its memory)
        yield ended(ctx, state["view"], RunState.LIMIT, str(e))
    except (ValueError, PolicyError, OutOfMemory) as e:  # BudgetError, RewardError, ArmSpecError ...
        yield ended(ctx, state["view"], RunState.ERROR, str(e))
    except Exception as e:  # never a server error: show it, log it, stay usable
        log.exception("run failed")
        yield ended(ctx, state["view"], RunState.ERROR, f"something went wrong ({type(e).__name__}: {e}). The app is "
                    "still usable: try again.")
    finally:
        view = state["view"]
        if view.state is RunState.RUNNING:  # closed early: Stop, a closed tab, a server shutdown
            view.state = RunState.STOPPED
        if view.state is RunState.STOPPED:
            view.trace_path = _write(ctx, view)
        ctx.machine.ended(key)


def ended(ctx: AppContext, view: RunView, state: RunState, message: str) -> Update:
    """A race that did not finish: its state and message, its trace written, the update that says so."""
    view.state, view.message = state, message
    view.trace_path = _write(ctx, view)
    return Update(Kind.LIMIT if state is RunState.LIMIT else Kind.FAILURE, view)


def page_fields(request) -> dict:
    """The request's settings as the page's controls hold them (what "Run it live" sets back)."""
    return {k: getattr(request, k) for k in REQUEST_FIELDS if k not in ("prompt", "model", "x_axis", "lecture")
            and isinstance(getattr(request, k), (str, int, float, bool))}


def record(ctx: AppContext, request, path: Path, *, events_fn=race_events) -> Path:
    """Race ``request`` as the page does (the same checks, arms and settings) and save it as the labelled
    recording of that race (``recordings.PAGE_RACES``): its events, this machine's quiet step (a replay prices
    Best-of-N's curve with it, and says whose machine that was), the generator's dtype and its ``race_key``,
    by which a Run too long for its machine finds it. ``scripts/record_page_races.py`` records the page's."""
    request, prep = planner.prepare(ctx, request)
    lm = ctx.generator(prep.model_spec)
    admitted = {arm.id: a for arm, a in zip(prep.arms, planner.admissions(prep, lm))}   # once: the race runs on them
    cost = startup.quiet_step(ctx, prep.model_spec, lm)
    recorder = Recorder()
    events = torch_worker().stream(lambda: events_fn(prep.model_spec, prep.reward_spec, prep.cfg, arms=prep.arms,
                                                     admissions=admitted, **prep.race_kw))
    try:
        for event in events:
            recorder.add(event)
    finally:
        events.close()
    c = prep.cfg
    settings = {"n": c.n, "alpha": c.alpha, "max_new_tokens": c.max_new_tokens, "budget": c.budget,
                "first_decision": c.first_decision, "seed": c.seed, "temperature": c.temperature, "top_p": c.top_p,
                "decision": c.decision, "rule": c.rule, "stop_when_matched": bool(prep.race_kw.get("stop_when_matched"))}
    meta = make_meta(prep.model_spec, reward_label(ctx, request.reward, request.preference), settings,
                     prompt=c.prompt, arms=[{"id": a.id, "spec": a.spec} for a in prep.arms],
                     step_cost=cost.to_record(),
                     dtype=str(lm.dtype).replace("torch.", ""), request=page_fields(request),
                     race=planner.race_key(ctx, prep, lm))
    recorder.recording(meta).save(path)
    return path
