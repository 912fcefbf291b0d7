"""The live defaults, measured: race settings -> decisions, pruned share, time, rewards, speed-up.

    python scripts/defaults_table.py                       # the page's defaults on every example prompt
    python scripts/defaults_table.py --set max_new_tokens=64 --set budget=576 --prompts 1

Each race runs through the library in the main thread (as ``python -m specrej`` does) with the
page's request (``RunRequest``: Speculative Rejection starts with ``auto``), on the embedded models
and the default reward. Prints one markdown row per prompt; run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    from components.session.context import AppContext, get_models
    from components.session.stream import RunRequest
    from specrej.arms import race_arms
    from specrej.compare import Tally

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from app_cost import _value

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a RunRequest field, e.g. n=16")
    p.add_argument("--prompts", type=int, default=None, help="only the first K example prompts")
    args = p.parse_args(argv)
    ctx = AppContext.from_env()
    lm, reward = get_models(*ctx.resolve(ctx.default_model, ctx.default_reward, ctx.default_preference))
    settings = {k.strip(): _value(v.strip()) for k, _, v in (s.partition("=") for s in args.set)}
    print("| prompt | SR opens with | decisions (at token) | pruned | race s (SR + BoN) | reward SR / BoN "
          "| wall | compute |")
    print("|---|---:|---|---:|---:|---:|---|---|")
    for prompt in ctx.examples[:args.prompts]:
        req = RunRequest(prompt=prompt, model=ctx.default_model, reward=ctx.default_reward,
                         preference=ctx.default_preference, **settings)
        cfg, arms = req.config(0), req.arms(ctx.arms)
        tally, start = Tally(), time.perf_counter()
        for event in race_arms(lm, reward, cfg, arms):
            tally.add(event)
        seconds = time.perf_counter() - start
        base, sr = arms[0].id, arms[1].id
        c = tally.compare_all(base)[sr]
        fin = tally.finished[sr]
        decided = [r for r in tally.rounds.get(sr, []) if r.n_pruned]
        pruned = sum(x.status == "pruned" for x in fin.candidates)
        print(f"| {prompt[:40]} | {len(fin.candidates)} | {len(decided)} ({', '.join(str(r.position) for r in decided)}) "
              f"| {pruned / len(fin.candidates):.0%} | {seconds:.1f} ({fin.ledger.wall_s:.1f} + "
              f"{tally.finished[base].ledger.wall_s:.1f}) | {c.reward:.3f} / {c.baseline_reward:.3f} "
              f"| {c.wall.words()} | {c.flops.words()} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
