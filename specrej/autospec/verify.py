"""Verification rules for a drafted block: token by token, and block verification (Sun et al.,
"Block Verification Accelerates Speculative Decoding", arXiv 2403.10444; reconstructed).

Shapes, for B chains and a block of at most g positions (0-indexed j = 0..g-1):
  nu [B, g, q]     the draft law of position j (here mu(x_{b_j} | x_S), the same for every prefix);
  p  [B, g + 1, q] the target law of position j given the drafted prefix y_<j (row g: the position
                   after the block, used only when ``bonus``);
  y  [B, g]        the drafted values;  length [B] the block's real length L (<= g).
A rule returns (accepted [B], correction [B]): the first ``accepted`` drafts stand, and position
``accepted`` takes the value ``correction`` (-1 when nothing is corrected: the whole block was
accepted and there is no bonus position).

The acceptance probabilities are separate functions so that a test can enumerate the exact output
law of one round (``tests/test_autospec.py``); samplers and tests run the same code.
"""
from __future__ import annotations

import torch

from .targets import DT


def _picked(dist: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dist [B, g, q], y [B, g] -> dist[b, j, y_bj]: [B, g]."""
    return dist.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1)


def draw(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw from unnormalised non-negative weights [B, q] with uniforms u [B] -> [B]."""
    total = weights.sum(-1, keepdim=True)
    cdf = weights.cumsum(-1) / torch.where(total > 0, total, torch.ones_like(total))
    return (cdf <= u.unsqueeze(-1)).sum(-1).clamp(max=weights.shape[-1] - 1)


def token_accept_probs(nu, p, y, length) -> torch.Tensor:
    """a_j = min(1, p_j(y_j) / nu_j(y_j)) for j < L, 0 beyond: [B, g]."""
    g = y.shape[1]
    a = (_picked(p[:, :g], y) / _picked(nu, y)).clamp(max=1.0)
    return torch.where(torch.arange(g) < length.unsqueeze(1), a, torch.zeros((), dtype=DT))


def block_weights(nu, p, y, length) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification's (P, h), both [B, g + 1].

    P_0 = 1, P_i = min(1, P_{i-1} p_i(y_i) / nu_i(y_i)) (computed as S_i - max(0, S_1..S_i) in logs);
    h_i = R_i / (R_i + 1 - P_i) for 1 <= i < L with R_i = sum_x (P_i p_i(x) - nu_i(x))_+, h_L = P_L, and
    h_i = 0 beyond L (h_0 is unused: the accepted length is the largest i >= 1 with eta_i <= h_i, else 0)."""
    b, g = y.shape
    valid = torch.arange(g) < length.unsqueeze(1)
    log_ratio = torch.where(valid, _picked(p[:, :g], y).log() - _picked(nu, y).log(), torch.zeros((), dtype=DT))
    s = torch.cat([torch.zeros(b, 1, dtype=DT), log_ratio.cumsum(1)], dim=1)          # S_0..S_g
    peak = torch.cummax(s.clamp(min=0.0), dim=1).values
    big_p = (s - peak).exp()                                                          # P_0..P_g
    resid = (big_p[:, :g].unsqueeze(-1) * p[:, :g] - nu).clamp(min=0).sum(-1)          # R_0..R_{g-1}
    denom = resid + 1 - big_p[:, :g]
    h = torch.where(denom > 0, resid / torch.where(denom > 0, denom, torch.ones_like(denom)),
                    torch.zeros((), dtype=DT))
    h = torch.cat([h, torch.zeros(b, 1, dtype=DT)], dim=1)                            # h_0..h_g
    i = torch.arange(g + 1)
    h = torch.where(i < length.unsqueeze(1), h, torch.zeros((), dtype=DT))
    h = torch.where(i == length.unsqueeze(1), big_p, h)
    return big_p, h


def token_residual(nu, p, j):
    """Weights of the correction at position j [B]: (p_j - nu_j)_+."""
    idx = j.view(-1, 1, 1).expand(-1, 1, nu.shape[-1])
    pj, nj = p.gather(1, idx).squeeze(1), nu.gather(1, idx.clamp(max=nu.shape[1] - 1)).squeeze(1)
    return (pj - nj).clamp(min=0)


def block_residual(nu, p, big_p, j):
    """Weights of the correction at position j [B]: (P_j p_j - nu_j)_+."""
    idx = j.view(-1, 1, 1).expand(-1, 1, nu.shape[-1])
    pj, nj = p.gather(1, idx).squeeze(1), nu.gather(1, idx.clamp(max=nu.shape[1] - 1)).squeeze(1)
    return (big_p.gather(1, j.view(-1, 1)) * pj - nj).clamp(min=0)


def _finish(nu, p, y, length, bonus, accepted, residual_w, gen):
    """The correction after ``accepted`` drafts: residual draw inside the block, bonus draw past it."""
    full = accepted >= length
    bonus_w = p.gather(1, length.view(-1, 1, 1).expand(-1, 1, p.shape[-1])).squeeze(1)
    w = torch.where(full.unsqueeze(-1), bonus_w, residual_w)
    c = draw(w, torch.rand(len(accepted), generator=gen, dtype=DT))
    return torch.where(full & ~bonus, torch.full_like(c, -1), c)


def verify_tokens(nu, p, y, length, bonus, gen):
    """Token-level rule: accept while U_j <= min(1, p_j/nu_j); correct from (p - nu)_+ at the first rejection."""
    a = token_accept_probs(nu, p, y, length)
    u = torch.rand(a.shape, generator=gen, dtype=DT)
    ok = (u <= a).to(torch.long)
    accepted = ok.cumprod(1).sum(1)
    j = accepted.clamp(max=y.shape[1] - 1)
    return accepted, _finish(nu, p, y, length, bonus, accepted, token_residual(nu, p, j), gen)


def verify_block(nu, p, y, length, bonus, gen):
    """Block verification: accept the longest prefix i with eta_i <= h_i; correct from (P_i p_i - nu_i)_+."""
    big_p, h = block_weights(nu, p, y, length)
    eta = torch.rand(h.shape, generator=gen, dtype=DT)
    hit = (eta <= h) & (torch.arange(h.shape[1]) >= 1)
    idx = torch.where(hit, torch.arange(h.shape[1]), torch.zeros((), dtype=torch.long))
    accepted = idx.max(1).values
    j = accepted.clamp(max=y.shape[1] - 1)
    return accepted, _finish(nu, p, y, length, bonus, accepted, block_residual(nu, p, big_p, j), gen)


RULES = {"token": verify_tokens, "block": verify_block}
