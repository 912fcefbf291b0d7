"""Target distributions on [q]^n with exact conditional marginals for any conditioning set.

The oracle is one batched call, ``target.conditionals(x, tau)``: for every chain b and site i it
returns P(x_i = . | x_l for every l with tau[b, l] < tau[b, i]), so one call answers a whole *pinning
order* at once (the drafts of an autospeculative round pin only the known sites; its verification
pins the known sites and then the drafted ones in block order). One call is one oracle round.

Targets know nothing about samplers. Every target also gives its exact normalised ``log_prob`` so
that small cases can be enumerated (``exact_distribution``) and the oracle checked by brute force.
All arithmetic is float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

DT = torch.float64
N_MAX = 4096  # the library's limit; the app sets its own, smaller ones
TARGETS = ("mixture", "curie-weiss", "potts")


def _finite(name: str, value: float, lo: float, hi: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(v) or math.isinf(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be between {lo:g} and {hi:g}, got {v:g}")
    return v


def _count(name: str, value, lo: int, hi: int) -> int:
    v = _finite(name, value, lo, hi)
    if v != int(v):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return int(v)


def _rank_before(tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each site i: how many sites have tau < tau_i, and the order that sorts tau (stable).

    Returns (first [B, n] = number of sites strictly before i, order [B, n])."""
    sorted_tau, order = torch.sort(tau, dim=1, stable=True)
    first = torch.searchsorted(sorted_tau.contiguous(), tau.contiguous(), side="left")
    return first, order


def _before(tau: torch.Tensor, sites: torch.Tensor) -> torch.Tensor:
    """[B, k, n]: is site l pinned before the queried site sites[b, k]?"""
    return tau.unsqueeze(1) < tau.gather(1, sites).unsqueeze(-1)


def _exclusive_cumsum(values_sorted: torch.Tensor) -> torch.Tensor:
    """[B, n, ...] -> [B, n + 1, ...] with row 0 = 0 and row k = sum of the first k."""
    zero = torch.zeros_like(values_sorted[:, :1])
    return torch.cat([zero, values_sorted.cumsum(dim=1)], dim=1)


@dataclass
class Target:
    """Base: ``n`` sites with ``q`` states; subclasses implement the oracle and log_prob."""
    n: int
    q: int = 2
    name: str = field(default="", init=False)

    def conditionals(self, x: torch.Tensor, tau: torch.Tensor, sites: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, n] long (values of sites with small tau; others ignored), tau: [B, n] -> [B, n, q];
        with ``sites`` [B, k]: only those sites' conditionals, [B, k, q] (a direct O(k n) path)."""
        raise NotImplementedError

    def log_prob(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, n] long, every site set -> [B] exact normalised log-probabilities."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def params(self) -> dict:
        raise NotImplementedError


@dataclass
class MixtureProduct(Target):
    """A mixture of C product distributions: P(x) = sum_c pi_c prod_i theta[c, i, x_i].

    P(x_i | x_S) = sum_c w_c(S) theta[c, i], w_c(S) ∝ pi_c prod_{j in S} theta[c, j, x_j]; in a pinning
    order the log-weights are a cumulative sum over the sites sorted by pin time."""
    components: int = 3
    seed: int = 0
    spread: float = 4.0  # how far from 1/2 the components' probabilities lean (logit scale)

    def __post_init__(self):
        self.name = "mixture"
        self.n = _count("n", self.n, 1, N_MAX)
        self.components = _count("C (components)", self.components, 1, 64)
        self.spread = _finite("spread", self.spread, 0.0, 20.0)
        if self.q != 2:
            raise ValueError("the mixture target is binary (q = 2)")
        g = torch.Generator().manual_seed(int(self.seed))
        logits = self.spread * (torch.rand(self.components, self.n, generator=g, dtype=DT) - 0.5)
        p1 = torch.sigmoid(logits)
        self.theta = torch.stack([1 - p1, p1], dim=-1)             # [C, n, 2]
        self.log_theta = self.theta.log()
        self.log_pi = torch.full((self.components,), -math.log(self.components), dtype=DT)

    def _site_terms(self, x: torch.Tensor) -> torch.Tensor:
        """log theta[c, i, x_i] for every chain: [B, n, C]."""
        idx = x.clamp(0, 1).unsqueeze(0).expand(self.components, -1, -1)        # [C, B, n]
        lt = self.log_theta.unsqueeze(1).expand(-1, x.shape[0], -1, -1)         # [C, B, n, 2]
        return lt.gather(-1, idx.unsqueeze(-1)).squeeze(-1).permute(1, 2, 0)

    def conditionals(self, x, tau, sites=None):
        terms = self._site_terms(x)                                            # [B, n, C]
        if sites is not None:
            logw = self.log_pi + torch.einsum("bkn,bnc->bkc", _before(tau, sites).to(DT), terms)
            theta = self.theta.permute(1, 0, 2)[sites]                         # [B, k, C, q]
            return torch.einsum("bkc,bkcq->bkq", torch.softmax(logw, dim=-1), theta)
        first, order = _rank_before(tau)
        sorted_terms = terms.gather(1, order.unsqueeze(-1).expand_as(terms))
        before = _exclusive_cumsum(sorted_terms)                               # [B, n+1, C]
        logw = self.log_pi + before.gather(1, first.unsqueeze(-1).expand(-1, -1, self.components))
        w = torch.softmax(logw, dim=-1)                                        # [B, n, C]
        return torch.einsum("bic,ciq->biq", w, self.theta)

    def log_prob(self, x):
        return torch.logsumexp(self.log_pi + self._site_terms(x).sum(1), dim=-1)

    def describe(self):
        return f"mixture of {self.components} product distributions, n = {self.n}"

    def params(self):
        return {"C": self.components, "seed": self.seed}


