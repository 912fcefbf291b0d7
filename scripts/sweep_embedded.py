"""The sweep of docs/library.md on the embedded pair (SmolLM2-135M-Instruct, the preference reward):

    python scripts/sweep_embedded.py --out /tmp/sweep.jsonl          # 3 prompts x 3 seeds x 2 alphas, resumable
    python scripts/sweep_embedded.py --out /tmp/sweep2.jsonl         # the same sweep again, to compare wall ratios

Prints the machine (CPU, cores, the load before and after), the summary table (``specrej.sweep``: geometric-mean
speed-ups with 90% bootstrap intervals over prompts and seeds) and how many races ran on a busy machine. Decoding
steps and FLOPs do not depend on the load; wall time does: time on a quiet machine (``uptime``).
"""
from __future__ import annotations

import argparse
import os
import time

PROMPTS = ["Give me three tips for staying healthy.", "Explain how a rainbow forms.", "Write a haiku about the sea."]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the sweep's rows (JSONL; a rerun resumes)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.5, 0.75])
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--budget", type=int, default=448)
    p.add_argument("--dtype", default=None)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's); 1 on a shared machine: two threads on a busy 2-core "
                        "machine collapse (docs/performance.md, scripts/thread_collapse.py)")
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    import specrej
    from specrej.origin import cores, cpu_name

    load0 = os.getloadavg()
    t0 = time.perf_counter()
    s = specrej.sweep(PROMPTS, "embedded", "embedded", {"n": args.n, "max_new_tokens": args.max_new_tokens,
                                                        "budget": args.budget},
                      ["bon", "sr"], seeds=args.seeds, alphas=args.alphas, out=args.out, dtype=args.dtype)
    load1 = os.getloadavg()
    prov = s.rows[0]["provenance"]
    print(f"CPU {cpu_name()}, {cores()} cores; load {load0[0]:.2f} before, {load1[0]:.2f} after; "
          f"{time.perf_counter() - t0:.0f} s; {prov['torch_threads']} torch threads; dtype {prov['dtype']}; step {s.rows[0]['arms']['bon']['step']}; "
          f"generator sha256 {prov['weights']['generator']['sha256'][:12]}")
    print(s.table())


if __name__ == "__main__":
    main()
