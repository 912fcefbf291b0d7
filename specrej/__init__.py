"""specrej: Speculative Rejection (Sun et al., NeurIPS 2024) and Best-of-N on one engine.

The library knows nothing of any UI: methods are iterators of typed events (``core.events``).

Names load on first use (module ``__getattr__``): ``import specrej.core.budget`` or ``from specrej
import RunConfig`` does not load torch; ``from specrej import race`` does (the methods need it).
"""
from __future__ import annotations

import importlib
import sys

from .origin import provenance, specrej_version

__version__ = specrej_version()   # the installed package's metadata (pyproject.toml's in a bare checkout)

# ``compare`` (the function, as ``from specrej import compare`` always gave) is torch-free: load it now.
from .analysis.compare import Comparison, Ratio, Tally, compare, compare_all

_WHERE = {  # name -> the module (relative to this package) that defines it
    **dict.fromkeys(["DEFAULT_ARMS", "REGISTRY", "ArmKind", "ArmSpec", "ArmSpecError", "parse_arms", "race_arms",
                     "register"], ".arms"),
    "BudgetError": ".core.budget",
    "RunConfig": ".core.config",
    **dict.fromkeys(["DeepConfSettings", "STBoNSettings"], ".core.settings"),
    **dict.fromkeys(["Candidate", "Event", "Finished", "Ledger", "Progress", "Round", "to_dict"], ".core.events"),
    **dict.fromkeys(["METHODS", "best_of_n", "race", "run_to_completion", "speculative_rejection"], ".methods"),
    "warm_up": ".methods.run",
    **dict.fromkeys(["LM", "load_generator"], ".backends.hf"),
    "ModelSpecError": ".engine.models",
    "ModelError": ".engine.models",
    **dict.fromkeys(["race_many", "read_prompts", "read_rows"], ".many"),
    **dict.fromkeys(["sweep", "Sweep"], ".sweeps"),
    "candidate_rows": ".core.events",
    **dict.fromkeys(["CallableReward", "Reward", "RewardError", "Scored", "TokenStats", "as_reward", "load_reward"],
                    ".rewards"),
}

__all__ = [
    "DEFAULT_ARMS", "REGISTRY", "ArmKind", "ArmSpec", "ArmSpecError", "parse_arms", "race_arms", "register",
    "Comparison", "Ratio", "Tally", "compare", "compare_all",
    "BudgetError", "RunConfig", "DeepConfSettings", "STBoNSettings",
    "Candidate", "Event", "Finished", "Ledger", "Progress", "Round", "to_dict",
    "METHODS", "best_of_n", "race", "run_to_completion", "speculative_rejection", "LM", "ModelError", "ModelSpecError",
    "load_generator", "CallableReward", "Reward", "RewardError", "Scored", "TokenStats", "as_reward", "load_reward",
    "unload", "provenance", "warm_up", "__version__", "race_many", "read_prompts", "read_rows", "candidate_rows",
    "sweep", "Sweep",
]


def unload() -> int:
    """Forget every generator and reward the loaders hold (``load_generator``, ``load_reward``): the next load
    reads the files again. Returns how many were forgotten. An object a caller still holds lives on; with no
    other reference left, its memory is freed (and CUDA's cached blocks returned)."""
    count = 0
    for name in (f"{__name__}.backends.hf", f"{__name__}.rewards"):   # only loaders that ran: no torch import
        module = sys.modules.get(name)
        if module is not None:
            count += module.unload()
    torch = sys.modules.get("torch")
    if torch is not None:
        import gc

        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return count


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value   # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