@dataclass
class CurieWeiss(Target):
    """Curie–Weiss: P(x) ∝ exp(beta/(2n) M^2 + h M), M = sum_i (2 x_i - 1).

    Exchangeable, so P(x_i | x_S) depends only on (a, r): a = ones in S, r = n - |S|. With
    F[a, r] = log sum_k C(r, k) W(a + k) (recursion F[a, r] = logaddexp(F[a, r-1], F[a+1, r-1])),
    P(x_i = 1 | x_S) = exp(F[a + 1, r - 1] - F[a, r])."""
    beta: float = 0.5
    h: float = 0.0

    def __post_init__(self):
        self.name = "curie-weiss"
        self.n = _count("n", self.n, 1, N_MAX)
        self.beta = _finite("beta", self.beta, -5.0, 5.0)
        self.h = _finite("h", self.h, -5.0, 5.0)
        if self.q != 2:
            raise ValueError("the Curie–Weiss target is binary (q = 2)")
        n = self.n
        k = torch.arange(n + 1, dtype=DT)
        m = 2 * k - n
        log_w = self.beta / (2 * n) * m ** 2 + self.h * m                     # W(ones = k)
        table = torch.full((n + 1, n + 1), -math.inf, dtype=DT)                # F[a, r], a + r <= n
        table[:, 0] = log_w
        for r in range(1, n + 1):
            table[: n + 1 - r, r] = torch.logaddexp(table[: n + 1 - r, r - 1], table[1: n + 2 - r, r - 1])
        self.table = table
        self.log_z = table[0, n]

    def conditionals(self, x, tau, sites=None):
        if sites is not None:
            before = _before(tau, sites)
            a = (before & (x == 1).unsqueeze(1)).sum(-1)
            r = self.n - before.sum(-1)
        else:
            first, order = _rank_before(tau)
            ones = (x == 1).to(DT).gather(1, order)
            a = _exclusive_cumsum(ones).gather(1, first).round().long()       # ones pinned before i
            r = self.n - first                                                 # sites not pinned before i
        p1 = (self.table[(a + 1).clamp(max=self.n), (r - 1).clamp(min=0)] - self.table[a, r]).exp()
        p1 = p1.clamp(0.0, 1.0)
        return torch.stack([1 - p1, p1], dim=-1)

    def log_prob(self, x):
        m = (2 * x - 1).sum(1).to(DT)
        return self.beta / (2 * self.n) * m ** 2 + self.h * m - self.log_z

    def describe(self):
        return f"Curie–Weiss, beta = {self.beta:g}, n = {self.n}"

    def params(self):
        return {"beta": self.beta, "h": self.h}


