"""Speed-ups over prompts (``specrej.analysis.boot``): the vectorised reading is ``metrics.speedup``'s, the
bootstrap resamples prompts (curve and point together), and a point on a plateau still gets an interval."""
from __future__ import annotations

import random

import numpy as np
import pytest

from specrej.analysis.boot import bootstrap_speedup, resamples, sensitivity, speedup_many, weighted
from specrej.analysis.metrics import speedup


def test_speedup_many_is_speedup_on_every_row():
    rng = random.Random(5)
    comps, scores, targets, own = [], [], [], []
    for _ in range(300):
        k = rng.randint(1, 9)
        c = sorted(rng.uniform(1, 100) for _ in range(k))
        s = [rng.choice([50.0, 80.0, 100.0, rng.uniform(40, 100)]) for _ in range(k)]
        comps.append(c + [c[-1]] * (9 - k))
        scores.append(s + [s[-1]] * (9 - k))
        targets.append(rng.choice([s[0], s[-1], max(s), rng.uniform(30, 110)]))
        own.append(rng.uniform(1, 50))
    values, bound = speedup_many(np.array(comps), np.array(scores), np.array(targets), np.array(own))
    for c, s, t, m, v, b in zip(comps, scores, targets, own, values, bound):
        ref = speedup(list(zip(c, s)), t, m)
        assert v == pytest.approx(ref.value, rel=1e-12) and bool(b) == ref.lower_bound


def test_a_point_on_the_plateau_gets_an_interval_over_prompts():
    """Three prompts whose Best-of-k reaches 100 at k = 2, 3 and 4 (a plateau from there), a method that matches
    Best-of-N's best on each with 1 unit of compute per prompt. The speed-up at the point is one number (the first
    k on the summed curve's plateau); resampled prompts move the plateau's start, so the interval is not a point."""
    bon_gains = np.array([[-0.5, 0.0, 0.0, 0.0], [-0.8, -0.3, 0.0, 0.0], [-0.9, -0.5, -0.2, 0.0]])
    bon_compute = np.array([[1.0, 2.0, 3.0, 4.0]] * 3)
    out = bootstrap_speedup(bon_gains, bon_compute, [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], resamples(3))
    assert out["low"] < out["high"]
    assert 2.0 <= out["low"] and out["high"] <= 4.0 and not out["high_lower_bound"]
    curve = [(3.0 * k, 100.0 * (1 + bon_gains[:, k - 1].mean())) for k in range(1, 5)]
    assert speedup(curve, 100.0, 3.0).value == pytest.approx(4.0)
    less = sensitivity(curve, 100.0, 3.0)
    assert less["0.1"]["value"] < 4.0 and less["1"]["value"] < less["0.1"]["value"]


def test_resamples_are_seeded_counts():
    w = resamples(5, draws=50)
    assert w.shape == (50, 5) and (w.sum(axis=1) == 5).all()
    assert (w == resamples(5, draws=50)).all()


def test_the_resamples_sums_are_added_prompt_by_prompt_the_same_on_any_cpu():
    """``weighted`` is ``weights @ x`` added prompt after prompt (plain floats below, bit for bit): a BLAS product's
    order and fused multiply-adds follow the CPU, and a committed interval must recompute exactly on any of them."""
    rng = random.Random(5)
    w = resamples(7, draws=50, seed=3)
    vec = [rng.uniform(-3, 3) / 7 for _ in range(7)]
    mat = [[rng.uniform(0, 1e12) / 3 for _ in range(4)] for _ in range(7)]
    got_vec, got_mat = weighted(w, vec), weighted(w, np.array(mat))
    for d in range(50):
        acc = 0.0
        for j in range(7):
            acc += float(w[d, j]) * vec[j]
        assert got_vec[d] == acc
        for k in range(4):
            acc = 0.0
            for j in range(7):
                acc += float(w[d, j]) * mat[j][k]
            assert got_mat[d, k] == acc
