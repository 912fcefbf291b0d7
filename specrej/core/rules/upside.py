"""An upside estimate: each candidate's probability of ending in its pool's top, fitted on coupled runs. No torch.

``UpsideRule`` ranks a decision's pool by P(final reward among the pool's top ``top`` fraction),
a logistic model of three features read at the decision (``upside_features``): the partial
reward standardised within the pool, how that score moved over the last ``window`` tokens (the
latest score less the oldest within the window, standardised within the pool) and finished or
not. One weight vector and intercept per decision length (the nearest fitted one on a log scale),
fitted on coupled runs by ``bench/fit_rule.py`` (``fit_upside``). Like ``WindowRule`` it has the
method score the live rows every ``every`` tokens (``score_every``), each a counted reward call,
so the movement is known live as in a replay. Ties: the current score, then the lower id.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .base import Contender, RuleDefaults, recent, zscores
from .calibrated import nearest

UPSIDE_FEATURES = ("score", "trend", "finished")


def upside_features(pool: Sequence[Contender], window: int) -> list[list[float]]:
    """One row per contender: its score and its score's movement over ``window`` tokens, each
    standardised within the pool, and finished as 0/1."""
    trend = []
    for c in pool:
        xs = recent(c, window)
        trend.append(xs[-1] - xs[0])
    cols = [zscores([c.score for c in pool]), zscores(trend), [1.0 if c.finished else 0.0 for c in pool]]
    return [list(row) for row in zip(*cols)]


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z > -40 else 0.0


@dataclass(frozen=True)
class UpsideRule(RuleDefaults):
    """Rank by the fitted P(ends in the pool's top ``top``) from the partial score and its movement."""

    name: str
    positions: tuple[int, ...]                # decision lengths fitted at, ascending
    weights: tuple[tuple[float, ...], ...]    # one weight per UPSIDE_FEATURES entry, per position
    intercepts: tuple[float, ...]             # one per position
    window: int = 8
    every: int = 4
    top: float = 0.05
    label: str = "Upside: P(ends in the pool's top) from the score and its movement"
    fitted_on: tuple[str, ...] = ()

    kind = "upside"
    uses_token_stats = False

    def __post_init__(self) -> None:
        if not self.positions or not len(self.positions) == len(self.weights) == len(self.intercepts):
            raise ValueError(f"rule {self.name!r}: one weight vector and intercept per decision length is needed.")
        if any(len(w) != len(UPSIDE_FEATURES) for w in self.weights):
            raise ValueError(f"rule {self.name!r}: each weight vector has {len(UPSIDE_FEATURES)} entries "
                             f"({UPSIDE_FEATURES}).")
        if self.window < 0 or self.every < 1:
            raise ValueError(f"rule {self.name!r}: window >= 0 and every >= 1 tokens.")

    @property
    def score_every(self) -> int:
        return self.every

    def probability(self, pool: Sequence[Contender], position: int) -> dict[int, float]:
        """Each contender's estimated P(final reward among the pool's top ``top``)."""
        j = nearest(self.positions, position)
        w, b = self.weights[j], self.intercepts[j]
        pool = sorted(pool, key=lambda c: c.id)   # the same sums whatever the order given
        return {c.id: _sigmoid(b + sum(a * x for a, x in zip(w, row)))
                for c, row in zip(pool, upside_features(pool, self.window))}

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        p = self.probability(pool, position)
        return [c.id for c in sorted(pool, key=lambda c: (-p[c.id], -c.score, c.id))]

    def to_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "label": self.label, "features": list(UPSIDE_FEATURES),
                "positions": list(self.positions), "weights": [list(w) for w in self.weights],
                "intercepts": list(self.intercepts), "window": self.window, "every": self.every, "top": self.top,
                "fitted_on": list(self.fitted_on)}

    @classmethod
    def from_dict(cls, d: dict) -> "UpsideRule":
        if list(d.get("features", UPSIDE_FEATURES)) != list(UPSIDE_FEATURES):
            raise ValueError(f"rule {d.get('name')!r} was fitted on features {d.get('features')}, "
                             f"not {UPSIDE_FEATURES}.")
        return cls(d["name"], tuple(d["positions"]), tuple(tuple(w) for w in d["weights"]), tuple(d["intercepts"]),
                   d.get("window", cls.window), d.get("every", cls.every), d.get("top", cls.top),
                   d.get("label", cls.label), tuple(d.get("fitted_on", ())))
