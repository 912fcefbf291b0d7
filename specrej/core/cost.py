"""What a race costs: FLOPs (``flops``, the one rule), Best-of-N's passes (``passes``, the one
splitter), the rows each arm decodes at each step, at most, and a measured cost of one decoding step
by batch size (``StepCost``, the one step-time model). No torch here.

``race_rows(budget, cfg)`` bounds the work from above: Best-of-N decodes its N candidates in
passes of ``rows_per_pass`` rows to full length (no answer ends early, no stop once matched);
Speculative Rejection's rows at token t are at most its first batch and at most what the memory
budget holds at t (memory-full decisions never leave more). ``StepCost`` turns rows into seconds
by interpolating decoding steps measured at a few batch sizes. The app uses the two to say, before
a run starts, whether it fits the deployment's time limit.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Iterable

from .config import AUTO, RunConfig
from .budget import KVBudget


def flops(params: int, tokens: float) -> float:
    """FLOPs of a model of ``params`` parameters reading or writing ``tokens`` tokens: 2 x params x tokens
    (a multiply and an add per weight per token)."""
    return 2.0 * params * tokens


def passes(n: int, rows_per_pass: int) -> list[range]:
    """Candidates 0..n-1 in Best-of-N's passes of ``rows_per_pass`` rows: full passes, then the remainder."""
    if rows_per_pass < 1:
        raise ValueError("rows_per_pass must be at least 1")
    return [range(first, min(n, first + rows_per_pass)) for first in range(0, n, rows_per_pass)]


def bon_rows(budget: KVBudget, n: int, max_new_tokens: int) -> list[int]:
    """Rows at each decoding step of Best-of-N: passes of ``rows_per_pass`` rows, each to full length."""
    return [len(p) for p in passes(n, budget.rows_per_pass(n, max_new_tokens)) for _ in range(max_new_tokens)]


def sr_rows(budget: KVBudget, n0: int, max_new_tokens: int) -> list[int]:
    """At most the rows of Speculative Rejection at each step: its first batch, capped at each token
    by what the budget holds (at least one row: a decision always keeps one)."""
    return [max(1, min(n0, budget.rows_that_fit(t))) for t in range(1, max_new_tokens + 1)]


def race_rows(budget: KVBudget, cfg: RunConfig, *, sr_auto: bool) -> dict[str, list[int]]:
    """{"bon": rows per step, "sr": rows per step} of a race at ``cfg`` (``sr_auto``: Speculative
    Rejection opens with the batch that fills memory at ``cfg.first_decision``)."""
    n = budget.auto_n(cfg.first_decision) if cfg.n == AUTO else cfg.n
    n0 = budget.auto_n(cfg.first_decision) if sr_auto else n
    return {"bon": bon_rows(budget, n, cfg.max_new_tokens), "sr": sr_rows(budget, n0, cfg.max_new_tokens)}


@dataclass(frozen=True)
class StepCost:
    """Seconds per decoding step at the measured batch sizes; between them linear, beyond the
    largest the last segment's slope (a step's cost grows at most linearly in its rows, and never
    falls with them); one measured size: that time at every size. The app measures it
    (``specrej.steptime.measure``), the bench from its real passes (``from_passes``)."""

    rows: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self):
        if not self.rows or len(self.rows) != len(self.seconds) or list(self.rows) != sorted(set(self.rows)):
            raise ValueError("StepCost needs distinct batch sizes, in increasing order, each with its time")
        if any(not (s > 0 and math.isfinite(s)) for s in self.seconds):
            raise ValueError("StepCost's times must be positive")

    @classmethod
    def from_passes(cls, passes: list[dict]) -> "StepCost":
        """From measured passes (``{"rows", "step_s"}`` each): the fastest at each batch size."""
        by_rows: dict[int, float] = {}
        for p in passes:
            by_rows[p["rows"]] = min(p["step_s"], by_rows.get(p["rows"], math.inf))
        return cls(tuple(sorted(by_rows)), tuple(by_rows[r] for r in sorted(by_rows)))

    @property
    def points(self) -> list[list]:
        """[[rows, seconds], ...], for a JSON record."""
        return [[r, s] for r, s in zip(self.rows, self.seconds)]

    def step(self, rows: int) -> float:
        r, s = self.rows, self.seconds
        if len(r) == 1:
            return s[0]
        i = min(max(bisect.bisect_left(r, rows), 1), len(r) - 1)
        slope = max(0.0, (s[i] - s[i - 1]) / (r[i] - r[i - 1]))
        return max(min(s), s[i - 1] + slope * (rows - r[i - 1]))

    def total(self, rows_per_step: Iterable[int]) -> float:
        """Seconds for these steps (rows at each)."""
        return sum(self.step(r) for r in rows_per_step)

    def scaled(self, factor: float) -> "StepCost":
        """Every step ``factor`` times slower (a busy machine: a probe's time over the quiet one's)."""
        return StepCost(self.rows, tuple(s * factor for s in self.seconds))

    def merged(self, other: "StepCost") -> "StepCost":
        """The faster of the two at each measured batch size (the machine at its quietest)."""
        if self.rows != other.rows:
            return other
        return StepCost(self.rows, tuple(min(a, b) for a, b in zip(self.seconds, other.seconds)))


def race_seconds(budget: KVBudget, cfg: RunConfig, cost: StepCost, *, sr_auto: bool) -> float:
    """The decoding time of a race at ``cfg``, bounded from above (``race_rows``), at ``cost``."""
    return sum(cost.total(r) for r in race_rows(budget, cfg, sr_auto=sr_auto).values())
