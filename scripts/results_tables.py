"""The markdown tables of docs/results.md that rest on the committed bench results, printed from them
(``assets/bench/quick.json``, ``graded.json``, ``rivals.json``; no model runs): ``python scripts/results_tables.py``
(every table), ``--bench quick`` (one).

Every speed-up at equal raw improvement score, against Best-of-N as vLLM v1 schedules it (``steps_vllm``:
``specrej.analysis.paging``) and beside it the three older baselines (fixed passes, refilled slots, paged slots
reserved at admission), FLOPs (``core.cost.FlopModel``: non-embedding weights and attention) and the wall time
modelled for Best-of-N as vLLM schedules it and in fixed passes; each with its 90% bootstrap interval over
prompts {in braces} and the speed-up had the method scored 0.1 / 1 point less (in parentheses: on Best-of-N's
plateau a tenth of a point moves it a lot). A rival the memory budget cut short (ST-BoN truncating before c + tau)
has its forced prompts counted and named. ``--capped``: also each point's speed-up at its capped score.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def x(s, lb=False) -> str:
    return "-" if s is None else ("≥ " if lb else "") + f"{s:.2f}x"


def boot(p: dict, m: str, less_too: bool = True) -> str:
    v = p.get(f"speedup_{m}")
    if not v:
        return "-"
    b, less = p.get(f"speedup_{m}_boot90"), p.get(f"speedup_{m}_less") or {}
    out = x(v["value"], v["lower_bound"])
    if b:
        out += (f" {{{'≥ ' if b['low_lower_bound'] else ''}{b['low']:.2f}, "
                f"{'≥ ' if b['high_lower_bound'] else ''}{b['high']:.2f}}}")
    if less and less_too:
        out += " (" + " / ".join(f"{'≥ ' if d['lower_bound'] else ''}{d['value']:.2f}" for d in less.values()) + ")"
    return out


def ci(c) -> str:
    return f"[{c[0]:.1f}, {c[1]:.1f}]"


def name_of(p: dict) -> str:
    if p.get("label"):
        return f"{p['label']} (N={p['n']:.0f})"
    return f"SR {p['rule']} α={p['alpha']:g}, T={p['first_decision']} (N≈{p['n']:.0f})"


def bench_table(agg: dict) -> str:
    """Every point of a bench: its improvement and every speed-up with its interval and sensitivity."""
    rows = ["| method | source | improvement [90% CI] | x engine steps, vLLM {90% over prompts} (0.1 / 1 point less) "
            "| x steps: fixed / refilled / paged | x FLOPs | x wall: vLLM / fixed passes | "
            f"kept Best-of-{agg['n_ref']}'s winner | memory forced its decision |", "|---|---|---|---|---|---|---|---|---|"]
    for p in agg["sr"]:
        forced = p.get("forced")
        forced = ("-" if forced is None else "on none" if not forced else
                  f"**on {len(forced)} of {agg['prompts']}**: {', '.join(forced)}")
        rows.append(f"| {name_of(p)} | {p['source']} | {p['improvement']:.1f} {ci(p['improvement_ci90'])} | "
                    f"{boot(p, 'steps_vllm')} | {boot(p, 'steps')} / {boot(p, 'steps_refill')} / "
                    f"{boot(p, 'steps_paged')} | {boot(p, 'flops')} | {boot(p, 'wall_vllm')} / {boot(p, 'wall')} | "
                    f"{p['winner_fate_counts']['kept']} of {agg['prompts']} | {forced} |")
    return "\n".join(rows)


def quick_table(agg: dict, n_prompts: int) -> str:
    rows = ["| method | source | improvement [90% CI] | capped [90% CI] | x engine steps, vLLM {90% over prompts} "
            "(0.1 / 1 point less) | x steps: fixed / refilled / paged | x FLOPs | x wall: vLLM / fixed passes | "
            f"kept Best-of-{agg['n_ref']}'s winner |", "|---|---|---|---|---|---|---|---|---|"]
    for p in agg["sr"]:
        name = f"SR {p['rule']} α={p['alpha']:g}, T={p['first_decision']} (N≈{p['n']:.0f})"
        sp = lambda m: boot(p, m)  # noqa: E731
        rows.append(f"| {name} | {p['source']} | {p['improvement']:.1f} {ci(p['improvement_ci90'])} | "
                    f"{p['improvement_capped']:.1f} {ci(p['improvement_capped_ci90'])} | {boot(p, 'steps_vllm')} | "
                    f"{sp('steps')} / {sp('steps_refill')} / {sp('steps_paged')} | {sp('flops')} | "
                    f"{sp('wall_vllm')} / {sp('wall')} | {p['winner_fate_counts']['kept']} of {n_prompts} |")
    return "\n".join(rows)


REVIEW = (("paper", 0.5, 16), ("calibrated", 0.5, 16), ("paper", 0.5, 8), ("calibrated", 0.5, 8), ("paper", 0.5, 32),
          ("schedule", 0.5, 16), ("schedule", 0.5, 8), ("schedule", 0.5, 32))


def review_table(agg: dict) -> str:
    """The reviewer's table: per point the speed-up against each baseline, the oracle ceiling, the winner's fate."""
    rows = ["| SR point (raw improvement) | x engine steps, vLLM {90% over prompts} (0.1 / 1 point less) | x steps: "
            
            "fixed / refill / paged | oracle (gap) | Best-of-" + str(agg["n_ref"]) + "'s winner: kept / pruned / never drawn |",
            "|---|---|---|---|---|"]
    by = {(p["rule"], p["alpha"], p["first_decision"]): p for p in agg["sr"]}
    for key in REVIEW:
        p = by.get(key)
        if p is None:
            continue
        raw = f"{p['improvement']:.1f}" + (f"; capped {p['improvement_capped']:.1f}"
                                           if abs(p["improvement_capped"] - p["improvement"]) > 0.05 else "")
        sp = lambda m: boot(p, m)  # noqa: E731
        oracle = (f"{p['oracle_improvement']:.1f} ({p['gap_to_oracle']:.1f})" if "oracle_improvement" in p
                  else f"- (first batch > {agg['n_ref']})")
        f = p["winner_fate_counts"]
        rows.append(f"| {key[0]} α={key[1]:g} T={key[2]} ({raw}) | {boot(p, 'steps_vllm')} | {sp('steps')} / "
                    f"{sp('steps_refill')} / {sp('steps_paged')} | {oracle} | {f['kept']} / {f['pruned']} / "
                    f"{f['never_drawn']} |")
    return "\n".join(rows)


def capped(agg: dict) -> str:
    """Each point's speed-up at its capped score, against every baseline (Best-of-N's curve, raw = capped on it)."""
    from specrej.analysis.metrics import speedup

    out = []
    for p in agg["sr"]:
        if abs(p["improvement_capped"] - p["improvement"]) < 0.05:
            continue
        parts = []
        for m in ("steps_vllm", "steps_paged", "steps_refill", "steps"):
            curve = [(b[f"rel_{m}"] * agg["bon_ref"][m], b["improvement"]) for b in agg["bon"]]
            own = agg["bon_ref"][m] * p[f"rel_{m}"]
            s = speedup(curve, p["improvement_capped"], own)
            parts.append(f"{m} {x(s.value, s.lower_bound)}")
        out.append(f"{p['rule']} a={p['alpha']:g} T={p['first_decision']} capped {p['improvement_capped']:.1f}: "
                   + ", ".join(parts))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", choices=("quick", "graded", "rivals"), action="append",
                    help="which committed bench (default: all three)")
    ap.add_argument("--json", help="another bench.json, printed as quick's tables")
    ap.add_argument("--capped", action="store_true")
    a = ap.parse_args()
    paths = ({"quick": Path(a.json)} if a.json else
             {b: ROOT / "assets" / "bench" / f"{b}.json" for b in (a.bench or ("quick", "graded", "rivals"))})
    for name, path in paths.items():
        agg = json.loads(path.read_text(encoding="utf-8"))["protocol"]
        print(f"### {name} ({agg['prompts']} prompts)\n")
        if name == "quick":
            print(quick_table(agg, agg["prompts"]))
            print()
            print(review_table(agg))
        else:
            print(bench_table(agg))
        if a.capped:
            print()
            print(capped(agg))
        print()


if __name__ == "__main__":
    main()
