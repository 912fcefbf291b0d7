"""Speed-ups with their uncertainty over prompts: a bootstrap that resamples prompts, and the plateau's
sensitivity.

What it knows: per prompt, Best-of-k's improvement term and compute for every k (``curve.prompt_curves``), and a
method's improvement term and compute on the same prompt. A resample draws the prompts with replacement; on it
Best-of-N's curve is rebuilt (the improvement score of the drawn prompts' expected bests, their compute summed)
and the method's point too, and the speed-up is read off that curve by ``metrics.speedup``'s rule (vectorised
here: ``speedup_many``, checked against it in ``tests/test_boot.py``). The interval holds the middle 90% of the
resampled speed-ups. Where every prompt's point sits on a plateau of Best-of-N's curve (the method matches
Best-of-N's best on each), the speed-up at the point is one number but the resampled ones are not: which k
first reaches the plateau moves with the prompts drawn.

``sensitivity``: the speed-up had the method scored ``less`` improvement points fewer (0.1 and 1), at the same
compute: on a plateau a tiny loss in score moves the speed-up a lot, and this says how much.
"""
from __future__ import annotations

import random
from typing import Sequence

import numpy as np

from .metrics import speedup

DRAWS = 2000
LESS = (0.1, 1.0)


def speedup_many(computes: np.ndarray, scores: np.ndarray, targets: np.ndarray,
                 method: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``metrics.speedup`` for D curves at once: ``computes`` and ``scores`` [D, K] (each row a curve),
    ``targets`` and ``method`` [D]. Returns (values [D], lower_bound [D]). Each row is sorted by compute, its
    scores made non-decreasing; the compute needed is the first point at or above the target (exactly on a
    point: that point; between two: log-linear; past the top: the top, a lower bound)."""
    order = np.argsort(computes, axis=1, kind="stable")
    c = np.take_along_axis(computes, order, axis=1)
    s = np.maximum.accumulate(np.take_along_axis(scores, order, axis=1), axis=1)
    t = targets[:, None]
    reach = s >= t
    past = ~reach.any(axis=1)
    i = np.where(past, c.shape[1] - 1, reach.argmax(axis=1))
    rows = np.arange(c.shape[0])
    ci, si = c[rows, i], s[rows, i]
    lo = np.maximum(i - 1, 0)
    c0, s0 = c[rows, lo], s[rows, lo]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = (targets - s0) / (si - s0)
        interp = np.exp(np.log(c0) + frac * (np.log(ci) - np.log(c0)))
    exact = (i == 0) | (si == targets) | past
    needed = np.where(exact, ci, interp)
    return needed / method, past


def resamples(prompts: int, draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """[draws, prompts] counts: how often each prompt is drawn in each resample (seeded: the same every call)."""
    rng = random.Random(seed)
    w = np.zeros((draws, prompts))
    for d in range(draws):
        for i in rng.choices(range(prompts), k=prompts):
            w[d, i] += 1
    return w


def weighted(weights: np.ndarray, x) -> np.ndarray:
    """``weights @ x`` ([draws, prompts] by [prompts, ...]) added prompt by prompt, in order: the same bits on any
    CPU (a matrix product's order and fused multiply-adds follow the BLAS kernel the CPU picks, and a committed
    interval must recompute exactly)."""
    x = np.asarray(x, float)
    out = np.zeros((weights.shape[0],) + x.shape[1:])
    for j in range(weights.shape[1]):
        out += np.multiply.outer(weights[:, j], x[j])
    return out


def bootstrap_speedup(bon_gains: np.ndarray, bon_compute: np.ndarray, gains: Sequence[float],
                      compute: Sequence[float], weights: np.ndarray, level: float = 0.9) -> dict:
    """The speed-up's percentile interval over prompts: ``bon_gains`` and ``bon_compute`` [prompts, k] (Best-of-k's
    improvement term and compute on each prompt), ``gains`` and ``compute`` the method's per prompt, ``weights``
    from ``resamples``. ``{"low", "high", "low_lower_bound", "high_lower_bound"}``: an end is a lower bound where
    the method beat Best-of-N_ref's best on that resample."""
    n = bon_gains.shape[0]
    curve_scores = 100.0 * (1.0 + weighted(weights, bon_gains) / n)
    curve_compute = weighted(weights, bon_compute)
    target = 100.0 * (1.0 + weighted(weights, gains) / n)
    own = weighted(weights, compute)
    values, bound = speedup_many(curve_compute, curve_scores, target, own)
    order = np.argsort(values, kind="stable")
    tail = (1.0 - level) / 2.0
    lo = order[int(np.floor(tail * (len(values) - 1)))]
    hi = order[int(np.ceil((1.0 - tail) * (len(values) - 1)))]
    return {"low": float(values[lo]), "high": float(values[hi]), "low_lower_bound": bool(bound[lo]),
            "high_lower_bound": bool(bound[hi])}


def sensitivity(curve: Sequence[tuple[float, float]], score: float, compute: float,
                less: Sequence[float] = LESS) -> dict:
    """The speed-up (``metrics.speedup``) had the method scored each of ``less`` improvement points fewer:
    ``{"0.1": {"value", "lower_bound"}, "1": ...}``."""
    out = {}
    for d in less:
        sp = speedup(curve, score - d, compute)
        out[f"{d:g}"] = {"value": sp.value, "lower_bound": sp.lower_bound}
    return out
