"""What the rivals' extra reads add to a decoding step, timed in pairs on this machine: the plain step (what
Best-of-N and Speculative Rejection decode with) against the step that also reads DeepConf's top-k
log-probabilities and the one that also reads every layer's hidden states (ST-BoN), in turn, on the same model,
dtype, threads and engine (``specrej.backends.steptime.time_paired``), which it prints. Run it on a quiet machine:

    python scripts/read_cost.py                      # the embedded model, fp32, 4/8/16 rows, ~50-token context
    python scripts/read_cost.py --rows 4 8 16 32 --steps 12 --repeats 3

For each batch size: the median over the paired steps of (read step / plain step), its spread (the quartiles),
and the ratio of the fastest of each; ``steptime.measure(reads=...)`` keeps the median (at least 1: ``StepCost.reads``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROMPT = ("Explain in a few sentences why the sky looks blue on a clear day, and why sunsets look red or orange; "
          "keep it simple enough for a curious ten-year-old to follow.")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--rows", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--steps", type=int, default=10, help="paired steps per engine per repeat")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--prompt", default=PROMPT)
    p.add_argument("--threads", type=int, help="torch threads (default: torch's default here)")
    p.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                   help="wall: seconds as they pass; cpu: the process's CPU seconds (with --threads 1, the work "
                        "alone, a shared machine's waits left out)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)

    import time

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    from specrej.backends.hf import load_generator
    from specrej.backends.steptime import RIVAL_READS, time_paired

    lm = load_generator(args.model, dtype=args.dtype)
    ids = lm.render(args.prompt)
    eng = lm.backend(lm, ids, sampling=__import__("specrej.backends", fromlist=["Sampling"]).Sampling(), seed=0,
                     n_total=1, max_new_tokens=4, stats=False)
    setup = {"model": lm.name, "dtype": str(lm.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
             "engine": f"{eng.name} ({eng.step_kind} step, prompt cache {eng.kv_sharing})", "context": len(ids),
             "clock": args.clock,
             "load": os.getloadavg()[0], "reads": list(RIVAL_READS)}
    eng.release()
    print("both sides: " + ", ".join(f"{k} {v}" for k, v in setup.items()), flush=True)
    out = {"setup": setup, "rows": {}}
    for rows in args.rows:
        pairs: dict[str, list[float]] = {k: [] for k in RIVAL_READS}
        fastest: dict[str, list[float]] = {k: [] for k in ("",) + RIVAL_READS}
        for _ in range(args.repeats):
            t = time_paired(lm, ids, rows, args.steps, RIVAL_READS, clock=clock)
            for k in RIVAL_READS:
                pairs[k] += [a / b for a, b in zip(t[k], t[""])]
            for k in fastest:
                fastest[k] += t[k]
        plain = min(fastest[""])
        row = {"plain_ms": 1e3 * plain}
        for k in RIVAL_READS:
            q = statistics.quantiles(pairs[k], n=4)
            row[k] = {"median_ratio": statistics.median(pairs[k]), "q1": q[0], "q3": q[2], "pairs": len(pairs[k]),
                      "fastest_ratio": min(fastest[k]) / plain}
        out["rows"][rows] = row
        print(f"{rows:4d} rows: plain {row['plain_ms']:.1f} ms; " + "; ".join(
            f"{k}: median {row[k]['median_ratio']:.3f}x (quartiles {row[k]['q1']:.3f}-{row[k]['q3']:.3f}, "
            f"{row[k]['pairs']} pairs), fastest/fastest {row[k]['fastest_ratio']:.3f}x" for k in RIVAL_READS),
            flush=True)
    out["load_after"] = os.getloadavg()[0]
    print(f"load average {setup['load']:.2f} before, {out['load_after']:.2f} after (a shared machine)")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
