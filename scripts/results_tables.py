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
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


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


def point_key(p: dict) -> tuple:
    """A Speculative Rejection point's name across runs of one bench: its rule, alpha and first decision."""
    return (p["rule"], p["alpha"], p["first_decision"])


def shared_points(aggs: list[dict]) -> list[tuple]:
    """The Speculative Rejection points every run holds (not the rivals, not re-run at other seeds; a point a run
    could not simulate, e.g. quick's T = 8 with no live run, is left out), in the first run's order."""
    held = [{point_key(p) for p in agg["sr"] if not p.get("label")} for agg in aggs]
    return [point_key(p) for p in aggs[0]["sr"] if not p.get("label") and all(point_key(p) in h for h in held)]


def seeds_table(runs: dict[int, dict]) -> str:
    """The same bench at several seeds (``--seeds``): each Speculative Rejection point's speed-up against vLLM's
    schedule, with its interval over that seed's prompts, seed by seed, and the range over seeds."""
    rows = ["| SR point | " + " | ".join(f"seed {s}: improvement; x engine steps, vLLM {{90% over prompts}}"
                                          for s in runs) + " | range over seeds |",
            "|---|" + "---|" * (len(runs) + 1)]
    for key in shared_points(list(runs.values())):
        cells, values = [], []
        for agg in runs.values():
            q = next(p for p in agg["sr"] if not p.get("label") and point_key(p) == key)
            cells.append(f"{q['improvement']:.1f}; {boot(q, 'steps_vllm', less_too=False)}")
            values.append(q["speedup_steps_vllm"]["value"])
        rows.append(f"| {key[0]} α={key[1]:g}, T={key[2]} | " + " | ".join(cells)
                    + f" | {min(values):.2f}x to {max(values):.2f}x |")
    return "\n".join(rows)


def nested_weights(prompts: int, seeds: int, draws: int = 2000, seed: int = 0):
    """[draws, prompts x seeds] counts of a nested bootstrap: the prompts drawn with replacement, then for each drawn
    prompt its seeds drawn with replacement (a prompt's seeds are not independent draws of the prompt set). Unit
    (p, s) is column s x prompts + p."""
    import random

    import numpy as np

    rng = random.Random(seed)
    w = np.zeros((draws, prompts * seeds))
    for d in range(draws):
        for p in rng.choices(range(prompts), k=prompts):
            for s in rng.choices(range(seeds), k=seeds):
                w[d, s * prompts + p] += 1
    return w


def pooled(benches: list[dict], measure: str = "steps_vllm") -> list[str]:
    """Each Speculative Rejection point over every (prompt, seed) of the same bench at several seeds: the speed-up
    against Best-of-N's curve summed over all of them, with a nested bootstrap's 90% interval (prompts, then each
    drawn prompt's seeds) and the plateau's sensitivity."""
    import numpy as np

    from specrej.analysis import boot
    from specrej.analysis.curve import (bon_curve, curves_by_measure, default_ks, improvement, improvement_gains,
                                        prompt_curves)
    from specrej.analysis.metrics import speedup
    from specrej.bench.protocol import prompt_run
    from specrej.bench.run import generator_flop_model
    from specrej.core.budget import KVBudget
    from specrej.core.cost import StepCost, flops

    ids = [r["id"] for r in benches[0]["prompts"]]
    assert all([r["id"] for r in b["prompts"]] == ids for b in benches), "the same prompts at every seed"
    records = [r for b in benches for r in b["prompts"]]
    meta = benches[0]["meta"]
    runs = [prompt_run(r, flops(meta["generator_params"], 1), generator_flop_model(meta)) for r in records]
    budgets = [KVBudget(r["budget"], r["prompt_tokens"], r.get("kv_shared", True)) for r in records]
    ks = default_ks(records[0]["bon"]["n"])
    per = prompt_curves(runs, ks, [r["rows_per_pass"] for r in records], None, budgets)
    curve = curves_by_measure(bon_curve(runs, ks, [], per_prompt=per))[measure]
    bon_gains = np.array([improvement_gains([p["best"][j] for p in per], runs) for j in range(len(ks))]).T
    bon_compute = np.array([p[measure] for p in per])
    weights = nested_weights(len(ids), len(benches))
    out = []
    for key in shared_points([b["protocol"] for b in benches]):
        pts = [next(s for s in r["sr"] if not s.get("label") and point_key(s) == key) for r in records]
        bests, steps = [s["score"] for s in pts], [float(s["steps"]) for s in pts]
        imp, total = improvement(bests, runs), sum(steps)
        sp = speedup(curve, imp, total)
        b = boot.bootstrap_speedup(bon_gains, bon_compute, improvement_gains(bests, runs), steps, weights)
        less = boot.sensitivity(curve, imp, total)
        out.append(f"| {key[0]} α={key[1]:g}, T={key[2]} | {len(ids)} x "
                   f"{len(benches)} | {imp:.1f} | {x(sp.value, sp.lower_bound)} {{{b['low']:.2f}, {b['high']:.2f}}} ("
                   + " / ".join(f"{d['value']:.2f}" for d in less.values()) + ") |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", choices=("quick", "graded", "rivals"), action="append",
                    help="which committed bench (default: all three)")
    ap.add_argument("--json", help="another bench.json, printed as quick's tables")
    ap.add_argument("--capped", action="store_true")
    ap.add_argument("--seeds", nargs="+", metavar="SEED=BENCH_JSON",
                    help="a committed bench at other seeds beside its seed 0 (graded_seed1.json ...; --bench names "
                         "which: default graded)")
    a = ap.parse_args()
    if a.seeds:
        name = (a.bench or ["graded"])[0]
        benches = [json.loads((ROOT / "assets" / "bench" / f"{name}.json").read_text(encoding="utf-8"))]
        benches += [json.loads(Path(item.split("=", 1)[1]).read_text(encoding="utf-8")) for item in a.seeds]
        runs = dict(zip([0] + [int(item.split("=", 1)[0]) for item in a.seeds], [b["protocol"] for b in benches]))
        print(seeds_table(runs))
        print()
        print("| SR point, every seed pooled | prompts x seeds | improvement | x engine steps, vLLM {90%: prompts, then "
              "seeds} (0.1 / 1 point less) |")
        print("|---|---|---|---|")
        print("\n".join(pooled(benches)))
        return
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
