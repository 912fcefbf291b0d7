"""Markdown tables of rules x points from ``fit_rule evaluate/select --json`` output, and each rule
against the paper's at equal decode steps.

    python scripts/rules_table.py quick_rules.json [--against paper]

Per point: Speculative Rejection's decode steps (summed over prompts), raw and capped improvement
with 90% intervals, the oracle ceiling and the gap to it, the steps speed-up against Best-of-N in
fixed passes / static refill / paged refill (the paged one with its 90% interval) and Best-of-N's
winner's fate (kept / pruned / never drawn).

Equal steps: the paper rule's score at a point's decode steps is the best score any of the paper's
points reaches with at most 2% more steps (its upper envelope over its own points, a step function:
generous to the paper); a rule beats it at equal steps where it scores above that. Every number here is read
from the file: nothing is recomputed but the envelope.
"""
from __future__ import annotations

import argparse
import json


def _ci(ci) -> str:
    return f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""


def _x(sp) -> str:
    if not sp:
        return "-"
    return (">= " if sp.get("lower_bound") else "") + f"{sp['value']:.2f}x"


def rows(agg: dict) -> list[dict]:
    steps = agg["bon_ref"]["steps"]
    out = []
    for p in agg["sr"]:
        fc = p.get("winner_fate_counts", {})
        out.append({"rule": p["rule"], "alpha": p["alpha"], "T": p["first_decision"], "n": p["n"],
                    "steps": p["rel_steps"] * steps, "raw": p["improvement"], "raw_ci": p["improvement_ci90"],
                    "capped": p["improvement_capped"], "capped_ci": p["improvement_capped_ci90"],
                    "oracle": p.get("oracle_improvement"), "gap": p.get("gap_to_oracle"),
                    "x_fixed": p.get("speedup_steps"), "x_refill": p.get("speedup_steps_refill"),
                    "x_paged": p.get("speedup_steps_paged"), "x_paged_ci": p.get("speedup_steps_paged_ci90"),
                    "fate": (fc.get("kept"), fc.get("pruned"), fc.get("never_drawn"))})
    return out


TOLERANCE = 0.02   # "equal steps": the paper's point may take up to 2% more decode steps


def envelope(points: list[dict], steps: float) -> float | None:
    """The best raw score among ``points`` with at most ``steps`` decode steps, give or take ``TOLERANCE``
    (None: none that few)."""
    ok = [p["raw"] for p in points if p["steps"] <= steps * (1 + TOLERANCE)]
    return max(ok) if ok else None


def markdown(agg: dict, against: str = "paper") -> str:
    rs = rows(agg)
    base = [r for r in rs if r["rule"] == against]
    lines = ["| rule | α | T (N) | SR steps | raw [90% CI] | capped [90% CI] | oracle (gap) | x steps fixed / refill / "
             f"paged [paged 90% CI] | winner kept / pruned / never drawn | {against} at ≤ these steps +2% (Δ) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        env = envelope(base, r["steps"])
        ci = r["x_paged_ci"]
        paged_ci = f" [{ci['low']:.1f}, {'≥ ' if ci.get('high_lower_bound') else ''}{ci['high']:.1f}]" if ci else ""
        oracle = f"{r['oracle']:.1f} ({r['gap']:.1f})" if r["oracle"] is not None else "-"
        vs = "-" if env is None or r["rule"] == against else f"{env:.1f} ({r['raw'] - env:+.1f})"
        lines.append(f"| {r['rule']} | {r['alpha']:g} | {r['T']} ({r['n']:.0f}) | {r['steps']:,.0f} | {r['raw']:.1f} "
                     f"{_ci(r['raw_ci'])} | {r['capped']:.1f} {_ci(r['capped_ci'])} | {oracle} | {_x(r['x_fixed'])} / "
                     f"{_x(r['x_refill'])} / {_x(r['x_paged'])}{paged_ci} | {' / '.join(str(v) for v in r['fate'])} "
                     f"| {vs} |")
    ref = agg["bon_ref"]
    lines.append(f"\nBest-of-{agg['n_ref']} over {agg['prompts']} prompts: {ref['steps']:,.0f} decode steps in fixed "
                 f"passes, {ref['steps_refill']:,.0f} with static refill, {ref.get('steps_paged', float('nan')):,.0f} "
                 "paged.")
    return "\n".join(lines)


def summary(agg: dict, against: str = "paper") -> str:
    """One row per rule: its mean raw score over the points, and its difference to ``against`` at the
    same points (mean, worst, best) with the decode steps of both (the selection table)."""
    rs = rows(agg)
    base = {(r["alpha"], r["T"]): r for r in rs if r["rule"] == against}
    lines = [f"| rule | mean raw over {len(base)} points | Δ vs {against}, same point: mean (worst, best) | "
             f"steps / {against}'s |", "|---|---|---|---|"]
    for rule in dict.fromkeys(r["rule"] for r in rs):
        mine = [r for r in rs if r["rule"] == rule and (r["alpha"], r["T"]) in base]
        d = [r["raw"] - base[(r["alpha"], r["T"])]["raw"] for r in mine]
        st = sum(r["steps"] for r in mine) / sum(base[(r["alpha"], r["T"])]["steps"] for r in mine)
        lines.append(f"| {rule} | {sum(r['raw'] for r in mine) / len(mine):.1f} | {sum(d) / len(d):+.1f} "
                     f"({min(d):+.1f}, {max(d):+.1f}) | {st:.3f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", help="fit_rule evaluate/select --json output")
    p.add_argument("--against", default="paper", help="the rule compared at equal steps")
    args = p.parse_args(argv)
    agg = json.load(open(args.json))["protocol"]
    print(summary(agg, args.against) + "\n\n" + markdown(agg, args.against))


if __name__ == "__main__":
    main()
