"""The memory budget, in KV-cache token slots (rows x length), and what fits in it.

One object, ``KVBudget``, answers every question the methods, the simulator and the bench ask:
the slots rows hold, the slots a row holds after the next step, does this fit, how many rows fit,
the rows n='auto' opens with, Best-of-N's rows per pass, the cap on kept rows after a decision, and
whether a run can start at all. It is plain arithmetic (no torch): a backend reports only its rows'
lengths (``Batch.lengths``), says how many slots the budget holds (``Backend.default_budget``) and
whether it allows rows to share the prompt's slots (``sharing``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .config import AUTO, CPU_BUDGET_ENV, DEFAULT_CPU_BUDGET, RunConfig, env_int

FEW_TOKENS = 4       # Speculative Rejection must fit N rows for at least this many tokens
AUTO_MAX_ROWS = 4096  # n='auto' never opens with more rows than this (a GPU's free memory could fit far more)


class BudgetError(ValueError):
    """A combination of N, prompt, max_new_tokens and budget that cannot run."""


def cpu_budget() -> int:
    """The budget a run without one gets on a CPU, whatever its backend: SPECREJ_CPU_BUDGET, else
    DEFAULT_CPU_BUDGET."""
    return env_int(CPU_BUDGET_ENV, DEFAULT_CPU_BUDGET, error=BudgetError)


def granted_budget(budget: int | None, *, lm=None, engine=None, on_gpu: bool = False) -> int | None:
    """What budget does this run get (the one answer; the methods, the page's planner and ``planned_budget`` ask
    here): its own ``budget`` when it asks for one; else, with its model loaded, ``engine``'s default for ``lm``
    (``Backend.default_budget``: on a GPU sized from free memory); else, before the model loads, the CPU budget on
    a CPU (every backend's default there) and None on a GPU (``on_gpu``: not known until the model loads)."""
    if budget is not None:
        return budget
    if lm is not None:
        return (engine or lm.backend).default_budget(lm)
    return None if on_gpu else cpu_budget()


def sharing(lm, backend) -> bool:
    """Do a run's rows hold the prompt's slots once? When the LM can (``lm.shares_prefix``: a shared
    prefix, vLLM's prefix cache) and the backend allows it (``allow_sharing``; the bench's reference
    engine keeps a copy per row)."""
    return bool(lm.shares_prefix and backend.allow_sharing)


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

    def row_slots_after_step(self, held: int, generated: int, max_new_tokens: int) -> int:
        """Slots one row holds on its own after the next step, when it holds ``held`` tokens beyond the
        prompt now and has written ``generated``: the token that step samples is fed back (one slot more)
        unless it is the row's last (``max_new_tokens``)."""
        return self.row_slots(held + (1 if generated + 1 < max_new_tokens else 0))

    def row_slots_at_end(self, length: int) -> int:
        """Slots one row holds on its own when it ends with ``length`` tokens written: its last token
        is never fed back."""
        return self.row_slots(max(length - 1, 0))

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
        fit = self.cap(self.row_slots_at_end(max_new_tokens))
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
        full = self.shared_slots + self.row_slots_at_end(max_new_tokens)   # one row at full length
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


# ---------------------------------------------------------------- admission: the one answer to "does this run fit?"

@dataclass(frozen=True)
class Admission:
    """What ``admit`` answers: the run's config (n='auto' resolved to the rows it opens with), the slots it
    is granted (its budget: the most its rows hold at once), and ``why`` it cannot run (None: it fits)."""

    cfg: RunConfig
    kv: KVBudget
    why: str | None = None

    @property
    def slots(self) -> int:
        return self.kv.total

    @property
    def fits(self) -> bool:
        return self.why is None

    def granted(self) -> RunConfig:
        """The config to run, or BudgetError saying why it cannot run (naming the fix)."""
        if self.why is not None:
            raise BudgetError(self.why)
        return self.cfg


def admit(cfg: RunConfig, *, budget: int, prompt_len: int, shared: bool,
          max_positions: int | None = None) -> Admission:
    """Does a run of ``cfg`` fit ``budget`` KV slots with a prompt of ``prompt_len`` tokens (``shared``:
    held once for all rows) and a model of ``max_positions`` positions? The one admission the methods, the
    page's check before a race and the bench ask: n='auto' resolved (``KVBudget.resolve_n``), then the
    rows checked at full length and for the first tokens (``KVBudget.check``)."""
    kv = KVBudget(budget, prompt_len, shared)
    try:
        cfg = kv.resolve_n(cfg)
        kv.check(cfg.n, cfg.max_new_tokens, max_positions)
    except BudgetError as e:
        return Admission(cfg, kv, str(e))
    return Admission(cfg, kv)


def admit_race(slots: list[int] | tuple[int, ...], limit: int | None, *, limit_name: str = "the limit") -> str | None:
    """Why a race whose arms are granted these ``slots`` does not fit ``limit`` slots in all (None: it fits).
    A race's arms take turns, but each holds its cache until it ends, so the race holds every arm's at once:
    the sum is what it needs."""
    total = sum(slots)
    if limit is None or total <= limit:
        return None
    k = len(slots)
    each = limit // max(k, 1)
    return (f"this race's {k} arms would hold {' + '.join(str(s) for s in slots)} = {total} KV slots at once "
            f"(every arm keeps its cache until it ends); {limit_name} is {limit} for a whole race: lower the "
            f"budget to {each} or race fewer arms.")


def budget_for(rows: int, tokens: int, prompt_len: int = 0, shared: bool = True) -> int:
    """The inverse of admission: the budget in which ``rows`` rows of ``tokens`` tokens each fit (with the
    prompt's slots: once when ``shared``, else per row)."""
    return KVBudget(0, prompt_len, shared).slots(rows, tokens)


def opening_rows(budget: int, first_decision: int) -> int:
    """The most rows n='auto' can open with in ``budget`` slots at ``first_decision`` tokens, before the
    prompt is known (the prompt's own slots only lower it), at most AUTO_MAX_ROWS."""
    return KVBudget(budget, 0, True).auto_n(first_decision)
