"""The Best-of-N curve by order statistics, with its compute, and the paper's speed-ups.

From one coupled Best-of-N_max run (every candidate's final score and length), the expected
best of k candidates drawn at random without replacement, for any k <= N_max, is exact and
unbiased over all C(N, k) subsets: with the scores sorted ascending,

    E[best of k] = sum_{i=k..N} C(i-1, k-1) / C(N, k) * s_(i)

(s_(i) is the best of a subset exactly when the subset holds it and k-1 of the i-1 below it).
Reading Best-of-k as candidates 0..k-1 instead is one draw per prompt: a noisy curve.

The compute of Best-of-k is an expectation too:

- generated tokens: k x the mean length (linearity);
- FLOPs: 2 x params x (prompt + generated) for the generator, plus k/N of the reward's FLOPs;
- decode steps under a memory budget: Best-of-k runs in passes of ``rows_per_pass`` rows, and a
  pass lasts as long as its longest answer, so steps = sum over passes of E[max length of a
  random subset of the pass's size] (each pass is a uniform random subset of the N);
- decode steps with slots refilled (``refill_steps``): the same ``rows_per_pass`` slots, but a
  slot takes the next candidate the step after its answer ends, as continuous batching (vLLM)
  does; the steps are the makespan of that list schedule, averaged over random orders;
- decode steps with a paged KV cache that reserves at admission (``paged_refill_steps``, ``steps_paged``): no
  slot is reserved for a full-length answer, but each answer holds its real (final) length from its start, and
  the next starts as soon as that fits (first come, first served);
- engine steps as vLLM v1 schedules Best-of-N (``paging.vllm_steps``, ``steps_vllm``): KV blocks (16 slots)
  taken as tokens are written, a waiting answer admitted while its blocks fit, the latest admitted answer
  preempted and later recomputed when a running one needs a block and none is free: the baseline the claims
  are priced against (``wall_vllm``: each of its steps priced at ``step_s`` of its rows, as below);
- wall time, modelled from step times measured by batch size (``step_s(rows)``), by the one
  Best-of-k pricing rule the page's verdict uses too (``core.cost.expected_pass_cost``): within a
  pass a row leaves the step after its answer ends, so each step is priced at the rows still
  decoding (hypergeometric over which answers the pass drew), summed over passes, plus ``fixed_s``
  (prefill and scoring) scaled by k/N. A model, not a measurement: say so where it is shown.

The improvement score is linear in each prompt's best, so the expected improvement score of
Best-of-k is the improvement score of the expected bests.
"""
from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from ..core.budget import KVBudget
from ..core.cost import best_of_k
from .metrics import SpeedUp, speedup
from .paging import BLOCK_SIZE, vllm_curve

MEASURES = ("flops", "steps", "steps_refill", "steps_paged", "steps_vllm", "wall", "wall_vllm")


@functools.lru_cache(maxsize=256)
def _maxes(ordered: tuple[float, ...]) -> tuple[float, ...]:
    """E[max of a random k-subset] of the ascending ``ordered`` for k = 1..n, exact where it must be.

    With the distinct values v_1 < ... < v_m and c_j the count at or below v_j,
    E[max] = v_m - sum_{j<m} (v_{j+1} - v_j) P(max <= v_j), and P(max <= v_j) = C(c_j, k) / C(n, k)
    = prod_{t<k} (c_j - t) / (n - t), carried from k to k+1 by one factor. So a tie at the top is reached
    exactly (P is exactly 0 once k > c_{m-1}: with 27 zeros and 5 ones, E[max of 28] is 1, not 1 - 7e-16),
    the curve never exceeds the largest value, and it never decreases in k (each P only shrinks)."""
    n = len(ordered)
    values = sorted(set(ordered))
    counts = [bisect.bisect_right(ordered, v) for v in values]
    gaps = [hi - lo for lo, hi in zip(values, values[1:])]
    below = [1.0] * len(gaps)   # P(max of a k-subset <= v_j), for k = 0
    out, low = [], 0   # below[j] is 0 for every j < low (fewer than k values at or below v_j)
    for k in range(1, n + 1):
        while low < len(gaps) and counts[low] < k:
            below[low] = 0.0
            low += 1
        for j in range(low, len(gaps)):
            below[j] = below[j] * (counts[j] - k + 1) / (n - k + 1)
        out.append(values[-1] - math.fsum(g * p for g, p in zip(gaps[low:], below[low:])))
    return tuple(out)


