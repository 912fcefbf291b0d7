"""Paper scale on this deployment: does the paper's protocol fit the run limit live, and if not,
which recording to play and the largest scaled-down setting that does fit.

The estimate is the library's upper bound on the rows each arm decodes (``specrej.core.cost``)
times this machine's decoding step, measured once per generator on the app's torch thread (the
fastest of 3 steps at 1, 8, 32 and 128 rows; a few seconds on a CPU). A setting fits when the estimate is at
most ``FIT_SHARE`` of the run limit: the bound leaves out the reward model, the frames sent and
other visitors' runs. Nothing here knows Gradio.
"""
from __future__ import annotations

from dataclasses import dataclass

from specrej import RunConfig
from specrej.core.budget import KVBudget, sharing
from specrej.core.config import DEFAULT_CPU_BUDGET
from specrej.core.cost import StepCost, race_rows

from .context import AppContext, get_models
from .replay import PAPER_SCALE, find
from .worker import torch_worker

FIT_SHARE = 0.5
CALIBRATION_ROWS = (1, 8, 32, 128)
# The paper's protocol (auto first batch, memory-full decisions, alpha 0.5), smaller: each step halves the
# tokens and the budget, or nearly. Every setting keeps N >= budget / first decision, so Speculative
# Rejection never opens with more rows than Best-of-N writes answers: its result falls on Best-of-N's curve.
SCALED_DOWN = (dict(n=64, max_new_tokens=128, budget=1024, first_decision=16),
               dict(n=32, max_new_tokens=96, budget=512, first_decision=16),
               dict(n=32, max_new_tokens=64, budget=DEFAULT_CPU_BUDGET, first_decision=14),
               dict(n=16, max_new_tokens=48, budget=224, first_decision=14))


@dataclass(frozen=True)
class PaperPlan:
    paper: dict                 # the paper's settings, capped by this deployment's limits
    paper_s: float              # its estimated live time here (an upper bound)
    limit_s: int
    settings: dict              # what the controls get: the paper's when it fits, else ``scaled``
    scaled_s: float | None      # the estimate of ``settings`` when they are scaled down
    replay_prompt: str | None   # a prompt with a recorded paper-scale race (when the paper does not fit)

    @property
    def fits(self) -> bool:
        return self.scaled_s is None


def capped(ctx: AppContext, settings: dict) -> dict:
    out = dict(PAPER_SCALE, **settings)
    out["n"] = min(out["n"], ctx.limits.max_n)
    out["max_new_tokens"] = min(out["max_new_tokens"], ctx.limits.max_new_tokens)
    if ctx.limits.max_budget:
        out["budget"] = min(out["budget"], ctx.limits.max_budget)
    # N capped by the deployment: the budget follows, so that the first batch still fits in N
    out["budget"] = min(out["budget"], out["n"] * out["first_decision"])
    return out


def _measure(lm) -> StepCost:   # on the torch thread
    from specrej.bench.engine_speed import decode_sweep

    sweep = decode_sweep(lm, "Hello", list(CALIBRATION_ROWS), steps=3)   # the fastest of 3: the machine, not its load
    return StepCost(tuple(s["rows"] for s in sweep), tuple(s["step_min_s"] for s in sweep))


def _generator(ctx: AppContext, model: str):
    return torch_worker().call(lambda: get_models(*ctx.resolve(model, ctx.default_reward, ctx.default_preference))[0])


def step_cost(ctx: AppContext, model: str, lm=None) -> StepCost:
    """This machine's decoding step for ``model`` (measured on first use, then kept)."""
    if model not in ctx.step_costs:
        ctx.step_costs[model] = torch_worker().call(_measure, lm or _generator(ctx, model))
    return ctx.step_costs[model]


def live_seconds(ctx: AppContext, settings: dict, prompt_len: int, shared: bool, cost: StepCost) -> float:
    """The estimated live time of a race at ``settings`` (an upper bound on a quiet machine)."""
    cfg = RunConfig(prompt="-", n=settings["n"], alpha=settings["alpha"], max_new_tokens=settings["max_new_tokens"],
                    budget=settings["budget"], first_decision=settings["first_decision"])
    rows = race_rows(KVBudget(settings["budget"], prompt_len, shared), cfg, sr_auto=settings["sr_start"] == "auto")
    return sum(cost.total(r) for r in rows.values())


def plan(ctx: AppContext, prompt: str, model: str | None = None) -> PaperPlan:
    """Paper scale for ``prompt`` on this deployment (the default generator unless ``model``)."""
    model = model or ctx.default_model
    lm = _generator(ctx, model)
    cost = step_cost(ctx, model, lm)
    prompt_len = len(torch_worker().call(lm.render, prompt or "-"))
    shared = sharing(lm, lm.backend)
    limit = ctx.limits.max_run_seconds
    paper = capped(ctx, {})
    paper_s = live_seconds(ctx, paper, prompt_len, shared, cost)
    if paper_s <= FIT_SHARE * limit:
        return PaperPlan(paper, paper_s, limit, paper, None, None)
    scaled, scaled_s = capped(ctx, SCALED_DOWN[-1]), None
    for step in SCALED_DOWN:
        s = capped(ctx, step)
        secs = live_seconds(ctx, s, prompt_len, shared, cost)
        if secs <= FIT_SHARE * limit:
            scaled, scaled_s = s, secs
            break
    if scaled_s is None:
        scaled_s = live_seconds(ctx, scaled, prompt_len, shared, cost)
    replay = prompt if find(prompt or "") else next((e for e in ctx.examples if find(e)), None)
    return PaperPlan(paper, paper_s, limit, scaled, scaled_s, replay)


def duration(seconds: float) -> str:
    """'45 s', '2 min 10 s', '1 h 5 min'."""
    s = max(1, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")

