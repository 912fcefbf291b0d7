"""The streaming callback: one generator steps both arms and yields frames.

``frames(ctx, request)`` validates the request, starts ``race(...)`` over Speculative Rejection
and Best-of-N (interleaved by FLOPs spent: an equal-compute race), feeds every event to a fresh
``RunView``, and yields a ``Frame`` (plain data: chart specs, markdown, rows) per Round and
Finished and at most every ``ctx.min_frame_interval`` seconds for Progress events. Errors become
a visible message in the status line, never a server error. Closing the generator (Stop, a
closed tab) closes the race, which closes both arms and frees their memory in their ``finally``.

``race_events`` is the only function that touches the models; it yields plain frozen events,
so on ZeroGPU (``spaces.GPU``) it runs in the GPU process and only picklable data crosses over.
"""
from __future__ import annotations

import gc
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from specrej import Progress, RunConfig, best_of_n, race, speculative_rejection
from specrej.budget import resolve_budget
from specrej.limits import PolicyError, smaller_budget

from . import charts, panels
from .context import PREFERENCE, REWARD_LABELS, AppContext, get_models, model_label
from .gpu import GPU
from .trace import write_traces
from .view import RunView

log = logging.getLogger("specrej.app")
KEEP: Any = object()  # a Frame field left as it is ("skip")
GPU_DURATION = int(os.environ.get("SPECREJ_GPU_DURATION", "120"))


class RunTooLong(Exception):
    """The run passed the deployment's time limit."""


class OutOfMemory(Exception):
    """The run ran out of (GPU) memory twice: with its budget and with half of it."""


MAX_SEED = 2**63 - 1
OOM_ERRORS: tuple[type[BaseException], ...] = tuple(
    {c for c in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if c})


def is_oom(e: BaseException) -> bool:
    """Only a real out-of-memory error is retried (never any other failure)."""
    return isinstance(e, OOM_ERRORS)


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for, as the UI (or the API) sends it."""

    prompt: str
    model: str
    reward: str
    preference: str = ""
    n: int = 32
    alpha: float = 0.5
    budget: float | None = 0          # KV-cache slots; 0 or None = auto
    decision: str = "budget"
    interval: int = 16
    max_new_tokens: int = 128
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int = 0
    x_axis: str = "flops"

    def config(self, progress_every: int) -> RunConfig:
        """A validated RunConfig (ValueError with a message that says what to change)."""
        budget = None if self.budget in (None, 0, "") else self.budget
        if isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed > MAX_SEED:
            raise ValueError(f"seed={self.seed} is too large: use a seed below 2**63.")
        return RunConfig(prompt=self.prompt if isinstance(self.prompt, str) else "", n=self.n, alpha=self.alpha,
                         max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                         seed=self.seed, budget=budget, decision=self.decision, interval=self.interval,
                         progress_every=progress_every)


@dataclass
class Frame:
    """One streamed update; ``KEEP`` leaves a component as it is, ``None`` clears it."""

    status: Any = KEEP
    sr_plot: Any = KEEP        # chart specs (dicts)
    bon_plot: Any = KEEP
    race_plot: Any = KEEP
    sr_leader: Any = KEEP      # (label, text)
    bon_leader: Any = KEEP
    summary: Any = KEEP        # markdown
    table: Any = KEEP          # rows
    trace_path: Any = KEEP
    summary_json: Any = KEEP
    view: Any = KEEP           # the RunView, kept in the session's gr.State
    results_visible: Any = KEEP  # the table, the trace and the JSON appear with the result


@GPU(duration=GPU_DURATION)
def race_events(model_spec: str, reward_spec: str, cfg: RunConfig, *, trust_remote_code: bool = False) -> Iterator:
    """Both arms' events, interleaved at equal compute. Loads (cached) models on first use."""
    lm, reward = get_models(model_spec, reward_spec, trust_remote_code=trust_remote_code)
    yield from race({"sr": speculative_rejection(lm, reward, cfg), "bon": best_of_n(lm, reward, cfg)})


def live_frame(view: RunView, *, starting: bool = False) -> Frame:
    return Frame(status=panels.status_markdown(view, starting=starting), sr_plot=charts.sr_chart(view),
                 bon_plot=charts.bon_chart(view), race_plot=charts.race_chart(view),
                 sr_leader=panels.leader(view, "sr"), bon_leader=panels.leader(view, "bon"))


def final_frame(view: RunView) -> Frame:
    f = live_frame(view)
    f.summary, f.table = panels.summary_markdown(view), panels.candidate_rows(view)
    f.trace_path, f.summary_json, f.view = view.trace_path, panels.summary_dict(view), view
    f.results_visible = True
    return f


def reward_label(ctx: AppContext, key: str, preference: str) -> str:
    if key == PREFERENCE:
        return f"preference: {preference.strip()}"
    return next((label for label, k in ctx.rewards if k == key), REWARD_LABELS.get(key, key))


