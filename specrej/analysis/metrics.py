"""Evaluation metrics for comparing Speculative Rejection against Best-of-N.

Contract (pure Python, standard library only):

* ``improvement_score``: the paper's normalised score. For each prompt the
  gap between a method's best reward and the reference (Best-of-N) best
  reward is divided by the reference's reward spread (max - min); the mean
  over prompts ``m`` is reported as ``100 * (1 + m)``. A method exactly
  matching the reference scores 100. Prompts with zero spread contribute 0.
* ``relative_compute``: ``method / reference`` compute ratio.
* ``speedup``: how much more compute Best-of-N needs to reach a target score,
  read off a (compute, score) Best-of-N curve with log-compute interpolation.
  When the target is beyond the curve the result is a lower bound.
* ``spearman``: Spearman rank correlation with average ranks for ties, or
  ``None`` when undefined.
* ``best_of_k``: best score among the first ``k`` candidates (with coupled
  randomness, Best-of-k is a prefix of a Best-of-N run).
* ``improvement_gains``: the per-prompt terms of ``improvement_score`` (its
  mean, times 100, plus 100), optionally with each method best capped at the
  reference's best (``capped=True``): a method cannot then score above 100
  by reading a score the reference never saw (rounding drift between arms).
* ``bootstrap_ci``: a percentile bootstrap interval of a mean over prompts.

Invalid inputs raise ``ValueError``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Sequence

__all__ = [
    "SpeedUp",
    "best_of_k",
    "bootstrap_ci",
    "improvement_gains",
    "improvement_score",
    "relative_compute",
    "speedup",
    "spearman",
]


def improvement_score(
    method_best: Sequence[float],
    ref_best: Sequence[float],
    ref_max: Sequence[float],
    ref_min: Sequence[float],
) -> float:
    """Return the normalised improvement score of a method over a reference.

    For each prompt ``i`` the gain is
    ``(method_best[i] - ref_best[i]) / (ref_max[i] - ref_min[i])``.
    A prompt whose reference spread is zero (``ref_max[i] == ref_min[i]``)
    contributes a gain of 0, since no scale is available to normalise by.
    The result is ``100 * (1 + mean gain)``, so matching the reference gives
    exactly 100.

    Raises ``ValueError`` if the inputs are empty or differ in length.
    """
    gains = improvement_gains(method_best, ref_best, ref_max, ref_min)
    return 100.0 * (1.0 + sum(gains) / len(gains))


def improvement_gains(
    method_best: Sequence[float],
    ref_best: Sequence[float],
    ref_max: Sequence[float],
    ref_min: Sequence[float],
    capped: bool = False,
) -> list[float]:
    """Per-prompt gains ``(best - ref_best) / (ref_max - ref_min)`` (0 where the spread is 0).

    ``capped``: each method best is first lowered to at most ``ref_max`` (the
    best the reference saw), so no prompt gains above it."""
    n = len(method_best)
    if n == 0:
        raise ValueError("improvement_score needs at least one prompt")
    if not (len(ref_best) == len(ref_max) == len(ref_min) == n):
        raise ValueError("improvement_score inputs must all have the same length")
    gains = []
    for best, reference, high, low in zip(method_best, ref_best, ref_max, ref_min):
        spread = high - low
        if capped:
            best = min(best, high)
        gains.append(0.0 if spread == 0 else (best - reference) / spread)
    return gains


def bootstrap_ci(values: Sequence[float], level: float = 0.9, draws: int = 4000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (one value per prompt).

    ``draws`` resamples of ``len(values)`` values with replacement (a seeded
    generator: the same inputs give the same interval); the interval holds
    the middle ``level`` of their means. Raises ``ValueError`` on no values."""
    if not values:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    n = len(values)
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(draws))
    tail = (1.0 - level) / 2.0
    lo = means[int(math.floor(tail * (draws - 1)))]
    hi = means[int(math.ceil((1.0 - tail) * (draws - 1)))]
    return lo, hi


def relative_compute(method: float, reference: float) -> float:
    """Return ``method / reference``; ``ValueError`` if ``reference <= 0``."""
    if reference <= 0:
        raise ValueError("reference compute must be positive")
    return method / reference


