"""The page's budget rule, in one place: the KV budget a run will get (``specrej.core.budget.granted_budget``, the
one answer: its own; with its model loaded, that model's engine's default; before it loads, the CPU budget on a
CPU and None on a GPU, sized from free memory as the run starts: ``specrej.backends.planned_budget``), the slot
arithmetic at that budget (``specrej.core.budget.KVBudget``) and a prompt's length in tokens. The planner, the
deployment's limits, the pace estimate, paper scale and the recordings' keys all ask here."""
from __future__ import annotations

import threading

from specrej.core.budget import KVBudget, granted_budget


def planned(budget: int | None) -> int | None:
    """The budget a run asking for ``budget`` (None: automatic) will get, before its model loads; None on a GPU."""
    from specrej.backends import planned_budget   # imports torch: not at the page's import

    return planned_budget(budget)


def granted(budget: int | None, lm) -> int:
    """The budget a run asking for ``budget`` gets on the loaded generator ``lm`` (its engine's default)."""
    return granted_budget(budget, lm=lm)


def slots(budget: int | None, prompt_len: int, shared: bool) -> KVBudget | None:
    """The slot arithmetic of a run asking for ``budget`` at a prompt of ``prompt_len`` tokens (``shared``: one
    copy of the prompt's cache for every row); None where the budget is not known before the model loads."""
    b = planned(budget)
    return None if b is None else KVBudget(b, prompt_len, shared)


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
