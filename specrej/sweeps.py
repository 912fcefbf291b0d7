"""A sweep: the same arms over seeds x alpha x N on one prompt list, with intervals for the speed-up.

``sweep(prompts, lm, reward, cfg, arms, seeds=(0, 1, 2), alphas=(0.3, 0.7), ns=(16,), out="sweep.jsonl")`` races
every (prompt, alpha, N, seed) once and writes one ``race_many`` row each (``many.result_row``, plus ``"sweep":
{"alpha", "n", "seed"}``), appended as it is done: resumable as ``race_many`` is (a rerun races only the rows the
file lacks, and refuses rows of other settings, weights or dtype). ``Sweep.summary`` then gives, for each setting
(alpha, N) and each challenger arm against the first arm:

  - the speed-up in decoding steps, FLOPs and wall time: the geometric mean over prompts and seeds of the
    per-race ratio (baseline / challenger: above 1 the challenger spent less), with a percentile bootstrap
    interval (prompts drawn with replacement, then each drawn prompt's seeds with replacement: seeds of one
    prompt are not independent draws of the prompt set);
  - the reward: the mean gap (challenger's winner minus the baseline's, on the reward's own scale) with its
    interval, and how often the challenger kept the baseline's winner;
  - how many of its races ran on a busy machine (their wall clocks are not reliable: ``origin.Clock``).

Decoding steps and FLOPs do not depend on the machine's load; wall time does (docs/library.md: how to time).
"""
from __future__ import annotations

import dataclasses
import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from .arms import DEFAULT_ARMS, ArmSpec, parse_arms
from .core.config import RunConfig
from .many import _check_dtype, _config, _prompts, _run, row_table

__all__ = ["Sweep", "sweep", "summarize", "nested_bootstrap"]

METRICS = ("steps", "flops", "wall")


