"""The request adapter: a ``RunRequest`` in, a stream of ``Frame``s out.

``frames(ctx, request)`` validates the request, starts ``race_arms(...)`` over the run's arms
(the context's arms, Best-of-N and Speculative Rejection by default, plus a second Speculative
Rejection setting when asked; interleaved by FLOPs spent: an equal-compute race), feeds every
event to a fresh ``RunView``, and yields a frame (``frames.py``) per Round and Finished and at
most every ``ctx.min_frame_interval`` seconds for Progress events. Errors become a visible
message in the status line, never a server error; an out-of-memory error is retried once with
half the budget (``retry.py``). Closing the generator (Stop, a closed tab) closes the race,
which closes every arm and frees its memory in its ``finally``.

``RunRequest``'s fields and defaults come from ``RunConfig`` (the settings the page offers,
``CONFIG_FIELDS``), plus the app's own: the model and reward choices, the second setting and
the race chart's axis. The page passes its inputs by these names.

``race_events`` is the only function that touches the models; it yields plain frozen events,
so on ZeroGPU (``spaces.GPU``) it runs in the GPU process and only picklable data crosses over.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import field, make_dataclass
from typing import Any, Callable, Iterator

from specrej import Progress, RunConfig
from specrej.config import AUTO
from specrej.core.config import DEFAULT_CPU_BUDGET
from specrej.match import StopWhenMatched
from specrej.arms import DEFAULT_ARMS, ArmSpec, parse_arms, race_arms
from specrej.config import env_int
from components.deploy.limits import PolicyError

from .. import charts
from .context import PREFERENCE, AppContext, get_models, model_label, reward_kind_label
from ..frames import KEEP, Frame, end_frame, error_frame, failure_frame, final_frame, limit_frame, live_frame, start_frame  # noqa: F401
from . import memory
from .gpu import GPU
from ..deploy.guard import check_request
from .retry import OutOfMemory, retry_on_oom
from .trace import write_traces
from .view import RunView
from . import pace
from .worker import torch_worker

log = logging.getLogger("specrej.app")
GPU_DURATION = env_int("SPECREJ_GPU_DURATION", 120)
MAX_SEED = 2**63 - 1
MAX_ARMS = 3   # arm slots on the page
CATCH_UP_SECONDS = 1.0   # a live frame waits at most this long for the reader to catch up with the race


class RunTooLong(Exception):
    """The run passed the deployment's time limit."""


# ---------------------------------------------------------------- the request

CONFIG_FIELDS = ("n", "alpha", "max_new_tokens", "temperature", "top_p", "seed", "budget", "decision", "interval",
                 "first_decision")
