"""Rejection rules: which candidates Speculative Rejection keeps at a decision.

A rule is a small policy object that never touches tensors. At a decision the method (live,
``specrej.methods``) or the simulator (``bench/simulate.py``) hands it the pool: every live
candidate with its partial reward, plus finished ones still in contention, as ``Contender``
records. ``rank`` orders the pool best first; ``select`` keeps the first ``n_keep``. The method
decides how many to keep (alpha, and memory when it forces more pruning: the lowest-ranked kept
live rows go first); the rule decides which.

- ``paper``: the paper's rule and the reference: the highest partial reward (ties: lower id).
- ``calibrated``: a score fitted on coupled runs (``bench/fit_rule.py``): at each decision
  length, a linear score of the candidate's features standardised within the pool (partial
  reward, mean token log-probability, mean self-certainty, finished or not, length), fitted
  to predict whether it ends among the pool's best by final reward. Its weights live in
  ``assets/rules/<name>.json``, with the prompts and data it was fitted on.

``get_rule(name)`` looks a rule up (``RULES``); an arm picks one with ``sr:rule=<name>``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

RULE_DIR = Path(__file__).resolve().parent.parent / "assets" / "rules"


@dataclass(frozen=True)
class Contender:
    """What a rule sees of one candidate at a decision."""

    id: int
    score: float                               # reward of its response so far (final when finished)
    tokens: int                                # tokens it has generated
    finished: bool
    mean_logprob: float | None = None          # the engine's token statistics (None when not kept)
    mean_self_certainty: float | None = None


class Rule(Protocol):
    """A decision rule: orders a pool of contenders, best first."""

    name: str

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        """The pool's ids, the ones to keep first. ``position``: generated tokens at the decision."""

    def select(self, pool: Sequence[Contender], n_keep: int, position: int) -> list[int]:
        """The ids of the ``n_keep`` contenders to keep."""


class _Ranked:
    """``select`` from ``rank``: the first ``n_keep`` of the ranking."""

    def select(self, pool: Sequence[Contender], n_keep: int, position: int) -> list[int]:
        return self.rank(pool, position)[:max(0, n_keep)]


class PaperRule(_Ranked):
    """Keep the highest partial rewards (the paper's rule)."""

    name = "paper"
    label = "Paper: highest partial reward"

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        return [c.id for c in sorted(pool, key=lambda c: (-c.score, c.id))]


FEATURES = ("score", "logprob", "self_certainty", "finished", "log_length")


def features(pool: Sequence[Contender], position: int) -> list[list[float]]:
    """One row per contender: each feature standardised within the pool (mean 0, sd 1; 0 where it is
    constant or missing), ``finished`` as 0/1 and ``log_length`` as log(tokens / position)."""
    def z(values: list[float | None]) -> list[float]:
        known = [v for v in values if v is not None and math.isfinite(v)]
        if len(known) < 2:
            return [0.0] * len(values)
        mean = sum(known) / len(known)
        sd = math.sqrt(sum((v - mean) ** 2 for v in known) / len(known))
        if sd == 0:
            return [0.0] * len(values)
        return [(v - mean) / sd if v is not None and math.isfinite(v) else 0.0 for v in values]

    cols = [z([c.score for c in pool]), z([c.mean_logprob for c in pool]),
            z([c.mean_self_certainty for c in pool]), [1.0 if c.finished else 0.0 for c in pool],
            [math.log(max(c.tokens, 1) / max(position, 1)) for c in pool]]
    return [list(row) for row in zip(*cols)]


@dataclass(frozen=True)
class CalibratedRule(_Ranked):
    """A linear score of ``features`` with weights per decision length (the nearest fitted length
    on a log scale), fitted on coupled runs. Ties: the paper's order."""

    name: str
    positions: tuple[int, ...]                 # decision lengths the weights were fitted at, ascending
    weights: tuple[tuple[float, ...], ...]     # one weight per FEATURES entry, per position
    label: str = "Calibrated on coupled runs"
    fitted_on: tuple[str, ...] = ()            # prompt ids

    def __post_init__(self) -> None:
        if not self.positions or len(self.positions) != len(self.weights):
            raise ValueError(f"rule {self.name!r}: one weight vector per decision length is needed.")
        if any(len(w) != len(FEATURES) for w in self.weights):
            raise ValueError(f"rule {self.name!r}: each weight vector has {len(FEATURES)} entries ({FEATURES}).")

    def weights_at(self, position: int) -> tuple[float, ...]:
        i = min(range(len(self.positions)),
                key=lambda j: abs(math.log(max(position, 1) / self.positions[j])))
        return self.weights[i]

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


def _bundled() -> dict[str, Rule]:
    rules: dict[str, Rule] = {"paper": PaperRule()}
    for path in sorted(RULE_DIR.glob("*.json")):
        rule = CalibratedRule.load(path)
        rules[rule.name] = rule
    return rules


RULES: dict[str, Rule] = _bundled()
DEFAULT_RULE = "paper"


def get_rule(name: str | Rule) -> Rule:
    """The rule called ``name`` (a rule object passes through)."""
    if not isinstance(name, str):
        return name
    rule = RULES.get(name.strip())
    if rule is None:
        raise ValueError(f"rule={name!r} is unknown; choose one of {', '.join(RULES)}.")
    return rule
