"""Rejection rules: in what order a decision ranks its contenders (which ones it keeps).

A decision policy (``core.decisions``: ``MemoryFull``, ``EveryK``) says when to decide and how
many to keep (alpha, and memory when it forces more pruning); its rejection rule says which: it
ranks the pool, best first, and the policy keeps the head of that ranking. The live methods
(``specrej.methods``) and the simulator (``bench/simulate.py``) hand the same rule the same pool,
as ``Contender`` records (the simulator is the live method on a replay: one loop). The oracle
ceiling (``core.oracle``), which ranks by final reward, is a rule too. No torch here.

- ``paper``: the paper's rule and the reference: the highest partial reward (ties: lower id).
- ``calibrated`` (and any ``specrej/data/rules/<name>.json``, package data): a linear score, fitted on coupled runs
  (``bench/fit_rule.py``), of the candidate's features standardised within the pool (partial
  reward, mean token log-probability, mean self-certainty, finished or not, length), with
  weights per decision length. It reads the generator's token statistics, so the method asks
  the backend for them (``uses_token_stats``) whatever the reward.

``get_rule(name)`` looks a rule up in ``RULES``; ``RunConfig.rule`` and the arm key
``sr:rule=<name>`` name one.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Protocol, Sequence

# The bundled rules ship inside the package (a wheel carries them); found through the package, not the source tree.
RULE_DIR = files("specrej").joinpath("data", "rules")


@dataclass(frozen=True)
class Contender:
    """What a rule sees of one candidate at a decision."""

    id: int
    score: float                               # reward of its response so far (final when finished)
    tokens: int                                # tokens it has generated
    finished: bool = False
    mean_logprob: float | None = None          # the generator's token statistics, when kept
    mean_self_certainty: float | None = None


def rank(scores: dict[int, float]) -> list[int]:
    """Candidate ids, best score first; ties go to the lower id."""
    return sorted(scores, key=lambda c: (-scores[c], c))


class RejectionRule(Protocol):
    name: str
    label: str
    uses_token_stats: bool   # reads mean_logprob / mean_self_certainty

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        """The pool's ids, the ones to keep first. ``position``: tokens the live rows have generated."""


@dataclass(frozen=True)
class PaperRule:
    """Keep the highest partial rewards (the paper's rule)."""

    name: str = "paper"
    label: str = "Paper: highest partial reward"
    uses_token_stats = False

    def rank(self, pool: Sequence[Contender], position: int) -> list[int]:
        return rank({c.id: c.score for c in pool})


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
class CalibratedRule:
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

    @property
    def uses_token_stats(self) -> bool:
        stats = [FEATURES.index("logprob"), FEATURES.index("self_certainty")]
        return any(w[j] != 0 for w in self.weights for j in stats)

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


PAPER = PaperRule()


def _bundled() -> dict[str, RejectionRule]:
    rules: dict[str, RejectionRule] = {PAPER.name: PAPER}
    for path in sorted((p for p in RULE_DIR.iterdir() if p.name.endswith(".json")), key=lambda p: p.name):
        rule = CalibratedRule.from_dict(json.loads(path.read_text(encoding="utf-8")))
        rules[rule.name] = rule
    return rules


RULES: dict[str, RejectionRule] = _bundled()
DEFAULT_RULE = PAPER.name


def get_rule(name: str | RejectionRule) -> RejectionRule:
    """The rule called ``name`` (a rule object passes through)."""
    if not isinstance(name, str):
        return name
    rule = RULES.get(name.strip())
    if rule is None:
        raise ValueError(f"rule={name!r} is unknown; choose one of {', '.join(RULES)}.")
    return rule
