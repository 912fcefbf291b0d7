"""Rounds (parallel depth) and queries (work) against n, with least-squares slopes on log-log axes."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .samplers import sample
from .targets import make_target


@dataclass(frozen=True)
class Curve:
    target: str
    sampler: str
    ns: list
    rounds_mean: list
    queries_mean: list
    slope: float            # d log(rounds) / d log(n)
    queries_slope: float
    chains: int
    params: dict

    def as_dict(self) -> dict:
        return asdict(self)


def loglog_slope(xs, ys) -> float:
    """Least-squares slope of log y against log x."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    var = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / var if var else float("nan")


def curve(target: str, sampler: str, ns, chains: int = 8, seed: int = 0, params: dict | None = None) -> Curve:
    params = params or {}
    rounds, queries = [], []
    for n in ns:
        s = sample(make_target(target, n, **params), sampler, chains, seed=seed + n)
        rounds.append(float(s.rounds.double().mean()))
        queries.append(float(s.queries.double().mean()))
    return Curve(target, sampler, list(ns), rounds, queries, loglog_slope(ns, rounds), loglog_slope(ns, queries),
                 chains, make_target(target, ns[0], **params).params())