@dataclass(frozen=True)
class SpeedUp:
    """A speed-up factor; ``lower_bound`` is True when the true value may be larger."""

    value: float
    lower_bound: bool


def speedup(
    curve: Sequence[tuple[float, float]],
    target_score: float,
    method_compute: float,
) -> SpeedUp:
    """Return how many times more compute Best-of-N needs to reach ``target_score``.

    ``curve`` holds Best-of-N (compute, score) points. They are sorted by
    compute and the running maximum of the scores is used, so a noisy curve
    is treated as non-decreasing. The compute needed is:

    * the first point's compute if the target is at or below its score;
    * a point's compute when the target equals its score: on a plateau (the
      curve reaching a tie at the top, ``curve.expected_max`` exact there), the
      first point of it;
    * otherwise, between the two points that bracket the target, a linear
      interpolation of ``log(compute)`` against score;
    * if the target exceeds every score, the largest compute, and the result
      is flagged ``lower_bound=True``.

    The returned value is ``needed_compute / method_compute``.

    Raises ``ValueError`` on an empty curve or any non-positive compute.
    """
    if not curve:
        raise ValueError("speedup needs a non-empty Best-of-N curve")
    if method_compute <= 0:
        raise ValueError("method_compute must be positive")
    points = sorted(curve, key=lambda point: point[0])
    if points[0][0] <= 0:
        raise ValueError("curve compute values must be positive")

    computes: list[float] = []
    running_scores: list[float] = []
    best_so_far = -math.inf
    for compute, score in points:
        best_so_far = max(best_so_far, score)
        computes.append(compute)
        running_scores.append(best_so_far)

    if target_score <= running_scores[0]:
        return SpeedUp(computes[0] / method_compute, lower_bound=False)

    for i in range(1, len(computes)):
        if running_scores[i] == target_score:   # on the point (a plateau: its first point), no interpolation
            return SpeedUp(computes[i] / method_compute, lower_bound=False)
        if running_scores[i] > target_score:
            # running_scores[i - 1] < target_score < running_scores[i],
            # so the score difference below is strictly positive.
            low_score, high_score = running_scores[i - 1], running_scores[i]
            fraction = (target_score - low_score) / (high_score - low_score)
            log_low, log_high = math.log(computes[i - 1]), math.log(computes[i])
            needed = math.exp(log_low + fraction * (log_high - log_low))
            return SpeedUp(needed / method_compute, lower_bound=False)

    return SpeedUp(computes[-1] / method_compute, lower_bound=True)


def _average_ranks(values: Sequence[float]) -> list[float]:
    """Return 1-based ranks of ``values``, giving tied values their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        mean_rank = (start + end) / 2 + 1
        for position in range(start, end + 1):
            ranks[order[position]] = mean_rank
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Return the Spearman rank correlation of ``x`` and ``y``.

    Ties get average ranks and the result is the Pearson correlation of the
    ranks. Returns ``None`` when there are fewer than 2 points or either
    side is constant (the correlation is undefined).

    Raises ``ValueError`` if ``x`` and ``y`` differ in length.
    """
    if len(x) != len(y):
        raise ValueError("spearman inputs must have the same length")
    if len(x) < 2:
        return None

    rank_x = _average_ranks(x)
    rank_y = _average_ranks(y)
    mean_x = sum(rank_x) / len(rank_x)
    mean_y = sum(rank_y) / len(rank_y)
    dev_x = [r - mean_x for r in rank_x]
    dev_y = [r - mean_y for r in rank_y]
    sum_xx = sum(d * d for d in dev_x)
    sum_yy = sum(d * d for d in dev_y)
    if sum_xx == 0 or sum_yy == 0:
        return None
    sum_xy = sum(a * b for a, b in zip(dev_x, dev_y))
    return sum_xy / math.sqrt(sum_xx * sum_yy)


def best_of_k(scores: Sequence[float], k: int) -> float:
    """Return the maximum of the first ``k`` scores (candidates ``0..k-1``).

    Raises ``ValueError`` if ``k < 1`` or ``k > len(scores)``.
    """
    if k < 1 or k > len(scores):
        raise ValueError(f"k must be between 1 and {len(scores)}, got {k}")
    return max(scores[:k])