def expected_max(values: Sequence[float], k: int) -> float:
    """Expected maximum of k values drawn at random without replacement from ``values`` (``_maxes``: exact at
    ties, never above the largest value, non-decreasing in k)."""
    n = len(values)
    if not 1 <= k <= n:
        raise ValueError(f"k={k} is outside 1..{n}")
    return _maxes(tuple(sorted(float(v) for v in values)))[k - 1]


@dataclass(frozen=True)
class PromptRun:
    """What the curve needs from one prompt's Best-of-N_max run."""

    scores: Sequence[float]          # final reward of candidate 0..N-1
    lengths: Sequence[int]           # tokens each generated
    prompt_tokens: int
    flops_per_token: float           # 2 x generator params
    reward_flops: float = 0.0        # the whole run's reward FLOPs (each candidate scored once)
    fixed_s: float = 0.0             # the run's wall time outside decoding (prefill, scoring)
    prompt_flops: float | None = None   # the generator's prefill, once (``core.cost.FlopModel``); with
    answer_flops: float | None = None   # each answer's mean FLOPs: Best-of-k's FLOPs are prompt + k x answer + k/N
                                        # of the reward's (attention counted); None: flops_per_token x tokens

    @property
    def n(self) -> int:
        return len(self.scores)


@dataclass(frozen=True)
class Point:
    """Expected Best-of-k on one prompt (or summed over prompts, ``best`` then per prompt)."""

    k: int
    best: float
    tokens: float
    flops: float
    steps: float
    wall_s: float | None


def bon_point(run: PromptRun, k: int, rows_per_pass: int,
              step_s: Callable[[int], float] | None = None, memo: dict | None = None) -> Point:
    """Expected best and compute of Best-of-k drawn from ``run``, under ``rows_per_pass``.
    ``memo``: a dict kept per run, so a curve over every k computes each expected length and each
    pass's price once."""
    n = run.n
    memo = {} if memo is None else memo
    if len(run.lengths) != n:
        raise ValueError("scores and lengths must cover the same candidates")
    # the one Best-of-k point (core.cost.best_of_k); this curve adds only its wall time's fixed part here, and
    # its refilled and paged columns elsewhere (refill_steps, paged_schedule)
    p = best_of_k(k, run.lengths, rows_per_pass, step_s, params=run.flops_per_token / 2.0,
                  prompt_tokens=run.prompt_tokens, reward_flops=run.reward_flops,
                  memo=memo.setdefault(("price", step_s is not None), {}))
    tokens = k * sum(run.lengths) / n
    wall_s = p.seconds + run.fixed_s * k / n if step_s is not None else None
    spent = (run.prompt_flops + k * run.answer_flops + run.reward_flops * k / n
             if run.prompt_flops is not None and run.answer_flops is not None else p.flops)
    return Point(k, expected_max(run.scores, k), tokens, spent, p.steps, wall_s)


def _orders(n: int, draws: int, seed: int) -> list[Sequence[int]]:
    """Every order of n candidates when n! <= ``draws``, else ``draws`` random ones (seeded)."""
    if math.factorial(n) <= draws:
        return list(itertools.permutations(range(n)))
    rng = random.Random(seed)
    orders = []
    for _ in range(draws):
        o = list(range(n))
        rng.shuffle(o)
        orders.append(o)
    return orders


