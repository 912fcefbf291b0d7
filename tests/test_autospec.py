"""Parallel sampling lab: oracle math against brute force, every sampler's exactness (chi² against the
enumerated law, fixed seeds), round accounting, bad parameters, and the CLI."""
from __future__ import annotations

import json
import math

import pytest
import torch

from specrej.autospec import SAMPLERS, exact_distribution, fit, make_target, sample, trace
from specrej.autospec import verify
from specrej.autospec.targets import DT, _nearest_pinned, all_states

SMALL = [("mixture", 6, {"C": 3}), ("curie-weiss", 6, {"beta": 1.3, "h": 0.2}), ("potts", 6, {"lam": 1.2, "q": 2}),
         ("potts", 5, {"lam": -0.7, "q": 3})]


def make(name, n, p):
    if name == "curie-weiss":
        from specrej.autospec import CurieWeiss
        return CurieWeiss(n=n, beta=p["beta"], h=p["h"])
    return make_target(name, n, **p)


def energy(t, x):
    """Unnormalised log-probability written independently of the targets' code."""
    if t.name == "mixture":
        per = [torch.log(t.theta[c, torch.arange(t.n), x]).sum() for c in range(t.components)]
        return torch.logsumexp(torch.stack(per), 0)
    if t.name == "curie-weiss":
        m = float((2 * x - 1).sum())
        return torch.tensor(t.beta / (2 * t.n) * m * m + t.h * m, dtype=DT)
    return torch.tensor(t.lam * float((x[1:] == x[:-1]).sum()), dtype=DT)


@pytest.mark.parametrize("name,n,p", SMALL)
def test_log_prob_is_the_normalised_energy(name, n, p):
    t = make(name, n, p)
    states = all_states(n, t.q)
    e = torch.stack([energy(t, s) for s in states])
    assert torch.allclose(exact_distribution(t), torch.softmax(e, 0), atol=1e-13, rtol=0)


@pytest.mark.parametrize("name,n,p", SMALL)
@pytest.mark.parametrize("direct", [False, True])
def test_conditionals_match_brute_force(name, n, p, direct):
    t = make(name, n, p)
    states, probs = all_states(n, t.q), exact_distribution(t)
    gen = torch.Generator().manual_seed(7)
    chains = 12
    x = torch.randint(0, t.q, (chains, n), generator=gen)
    tau = torch.randint(0, 4, (chains, n), generator=gen)            # ties on purpose
    sites = torch.randint(0, n, (chains, 3), generator=gen) if direct else torch.arange(n).expand(chains, n)
    got = t.conditionals(x, tau, sites=sites) if direct else t.conditionals(x, tau)
    for b in range(chains):
        for k, i in enumerate(sites[b].tolist()):
            pinned = tau[b] < tau[b, i]
            match = (states[:, pinned] == x[b, pinned]).all(1)
            want = torch.stack([probs[match & (states[:, i] == c)].sum() for c in range(t.q)])
            assert torch.allclose(got[b, k], want / want.sum(), atol=1e-12, rtol=0), (b, i)


def test_nearest_pinned_matches_a_plain_scan():
    gen = torch.Generator().manual_seed(3)
    tau = torch.randint(0, 6, (20, 37), generator=gen)
    left, right = _nearest_pinned(tau)
    for b in range(20):
        for i in range(37):
            ls = [l for l in range(i) if tau[b, l] < tau[b, i]]
            rs = [r for r in range(i + 1, 37) if tau[b, r] < tau[b, i]]
            assert left[b, i] == (ls[-1] if ls else -1) and right[b, i] == (rs[0] if rs else -1)


EXACT = [("mixture", 8, {"C": 3}), ("curie-weiss", 8, {"beta": 1.2}), ("potts", 8, {"lam": 1.0, "q": 2}),
         ("potts", 5, {"lam": 1.5, "q": 3})]


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("name,n,p", EXACT)
def test_sampler_is_exact(sampler, name, n, p):
    f = fit(make_target(name, n, **p), sampler, samples=20_000, seed=11)
    assert f.chi2_p > 1e-3, f
    assert f.tv < 1.3 * f.tv_floor, f


