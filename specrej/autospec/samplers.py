"""Samplers over an any-order oracle: sequential and autospeculative (token or block verification).

Every chain draws a uniformly random order sigma of the sites once; position j of a chain means site
sigma_j, and the first ``t`` positions are known. One oracle call (``Target.conditionals``) is one
*round*, the parallel depth; each conditional read off it is one *query*, the work.

1. Sequential: one round per site, n rounds.
2. Autospeculative (Anari et al., arXiv 2511.07869; reconstructed from the abstract), per iteration:
   round A drafts the block's positions in parallel from nu_j = mu(x_{b_j} | x_S) (conditionally
   independent given x_S: the speculation comes from the same oracle); round B reads the targets
   p_j = mu(x_{b_j} | x_S, y_<j) for all j at once (one pinning order); a rule from ``verify`` accepts
   a prefix and corrects one position. Exact for any block size chosen from the past.
   Block size: every remaining site, or adaptive (doubles after a fully accepted block, else twice
   the accepted length; starts at ceil(sqrt n)), which then also draws a bonus site.

``sample`` runs a batch of chains to the end; ``trace`` yields one chain's steps for animation.
Both step through ``_iteration`` (one core).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from .targets import DT, Target
from .verify import RULES, draw

SAMPLERS = ("sequential", "token", "block", "block-adaptive")
LABELS = {"sequential": "sequential", "token": "autospec, token verification",
          "block": "autospec, block verification", "block-adaptive": "autospec, block verification, adaptive"}


@dataclass
class Batch:
    """State of B chains in *order* coordinates: x[b, j] is the value of site sigma[b, j] (-1 unknown)."""
    sigma: torch.Tensor     # [B, n] the random order
    x: torch.Tensor         # [B, n] values by position
    t: torch.Tensor         # [B] known positions (a prefix of the order)
    block: torch.Tensor     # [B] the next block size (adaptive sampler)
    rounds: torch.Tensor    # [B]
    queries: torch.Tensor   # [B]

    def sites(self) -> torch.Tensor:
        """Values by site: [B, n]."""
        return torch.empty_like(self.x).scatter_(1, self.sigma, self.x)


@dataclass(frozen=True)
class Step:
    """One iteration of one chain (for display): positions are indices into ``order``."""
    kind: str                       # "sequential" | "autospec"
    order: tuple[int, ...]          # sigma: site of each position
    known_before: int               # t before the step
    drafted: tuple[int, ...]        # drafted values of the block positions t .. t+L-1 (empty if sequential)
    accepted: int                   # how many drafts stood
    corrected: int                  # the value given to position t + accepted (-1: none)
    state: tuple[int, ...]          # values by site after the step (-1 unknown)
    rounds: int
    queries: int


def _ask(target: Target, batch: Batch, x_ord: torch.Tensor, tau_ord: torch.Tensor) -> torch.Tensor:
    """One oracle round in order coordinates: probs [B, n, q] of position j given positions with smaller tau."""
    x_site = torch.empty_like(x_ord).scatter_(1, batch.sigma, x_ord)
    tau_site = torch.empty_like(tau_ord).scatter_(1, batch.sigma, tau_ord)
    probs = target.conditionals(x_site, tau_site)
    return probs.gather(1, batch.sigma.unsqueeze(-1).expand(-1, -1, target.q))


def _put(x: torch.Tensor, pos: torch.Tensor, values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """x with x[b, pos[b, k]] = values[b, k] where ``where``; other entries go to a spare column, so that
    clamped duplicate positions never overwrite a real write."""
    spare = torch.cat([x, x[:, :1]], dim=1)
    spare = spare.scatter(1, torch.where(where, pos, x.shape[1]), values)
    return spare[:, :-1]


def start(target: Target, chains: int, gen: torch.Generator, sampler: str) -> Batch:
    sigma = torch.argsort(torch.rand(chains, target.n, generator=gen), dim=1)
    zeros = torch.zeros(chains, dtype=torch.long)
    first = max(2, math.ceil(math.sqrt(target.n))) if sampler == "block-adaptive" else target.n
    return Batch(sigma, torch.full((chains, target.n), -1, dtype=torch.long), zeros.clone(),
                 torch.full((chains,), first, dtype=torch.long), zeros.clone(), zeros.clone())


def _sequential(target: Target, b: Batch, gen: torch.Generator) -> tuple:
    n = target.n
    pos = torch.arange(n).expand(len(b.t), n)
    tau = torch.where(pos < b.t.unsqueeze(1), 0, torch.where(pos == b.t.unsqueeze(1), 1, 2))
    here = b.t.clamp(max=n - 1)
    x_site = torch.empty_like(b.x).scatter_(1, b.sigma, b.x)
    tau_site = torch.empty_like(tau).scatter_(1, b.sigma, tau)
    w = target.conditionals(x_site, tau_site, sites=b.sigma.gather(1, here.unsqueeze(1))).squeeze(1)
    value = draw(w, torch.rand(len(b.t), generator=gen, dtype=DT))
    b.x = b.x.scatter(1, here.unsqueeze(1), value.unsqueeze(1))
    b.t, b.rounds, b.queries = b.t + 1, b.rounds + 1, b.queries + 1
    return None, torch.zeros_like(b.t), value


def _autospec(target: Target, b: Batch, gen: torch.Generator, rule: str, adaptive: bool) -> tuple:
    n, q, chains = target.n, target.q, len(b.t)
    length = torch.minimum(b.block, n - b.t)                               # L: block length per chain
    g = int(length.max())
    offs = torch.arange(g)
    valid = offs < length.unsqueeze(1)
    block_pos = (b.t.unsqueeze(1) + offs).clamp(max=n - 1)                 # [B, g]
    pos = torch.arange(n).expand(chains, n)
    rel = pos - b.t.unsqueeze(1)                                           # position relative to the block
    # Round A: drafts nu_j = mu(x_{b_j} | x_S) for the whole block, y_j ~ nu_j.
    probs_a = _ask(target, b, b.x, torch.where(rel < 0, 0, 1))
    nu = probs_a.gather(1, block_pos.unsqueeze(-1).expand(-1, -1, q))      # [B, g, q]
    u = torch.rand(chains, g, generator=gen, dtype=DT)
    y = draw(nu.reshape(-1, q), u.reshape(-1)).view(chains, g)
    y = torch.where(valid, y, torch.zeros_like(y))
    # Round B: targets p_j = mu(x_{b_j} | x_S, y_<j), plus the bonus position after a short block.
    bonus = b.t + length < n
    z = _put(b.x, block_pos, y, valid)
    tau_b = torch.where(rel < 0, 0, torch.where(rel <= length.unsqueeze(1), 1 + rel, n + 2))
    probs_b = _ask(target, b, z, tau_b)
    p_pos = (b.t.unsqueeze(1) + torch.arange(g + 1)).clamp(max=n - 1)
    p = probs_b.gather(1, p_pos.unsqueeze(-1).expand(-1, -1, q))           # [B, g + 1, q]
    p[:, 0] = nu[:, 0]                                                     # the same conditional: not asked again
    accepted, correction = RULES[rule](nu, p, y, length, bonus, gen)
    # Commit: the accepted drafts, then the correction at position t + accepted.
    x = _put(b.x, block_pos, y, offs < accepted.unsqueeze(1))
    has = correction >= 0
    x = _put(x, (b.t + accepted).unsqueeze(1), correction.unsqueeze(1), has.unsqueeze(1))
    b.x, b.t = x, b.t + accepted + has.long()
    b.rounds = b.rounds + 2
    b.queries = b.queries + length + (length - 1) + bonus.long()
    if adaptive:  # otherwise the block stays "every open site" (b.block = n)
        b.block = torch.where(accepted >= length, 2 * b.block, torch.clamp(2 * (accepted + 1), min=2))
    return y, accepted, correction


def _iteration(target: Target, b: Batch, gen: torch.Generator, sampler: str) -> tuple:
    if sampler == "sequential":
        return _sequential(target, b, gen)
    return _autospec(target, b, gen, "token" if sampler == "token" else "block", sampler == "block-adaptive")


def _check(sampler: str) -> None:
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(SAMPLERS)}")


@dataclass
class Samples:
    x: torch.Tensor        # [B, n] values by site
    rounds: torch.Tensor   # [B]
    queries: torch.Tensor  # [B]


@torch.inference_mode()
def sample(target: Target, sampler: str, chains: int, seed: int = 0) -> Samples:
    """``chains`` independent exact samples of ``target``; each chain counts its own rounds and queries."""
    _check(sampler)
    gen = torch.Generator().manual_seed(int(seed))
    b = start(target, chains, gen, sampler)
    out = Samples(torch.empty_like(b.x), torch.empty_like(b.t), torch.empty_like(b.t))
    ids = torch.arange(chains)
    while len(ids):
        _iteration(target, b, gen, sampler)
        done = b.t >= target.n
        if done.any():
            out.x[ids[done]] = b.sites()[done]
            out.rounds[ids[done]], out.queries[ids[done]] = b.rounds[done], b.queries[done]
            keep = ~done
            ids = ids[keep]
            b = Batch(b.sigma[keep], b.x[keep], b.t[keep], b.block[keep], b.rounds[keep], b.queries[keep])
    return out


@torch.inference_mode()
def trace(target: Target, sampler: str, seed: int = 0) -> Iterator[Step]:
    """One chain, step by step (one Step per iteration: 1 round sequential, 2 rounds autospeculative)."""
    _check(sampler)
    gen = torch.Generator().manual_seed(int(seed))
    b = start(target, 1, gen, sampler)
    order = tuple(b.sigma[0].tolist())
    while int(b.t[0]) < target.n:
        before, length = int(b.t[0]), min(int(b.block[0]), target.n - int(b.t[0]))
        y, accepted, correction = _iteration(target, b, gen, sampler)
        drafted = () if y is None else tuple(y[0, :length].tolist())
        yield Step("sequential" if y is None else "autospec", order, before, drafted, int(accepted[0]),
                   int(correction[0]), tuple(b.sites()[0].tolist()), int(b.rounds[0]), int(b.queries[0]))
