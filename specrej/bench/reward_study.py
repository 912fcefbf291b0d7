"""Which reward? For each reward kind: how the Best-of-N curve rises with N, and how partial
rewards predict final ones as the decision comes later. Plus Speculative Rejection replayed
offline (``simulate``) at a few budgets, alphas and first decisions, to choose the bench's defaults.

Two steps, so the model runs once and every reward reads the same candidates:

    python -m specrej.bench.reward_study collect --out study.json.gz [--prompts P --limit 5 --n 128 --max-new-tokens 256]
    python -m specrej.bench.reward_study analyse study.json.gz [--rewards preference,sentiment,confidence,self-certainty]

Nothing here is a timing: the numbers are rewards, ranks and counts (tokens, decode steps), so a
loaded machine does not change them. The simulated Speculative Rejection numbers are a
cross-check of the real methods, labelled as simulated wherever they are shown.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

STUDY_PROMPTS = ["advice-03", "explanation-04", "creative-05", "coding-06", "factual-07"]
DECISION_LENGTHS = [8, 16, 32, 64, 128]
REWARD_KINDS = ["preference", "sentiment", "confidence", "self-certainty"]


def collect_main(args) -> None:
    import torch

    from ..core.config import RunConfig
    from ..backends.hf import load_generator
    from .coupled import collect, save_runs
    from .prompts import load_prompts

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = load_prompts(args.prompts)
    if args.ids:
        wanted = args.ids.split(",")
        rows = [r for r in rows if r["id"] in wanted]
    rows = rows[: args.limit or None]
    lm = load_generator(args.model, dtype=args.dtype)
    runs = []
    for row in rows:
        t0 = time.perf_counter()
        cfg = RunConfig(prompt=row["prompt"], n=args.n, max_new_tokens=args.max_new_tokens, seed=args.seed)
        runs.append(collect(lm, cfg))
        print(f"[collect] {row['id']}: {args.n} x <= {args.max_new_tokens} tokens in "
              f"{time.perf_counter() - t0:.0f} s (loaded machine: not a timing)", file=sys.stderr, flush=True)
        save_runs(runs, Path(args.out), {"model": args.model, "dtype": args.dtype, "n": args.n,
                                         "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                                         "ids": [r["id"] for r in rows[: len(runs)]]})


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specrej.bench.reward_study", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="one coupled Best-of-N run per prompt, kept whole")
    c.add_argument("--out", required=True)
    c.add_argument("--prompts", default="default")
    c.add_argument("--ids", default=",".join(STUDY_PROMPTS), help="comma-separated prompt ids ('' = all)")
    c.add_argument("--limit", type=int)
    c.add_argument("--n", type=int, default=128)
    c.add_argument("--max-new-tokens", type=int, default=256)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--model", default="embedded")
    c.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32", help="fp32: exact coupling")
    c.add_argument("--threads", type=int)
    a = sub.add_parser("analyse", help="curves, rank correlations and simulated SR per reward kind")
    a.add_argument("data")
    a.add_argument("--rewards", default=",".join(REWARD_KINDS))
    a.add_argument("--budgets", default="2048,4096")
    a.add_argument("--alphas", default="0.5,0.7,0.9")
    a.add_argument("--first-decisions", default="16,32,64")
    a.add_argument("--json", help="write every number here")
    return p


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    if args.cmd == "collect":
        collect_main(args)
    else:
        analyse_main(args)


def analyse_run(lm, reward, runs, *, ks, budgets, alphas, first_decisions, max_new_tokens) -> dict:
    """Curve, rank correlations and simulated Speculative Rejection for one reward on the collected runs."""
    from ..analysis.curve import PromptRun, bon_curve, curves_by_measure, improvement, speedups
    from .coupled import PrefixScorer, partial_spearman
    from ..core.budget import KVBudget
    from ..core.cost import flops
    from .simulate import simulate_sr

    scorers = [PrefixScorer(lm, reward, r) for r in runs]
    finals = [s.final() for s in scorers]
    gen_flops = flops(lm.n_params, 1)
    prompt_runs = [PromptRun(f, r.lengths(), r.prompt_tokens, gen_flops) for f, r in zip(finals, runs)]
    curve = bon_curve(prompt_runs, ks, [runs[0].n] * len(runs))
    out = {"reward": reward.name, "curve": [{"k": row["k"], "improvement": row["improvement"]} for row in curve],
           "spearman": [], "simulated": []}
    for t in DECISION_LENGTHS:
        rhos = partial_spearman(runs, scorers, t)
        out["spearman"].append({"t": t, "mean": sum(rhos) / len(rhos) if rhos else None, "prompts": len(rhos)})
    for budget in budgets:
        rpp = [KVBudget(budget, r.prompt_tokens, True).rows_per_pass(None, max_new_tokens) for r in runs]
        bon = bon_curve(prompt_runs, sorted(set(ks) | set(range(1, runs[0].n + 1))), rpp)
        by = curves_by_measure(bon)
        by["tokens"] = [(row["tokens"], row["improvement"]) for row in bon]
        for first in first_decisions:
            for alpha in alphas:
                sims = []
                for s, r in zip(scorers, runs):
                    n0 = min(r.n, max(1, KVBudget(budget, r.prompt_tokens, True).auto_n(first)))
                    sims.append(simulate_sr(r, s, budget=budget, alpha=alpha, n0=n0, max_new_tokens=max_new_tokens))
                imp = improvement([x.score for x in sims], prompt_runs)
                method = {"steps": sum(x.steps for x in sims), "tokens": sum(x.generated_tokens for x in sims),
                          "flops": sum(x.flops(r.prompt_tokens, lm.n_params, reward.n_params)
                                       for x, r in zip(sims, runs))}
                sp = speedups(by, imp, method)
                out["simulated"].append({
                    "budget": budget, "first_decision_asked": first, "alpha": alpha,
                    "n0": sum(x.n0 for x in sims) / len(sims),
                    "first_decision": sum(x.first_decision or 0 for x in sims) / len(sims),
                    "improvement": imp, "rows_per_pass": sum(rpp) / len(rpp),
                    "kept_bon_winner": sum(x.kept_bon_winner for x in sims) / len(sims),
                    **{f"speedup_{m}": {"value": v.value, "lower_bound": v.lower_bound} for m, v in sp.items()}})
    return out


def _sp(d: dict | None) -> str:
    return "-" if not d else (">=" if d["lower_bound"] else "") + f"{d['value']:.1f}x"


def table(res: dict) -> str:
    lines = [f"== reward {res['reward']}",
             "  Best-of-k (order statistics): " + "  ".join(
                 f"k={row['k']}: {row['improvement']:.1f}" for row in res["curve"]),
             "  Spearman(partial at t, final), live at t: " + "  ".join(
                 f"t={row['t']}: " + ("-" if row["mean"] is None else f"{row['mean']:.2f}") for row in res["spearman"]),
             "  SIMULATED Speculative Rejection (n=auto, capped at the recorded N; speed-up at equal improvement):",
             f"    {'budget':>7}{'T asked':>8}{'alpha':>6}{'n0':>6}{'1st dec':>8}{'improv':>8}{'kept win':>9}"
             f"{'steps':>9}{'tokens':>9}{'FLOPs':>9}"]
    for s in res["simulated"]:
        lines.append(f"    {s['budget']:>7}{s['first_decision_asked']:>8}{s['alpha']:>6.1f}{s['n0']:>6.0f}"
                     f"{s['first_decision']:>8.1f}{s['improvement']:>8.1f}{s['kept_bon_winner']:>9.0%}"
                     f"{_sp(s.get('speedup_steps')):>9}{_sp(s.get('speedup_tokens')):>9}{_sp(s.get('speedup_flops')):>9}")
    return "\n".join(lines)


def analyse_main(args) -> None:
    import torch

    from ..backends.hf import load_generator
    from ..rewards import load_reward
    from .coupled import load_runs

    meta, runs = load_runs(Path(args.data))
    lm = load_generator(meta["model"])
    if meta.get("dtype") == "bf16":
        lm.model.to(torch.bfloat16)   # the confidence rewards read statistics kept in the run; text is decoded
    n = runs[0].n
    ks = sorted({k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if k <= n} | {n})
    results = []
    for kind in [k for k in args.rewards.split(",") if k]:
        reward = load_reward(kind)
        res = analyse_run(lm, reward, runs, ks=ks, budgets=[int(b) for b in args.budgets.split(",")],
                          alphas=[float(a) for a in args.alphas.split(",")],
                          first_decisions=[int(t) for t in args.first_decisions.split(",")],
                          max_new_tokens=meta["max_new_tokens"])
        results.append(res)
        print(table(res), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))


if __name__ == "__main__":
    main()
