"""Paper scale on this deployment: does the paper's protocol fit the run limit live, and if not,
which recording to play and the largest scaled-down setting that does fit (sized from this deployment's limits
on the recordings' machine, ``scaled_down``: never from the load, so the same deployment always runs the same
scaled race).

The estimate is the library's upper bound on the rows each arm decodes (``specrej.core.cost``)
times this machine's decoding step, measured once per generator on the app's torch thread (the
fastest of 3 steps at 1, 8, 32 and 128 rows; a few seconds on a CPU). A setting fits when the estimate is at
most ``FIT_SHARE`` of the run limit: the bound leaves out the reward model, the frames sent and
other visitors' runs. Nothing here knows Gradio.
"""
from __future__ import annotations

import functools
import statistics
from pathlib import Path

from specrej import RunConfig
from specrej.core.budget import sharing
from specrej.core.budget import budget_for
from specrej.core.config import DEFAULT_CPU_BUDGET
from specrej.core.cost import StepCost, race_rows

from components.session import budget as kv_rule
from components.session.context import AppContext, Machine, MachineProfile
from components.state.shared import PAPER_SCALE, PaperPlan
from components.session.recordings import RECORDINGS, RecordingError, find, load

FIT_SHARE = 0.5
# The paper's protocol (auto first batch, memory-full decisions, alpha 0.5), smaller: each step halves the
# tokens and the budget, or nearly. Every setting keeps N >= budget / first decision, so Speculative
# Rejection never opens with more rows than Best-of-N writes answers: its result falls on Best-of-N's curve.
SCALED_DOWN = (dict(n=64, max_new_tokens=128, budget=1024, first_decision=16),
               dict(n=32, max_new_tokens=96, budget=512, first_decision=16),
               dict(n=32, max_new_tokens=64, budget=DEFAULT_CPU_BUDGET, first_decision=14),
               dict(n=16, max_new_tokens=48, budget=224, first_decision=14))


def capped(ctx: AppContext, settings: dict) -> dict:
    out = dict(PAPER_SCALE, **settings)
    out["n"] = min(out["n"], ctx.limits.max_n)
    out["max_new_tokens"] = min(out["max_new_tokens"], ctx.limits.max_new_tokens)
    if ctx.limits.max_budget:
        out["budget"] = min(out["budget"], ctx.limits.max_budget)
    # N capped by the deployment: the budget follows, so that the first batch still fits in N
    out["budget"] = min(out["budget"], budget_for(out["n"], out["first_decision"]))
    return out


def live_seconds(ctx: AppContext, settings: dict, prompt_len: int, shared: bool, cost: StepCost,
                 overhead: float | None = None) -> float:
    """The estimated live time of a race at ``settings`` on a quiet machine: the decode-time bound times what
    races here took over it (``overhead``, default ``ctx.machine.overhead``), as ``pace`` estimates a Run, so a setting
    chosen here is one a Run then starts live (at ``FIT_SHARE`` of the limit, against the Run's 80%: room for
    some load)."""
    cfg = RunConfig(prompt="-", n=settings["n"], alpha=settings["alpha"], max_new_tokens=settings["max_new_tokens"],
                    budget=settings["budget"], first_decision=settings["first_decision"])
    rows = race_rows(kv_rule.slots(settings["budget"], prompt_len, shared), cfg, sr_auto=settings["sr_start"] == "auto")
    if overhead is None:
        with ctx.machine.lock:
            overhead = ctx.machine.overhead
    return overhead * sum(cost.total(r) for r in rows.values())


# The scaled-down race is priced on the machine the paper-scale recordings were made on, not on this one now: the
# same deployment (its limits) always gets the same scaled race, whatever the load when Paper scale is pressed
# (two sessions got 96 tokens / 512 slots and 64 / 448). Its step: the median over the committed recordings of
# each row count's measured step; its overhead: what the page's races took over their bound when first measured.
REFERENCE_OVERHEAD = Machine.__dataclass_fields__["overhead"].default


@functools.cache
def reference_step(folder: str = str(RECORDINGS)) -> StepCost | None:
    """The median measured step of the paper-scale recordings in ``folder`` (None when none carries one)."""
    costs = []
    for path in sorted(Path(folder).glob("*.json.gz")):
        try:
            c = load(path).meta.get("step_cost") or {}
            costs.append(StepCost(tuple(c["rows"]), tuple(c["seconds"])))
        except (RecordingError, KeyError, TypeError, ValueError):
            continue
    rows = costs[0].rows if costs else ()
    costs = [c for c in costs if c.rows == rows]
    if not costs:
        return None
    return StepCost(rows, tuple(statistics.median(c.seconds[i] for c in costs) for i in range(len(rows))))


def scaled_down(ctx: AppContext, prompt_len: int, shared: bool, cost: StepCost) -> tuple[dict, float]:
    """The largest of ``SCALED_DOWN``, within this deployment's limits (``capped``), that ends within
    ``FIT_SHARE`` of its time limit on the reference machine (``reference_step``; ``cost`` where no recording
    carries one), and its estimate there. Never the load: the same limits give the same race."""
    ref = reference_step() or cost
    limit = ctx.limits.max_run_seconds
    for step in SCALED_DOWN:
        s = capped(ctx, step)
        secs = live_seconds(ctx, s, prompt_len, shared, ref, REFERENCE_OVERHEAD)
        if secs <= FIT_SHARE * limit:
            return s, secs
    s = capped(ctx, SCALED_DOWN[-1])
    return s, live_seconds(ctx, s, prompt_len, shared, ref, REFERENCE_OVERHEAD)


def plan(ctx: AppContext, prompt: str, profile: MachineProfile | None = None, model: str | None = None) -> PaperPlan:
    """Paper scale for ``prompt`` on this deployment (the default generator unless ``model``), priced at the quiet
    step the machine profile holds (measured during the warm-up: nothing is measured here); ValueError where it
    holds none (the warm-up failed: its words)."""
    model = model or ctx.default_model
    lm = ctx.generator(model)
    cost = (profile or ctx.machine.profile()).step(model)
    if cost is None:
        raise ValueError("this machine's decoding step is not measured yet (the server's warm-up did not finish"
                         + (f": {ctx.warm_error}" if ctx.warm_error else "") + "): try again in a minute.")
    prompt_len = kv_rule.prompt_tokens(lm, prompt or "-")   # off the torch thread: a race never holds it up
    shared = sharing(lm, lm.backend)
    limit = ctx.limits.max_run_seconds
    paper = capped(ctx, {})
    paper_s = live_seconds(ctx, paper, prompt_len, shared, cost)
    if paper_s <= FIT_SHARE * limit:
        return PaperPlan(paper, paper_s, limit, paper, None, None)
    scaled, scaled_s = scaled_down(ctx, prompt_len, shared, cost)
    replay = prompt if find(prompt or "") else next((e for e in ctx.examples if find(e)), None)
    return PaperPlan(paper, paper_s, limit, scaled, scaled_s, replay)
