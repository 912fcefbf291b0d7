"""The verification rules' exact one-round output law, by enumeration (float64, error <= 1e-12).

For a random joint target pi on [q]^m and random drafts, one verification round followed by exact
sampling of the rest from pi must give exactly pi: sum over every drafted block y of
P_draft(y) x P(accept i | y) x P(correction c | y, i) x pi(rest | y_<i, c)."""
from __future__ import annotations

import itertools

import pytest
import torch

from specrej.autospec.targets import DT
from specrej.autospec.verify import block_residual, block_weights, token_accept_probs, token_residual

pytestmark = pytest.mark.filterwarnings("ignore")


def cond(pi: torch.Tensor, prefix: tuple) -> torch.Tensor:
    """pi(x_k = . | x_<k = prefix) for a joint pi of shape [q]*m."""
    sub = pi[prefix] if prefix else pi
    marg = sub.reshape(sub.shape[0], -1).sum(1)
    return marg / marg.sum()


def completion(pi, prefix):
    """Law over full sequences of (prefix, rest ~ pi(. | prefix)) as a tensor shaped like pi."""
    out = torch.zeros_like(pi)
    sub = pi[prefix]
    out[prefix] = sub / sub.sum()
    return out


def one_round_law(rule, pi, drafts, g, bonus):
    """Exact output law of draft + verify + exact completion. ``drafts(prefix)`` gives nu(. | prefix)."""
    q, m = pi.shape[0], pi.dim()
    law = torch.zeros_like(pi)
    for y in itertools.product(range(q), repeat=g):
        nu = torch.stack([drafts(y[:j]) for j in range(g)]).unsqueeze(0)
        p_rows = [cond(pi, y[:j]) for j in range(g)] + [cond(pi, y) if g < m else torch.ones(q, dtype=DT) / q]
        p = torch.stack(p_rows).unsqueeze(0)
        p_draft = torch.prod(torch.stack([nu[0, j, y[j]] for j in range(g)]))
        yt, length = torch.tensor([y]), torch.tensor([g])
        if rule == "token":
            a = token_accept_probs(nu, p, yt, length)[0]
            stop = [torch.prod(a[:i]) * (1 - a[i]) for i in range(g)] + [torch.prod(a)]
        else:
            big_p, h = block_weights(nu, p, yt, length)
            h = h[0]
            stop = [torch.prod(1 - h[1:])] + [h[i] * torch.prod(1 - h[i + 1:]) for i in range(1, g + 1)]
        for i, s in enumerate(stop):
            if s == 0:
                continue
            if i == g:
                if bonus:
                    w = p[0, g]
                else:
                    law += p_draft * s * completion(pi, y)
                    continue
            else:
                j = torch.tensor([i])
                w = (token_residual(nu, p, j) if rule == "token" else block_residual(nu, p, big_p, j))[0]
            assert w.sum() > 0, "stopped where the correction has no mass"
            for c in range(q):
                law += p_draft * s * (w[c] / w.sum()) * completion(pi, y[:i] + (c,))
    return law


@pytest.mark.parametrize("rule", ["token", "block"])
@pytest.mark.parametrize("q,g,bonus,dependent", [(2, 3, False, False), (3, 3, False, False), (3, 2, True, False),
                                                   (2, 4, True, True), (3, 3, False, True)])
def test_one_round_law_is_exact(rule, q, g, bonus, dependent):
    gen = torch.Generator().manual_seed(1000 * q + 10 * g + bonus + 7 * dependent)
    for trial in range(4):
        m = g + 1 if bonus else g
        pi = torch.rand([q] * m, generator=gen, dtype=DT) ** 3 + 1e-3
        pi /= pi.sum()
        if dependent:  # a draft that depends on the prefix (the general speculative-decoding case)
            table = {}

            def drafts(prefix):
                if prefix not in table:
                    v = torch.rand(q, generator=gen, dtype=DT) + 0.05
                    table[prefix] = v / v.sum()
                return table[prefix]
        else:          # our case: independent drafts nu_j
            fixed = torch.rand(g, q, generator=gen, dtype=DT) + 0.05
            fixed /= fixed.sum(1, keepdim=True)

            def drafts(prefix):
                return fixed[len(prefix)]
        law = one_round_law(rule, pi, drafts, g, bonus)
        assert (law - pi).abs().max().item() <= 1e-12, f"trial {trial}: max error {(law - pi).abs().max():.3e}"


@pytest.mark.parametrize("rule", ["token", "block"])
def test_identical_draft_and_target_accepts_everything(rule):
    q, g = 3, 4
    gen = torch.Generator().manual_seed(5)
    pi = torch.rand([q] * g, generator=gen, dtype=DT)
    pi /= pi.sum()
    y = (0, 2, 1, 1)
    nu = torch.stack([cond(pi, y[:j]) for j in range(g)]).unsqueeze(0)
    p = torch.cat([nu, torch.ones(1, 1, q, dtype=DT) / q], dim=1)
    yt, length = torch.tensor([y]), torch.tensor([g])
    if rule == "token":
        assert torch.allclose(token_accept_probs(nu, p, yt, length), torch.ones(1, g, dtype=DT))
    else:
        assert block_weights(nu, p, yt, length)[1][0, g].item() == pytest.approx(1.0)


def test_a_wrong_rule_is_caught():
    """The enumeration can fail: dropping block verification's P_i from the residual breaks exactness."""
    import specrej.autospec.verify as v

    gen = torch.Generator().manual_seed(3)
    q, g = 3, 3  # (with q = 2 at most one state has positive residual weight, so both rules agree)
    pi = torch.rand([q] * g, generator=gen, dtype=DT) ** 3 + 1e-3
    pi /= pi.sum()
    fixed = torch.rand(g, q, generator=gen, dtype=DT) + 0.05
    fixed /= fixed.sum(1, keepdim=True)
    original = v.block_residual
    try:
        globals()["block_residual"] = lambda nu, p, big_p, j: token_residual(nu, p, j)
        law = one_round_law("block", pi, lambda pre: fixed[len(pre)], g, False)
    finally:
        globals()["block_residual"] = original
    assert (law - pi).abs().max().item() > 1e-4
