"""Fit a calibrated rejection rule on coupled runs, and compare rules on others, offline.

    python -m specrej.bench.reward_study collect --out fit.json.gz --ids <prompts outside the quick set>
    python -m specrej.bench.fit_rule fit fit.json.gz --name calibrated --out specrej/data/rules/calibrated.json
    python -m specrej.bench.fit_rule evaluate quick_runs.json.gz --rules paper,calibrated

The fit: at each decision length t in ``POSITIONS``, every candidate of every run is a sample:
its features at t (``specrej.core.rules.features`` over the whole pool: partial reward, token
statistics, finished or not, length) and a label, 1 when its final reward is among the pool's
top ``TOP`` fraction (at least the best one). A logistic regression (L2, Newton's method, pure
Python) gives one weight vector per t; the rule ranks a pool by the linear score. The rewards
are the bench's reward (``--reward``), read off the coupled run (``PrefixScorer``), so the fit
never runs the generator, only its tokenizer.

``evaluate`` replays Speculative Rejection with each rule (``simulate``) on other coupled runs and
prints the bench's table (raw and capped improvement with intervals, how often it kept
Best-of-N's winner, speed-ups): simulated numbers, labelled so.
The fit must never see the prompts it is evaluated on (the bench's quick set): ``fit`` refuses
runs whose prompts are in ``specrej/data/prompts/quick.jsonl`` unless told otherwise.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from ..core.rules import FEATURES, CalibratedRule, Contender, features

POSITIONS = (8, 16, 32, 64, 128)
TOP = 0.05
L2 = 1.0


# ---------------------------------------------------------------------------------- samples
def samples(run, scorer, position: int, top: float = TOP) -> tuple[list[list[float]], list[int]]:
    """Features and labels of every candidate of ``run`` at ``position`` generated tokens."""
    final = scorer.final()
    lengths = run.lengths()
    pool = []
    partial = scorer.score(list(range(run.n)), position)
    for c in range(run.n):
        t = min(position, lengths[c])
        st = run.stats(c, t)   # a rule that reads them has them, whatever the reward (core.rules)
        pool.append(Contender(c, partial[c], t, lengths[c] <= position, st.mean_logprob, st.mean_self_certainty))
    n_top = max(1, round(top * run.n))
    best = set(sorted(range(run.n), key=lambda c: (-final[c], c))[:n_top])
    return features(pool, position), [1 if c in best else 0 for c in range(run.n)]


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Solve a x = b (a small, symmetric positive definite) by Gaussian elimination with pivoting."""
    n = len(b)
    m = [row[:] + [v] for row, v in zip(a, b)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        for r in range(i + 1, n):
            f = m[r][i] / m[i][i]
            for j in range(i, n + 1):
                m[r][j] -= f * m[i][j]
    x = [0.0] * n
    for i in range(n - 1, -1, -1):
        x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def logistic(xs: list[list[float]], ys: list[int], l2: float = L2, iters: int = 30) -> tuple[list[float], float]:
    """L2-regularised logistic regression by Newton's method: (weights, intercept). The intercept is
    not penalised (it does not change a ranking, but it keeps the weights honest)."""
    if not xs or len(xs) != len(ys):
        raise ValueError("logistic needs as many labels as samples, at least one")
    d = len(xs[0]) + 1
    w = [0.0] * d
    rows = [[1.0] + list(x) for x in xs]
    for _ in range(iters):
        grad = [0.0] * d
        hess = [[0.0] * d for _ in range(d)]
        for x, y in zip(rows, ys):
            z = sum(a * b for a, b in zip(w, x))
            p = 1.0 / (1.0 + math.exp(-z)) if z > -40 else 0.0
            for i in range(d):
                grad[i] += (p - y) * x[i]
                for j in range(i, d):
                    hess[i][j] += p * (1 - p) * x[i] * x[j]
        for i in range(d):
            for j in range(i):
                hess[i][j] = hess[j][i]
            if i:
                grad[i] += l2 * w[i]
                hess[i][i] += l2
            hess[i][i] += 1e-9
        step = _solve(hess, grad)
        w = [a - b for a, b in zip(w, step)]
        if max(abs(s) for s in step) < 1e-8:
            break
    return w[1:], w[0]


def fit(runs, scorers, *, name: str = "calibrated", positions=POSITIONS, top: float = TOP, l2: float = L2,
        fitted_on: tuple[str, ...] = ()) -> CalibratedRule:
    """A ``CalibratedRule`` fitted on coupled runs (one scorer per run)."""
    weights = []
    for t in positions:
        xs, ys = [], []
        for run, scorer in zip(runs, scorers):
            x, y = samples(run, scorer, t, top)
            xs += x
            ys += y
        w, _ = logistic(xs, ys, l2)
        weights.append(tuple(round(v, 6) for v in w))
    return CalibratedRule(name, tuple(positions), tuple(weights),
                          f"Calibrated on {len(runs)} coupled runs (P(final top {top:.0%}) at each length)", fitted_on)


# ---------------------------------------------------------------------------------- evaluation
def table(runs, scorers, lm, reward, rules, *, budget: int, points, max_new_tokens: int, ids, meta: dict,
          leave_one_out: bool = False) -> tuple[dict, str]:
    """The bench's full table (raw and capped improvement with 90% intervals, speed-ups against both
    Best-of-N baselines), every point SIMULATED from coupled runs. ``leave_one_out``: add the rule
    'calibrated-loo', fitted for each prompt on the other runs only (an out-of-sample estimate)."""
    from ..config import RunConfig
    from .protocol import aggregate, run_prompt
    from .report import paper_table

    base = RunConfig(prompt="-", n=runs[0].n, max_new_tokens=max_new_tokens, budget=budget, progress_every=0)
    records = []
    for i, (run, scorer) in enumerate(zip(runs, scorers)):
        these = list(rules)
        if leave_one_out:
            others = [j for j in range(len(runs)) if j != i]
            these.append(fit([runs[j] for j in others], [scorers[j] for j in others], name="calibrated-loo"))
        records.append(run_prompt(lm, reward, {"id": ids[i], "prompt": run.prompt}, base, n_ref=run.n,
                                  points=points, budget=budget, rules=tuple(these), live=(), coupled=run))
    agg = aggregate(records, gen_params=lm.n_params, step_model=None)
    return agg, paper_table(agg, {**meta, "budget": budget, "max_new_tokens": max_new_tokens,
                                  "wall_note": "no wall time: every point is simulated"})


def _load(path: str, reward_spec: str, model: str):
    from ..models import load_generator
    from ..rewards import load_reward
    from .coupled import PrefixScorer, load_runs

    meta, runs = load_runs(Path(path))
    lm = load_generator(model, dtype=meta.get("dtype"))   # the tokenizer is what the scorer needs
    reward = load_reward(reward_spec)
    return meta, runs, [PrefixScorer(lm, reward, r) for r in runs]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m specrej.bench.fit_rule", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit a calibrated rule on coupled runs")
    f.add_argument("runs", help="coupled runs (reward_study collect's output)")
    f.add_argument("--name", default="calibrated")
    f.add_argument("--out", required=True, help="the rule's JSON (specrej/data/rules/<name>.json to bundle it)")
    f.add_argument("--reward", default="self-certainty")
    f.add_argument("--model", default="embedded")
    f.add_argument("--top", type=float, default=TOP)
    f.add_argument("--l2", type=float, default=L2)
    f.add_argument("--allow-quick", action="store_true", help="allow fitting on the quick set's prompts")
    e = sub.add_parser("evaluate", help="compare rules on coupled runs (simulated)")
    e.add_argument("runs")
    e.add_argument("--rules", default="paper,calibrated")
    e.add_argument("--reward", default="self-certainty")
    e.add_argument("--model", default="embedded")
    e.add_argument("--budget", type=int, default=2048)
    e.add_argument("--points", default="0.5@16,0.7@16,0.9@16,0.5@8,0.5@32")
    e.add_argument("--max-new-tokens", type=int, default=256)
    e.add_argument("--leave-one-out", action="store_true",
                   help="also a rule fitted for each prompt on the other runs only (calibrated-loo)")
    e.add_argument("--json", help="write the aggregate here")
    args = p.parse_args(argv)
    if args.cmd == "fit":
        from .prompts import load_prompts

        meta, runs, scorers = _load(args.runs, args.reward, args.model)
        quick = {r["prompt"] for r in load_prompts("quick")}
        leak = [r.prompt for r in runs if r.prompt in quick]
        if leak and not args.allow_quick:
            raise SystemExit(f"{len(leak)} of these runs are quick-set prompts (the bench evaluates on them): "
                             f"{leak[:3]}; fit on others, or pass --allow-quick.")
        rule = fit(runs, scorers, name=args.name, top=args.top, l2=args.l2,
                   fitted_on=tuple(meta.get("ids") or [r.prompt for r in runs]))
        d = rule.to_dict()
        d["fit"] = {"runs": args.runs, "reward": args.reward, "n": meta.get("n"), "dtype": meta.get("dtype"),
                    "max_new_tokens": meta.get("max_new_tokens"), "top": args.top, "l2": args.l2,
                    "command": "python -m specrej.bench.fit_rule " + " ".join(argv or sys.argv[1:])}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(d, indent=1))
    else:
        from ..core.rules import get_rule
        from .run import parse_points

        meta, runs, scorers = _load(args.runs, args.reward, args.model)
        rules = [get_rule(r).name for r in args.rules.split(",") if r.strip()]
        ids = meta.get("ids") or [f"p{i + 1}" for i in range(len(runs))]
        agg, text = table(runs, scorers, scorers[0].lm, scorers[0].reward, rules, budget=args.budget,
                          points=parse_points(args.points), max_new_tokens=args.max_new_tokens, ids=ids,
                          leave_one_out=args.leave_one_out,
                          meta={"prompt_set": f"coupled runs {args.runs}: {', '.join(ids)}", "model": args.model,
                                "reward": args.reward, "seed": meta.get("seed"), "dtype": meta.get("dtype")})
        print("SIMULATED from coupled runs (no model run; exact in fp32):")
        print(text)
        if args.json:
            Path(args.json).write_text(json.dumps({"meta": {**meta, "command": "python -m specrej.bench.fit_rule "
                                                            + " ".join(argv or sys.argv[1:])},
                                                   "protocol": agg}, indent=1))


if __name__ == "__main__":
    main()