SR_STARTS = ("same", "auto")   # Speculative Rejection starts with Best-of-N's N, or fills memory at first_decision
# The page's defaults: the library's, except N and the first decision. N = the CPU budget's slots / 14
# tokens (32): Speculative Rejection opens with at most as many rows as Best-of-N writes answers, so with coupled
# randomness every answer it can pick is one Best-of-N writes too, and its result always falls on Best-of-N's
# curve (the verdict is a time, never only a bound). Two decisions on every example prompt.
PAGE_DEFAULTS = {"n": DEFAULT_CPU_BUDGET // 14, "first_decision": 14}
_DEFAULTS = {**{f.name: f.default for f in dataclasses.fields(RunConfig)}, **PAGE_DEFAULTS}


class _Request:
    def config(self, progress_every: int) -> RunConfig:
        """A validated RunConfig (ValueError with a message that says what to change)."""
        kw = {name: getattr(self, name) for name in CONFIG_FIELDS}
        kw["budget"] = None if kw["budget"] in (None, 0, "") else kw["budget"]
        kw["rule"] = _DEFAULTS["rule"] if self.rule in (None, "") else self.rule   # RunConfig checks the rest
        seed = kw["seed"]
        if isinstance(seed, int) and not isinstance(seed, bool) and seed > MAX_SEED:
            raise ValueError(f"seed={seed} is too large: use a seed below 2**63.")
        return RunConfig(prompt=self.prompt if isinstance(self.prompt, str) else "", progress_every=progress_every,
                         **kw)

    def arms(self, base: tuple = DEFAULT_ARMS) -> tuple[ArmSpec, ...]:
        """The run's arms: ``base``, and with ``second`` a second Speculative Rejection setting
        (both Speculative Rejection arms then name their settings)."""
        arms = list(parse_arms(base))
        if self.second is True:
            differ = self.second_decision != self.decision
            first = ArmSpec("sr", (("alpha", self.alpha),) + ((("decision", self.decision),) if differ else ()))
            other = ArmSpec("sr", (("alpha", self.second_alpha),)
                            + ((("decision", self.second_decision),) if differ else ()))
            k = next((i for i, a in enumerate(arms) if a.method == "sr" and not a.overrides), None)
            if k is None:
                arms.append(first)
            else:
                arms[k] = first
            arms.append(other)
        if self.sr_start not in SR_STARTS:
            raise ValueError(f"sr_start={self.sr_start!r}: choose 'same' (Best-of-N's N) or 'auto' (fills memory at "
                             "the first decision).")
        if self.sr_start == "auto":   # the paper's first batch: every SR arm without its own N fills memory
            arms = [dataclasses.replace(a, overrides=a.overrides + (("n", AUTO),))
                    if a.method == "sr" and "n" not in dict(a.overrides) else a for a in arms]
        arms = parse_arms([dataclasses.replace(a, id="") for a in arms])
        if len(arms) > MAX_ARMS:
            raise ValueError(f"{len(arms)} arms do not fit the page (at most {MAX_ARMS}): turn off the second "
                             "setting.")
        return arms


RunRequest = make_dataclass(
    "RunRequest",
    [("prompt", Any, field(default="")), ("model", Any, field(default="")), ("reward", Any, field(default="")),
     ("preference", Any, field(default=""))]
    + [(name, Any, field(default=_DEFAULTS[name])) for name in CONFIG_FIELDS]
    + [("second", Any, field(default=False)), ("second_alpha", Any, field(default=0.9)),
       ("second_decision", Any, field(default=_DEFAULTS["decision"])), ("x_axis", Any, field(default="time")),
       ("sr_start", Any, field(default="auto")), ("stop_when_matched", Any, field(default=False)),
       ("rule", Any, field(default=_DEFAULTS["rule"])), ("fit", Any, field(default=True)),
       ("step", Any, field(default=False))],
    bases=(_Request,), frozen=True)
RunRequest.__doc__ = ("What the user asked for, as the page (or the API) sends it, by name: the RunConfig "
                      "settings the page offers, the model and reward choices, a second Speculative Rejection "
                      "setting to compare, the race chart's axis, how Speculative Rejection starts ('same' N as "
                      "Best-of-N, or 'auto': the rows that fill memory at first_decision tokens) and whether the "
                      "race stops Best-of-N once it matches Speculative Rejection's winner, and the rule that picks which "
                      "candidates a decision keeps (specrej.core.rules); whether the race is fitted to this machine "
                      "(fit: answers shortened when the machine is busy, session/pace.py) and whether the page "
                      "steps through the decisions at the end (step).")
REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RunRequest))


# ---------------------------------------------------------------- the race

@GPU(duration=GPU_DURATION)
def race_events(model_spec: str, reward_spec: str, cfg: RunConfig, *, arms=DEFAULT_ARMS,
                trust_remote_code: bool = False, stop_when_matched: bool = False) -> Iterator:
    """Every arm's events, interleaved at equal compute. Loads (cached) models on first use.
    ``stop_when_matched``: the baseline (first arm) stops once it reaches the second arm's winner."""
    lm, reward = get_models(model_spec, reward_spec, trust_remote_code=trust_remote_code)
    arms = parse_arms(arms) if not all(isinstance(a, ArmSpec) and a.id for a in arms) else tuple(arms)
    referee = StopWhenMatched(arms[0].id, arms[1].id) if stop_when_matched and len(arms) > 1 else None
    yield from race_arms(lm, reward, cfg, arms, referee)


