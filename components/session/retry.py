"""The out-of-memory retry: a run that runs out of (GPU) memory is tried once more with half
the memory budget it ran with, and says so on the page. Only a real out-of-memory error is
retried, never any other failure.

The budget it ran with is the library's: every event's ledger carries the resolved budget
(``Ledger.budget``), so nothing here resolves it again.
"""
from __future__ import annotations

import gc
import logging
from typing import Callable, Iterator

import torch

from components.deploy.limits import smaller_budget

from components.state.view import RunView

log = logging.getLogger("specrej.app")

OOM_ERRORS: tuple[type[BaseException], ...] = tuple(
    {c for c in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if c})


class OutOfMemory(Exception):
    """The run ran out of (GPU) memory twice: with its budget and with half of it (or before
    its budget was known)."""


def is_oom(e: BaseException) -> bool:
    return isinstance(e, OOM_ERRORS)


def used_budget(view: RunView) -> int | None:
    """The budget the attempt ran with: the request's, else what the library reported."""
    if view.cfg.budget is not None:
        return view.cfg.budget
    return max((a.ledger.budget for a in view.arms.values()), default=0) or None


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def retry_on_oom(attempt: Callable[[RunView], Iterator], view: RunView,
                 on_view: Callable[[RunView], None]) -> Iterator:
    """Yield ``attempt(view)``'s updates; on an out-of-memory error, once more on a fresh view with
    half the budget (``on_view`` is told of it). A second one raises ``OutOfMemory``."""
    try:
        yield from attempt(view)
        return
    except Exception as e:
        if not is_oom(e):
            raise
        first = e
    free_memory()
    used = used_budget(view)
    if not used:
        raise OutOfMemory("out of memory before the run's memory budget was known: set a smaller memory "
                          "budget, N or max new tokens and try again.") from first
    log.warning("run out of memory with a budget of %s KV slots; retrying with half", used)
    cfg = smaller_budget(view.cfg, used)
    note = f"Out of memory with a budget of {used:,} KV slots: retried once with a smaller budget of {cfg.budget:,}."
    retry = RunView(cfg, model_label=view.model_label, reward_label=view.reward_label, x_axis=view.x_axis,
                    specs=view.specs, run_id=view.run_id, note=note, step=view.step, fit=view.fit,
                    stepping=view.stepping)
    on_view(retry)
    try:
        yield from attempt(retry)
    except Exception as e:
        if is_oom(e):
            free_memory()
            raise OutOfMemory(f"out of memory again with the smaller budget of {cfg.budget} KV slots: "
                              "lower N, max new tokens or the memory budget and try again.") from e
        raise
