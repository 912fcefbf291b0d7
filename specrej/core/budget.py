"""The memory budget, in KV-cache token slots (rows x length), and what fits in it.

One object, ``KVBudget``, answers every question the methods, the simulator and the bench ask:
does this fit, how many rows fit, the rows n='auto' opens with, Best-of-N's rows per pass, the
cap on kept rows after a decision, and whether a run can start at all. It is plain arithmetic
(no torch): a backend says how many slots the budget holds (``Backend.default_budget``) and
whether its rows share the prompt's slots.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .config import AUTO, RunConfig

FEW_TOKENS = 4       # Speculative Rejection must fit N rows for at least this many tokens
AUTO_MAX_ROWS = 4096  # n='auto' never opens with more rows than this (a GPU's free memory could fit far more)


class BudgetError(ValueError):
    """A combination of N, prompt, max_new_tokens and budget that cannot run."""


@dataclass(frozen=True)
class KVBudget:
    """``total`` KV slots for one prompt of ``prompt_len`` tokens. ``shared``: the prompt's slots
    are held once for all rows (a shared prefix, vLLM's prefix cache); otherwise each row holds
    a copy of the prompt."""

    total: int
    prompt_len: int
    shared: bool

    @property
    def shared_slots(self) -> int:
        """Slots held once for all rows: the prompt when it is shared, else 0."""
        return self.prompt_len if self.shared else 0

    def row_slots(self, generated: int) -> int:
        """Slots one row holds on its own with ``generated`` tokens in the cache."""
        return generated if self.shared else self.prompt_len + generated

    def slots(self, rows: int, generated: int) -> int:
        """Slots of ``rows`` rows holding ``generated`` tokens each (the shared prompt counted once)."""
        return self.shared_slots + rows * self.row_slots(generated)

    def held(self, lengths) -> int:
        """Slots held by rows of these ``lengths`` (tokens in each row's cache; a refilled batch's rows
        differ), the shared prompt counted once; 0 when there are no rows."""
        lengths = list(lengths)
        return self.shared_slots + sum(self.row_slots(g) for g in lengths) if lengths else 0

    def row_slots_after_step(self, generated: int, max_new_tokens: int) -> int:
        """Slots one row of ``generated`` tokens holds on its own after the next step: the token that
        step samples is fed back unless it is the row's last (``max_new_tokens``)."""
        g = generated + 1
        return self.row_slots(g if g < max_new_tokens else g - 1)

    def fits(self, rows: int, per_row: int) -> bool:
        """Do ``rows`` rows of ``per_row`` own slots each fit, with the shared prompt?"""
        return self.shared_slots + rows * per_row <= self.total

    def cap(self, per_row: int) -> int:
        """Most rows of ``per_row`` own slots each that fit (after a decision: the most that may stay)."""
        return max(0, self.total - self.shared_slots) // max(per_row, 1)

    def rows_that_fit(self, generated: int) -> int:
        """Most rows of ``generated`` tokens each that fit (0 if not even the prompt fits)."""
        return self.cap(self.row_slots(generated))

    def auto_n(self, first_decision: int) -> int:
        """The rows that fill the budget at ``first_decision`` generated tokens (the paper's first
        batch), at most AUTO_MAX_ROWS; 0 if not even one fits."""
        return min(AUTO_MAX_ROWS, self.rows_that_fit(first_decision))

    def rows_per_pass(self, n: int | None, max_new_tokens: int) -> int:
        """Best-of-N rows that fit at full length at once (the last token is never fed back), at
        least 1 and at most ``n`` (None: no bound)."""
        fit = self.rows_that_fit(max_new_tokens - 1)
        return max(1, fit if n is None else min(n, fit))

    def resolve_n(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` with n='auto' replaced by ``auto_n(cfg.first_decision)``; unchanged when n is a number."""
        if cfg.n != AUTO:
            return cfg
        n = self.auto_n(cfg.first_decision)
        if n < 1:
            raise BudgetError(f"budget of {self.total} KV slots cannot fit even one row of this prompt "
                              f"({self.prompt_len} tokens) at first_decision={cfg.first_decision} tokens: raise "
                              "the budget or lower first_decision.")
        return dataclasses.replace(cfg, n=n)

    def check(self, n: int, max_new_tokens: int, max_positions: int | None) -> None:
        """Raise BudgetError, naming the fix, when ``n`` rows of up to ``max_new_tokens`` cannot run."""
        p, budget = self.prompt_len, self.total
        full = p + max_new_tokens - 1   # a row at full length (its last token is never fed)
        if max_positions and p + max_new_tokens > max_positions:
            raise BudgetError(f"prompt ({p} tokens) + max_new_tokens ({max_new_tokens}) exceeds the "
                              f"model's context of {max_positions} tokens: lower max_new_tokens or shorten the "
                              "prompt.")
        if budget < full:
            raise BudgetError(f"budget of {budget} KV slots cannot hold even one candidate at full length "
                              f"({p} prompt + {max_new_tokens} new tokens): raise the budget to at "
                              f"least {full} or lower max_new_tokens.")
        few = min(FEW_TOKENS, max_new_tokens)
        need = self.slots(n, few)
        if need > budget:
            raise BudgetError(f"budget of {budget} KV slots cannot fit N={n} rows of this prompt ({p} "
                              f"tokens) for even {FEW_TOKENS} tokens: raise the budget to at least {need} or lower "
                              f"N to {max(1, self.rows_that_fit(few))}.")