@dataclass
class PottsChain(Target):
    """A 1D Potts chain (Ising for q = 2), open ends: P(x) ∝ exp(lam * #{i : x_i = x_{i+1}}).

    Transfer matrix T = (e^lam - 1) I + J; normalised, T^d / rho^d = kappa^d I + (1 - kappa^d) J / q with
    kappa = (e^lam - 1)/(e^lam - 1 + q). Rows of T sum to rho, so an unpinned end contributes a
    constant: P(x_i = c | x_S) ∝ T^{i-l}[x_l, c] T^{r-i}[c, x_r] with l, r the nearest pinned sites."""
    lam: float = 1.0

    def __post_init__(self):
        self.name = "potts"
        self.n = _count("n", self.n, 1, N_MAX)
        self.q = _count("q", self.q, 2, 16)
        self.lam = _finite("lambda", self.lam, -5.0, 10.0)
        e = math.exp(self.lam)
        self.kappa = (e - 1) / (e - 1 + self.q)

    def correlation_length(self) -> float:
        k = abs(self.kappa)
        return math.inf if k >= 1 else (0.0 if k == 0 else -1 / math.log(k))

    def _power(self, d: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """Normalised T^d[a, c] for every c: d, a [B, n] -> [B, n, q]; d = -1 means 'no pinned site'."""
        kd = torch.where(d >= 0, self.kappa ** d.clamp(min=0).to(DT), torch.zeros((), dtype=DT))
        same = torch.nn.functional.one_hot(a.clamp(0, self.q - 1), self.q).to(DT)
        out = kd.unsqueeze(-1) * same + ((1 - kd) / self.q).unsqueeze(-1)
        return torch.where((d >= 0).unsqueeze(-1), out, torch.ones_like(out))

    def conditionals(self, x, tau, sites=None):
        if sites is not None:
            i = sites
            before, site = _before(tau, sites), torch.arange(self.n)
            left = torch.where(before & (site < i.unsqueeze(-1)), site, -1).max(-1).values
            right = torch.where(before & (site > i.unsqueeze(-1)), site, self.n).min(-1).values
            right = torch.where(right < self.n, right, -1)
        else:
            left, right = _nearest_pinned(tau)                                 # [B, n], -1 = none
            i = torch.arange(self.n).expand_as(tau)
        xl = x.gather(1, left.clamp(min=0))
        xr = x.gather(1, right.clamp(min=0))
        f_left = self._power(torch.where(left >= 0, i - left, -1), xl)
        f_right = self._power(torch.where(right >= 0, right - i, -1), xr)
        w = f_left * f_right
        return w / w.sum(-1, keepdim=True)

    def log_prob(self, x):
        same = (x[:, 1:] == x[:, :-1]).sum(1).to(DT)
        rho = math.exp(self.lam) - 1 + self.q
        log_z = math.log(self.q) + (self.n - 1) * math.log(rho)
        return self.lam * same - log_z

    def describe(self):
        return f"{'Ising' if self.q == 2 else f'{self.q}-state Potts'} chain, lambda = {self.lam:g}, n = {self.n}"

    def params(self):
        return {"lambda": self.lam, "q": self.q}


def _nearest_pinned(tau: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each site i the nearest l < i and r > i with tau_l < tau_i (-1 if none): [B, n] each.

    A sparse table of range minima of tau (log2 n levels) and a greedy descent: O(n log n), batched."""
    def previous_smaller(t: torch.Tensor) -> torch.Tensor:
        b, n = t.shape
        levels = [t]
        while (1 << len(levels)) <= n:
            prev, step = levels[-1], 1 << (len(levels) - 1)
            nxt = prev.clone()
            nxt[:, : n - step] = torch.minimum(prev[:, : n - step], prev[:, step:])
            levels.append(nxt)
        p = torch.arange(n).expand(b, n).clone()            # candidate range is [.., p): sites p-1, p-2, ...
        for k in range(len(levels) - 1, -1, -1):
            s = 1 << k
            start = p - s
            ok = start >= 0
            block_min = levels[k].gather(1, start.clamp(min=0))
            jump = ok & (block_min >= t)                     # no smaller tau in [p - s, p): skip it
            p = torch.where(jump, start, p)
        return p - 1                                          # -1 when nothing to the left is smaller
    left = previous_smaller(tau)
    n = tau.shape[1]
    right_flipped = previous_smaller(tau.flip(1))
    right = torch.where(right_flipped >= 0, n - 1 - right_flipped, -1).flip(1)
    return left, right


def make_target(name: str, n: int, **params) -> Target:
    """A target by name: ``mixture`` (C, seed), ``curie-weiss`` (beta, h), ``potts`` (lam, q)."""
    if name == "mixture":
        return MixtureProduct(n=n, components=params.get("C", 3), seed=int(params.get("seed", 0)))
    if name == "curie-weiss":
        return CurieWeiss(n=n, beta=params.get("beta", 0.5), h=params.get("h", 0.0))
    if name == "potts":
        return PottsChain(n=n, q=params.get("q", 2), lam=params.get("lam", 1.0))
    raise ValueError(f"unknown target {name!r}; choose one of {', '.join(TARGETS)}")


# ---------------------------------------------------------------- enumeration (small n only)

def all_states(n: int, q: int) -> torch.Tensor:
    """Every state of [q]^n in lexicographic order: [q^n, n] (site 0 most significant)."""
    if q ** n > 1 << 22:
        raise ValueError(f"q^n = {q}^{n} states is too many to enumerate")
    idx = torch.arange(q ** n)
    powers = q ** torch.arange(n - 1, -1, -1)
    return (idx.unsqueeze(1) // powers) % q


def state_index(x: torch.Tensor, q: int) -> torch.Tensor:
    """Inverse of ``all_states``: [B, n] -> [B]."""
    n = x.shape[1]
    powers = q ** torch.arange(n - 1, -1, -1)
    return (x * powers).sum(1)


def exact_distribution(target: Target) -> torch.Tensor:
    """P(state) for every state of ``all_states(n, q)``: [q^n], sums to 1."""
    return target.log_prob(all_states(target.n, target.q)).exp()