def nested_bootstrap(groups: Sequence[Sequence[float]], stat=statistics.fmean, level: float = 0.9,
                     draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over ``groups`` (a prompt's values, one a seed): each draw takes
    ``len(groups)`` groups with replacement, then each drawn group's values with replacement. Seeded: the same
    values give the same interval. ValueError on no values."""
    groups = [list(g) for g in groups if len(g)]
    if not groups:
        raise ValueError("nested_bootstrap needs at least one value")
    rng = random.Random(seed)
    stats = []
    for _ in range(draws):
        drawn = [v for g in rng.choices(groups, k=len(groups)) for v in rng.choices(g, k=len(g))]
        stats.append(stat(drawn))
    stats.sort()
    tail = (1.0 - level) / 2.0
    return stats[int(math.floor(tail * (draws - 1)))], stats[int(math.ceil((1.0 - tail) * (draws - 1)))]


def _geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _ratio(row: dict, arm: str, base: str, metric: str) -> float | None:
    """baseline / challenger for one race's ``metric`` (None where either is missing or not positive)."""
    a, b = row["arms"].get(arm), row["arms"].get(base)
    if a is None or b is None:
        return None
    key = {"steps": "steps", "flops": "flops", "wall": "wall_s"}[metric]
    x, y = a.get(key), b.get(key)
    return y / x if x and y and x > 0 and y > 0 else None


def summarize(rows: Sequence[dict], level: float = 0.9, draws: int = 2000) -> list[dict]:
    """One record per (alpha, N, challenger arm): each metric's geometric-mean speed-up and its interval (see the
    module's docstring), the reward gap and its interval, kept-winner and busy counts."""
    by: dict[tuple, list[dict]] = {}
    for row in rows:
        s = row["sweep"]
        by.setdefault((s["alpha"], s["n"]), []).append(row)
    out = []
    for (alpha, n), group in by.items():
        base = group[0]["baseline"]
        arms = [a for a in group[0]["arms"] if a != base]
        for arm in arms:
            rec = {"alpha": alpha, "n": n, "arm": arm, "baseline": base, "races": len(group),
                   "prompts": len({r["prompt"] for r in group}), "seeds": len({r["sweep"]["seed"] for r in group})}
            for metric in METRICS:
                per_prompt: dict[str, list[float]] = {}
                for r in group:
                    v = _ratio(r, arm, base, metric)
                    if v is not None:
                        per_prompt.setdefault(r["prompt"], []).append(v)
                values = [v for vs in per_prompt.values() for v in vs]
                if values:
                    lo, hi = nested_bootstrap(list(per_prompt.values()), _geomean, level, draws)
                    rec[metric] = {"speedup": _geomean(values), "low": lo, "high": hi}
                else:
                    rec[metric] = None
            gaps: dict[str, list[float]] = {}
            kept = 0
            for r in group:
                a, b = r["arms"].get(arm), r["arms"].get(base)
                if a and b and a["score"] is not None and b["score"] is not None:
                    gaps.setdefault(r["prompt"], []).append(a["score"] - b["score"])
                kept += bool((r["comparison"].get(arm) or {}).get("kept_baseline_winner"))
            values = [v for vs in gaps.values() for v in vs]
            rec["reward_gap"] = ({"mean": statistics.fmean(values),
                                  **dict(zip(("low", "high"), nested_bootstrap(list(gaps.values()), level=level,
                                                                               draws=draws)))} if values else None)
            rec["kept_winner"] = kept
            rec["busy"] = sum(bool(((r.get("provenance") or {}).get("load") or {}).get("busy")) for r in group)
            rec["level"] = level
            out.append(rec)
    return out


def _interval(m: dict | None) -> str:
    return "n/a" if m is None else f"{m['speedup']:.2f}x [{m['low']:.2f}, {m['high']:.2f}]"


def summary_table(summary: Sequence[dict]) -> str:
    """The summary as a Markdown table (the CLI prints it; docs/library.md holds one)."""
    if not summary:
        return "(no rows)"
    pct = round(100 * summary[0]["level"])
    lines = [f"| alpha | N | arm | races | steps speed-up ({pct}% CI) | FLOPs speed-up | wall speed-up | "
             "reward gap | kept winner | busy |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        gap = s["reward_gap"]
        gap_s = "n/a" if gap is None else f"{gap['mean']:+.4f} [{gap['low']:+.4f}, {gap['high']:+.4f}]"
        lines.append(f"| {s['alpha']} | {s['n']} | {s['arm']} | {s['races']} ({s['prompts']} prompts x {s['seeds']} "
                     f"seeds) | {_interval(s['steps'])} | {_interval(s['flops'])} | {_interval(s['wall'])} | {gap_s} | "
                     f"{s['kept_winner']}/{s['races']} | {s['busy']}/{s['races']} |")
    return "\n".join(lines)


@dataclass
class Sweep:
    """A sweep's rows (one a prompt, alpha, N and seed, in grid order) and their summary (``summarize``)."""

    rows: list[dict]
    summary: list[dict] = field(default_factory=list)

    def table(self) -> str:
        return summary_table(self.summary)

    def row_table(self) -> str:
        return row_table(self.rows)


def sweep(prompts, lm, reward, cfg: RunConfig | Mapping | None = None,
          arms: Sequence[str | ArmSpec] = DEFAULT_ARMS, *, seeds: Sequence[int] = (0, 1, 2),
          alphas: Sequence[float] | None = None, ns: Sequence[int | str] | None = None, out=None,
          progress: bool = True, warm_up: bool = True, candidates: bool = False, command: list[str] | None = None,
          dtype: str | None = None, level: float = 0.9, draws: int = 2000) -> Sweep:
    """Race ``arms`` on every (prompt, alpha, N, seed) of the grid; return the rows and their summary (``Sweep``).

    ``prompts``, ``lm``, ``reward``, ``cfg``, ``arms``, ``candidates``, ``command``, ``dtype``, ``warm_up``: as
    ``race_many`` takes them. ``seeds``, ``alphas``, ``ns``: the grid (``alphas``/``ns`` None: ``cfg``'s one value);
    each race's RunConfig is ``cfg`` with that prompt, seed, alpha and n. An arm spec that sets its own alpha or n
    (``sr:alpha=0.5``) keeps it. ``out``: a JSONL file, resumable as ``race_many``'s. ``level``, ``draws``: the
    bootstrap's. Every setting is checked before any model work (ValueError naming it)."""
    from .backends import load_lm
    from .rewards import load_reward

    texts = _prompts(prompts)
    arm_specs = parse_arms(arms)
    base_cfg = _config(cfg, texts[0])
    alphas = [base_cfg.alpha] if alphas is None else list(alphas)
    ns = [base_cfg.n] if ns is None else list(ns)
    seeds = list(seeds)
    if not seeds or not alphas or not ns:
        raise ValueError("a sweep needs at least one seed, one alpha and one N")
    jobs = []
    for alpha in alphas:
        for n in ns:
            for seed in seeds:
                for i, text in enumerate(texts, 1):
                    try:
                        c = dataclasses.replace(base_cfg, prompt=text, alpha=alpha, n=n, seed=seed)
                    except (TypeError, ValueError) as e:
                        raise ValueError(f"sweep setting alpha={alpha!r}, n={n!r}, seed={seed!r}, prompt {i}: {e}") \
                            from None
                    for arm in arm_specs:
                        arm.config(c)
                    jobs.append(((text, seed, c.alpha, c.n), text, c))
    given = lm
    lm = load_lm(lm, dtype=dtype)
    if lm is given:
        _check_dtype(lm, dtype)
    reward = load_reward(reward)
    rows = _run(jobs, lm, reward, arm_specs, Path(out) if out is not None else None, progress=progress,
                warm_up=warm_up, candidates=candidates, command=command, unit="race",
                key_of=lambda row: (row["prompt"], *((row.get("sweep") or {}).get(k) for k in ("seed", "alpha", "n"))),
                extra=lambda key: {"sweep": {"alpha": key[2], "n": key[3], "seed": key[1]}})
    ordered = [rows[k] for k, _, _ in jobs]
    return Sweep(ordered, summarize(ordered, level, draws))
