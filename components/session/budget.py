"""The page's budget rule, in one place: the KV budget a run will get, known before its model loads
(``specrej.backends.planned_budget``: its own; the CPU budget on a CPU; None on a GPU, sized from free memory as
the run starts), and the slot arithmetic at that budget (``specrej.core.budget.KVBudget``). The planner, the
deployment's limits, the pace estimate, paper scale and the recordings' keys all ask here."""
from __future__ import annotations

from specrej.core.budget import KVBudget


def planned(budget: int | None) -> int | None:
    """The budget a run asking for ``budget`` (None: automatic) will get; None on a GPU."""
    from specrej.backends import planned_budget

    return planned_budget(budget)


def slots(budget: int | None, prompt_len: int, shared: bool) -> KVBudget | None:
    """The slot arithmetic of a run asking for ``budget`` at a prompt of ``prompt_len`` tokens (``shared``: one
    copy of the prompt's cache for every row); None where the budget is not known before the model loads."""
    b = planned(budget)
    return None if b is None else KVBudget(b, prompt_len, shared)
