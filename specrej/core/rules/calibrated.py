"""The calibrated rule: a linear score of the candidate's features, fitted on coupled runs. No torch.

``features`` standardises within the pool the partial reward, mean token log-probability, mean
self-certainty, and adds finished (0/1) and log length; ``CalibratedRule`` weighs them with the
weights of the nearest fitted decision length (``bench/fit_rule.py`` fits them).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .base import Contender, RuleDefaults, zscores

FEATURES = ("score", "logprob", "self_certainty", "finished", "log_length")


def features(pool: Sequence[Contender], position: int) -> list[list[float]]:
    """One row per contender: each feature standardised within the pool (mean 0, sd 1; 0 where it is
    constant or missing), ``finished`` as 0/1 and ``log_length`` as log(tokens / position)."""
    cols = [zscores([c.score for c in pool]), zscores([c.mean_logprob for c in pool]),
            zscores([c.mean_self_certainty for c in pool]), [1.0 if c.finished else 0.0 for c in pool],
            [math.log(max(c.tokens, 1) / max(position, 1)) for c in pool]]
    return [list(row) for row in zip(*cols)]


def nearest(positions: Sequence[int], position: int) -> int:
    """Index of the fitted decision length nearest ``position`` on a log scale."""
    return min(range(len(positions)), key=lambda j: abs(math.log(max(position, 1) / positions[j])))


@dataclass(frozen=True)
class CalibratedRule(RuleDefaults):
    """A linear score of ``features`` with weights per decision length (the nearest fitted length
    on a log scale), fitted on coupled runs. Ties: the paper's order."""

    name: str
    positions: tuple[int, ...]                 # decision lengths the weights were fitted at, ascending
    weights: tuple[tuple[float, ...], ...]     # one weight per FEATURES entry, per position
    label: str = "Calibrated on coupled runs"
    fitted_on: tuple[str, ...] = ()            # prompt ids

    kind = "calibrated"

    def __post_init__(self) -> None:
        if not self.positions or len(self.positions) != len(self.weights):
            raise ValueError(f"rule {self.name!r}: one weight vector per decision length is needed.")
        if any(len(w) != len(FEATURES) for w in self.weights):
            raise ValueError(f"rule {self.name!r}: each weight vector has {len(FEATURES)} entries ({FEATURES}).")

    @property
    def uses_token_stats(self) -> bool:
        stats = [FEATURES.index("logprob"), FEATURES.index("self_certainty")]
        return any(w[j] != 0 for w in self.weights for j in stats)

    def weights_at(self, position: int) -> tuple[float, ...]:
        return self.weights[nearest(self.positions, position)]

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        w = self.weights_at(position)
        pool = sorted(pool, key=lambda c: c.id)   # the same sums (so the same ranking) whatever the order given
        value = {c.id: sum(a * b for a, b in zip(w, row)) for c, row in zip(pool, features(pool, position))}
        return [c.id for c in sorted(pool, key=lambda c: (-value[c.id], -c.score, c.id))]

    def to_dict(self) -> dict:
        return {"name": self.name, "label": self.label, "features": list(FEATURES),
                "positions": list(self.positions), "weights": [list(w) for w in self.weights],
                "fitted_on": list(self.fitted_on)}

    @classmethod
    def from_dict(cls, d: dict) -> "CalibratedRule":
        if list(d.get("features", FEATURES)) != list(FEATURES):
            raise ValueError(f"rule {d.get('name')!r} was fitted on features {d.get('features')}, not {FEATURES}.")
        return cls(d["name"], tuple(d["positions"]), tuple(tuple(w) for w in d["weights"]),
                   d.get("label", cls.label), tuple(d.get("fitted_on", ())))

    @classmethod
    def load(cls, path: Path) -> "CalibratedRule":
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