def used_budget(model_spec: str, cfg: RunConfig, view: RunView | None = None) -> int:
    """The KV-cache budget the failed attempt ran with: the request's, else the library's auto
    budget for this generator (``resolve_budget``), else the peak the attempt reached."""
    if cfg.budget is not None:
        return cfg.budget
    try:
        from specrej import load_generator

        return resolve_budget(cfg, load_generator(model_spec))
    except Exception:  # e.g. no CUDA in this process (ZeroGPU): fall back on what was used
        peak = max((a.ledger.peak_kv_slots for a in view.arms.values()), default=0) if view else 0
        if peak < 2:
            raise
        return peak


def _free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def failure_frame(ctx: AppContext, view: RunView) -> Frame:
    """The status line says what happened; the charts and leaders keep what was already shown;
    the trace (marked failed) can be downloaded."""
    view.trace_path = _write(ctx, view)
    f = Frame(status=panels.status_markdown(view), view=view, summary_json=panels.summary_dict(view))
    if view.trace_path:
        f.trace_path, f.results_visible = view.trace_path, True
    return f


def _write(ctx: AppContext, view: RunView) -> str | None:
    """Write the run's trace (the download copy, and the operator's folder if set); never raises."""
    try:
        return write_traces(view, ctx.trace_dir, ctx.archive_dir)
    except Exception:
        log.exception("could not write the trace")
        return None


def frames(ctx: AppContext, request: RunRequest, *, events_fn=race_events) -> Iterator[Frame]:
    """Validate, race, and yield frames until both arms finish (or the generator is closed).

    Every outcome is a frame: bad input a "Can't run" status (nothing starts); a failure mid-run
    a status-only frame (the charts keep what they showed) and a trace marked failed; a GPU
    out-of-memory error one retry with half the budget (``smaller_budget``), said on the page."""
    try:
        model_spec, reward_spec = ctx.resolve(request.model, request.reward, request.preference)
        if ctx.policy.allow_remote_code:
            ctx.policy.check(model_spec, trust_remote_code=True)
        cfg = request.config(ctx.progress_every)
        ctx.limits.check(cfg)
        x_axis = request.x_axis if isinstance(request.x_axis, str) and request.x_axis in charts.X_AXES else "flops"
    except (ValueError, TypeError, PolicyError) as e:  # bad input: say what to change, start nothing
        yield Frame(status=panels.error_markdown(str(e)))
        return
    labels = dict(model_label=model_label(model_spec),
                  reward_label=reward_label(ctx, request.reward, request.preference))
    kw = {"trust_remote_code": True} if ctx.policy.allow_remote_code else {}
    view = RunView(cfg, x_axis=x_axis, **labels)
    key = view.run_id
    ctx.active.add(key)
    events = None
    try:
        for attempt in (0, 1):
            start = live_frame(view, starting=True)
            start.summary, start.table, start.trace_path, start.summary_json = \
                panels.SUMMARY_PLACEHOLDER, None, None, None
            start.view, start.results_visible = view, False
            yield start
            events = events_fn(model_spec, reward_spec, view.cfg, **kw)
            last = 0.0
            try:
                for event in events:
                    view.apply(event)
                    if view.elapsed() > ctx.limits.max_run_seconds:
                        raise RunTooLong(f"this deployment stops a run after {ctx.limits.max_run_seconds} s "
                                         "(SPECREJ_MAX_RUN_SECONDS): try a smaller N or fewer new tokens.")
                    now = time.perf_counter()
                    if isinstance(event, Progress) and now - last < ctx.min_frame_interval:
                        continue  # the browser redraws per message: a few frames a second is plenty
                    last = now
                    if not view.done:
                        yield live_frame(view)
                break
            except Exception as e:
                if not is_oom(e):
                    raise
                events.close()
                events = None
                _free_memory()
                used = used_budget(model_spec, view.cfg, view)
                if attempt:
                    raise OutOfMemory(f"out of memory again with the smaller budget of {used} KV slots: "
                                      "lower N, max new tokens or the memory budget and try again.") from e
                log.warning("run out of memory with a budget of %s KV slots; retrying with half", used)
                retry = smaller_budget(view.cfg, used)
                note = (f"Out of memory with a budget of {used:,} KV slots: retried once with a smaller "
                        f"budget of {retry.budget:,}.")
                view = RunView(retry, x_axis=view.x_axis, run_id=key, note=note, **labels)
        if not view.done:
            raise RuntimeError("the race ended before both methods finished")
        view.trace_path = _write(ctx, view)
        yield final_frame(view)
    except (ValueError, PolicyError, RunTooLong, OutOfMemory) as e:  # BudgetError, RewardError, ModelSpecError ...
        view.state, view.message = "error", str(e)
        yield failure_frame(ctx, view)
    except Exception as e:  # never a server error: show it, log it, stay usable
        log.exception("run failed")
        view.state = "error"
        view.message = f"something went wrong ({type(e).__name__}: {e}). The app is still usable: try again."
        yield failure_frame(ctx, view)
    finally:
        if view.state == "running":  # closed early: Stop, a closed tab, a server shutdown
            view.state = "stopped"
        if events is not None:
            events.close()  # closes the race and both arms: their KV caches are freed now
        if view.state == "stopped":
            view.trace_path = _write(ctx, view)
        ctx.active.discard(key)