def test_the_chi2_check_catches_a_wrong_sampler(monkeypatch):
    """Accepting every draft (no verification) samples the product of marginals: the check must fail."""
    def accept_all(nu, p, y, length, bonus, gen):
        return length, torch.full_like(length, -1)
    monkeypatch.setitem(verify.RULES, "block", accept_all)
    import specrej.autospec.samplers as s
    monkeypatch.setitem(s.RULES, "block", accept_all)
    f = fit(make_target("curie-weiss", 8, beta=1.2), "block", samples=20_000, seed=11)
    assert f.chi2_p < 1e-6 and f.tv > 2 * f.tv_floor


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_rounds_and_queries_are_counted(sampler):
    t = make_target("potts", 40, lam=1.0, q=3)
    s = sample(t, sampler, 6, seed=2)
    assert (s.x >= 0).all() and (s.x < 3).all()
    if sampler == "sequential":
        assert (s.rounds == 40).all() and (s.queries == 40).all()
    else:
        assert (s.rounds % 2 == 0).all() and (s.rounds >= 2).all() and (s.rounds <= 2 * 40).all()
        assert (s.queries >= 40).all()


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_trace_fills_every_site_and_matches_sample(sampler):
    t = make_target("mixture", 30, C=2)
    steps = list(trace(t, sampler, seed=4))
    last = steps[-1]
    assert -1 not in last.state and last.rounds == sample(t, sampler, 1, seed=4).rounds.item()
    assert list(last.state) == sample(t, sampler, 1, seed=4).x[0].tolist()
    for a, b in zip(steps, steps[1:]):
        assert b.known_before > a.known_before
        assert all(v == w for v, w in zip(a.state, b.state) if v >= 0)     # fixed sites never change
    if sampler in ("token", "block"):                                       # the block is every open site
        assert all(len(st.drafted) == t.n - st.known_before for st in steps)
    if sampler == "block-adaptive":
        assert len(steps[0].drafted) == math.ceil(math.sqrt(t.n))


def test_block_verification_is_sequence_level_on_curie_weiss():
    """Weak dense dependence: block verification accepts whole sequences; token verification cannot."""
    t = make_target("curie-weiss", 512, beta=0.5)
    block = sample(t, "block", 8, seed=1).rounds.double().mean()
    token = sample(t, "token", 8, seed=1).rounds.double().mean()
    assert block < token and block < 2 * math.sqrt(512)


@pytest.mark.parametrize("name,kw,msg", [
    ("curie-weiss", {"n": 8, "beta": float("nan")}, "finite"), ("curie-weiss", {"n": 8, "beta": 99}, "between"),
    ("potts", {"n": 8, "q": 1}, "q must be"), ("potts", {"n": 8, "q": 2.5}, "whole"),
    ("mixture", {"n": 0}, "n must be"), ("mixture", {"n": 8, "C": 0}, "C (components)"), ("ising", {"n": 8}, "unknown"),
])
def test_bad_parameters_get_clear_messages(name, kw, msg):
    n = kw.pop("n")
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        make_target(name, n, **kw)


def test_cli_writes_json_and_plots(tmp_path, capsys):
    from specrej.autospec.cli import main

    out = tmp_path / "out.json"
    assert main(["--quick", "--json", str(out), "--samples", "3000", "--chains", "2", "--ns", "16,32,64"]) == 0
    data = json.loads(out.read_text())
    assert {"exactness", "scaling"} <= set(data)
    assert all({"target", "sampler", "n", "samples", "chi2_p", "tv"} <= set(e) for e in data["exactness"])
    assert all({"target", "sampler", "ns", "rounds_mean", "queries_mean", "slope"} <= set(s) for s in data["scaling"])
    assert {(s["target"], s["sampler"]) for s in data["scaling"]} == \
        {(t, s) for t in ("mixture", "curie-weiss", "potts") for s in SAMPLERS}
    seq = [s for s in data["scaling"] if s["sampler"] == "sequential"]
    assert all(s["rounds_mean"] == [16, 32, 64] and abs(s["slope"] - 1) < 1e-9 for s in seq)
    assert out.with_suffix(".html").stat().st_size > 1000 and out.with_suffix(".png").stat().st_size > 1000
    assert "slope" in capsys.readouterr().out
