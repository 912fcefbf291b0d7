"""Run a rule's Speculative Rejection for real on prompts of a coupled run and compare it with its replay.

    python scripts/replay_vs_live.py quick256.json.gz --rule schedule --alpha 0.5 --first-decision 8 [ids ...]

For each prompt: the live run (fp32 when the coupled run was, n = auto at the first decision, the budget)
and the replay of the coupled run through the same method (``bench.simulate``): winner, score, decode
steps and decisions of both. Wall times are printed only as a note (not a timing).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from specrej import RunConfig, speculative_rejection
from specrej.bench.coupled import PrefixScorer, load_runs
from specrej.bench.protocol import sr_rows
from specrej.bench.simulate import simulate_sr
from specrej.methods import run_to_completion
from specrej.backends.hf import load_generator
from specrej.rewards import load_reward


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs")
    p.add_argument("ids", nargs="*", help="prompt ids (default: all)")
    p.add_argument("--rule", default="schedule")
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--first-decision", type=int, default=8)
    p.add_argument("--budget", type=int, default=2048)
    p.add_argument("--n-ref", type=int, default=128)
    p.add_argument("--reward", default="self-certainty")
    args = p.parse_args(argv)
    meta, runs = load_runs(Path(args.runs))
    lm = load_generator(meta.get("model", "embedded"), dtype=meta.get("dtype"))
    reward = load_reward(args.reward)
    for pid in args.ids or meta["ids"]:
        run = runs[meta["ids"].index(pid)]
        n0 = sr_rows(lm, args.budget, run.prompt_tokens, args.first_decision)
        sim = simulate_sr(run, PrefixScorer(lm, reward, run), budget=args.budget, alpha=args.alpha, n0=n0,
                          max_new_tokens=meta["max_new_tokens"], rule=args.rule, n_ref=args.n_ref)
        t0 = time.perf_counter()
        fin = run_to_completion(speculative_rejection(lm, reward, RunConfig(
            prompt=run.prompt, n="auto", first_decision=args.first_decision, alpha=args.alpha, budget=args.budget,
            max_new_tokens=meta["max_new_tokens"], rule=args.rule, seed=meta.get("seed", 0), progress_every=0)))
        same = fin.winner.id == sim.winner and fin.ledger.steps == sim.steps
        print(f"{pid}: n0 {n0} | live winner {fin.winner.id} ({fin.winner.score:.6f}) in {fin.ledger.steps} steps, "
              f"{fin.rounds} decisions | replay winner {sim.winner} ({sim.score:.6f}) in {sim.steps} steps, "
              f"{sim.rounds} decisions | {'same' if same else 'DIFFERENT'} "
              f"({time.perf_counter() - t0:.0f} s wall, not a timing)", flush=True)


if __name__ == "__main__":
    main()
