"""Goodness of fit of a sampler against the exact law (small n, by enumeration).

chi² with bins of expected count below 5 pooled; total variation against its Monte Carlo noise
floor (the mean TV of the same number of draws made directly from the exact law)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from .samplers import sample
from .targets import DT, Target, exact_distribution, state_index

MAX_STATES = 1 << 14


@dataclass(frozen=True)
class Fit:
    target: str
    sampler: str
    n: int
    q: int
    samples: int
    chi2: float
    df: int
    chi2_p: float
    tv: float
    tv_floor: float
    params: dict

    def as_dict(self) -> dict:
        return asdict(self)


def chi2_test(counts: torch.Tensor, probs: torch.Tensor, min_expected: float = 5.0) -> tuple[float, int, float]:
    """(statistic, degrees of freedom, p-value); states expected fewer than ``min_expected`` times are pooled."""
    total = counts.sum()
    expected = probs.to(DT) * total
    small = expected < min_expected
    obs = torch.cat([counts[~small].to(DT), counts[small].to(DT).sum().view(1)])
    exp = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = max(int(keep.sum()) - 1, 1)
    p = torch.special.gammaincc(torch.tensor(df / 2, dtype=DT), stat / 2)
    return float(stat), df, float(p)


def tv_noise_floor(probs: torch.Tensor, samples: int, reps: int = 5, seed: int = 12345) -> float:
    """Mean TV between ``probs`` and the empirical law of ``samples`` exact draws."""
    gen = torch.Generator().manual_seed(seed)
    tvs = []
    for _ in range(reps):
        draws = torch.multinomial(probs.float(), samples, replacement=True, generator=gen)
        emp = torch.bincount(draws, minlength=len(probs)).to(DT) / samples
        tvs.append(0.5 * (emp - probs).abs().sum())
    return float(torch.stack(tvs).mean())


def empirical(target: Target, sampler: str, samples: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts per state, exact probabilities per state), states in ``all_states`` order."""
    if target.q ** target.n > MAX_STATES:
        raise ValueError(f"exactness needs q^n <= {MAX_STATES} states; got {target.q}^{target.n}")
    exact = exact_distribution(target)
    x = sample(target, sampler, samples, seed=seed).x
    return torch.bincount(state_index(x, target.q), minlength=len(exact)), exact


def fit(target: Target, sampler: str, samples: int = 20_000, seed: int = 0) -> Fit:
    return score(target, sampler, *empirical(target, sampler, samples, seed))


def score(target: Target, sampler: str, counts: torch.Tensor, exact: torch.Tensor) -> Fit:
    """The Fit of observed ``counts`` per state against the ``exact`` law."""
    samples = int(counts.sum())
    stat, df, p = chi2_test(counts, exact)
    tv = float(0.5 * (counts.to(DT) / samples - exact).abs().sum())
    return Fit(target.name, sampler, target.n, target.q, samples, stat, df, p, tv,
               tv_noise_floor(exact, samples), target.params())