MEASURING = "**Measuring** this machine's decoding speed now, to size the race so it ends in time…"


def measure_and_fit(ctx: AppContext, model_spec: str, cfg: RunConfig, arms, *, shorten: bool,
                    stop_requested: Callable[[], bool] = lambda: False):
    """``pace.fit`` for this race (None when it cannot measure: the race then runs as asked, and the verdict
    counts decoding steps instead of seconds). The measurement runs on the torch thread as one job; this
    handler waits for it but answers a cancel at once (the job is dropped if it has not started)."""
    from .gpu import ZERO_GPU

    if ZERO_GPU:   # the race runs in ZeroGPU's own process on a GPU lent per call: this process cannot time it
        return None
    sr_auto = any(dict(a.overrides).get("n") == AUTO for a in arms if a.method == "sr")
    busy = bool(ctx.active)
    token = f"measuring-{id(object())}"
    ctx.active.add(token)   # a run starting meanwhile does not probe a machine this one is timing

    def job():
        return pace.fit(ctx, model_spec, cfg, sr_auto=sr_auto, allow_shorten=shorten, busy=busy)

    try:
        if busy:   # no probe: nothing to wait for on the torch thread
            return job()
        fut = torch_worker().submit(job)
        while True:
            try:
                return fut.result(timeout=0.05)
            except FutureTimeout:
                if stop_requested():
                    fut.cancel()
                    return None
    except Exception:   # a model that cannot load says so in the race itself
        log.warning("could not measure this machine's decoding step", exc_info=True)
        return None
    finally:
        ctx.active.discard(token)


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


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A request that passed every check: what the race needs."""

    model_spec: str
    reward_spec: str
    cfg: RunConfig
    arms: tuple
    x_axis: str
    race_kw: dict          # extra keyword arguments of ``events_fn`` (remote code, stop once matched)


def prepare(ctx: AppContext, request) -> Prepared:
    """Every check on a request before anything starts; ValueError, TypeError or PolicyError with a
    message that names what to change."""
    check_request(request)   # plain values of their kind, valid text: messages name the field
    model_spec, reward_spec = ctx.resolve(request.model, request.reward, request.preference)
    if ctx.policy.allow_remote_code:
        ctx.policy.check(model_spec, trust_remote_code=True)
    cfg = request.config(ctx.progress_every)
    ctx.limits.check(cfg)
    arms = request.arms(ctx.arms)
    for arm in arms:
        ctx.limits.check(arm.config(cfg))
    x_axis = request.x_axis if isinstance(request.x_axis, str) and request.x_axis in charts.X_AXES else "time"
    kw = {"trust_remote_code": True} if ctx.policy.allow_remote_code else {}
    if request.stop_when_matched is True:
        kw["stop_when_matched"] = True
    return Prepared(model_spec, reward_spec, cfg, arms, x_axis, kw)


def new_view(ctx: AppContext, request, prep: Prepared, fitted) -> RunView:
    """The run's view, at the fitted settings when the machine was measured."""
    view = RunView(fitted.cfg if fitted is not None else prep.cfg, model_label=model_label(prep.model_spec),
                   reward_label=reward_label(ctx, request.reward, request.preference), x_axis=prep.x_axis,
                   specs=prep.arms)
    view.fit, view.stepping = fitted, request.step is True
    if fitted is not None:
        view.step, view.note = fitted.cost, fitted.words()
    return view


