"""The memory budget, in KV-cache token slots (rows x length), and what fits in it."""
from __future__ import annotations

import torch

import dataclasses

from .config import AUTO, RunConfig, env_int
from .models import LM

CPU_BUDGET_ENV = "SPECREJ_CPU_BUDGET"
DEFAULT_CPU_BUDGET = 576   # 8 full-length rows of 64 tokens, or ~67 rows at token 8 (README: the defaults)
GPU_FRACTION = 0.5   # of free memory given to the KV cache; the rest covers activations and logits
FEW_TOKENS = 4       # Speculative Rejection must fit N rows for at least this many tokens
AUTO_MAX_ROWS = 4096  # n='auto' never opens with more rows than this (a GPU's free memory could fit far more)


class BudgetError(ValueError):
    """A combination of N, prompt, max_new_tokens and budget that cannot run."""


def resolve_budget(cfg: RunConfig, lm: LM) -> int:
    if cfg.budget is not None:
        return cfg.budget
    if lm.device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(lm.device)
        return int(free * GPU_FRACTION) // lm.kv_bytes_per_slot
    return cpu_budget()


def cpu_budget() -> int:
    """The budget a run without one gets on a CPU: SPECREJ_CPU_BUDGET, else DEFAULT_CPU_BUDGET."""
    return env_int(CPU_BUDGET_ENV, DEFAULT_CPU_BUDGET, error=BudgetError)


def slots(rows: int, prompt_len: int, generated: int, shared: bool) -> int:
    """KV-cache slots of ``rows`` rows that hold ``generated`` tokens each: the prompt once when it
    is shared across rows (``lm.shares_prefix``), once per row when each row has a copy."""
    return (prompt_len + rows * generated) if shared else rows * (prompt_len + generated)


def rows_that_fit(budget: int, prompt_len: int, generated: int, shared: bool) -> int:
    """Most rows of ``generated`` tokens each that fit the budget (0 if not even the prompt fits)."""
    if shared:
        return max(0, budget - prompt_len) // max(generated, 1)
    return budget // (prompt_len + generated)


def check_fits(cfg: RunConfig, prompt_len: int, budget: int, max_positions: int | None,
               shared: bool = False) -> None:
    """Raise BudgetError, naming the fix, when the run cannot fit the budget."""
    full = prompt_len + cfg.max_new_tokens - 1   # a row at full length (its last token is never fed)
    if max_positions and prompt_len + cfg.max_new_tokens > max_positions:
        raise BudgetError(f"prompt ({prompt_len} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the "
                          f"model's context of {max_positions} tokens: lower max_new_tokens or shorten the prompt.")
    if budget < full:
        raise BudgetError(f"budget of {budget} KV slots cannot hold even one candidate at full length "
                          f"({prompt_len} prompt + {cfg.max_new_tokens} new tokens): raise the budget to at "
                          f"least {full} or lower max_new_tokens.")
    few = min(FEW_TOKENS, cfg.max_new_tokens)
    need = slots(cfg.n, prompt_len, few, shared)
    if need > budget:
        raise BudgetError(f"budget of {budget} KV slots cannot fit N={cfg.n} rows of this prompt ({prompt_len} "
                          f"tokens) for even {FEW_TOKENS} tokens: raise the budget to at least {need} or lower "
                          f"N to {max(1, rows_that_fit(budget, prompt_len, few, shared))}.")


def rows_per_pass(cfg: RunConfig, prompt_len: int, budget: int, shared: bool = False) -> int:
    """Best-of-N rows that fit at full length at once."""
    return max(1, min(cfg.n, rows_that_fit(budget, prompt_len, cfg.max_new_tokens - 1, shared)))


def resolve_n(cfg: RunConfig, prompt_len: int, budget: int, shared: bool = False) -> RunConfig:
    """``cfg`` with n='auto' replaced by the rows that fill ``budget`` at ``first_decision`` generated
    tokens (the paper's first batch; at most AUTO_MAX_ROWS); unchanged when n is a number."""
    if cfg.n != AUTO:
        return cfg
    n = min(AUTO_MAX_ROWS, rows_that_fit(budget, prompt_len, cfg.first_decision, shared))
    if n < 1:
        raise BudgetError(f"budget of {budget} KV slots cannot fit even one row of this prompt ({prompt_len} tokens) "
                          f"at first_decision={cfg.first_decision} tokens: raise the budget or lower first_decision.")
    return dataclasses.replace(cfg, n=n)
