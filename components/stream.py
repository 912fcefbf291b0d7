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

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Iterator

from specrej import Progress, RunConfig, best_of_n, race, speculative_rejection
from specrej.limits import PolicyError

from . import charts, panels
from .context import PREFERENCE, REWARD_LABELS, AppContext, get_models, model_label
from .gpu import GPU
from .trace import write_trace
from .view import RunView

log = logging.getLogger("specrej.app")
KEEP: Any = object()  # a Frame field left as it is ("skip")
GPU_DURATION = int(os.environ.get("SPECREJ_GPU_DURATION", "120"))


class RunTooLong(Exception):
    """The run passed the deployment's time limit."""


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
def race_events(model_spec: str, reward_spec: str, cfg: RunConfig) -> Iterator:
    """Both arms' events, interleaved at equal compute. Loads (cached) models on first use."""
    lm, reward = get_models(model_spec, reward_spec)
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


def frames(ctx: AppContext, request: RunRequest, *, events_fn=race_events) -> Iterator[Frame]:
    """Validate, race, and yield frames until both arms finish (or the generator is closed)."""
    try:
        model_spec, reward_spec = ctx.resolve(request.model, request.reward, request.preference)
        cfg = request.config(ctx.progress_every)
        ctx.limits.check(cfg)
    except (ValueError, PolicyError) as e:  # bad input: say what to change, start nothing
        yield Frame(status=panels.error_markdown(str(e)))
        return
    view = RunView(cfg, model_label=model_label(model_spec),
                   reward_label=reward_label(ctx, request.reward, request.preference),
                   x_axis=request.x_axis if request.x_axis in charts.X_AXES else "flops")
    ctx.active.add(id(view))
    events = None
    try:
        start = live_frame(view, starting=True)
        start.summary, start.table, start.trace_path, start.summary_json = panels.SUMMARY_PLACEHOLDER, None, None, None
        start.view, start.results_visible = view, False
        yield start
        events = events_fn(model_spec, reward_spec, cfg)
        last = 0.0
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
        if not view.done:
            raise RuntimeError("the race ended before both methods finished")
        view.trace_path = write_trace(view, ctx.trace_dir)
        yield final_frame(view)
    except (ValueError, PolicyError, RunTooLong) as e:  # BudgetError, RewardError, ModelSpecError ...
        view.state, view.message = "error", str(e)
        yield Frame(status=panels.status_markdown(view), view=view)
    except Exception as e:  # never a server error: show it, log it, stay usable
        log.exception("run failed")
        view.state = "error"
        view.message = f"something went wrong ({type(e).__name__}: {e}). The app is still usable: try again."
        yield Frame(status=panels.status_markdown(view), view=view)
    finally:
        if view.state == "running":  # closed early: Stop, a closed tab, a server shutdown
            view.state = "stopped"
        if events is not None:
            events.close()  # closes the race and both arms: their KV caches are freed now
        ctx.active.discard(id(view))