def paged_schedule(lengths: Sequence[int], order: Sequence[int], budget: KVBudget) -> list[int]:
    """Decode steps of Best-of-k for k = 1..len(order) (entry k-1) when the candidates start in ``order``
    and each holds its answer's *real* length in memory (a paged KV cache): the next candidate starts as
    soon as its memory fits beside the running ones (first come, first served: it waits for nobody behind
    it, nobody behind it overtakes), as vLLM's scheduler admits requests. A candidate of length L holds
    ``budget.row_slots_at_end(L)`` slots from its start to its end; the shared prompt is held once.
    Online, like ``refill_steps``: the first k never wait for later ones."""
    room = budget.total - budget.shared_slots
    need = {c: budget.row_slots_at_end(lengths[c]) for c in order}
    if any(v > room for v in need.values()):
        raise ValueError(f"an answer of {max(lengths)} tokens does not fit the budget of {budget.total} slots alone")
    running: list[tuple[int, int]] = []   # (end step, slots held), a heap
    now, free = 0, room
    out, end = [], 0
    for c in order:
        while need[c] > free:             # wait for the next answer to end, and free its memory
            now, held = heapq.heappop(running)
            free += held
            while running and running[0][0] == now:
                free += heapq.heappop(running)[1]
        heapq.heappush(running, (now + lengths[c], need[c]))
        free -= need[c]
        end = max(end, now + lengths[c])
        out.append(end)
    return out


def paged_refill_steps(lengths: Sequence[int], budget: KVBudget, draws: int = 256, seed: int = 0) -> list[float]:
    """Expected decode steps of Best-of-k for k = 1..N (entry k-1) with a paged KV cache
    (``paged_schedule``), averaged over orders of the candidates as ``refill_steps`` does."""
    n = len(lengths)
    if n == 0:
        raise ValueError("paged_refill_steps needs at least one length")
    orders = _orders(n, draws, seed)
    total = [0.0] * n
    for order in orders:
        for k, e in enumerate(paged_schedule(lengths, order, budget)):
            total[k] += e
    return [t / len(orders) for t in total]


def refill_steps(lengths: Sequence[int], slots: int, draws: int = 256, seed: int = 0) -> list[float]:
    """Expected decode steps of Best-of-k for k = 1..N (entry k-1) when ``slots`` rows decode at once
    and a slot takes the next candidate as soon as its answer ends (continuous batching).

    For one order of the N candidates, the first k run as a list schedule: each goes to the slot
    that frees first, and the steps are when the last one ends. A list schedule is online (the
    first k do not depend on later ones), so one pass over an order gives every k. The
    expectation is over orders: every order when N! <= ``draws`` (exact), else ``draws`` random
    orders from a seeded generator (the same inputs give the same curve)."""
    n = len(lengths)
    if n == 0:
        raise ValueError("refill_steps needs at least one length")
    if slots < 1:
        raise ValueError("slots must be at least 1")
    orders = _orders(n, draws, seed)
    total = [0.0] * n
    for order in orders:
        free = [0] * min(slots, n)      # the step at which each slot is next free
        end = 0
        for k, c in enumerate(order):
            start = heapq.heappop(free)
            heapq.heappush(free, start + lengths[c])
            end = max(end, start + lengths[c])
            total[k] += end
    return [t / len(orders) for t in total]


def default_ks(n_max: int) -> list[int]:
    """Every k from 1 to n_max: the speed-ups interpolate between neighbours, never across a gap."""
    return list(range(1, n_max + 1))


def speedups(curves: dict[str, Sequence[tuple[float, float]]], target: float,
             method: dict[str, float]) -> dict[str, SpeedUp]:
    """Speed-up at equal improvement score in each measure present in both ``curves`` and
    ``method`` (e.g. flops, steps, wall): the compute Best-of-N needs for ``target`` (log-
    interpolated on its curve) over the method's. A lower bound when the target is off the curve."""
    return {m: speedup(curves[m], target, method[m]) for m in curves if m in method and method[m]}


def improvement(bests: Sequence[float], runs: Sequence[PromptRun], capped: bool = False) -> float:
    """The improvement score of per-prompt bests against each run's Best-of-N_max (100 = match it);
    ``capped``: each prompt's best counts at most Best-of-N_max's best."""
    gains = improvement_gains(bests, runs, capped)
    return 100.0 * (1.0 + sum(gains) / len(gains))


