"""Fit rejection rules on coupled runs, select among them by leave-one-out, and compare rules on others, offline.

    python -m specrej.bench.reward_study collect --out fit.json.gz --ids <prompts outside the quick set>
    python -m specrej.bench.fit_rule fit fit.json.gz --name calibrated --out specrej/data/rules/calibrated.json
    python -m specrej.bench.fit_rule fit fit.json.gz --kind schedule --name schedule --out specrej/data/rules/schedule.json
    python -m specrej.bench.fit_rule fit fit.json.gz --kind upside --name upside --out specrej/data/rules/upside.json
    python -m specrej.bench.fit_rule select fit.json.gz        # leave-one-out over the candidate rules
    python -m specrej.bench.fit_rule evaluate quick_runs.json.gz --rules paper,calibrated,schedule,window,upside

The fit: at each decision length t in ``POSITIONS``, every candidate of every run is a sample:
its features at t (``specrej.core.rules.features`` over the whole pool: partial reward, token
statistics, finished or not, length) and a label, 1 when its final reward is among the pool's
top ``TOP`` fraction (at least the best one). A logistic regression (L2, Newton's method, pure
Python) gives one weight vector per t; the rule ranks a pool by the linear score. The rewards
are the bench's reward (``--reward``), read off the coupled run (``PrefixScorer``), so the fit
never runs the generator, only its tokenizer.

The rules for a weak early signal (``core.rules``) are fitted the same way: ``schedule`` measures
the partial reward's reliability (``reliability``: Spearman of partial against final reward over
the candidates live at t, averaged over runs) at ``RELIABILITY_POSITIONS``; ``upside`` fits, per t, a
logistic regression of the same label on the partial reward, its movement over a window and
finished (``core.rules.upside_features``, with the scores the live method would hold: its prefixes
at every ``every`` tokens, ``pool_at``). ``select`` evaluates a grid of candidate rules by
leave-one-out (each fitted rule refitted for each prompt on the others) on the fit runs.

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

from ..core.cost import flop_model_of
from ..core.rules import (FEATURES, CalibratedRule, Contender, ScheduleRule, UpsideRule, WindowRule, features,
                          upside_features)

POSITIONS = (8, 16, 32, 64, 128)
RELIABILITY_POSITIONS = (4, 8, 16, 32, 64, 128, 192)
TOP = 0.05
L2 = 1.0


# ---------------------------------------------------------------------------------- samples
def top_labels(final: list[float], top: float = TOP) -> list[int]:
    """1 for the candidates whose final reward is among the top ``top`` fraction (at least the best one;
    ties: the lower id), else 0: what the fitted rules learn to predict."""
    n_top = max(1, round(top * len(final)))
    best = set(sorted(range(len(final)), key=lambda c: (-final[c], c))[:n_top])
    return [1 if c in best else 0 for c in range(len(final))]


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
    return features(pool, position), top_labels(final, top)


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


# ---------------------------------------------------------------------------------- rules for a weak early signal
def reliability(runs, scorers, positions=RELIABILITY_POSITIONS) -> tuple[float, ...]:
    """Spearman(partial reward at t, final reward) over the candidates still live at t (longer than t),
    averaged over runs, at each t (a run with fewer than 3 live candidates at t is left out there)."""
    from .coupled import partial_spearman

    out = []
    for t in positions:
        rhos = partial_spearman(runs, scorers, t)
        out.append(round(sum(rhos) / len(rhos), 4) if rhos else 0.0)
    return tuple(out)


def fit_schedule(runs, scorers, *, name: str = "schedule", full_at: float = 0.6, positions=RELIABILITY_POSITIONS,
                 fitted_on: tuple[str, ...] = ()) -> ScheduleRule:
    """A ``ScheduleRule`` keyed to the reliability measured on these runs."""
    return ScheduleRule(name, tuple(positions), reliability(runs, scorers, positions), full_at,
                        f"Schedule: prune less while the partial score is unreliable (measured on {len(runs)} runs)",
                        fitted_on)


def pool_at(run, scorer, position: int, *, every: int, window: int) -> list[Contender]:
    """Every candidate of ``run`` as a decision after ``position`` tokens sees it, with the history the
    live method holds within ``window`` tokens: its prefixes scored every ``every`` tokens and its score
    at the decision (a finished one: at its end)."""
    lengths = run.lengths()
    pool = []
    for c in range(run.n):
        u = min(position, lengths[c])
        ts = sorted({k for k in range(every, u + 1, every) if k >= u - window} | {u})
        hist = tuple((k, scorer.score([c], k)[0]) for k in ts)
        pool.append(Contender(c, hist[-1][1], u, lengths[c] <= position, history=hist))
    return pool


def fit_upside(runs, scorers, *, name: str = "upside", positions=POSITIONS, window: int = 8, every: int = 4,
               top: float = TOP, l2: float = L2, fitted_on: tuple[str, ...] = ()) -> UpsideRule:
    """An ``UpsideRule``: per decision length, a logistic regression of 'ends in the pool's top ``top``'
    on ``upside_features`` (partial reward, its movement over ``window`` tokens, finished)."""
    weights, intercepts = [], []
    for t in positions:
        xs, ys = [], []
        for run, scorer in zip(runs, scorers):
            xs += upside_features(pool_at(run, scorer, t, every=every, window=window), window)
            ys += top_labels(scorer.final(), top)
        w, b = logistic(xs, ys, l2)
        weights.append(tuple(round(v, 6) for v in w))
        intercepts.append(round(b, 6))
    return UpsideRule(name, tuple(positions), tuple(weights), tuple(intercepts), window, every, top,
                      f"Upside: P(ends in the pool's top {top:.0%}) from the score and its movement "
                      f"(fitted on {len(runs)} runs)", fitted_on)


FITS = {"calibrated": fit, "schedule": fit_schedule, "upside": fit_upside}


def candidates() -> dict:
    """The rules ``select`` compares: fixed ones (a rule object) and fitted ones (a function of the
    training runs and scorers that fits one, refitted for each left-out prompt)."""
    return {
        "paper": "paper",
        "calibrated": lambda r, s: fit(r, s, name="calibrated"),
        **{f"schedule-{f:g}": (lambda f: lambda r, s: fit_schedule(r, s, name=f"schedule-{f:g}", full_at=f))(f)
           for f in (0.45, 0.6, 0.9, 1.2, 1.5)},
        **{f"window-{w}": WindowRule(f"window-{w}", w, 4) for w in (4, 8, 16)},
        **{f"upside-{w}": (lambda w: lambda r, s: fit_upside(r, s, name=f"upside-{w}", window=w))(w) for w in (8, 16)},
    }


# ---------------------------------------------------------------------------------- evaluation
def table(runs, scorers, lm, reward, rules, *, budget: int, points, max_new_tokens: int, ids, meta: dict,
          leave_one_out: bool = False, fitters: dict | None = None, n_ref: int | None = None) -> tuple[dict, str]:
    """The bench's full table (raw and capped improvement with 90% intervals, speed-ups against the
    three Best-of-N baselines), every point SIMULATED from coupled runs. ``leave_one_out``: add the
    rules '<kind>-loo' (calibrated, schedule, upside), fitted for each prompt on the other runs only (an
    out-of-sample estimate); ``fitters``: {name: f(runs, scorers) -> rule}, refitted so for each prompt.
    ``n_ref``: Best-of-N's candidates are each run's first n_ref (default: all; a run of more candidates
    replays a larger first batch)."""
    from ..core.config import RunConfig
    from .protocol import aggregate, run_prompt
    from .report import paper_table

    fitters = dict(fitters or {})
    if leave_one_out:
        fitters.update({f"{k}-loo": (lambda f, k: lambda r, s: f(r, s, name=f"{k}-loo"))(f, k) for k, f in FITS.items()})
    n_ref = n_ref or min(r.n for r in runs)
    base = RunConfig(prompt="-", n=n_ref, max_new_tokens=max_new_tokens, budget=budget, progress_every=0)
    records = []
    for i, (run, scorer) in enumerate(zip(runs, scorers)):
        these = list(rules)
        others = [j for j in range(len(runs)) if j != i]
        these += [f([runs[j] for j in others], [scorers[j] for j in others]) for f in fitters.values()]
        records.append(run_prompt(lm, reward, {"id": ids[i], "prompt": run.prompt}, base, n_ref=n_ref,
                                  points=points, budget=budget, rules=tuple(these), live=(), coupled=run))
    agg = aggregate(records, gen_params=lm.n_params, step_model=None, gen_flops=flop_model_of(lm))
    return agg, paper_table(agg, {**meta, "budget": budget, "max_new_tokens": max_new_tokens,
                                  "wall_note": "no wall time: every point is simulated"})


def _load(path: str, reward_spec: str, model: str):
    from ..backends.hf import load_generator
    from ..rewards import load_reward
    from .coupled import PrefixScorer, load_runs

    meta, runs = load_runs(Path(path))
    lm = load_generator(model, dtype=meta.get("dtype"))   # the tokenizer is what the scorer needs
    reward = load_reward(reward_spec)
    return meta, runs, [PrefixScorer(lm, reward, r) for r in runs]


def _evaluate(args, argv, rules, fitters: dict, title: str) -> None:
    from .run import parse_points

    meta, runs, scorers = _load(args.runs, args.reward, args.model)
    ids = meta.get("ids") or [f"p{i + 1}" for i in range(len(runs))]
    agg, text = table(runs, scorers, scorers[0].lm, scorers[0].reward, rules, budget=args.budget,
                      points=parse_points(args.points), max_new_tokens=args.max_new_tokens, ids=ids,
                      leave_one_out=getattr(args, "leave_one_out", False), fitters=fitters, n_ref=args.n_ref,
                      meta={"prompt_set": f"coupled runs {args.runs}: {', '.join(ids)}", "model": args.model,
                            "reward": args.reward, "seed": meta.get("seed"), "dtype": meta.get("dtype")})
    print(title)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": {**meta, "command": "python -m specrej.bench.fit_rule "
                                                        + " ".join(argv or sys.argv[1:])},
                                               "protocol": agg}, indent=1))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m specrej.bench.fit_rule", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit a rule (calibrated, schedule or upside) on coupled runs")
    f.add_argument("runs", help="coupled runs (reward_study collect's output)")
    f.add_argument("--kind", choices=list(FITS), default="calibrated")
    f.add_argument("--name", default=None, help="the rule's name (default: its kind)")
    f.add_argument("--out", required=True, help="the rule's JSON (specrej/data/rules/<name>.json to bundle it)")
    f.add_argument("--reward", default="self-certainty")
    f.add_argument("--model", default="embedded")
    f.add_argument("--top", type=float, default=TOP)
    f.add_argument("--l2", type=float, default=L2)
    f.add_argument("--full-at", type=float, default=0.6, help="schedule: the reliability at which it rejects alpha")
    f.add_argument("--window", type=int, default=8, help="upside: tokens over which a score's movement is read")
    f.add_argument("--every", type=int, default=4, help="upside: the live rows are scored every this many tokens")
    f.add_argument("--allow-quick", action="store_true", help="allow fitting on the quick set's prompts")
    for name, helptext in (("evaluate", "compare rules on coupled runs (simulated)"),
                           ("select", "leave-one-out over the candidate rules (fit_rule.candidates) on the fit runs")):
        e = sub.add_parser(name, help=helptext)
        e.add_argument("runs")
        if name == "evaluate":
            e.add_argument("--rules", default="paper,calibrated")
            e.add_argument("--leave-one-out", action="store_true",
                           help="also each fitted kind refitted for each prompt on the other runs only (<kind>-loo)")
        e.add_argument("--reward", default="self-certainty")
        e.add_argument("--model", default="embedded")
        e.add_argument("--budget", type=int, default=2048)
        e.add_argument("--points", default="0.5@16,0.7@16,0.9@16,0.5@8,0.5@32" if name == "evaluate"
                       else "0.5@16,0.7@16,0.9@16,0.5@32")
        e.add_argument("--max-new-tokens", type=int, default=256)
        e.add_argument("--n-ref", type=int, help="Best-of-N is each run's first n_ref candidates (default: all)")
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
        name = args.name or args.kind
        fitted_on = tuple(meta.get("ids") or [r.prompt for r in runs])
        if args.kind == "schedule":
            rule = fit_schedule(runs, scorers, name=name, full_at=args.full_at, fitted_on=fitted_on)
        elif args.kind == "upside":
            rule = fit_upside(runs, scorers, name=name, window=args.window, every=args.every, top=args.top,
                              l2=args.l2, fitted_on=fitted_on)
        else:
            rule = fit(runs, scorers, name=name, top=args.top, l2=args.l2, fitted_on=fitted_on)
        d = rule.to_dict()
        d["fit"] = {"runs": args.runs, "reward": args.reward, "n": meta.get("n"), "dtype": meta.get("dtype"),
                    "max_new_tokens": meta.get("max_new_tokens"),
                    **({"top": args.top, "l2": args.l2} if args.kind != "schedule" else {}),
                    "command": "python -m specrej.bench.fit_rule " + " ".join(argv or sys.argv[1:])}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(d, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(d, indent=1))
    elif args.cmd == "select":
        grid = candidates()
        fixed = [r for r in grid.values() if not callable(r) or hasattr(r, "rank")]
        fitters = {k: r for k, r in grid.items() if callable(r) and not hasattr(r, "rank")}
        _evaluate(args, argv, fixed, fitters, "LEAVE-ONE-OUT on the fit runs, SIMULATED (each fitted rule refitted "
                  "for each prompt on the others):")
    else:
        from ..core.rules import get_rule

        rules = [get_rule(r).name for r in args.rules.split(",") if r.strip()]
        _evaluate(args, argv, rules, {}, "SIMULATED from coupled runs (no model run; exact in fp32):")


if __name__ == "__main__":
    main()