def race_frames(ctx: AppContext, view: RunView, prep: Prepared, events_fn,
                stop_requested: Callable[[], bool]) -> Iterator[Frame]:
    """One attempt at the race on ``view``: its start frame, then a live frame per Round and Finished and a
    few a second for Progress. Closing it closes the race on the torch thread."""
    yield start_frame(view)
    # every torch call of the race runs on the app's one torch thread (worker.py)
    events = torch_worker().stream(lambda: events_fn(prep.model_spec, prep.reward_spec, view.cfg, arms=view.specs,
                                                     **prep.race_kw), cancelled=stop_requested)
    last = 0.0
    try:
        for event in events:
            if stop_requested():
                return   # nobody reads this run any more: stop as Stop does
            view.apply(event)
            if view.elapsed() > ctx.limits.max_run_seconds:
                raise RunTooLong(f"this deployment stops a run after {ctx.limits.max_run_seconds} s "
                                 "(SPECREJ_MAX_RUN_SECONDS).")
            now = time.perf_counter()
            if isinstance(event, Progress) and (now - last < ctx.min_frame_interval
                                                or events.ready() and now - last < CATCH_UP_SECONDS):
                continue  # a few frames a second is plenty, each drawn once the reader has caught up
            last = now
            if not view.done:
                yield live_frame(view)   # the torch thread computes on while this frame is sent
    finally:
        # closes the race and every arm on the torch thread after its step in progress (their KV caches
        # are freed there, then memory is returned); not waited for: a cancel answers at once
        events.close(wait=False, then=memory.release)


def frames(ctx: AppContext, request, *, events_fn=race_events,
           stop_requested: Callable[[], bool] = lambda: False) -> Iterator[Frame]:
    """Validate (``prepare``), measure the machine and fit the race (``pace``), race (``race_frames``), and
    yield frames until every arm finishes (or the generator is closed).

    Every outcome is a frame: bad input a "Can't run" status (nothing starts); a failure mid-run
    a status-only frame (the charts keep what they showed) and a trace marked failed; a GPU
    out-of-memory error one retry with half the budget (``retry.retry_on_oom``), said on the page.
    ``stop_requested`` (``guard.Guard.stop_requested``) is asked at every event: a run whose client
    cancelled it stops there, as if closed."""
    try:
        prep = prepare(ctx, request)
    except (ValueError, TypeError, PolicyError) as e:  # bad input: say what to change, start nothing
        yield error_frame(str(e))
        return
    yield Frame(status=MEASURING, status_kind="live")
    fitted = measure_and_fit(ctx, prep.model_spec, prep.cfg, prep.arms, shorten=request.fit is not False,
                             stop_requested=stop_requested)
    if stop_requested():
        return   # cancelled while the machine was measured: nothing started
    state = {"view": new_view(ctx, request, prep, fitted)}
    key = state["view"].run_id
    ctx.active.add(key)
    try:
        yield from retry_on_oom(lambda view: race_frames(ctx, view, prep, events_fn, stop_requested), state["view"],
                                lambda v: state.update(view=v))
        view = state["view"]
        if not view.done and stop_requested():
            return   # cancelled: the finally marks the run stopped and writes its trace
        if not view.done:
            raise RuntimeError("the race ended before every method finished")
        view.trace_path = _write(ctx, view)
        if fitted is not None:
            pace.learn(ctx, fitted, view.elapsed())
        yield end_frame(view)
    except RunTooLong as e:  # not an error: the race so far is the result (the finally above freed its memory)
        yield ended(ctx, state["view"], "limit", str(e), limit_frame)
    except (ValueError, PolicyError, OutOfMemory) as e:  # BudgetError, RewardError, ArmSpecError ...
        yield ended(ctx, state["view"], "error", str(e), failure_frame)
    except Exception as e:  # never a server error: show it, log it, stay usable
        log.exception("run failed")
        yield ended(ctx, state["view"], "error", f"something went wrong ({type(e).__name__}: {e}). The app is "
                    "still usable: try again.", failure_frame)
    finally:
        view = state["view"]
        if view.state == "running":  # closed early: Stop, a closed tab, a server shutdown
            view.state = "stopped"
        if view.state == "stopped":
            view.trace_path = _write(ctx, view)
        ctx.active.discard(key)


def ended(ctx: AppContext, view: RunView, state: str, message: str, frame) -> Frame:
    """A race that did not finish: its state and message, its trace written, the frame that says so."""
    view.state, view.message = state, message
    view.trace_path = _write(ctx, view)
    return frame(view)