def improvement_gains(bests: Sequence[float], runs: Sequence[PromptRun], capped: bool = False) -> list[float]:
    """Each prompt's term of ``improvement`` (its mean x 100, + 100): what a bootstrap resamples."""
    from . import metrics

    top = [max(r.scores) for r in runs]
    return metrics.improvement_gains(bests, top, top, [min(r.scores) for r in runs], capped=capped)


def prompt_curves(runs: Sequence[PromptRun], ks: Sequence[int], rows_per_pass: Sequence[int],
                  step_s: Callable[[int], float] | None = None, budgets: Sequence[KVBudget] | None = None,
                  block_size: int = BLOCK_SIZE) -> list[dict[str, list[float]]]:
    """Best-of-k on each prompt, for each k of ``ks``: ``{"best", "tokens", "flops", "steps", "steps_refill"}``
    (and ``steps_paged`` and ``steps_vllm`` when ``budgets`` gives each prompt's, ``wall`` when ``step_s``
    models it: Best-of-k in fixed passes, and ``wall_vllm`` with both: each of vLLM's steps priced at its rows),
    one list over ``ks`` each. What ``bon_curve`` sums and a bootstrap over prompts resamples."""
    if not runs or len(rows_per_pass) != len(runs):
        raise ValueError("bon_curve needs one rows_per_pass per prompt run")
    if budgets is not None and len(budgets) != len(runs):
        raise ValueError("bon_curve needs one budget per prompt run")
    out = []
    for i, (r, b) in enumerate(zip(runs, rows_per_pass)):
        memo: dict = {}
        pts = [bon_point(r, k, b, step_s, memo) for k in ks]
        refill = refill_steps(r.lengths, b)
        row = {"best": [p.best for p in pts], "tokens": [p.tokens for p in pts], "flops": [p.flops for p in pts],
               "steps": [p.steps for p in pts], "steps_refill": [refill[k - 1] for k in ks]}
        if budgets is not None:
            paged = paged_refill_steps(r.lengths, budgets[i])
            vllm, vllm_s = vllm_curve(r.lengths, budgets[i], block_size, step_s)
            row["steps_paged"] = [paged[k - 1] for k in ks]
            row["steps_vllm"] = [vllm[k - 1] for k in ks]
        if step_s is not None:
            row["wall"] = [p.wall_s for p in pts]
            if budgets is not None:
                row["wall_vllm"] = [vllm_s[k - 1] + r.fixed_s * k / r.n for k in ks]
        out.append(row)
    return out


def bon_curve(runs: Sequence[PromptRun], ks: Sequence[int], rows_per_pass: Sequence[int],
              step_s: Callable[[int], float] | None = None,
              budgets: Sequence[KVBudget] | None = None, block_size: int = BLOCK_SIZE,
              per_prompt: list[dict[str, list[float]]] | None = None) -> list[dict]:
    """Best-of-k over prompts, for each k: the expected improvement score and the compute summed
    over prompts (tokens, flops, steps in fixed passes, steps_refill with refilled slots,
    steps_paged reserving each answer's length at its start and steps_vllm as vLLM v1 schedules it when
    ``budgets`` gives each prompt's, and wall_s when ``step_s`` models it). ``per_prompt``: ``prompt_curves``
    computed before, for the same arguments."""
    per = per_prompt if per_prompt is not None else prompt_curves(runs, ks, rows_per_pass, step_s, budgets,
                                                                  block_size)
    out = []
    for j, k in enumerate(ks):
        row = {"k": k, "improvement": improvement([p["best"][j] for p in per], runs)}
        for m in ("tokens", "flops", "steps", "steps_refill", "steps_paged", "steps_vllm", "wall", "wall_vllm"):
            if m in per[0]:
                row[m] = sum(p[m][j] for p in per)
        out.append(row)
    return out


def curves_by_measure(curve: Sequence[dict]) -> dict[str, list[tuple[float, float]]]:
    """(compute, improvement) points per measure, for ``speedups``."""
    return {m: [(row[m], row["improvement"]) for row in curve] for m in MEASURES if all(m in r for r in curve)}
