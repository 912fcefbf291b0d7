"""``python -m specrej.bench``: the command line, sharding across processes, and the outputs."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

MODES = {
    # finishes in a few minutes on a 2-core CPU with the embedded models
    "quick": dict(prompts="quick", ns=[4, 8, 16, 32], alphas=[0.5, 0.8], max_new_tokens=48,
                  engine_rows=32, engine_length=32, sweep=[1, 8, 32, 128], repeats=2),
    # for bigger machines (a GPU, where the budget comes from free memory)
    "full": dict(prompts="default", ns=[4, 8, 16, 32, 64, 128], alphas=[0.5, 0.75, 0.9], max_new_tokens=128,
                 engine_rows=64, engine_length=128, sweep=[1, 8, 32, 128, 512], repeats=2),
}


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m specrej.bench",
        description="Speculative Rejection vs Best-of-N: the paper's efficiency metrics, and the engine's speed. "
                    "Under `accelerate launch` (or torchrun) prompts are sharded across processes.")
    p.add_argument("--quick", action="store_true", help="the quick mode (default: full): " + json.dumps(MODES["quick"]))
    p.add_argument("--prompts", help="prompt set name in assets/prompts (default, quick) or a .json/.jsonl file")
    p.add_argument("--limit", type=int, help="use only the first LIMIT prompts")
    p.add_argument("--ns", type=_ints, help="comma-separated N of the Best-of-N curve; the largest is the reference")
    p.add_argument("--alphas", type=_floats, help="comma-separated rejection rates for Speculative Rejection")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--budget", type=int, help="KV-cache slots both methods obey (default: the library's auto)")
    p.add_argument("--decision", default="budget", choices=["budget", "interval"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="embedded", help="generator: embedded, a hub id, a folder or a .gguf file")
    p.add_argument("--reward", default="embedded", help="reward spec, as the library's load_reward takes it")
    p.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default=None,
                   help="generator precision (default: SPECREJ_DTYPE, else auto: bf16 where faster)")
    p.add_argument("--out", default="bench_out", help="output folder (bench.json, bench.html, bench.png)")
    p.add_argument("--threads", type=int, help="torch threads per process (default: the idle cores / processes)")
    p.add_argument("--engine-rows", type=int, help="rows for the engine-speed comparison")
    p.add_argument("--engine-length", type=int, help="new tokens for the engine-speed comparison")
    p.add_argument("--sweep", type=_ints, help="batch sizes of the one-step decode sweep")
    p.add_argument("--repeats", type=int, help="engine-speed runs of each kind (the fastest counts)")
    sec = p.add_mutually_exclusive_group()
    sec.add_argument("--no-engine", action="store_true", help="skip the engine-speed section")
    sec.add_argument("--engine-only", action="store_true", help="run only the engine-speed section")
    return p


def auto_threads(processes: int) -> int:
    """Cores not already busy (1-minute load average), split between this run's processes."""
    cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        busy = 0.0
    free = cores - int(busy + 0.5) if busy >= 1 else cores
    return max(1, min(cores, free) // max(1, processes))


def _state():
    """accelerate's PartialState when launched as several processes, else a single-process stand-in."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch
        from accelerate import PartialState
        return PartialState(cpu=not torch.cuda.is_available())
    return argparse.Namespace(process_index=0, num_processes=1, is_main_process=True)


def main(argv: list[str] | None = None) -> dict | None:
    args = parser().parse_args(argv)
    mode = MODES["quick" if args.quick else "full"]
    for key, value in mode.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if len(args.ns) < 2 or min(args.ns) < 1:
        raise SystemExit("--ns needs at least two positive N values (the curve and its reference).")
    if any(not 0 <= a < 1 for a in args.alphas):
        raise SystemExit("--alphas must lie in [0, 1).")

    started = time.perf_counter()
    state = _state()
    import torch
    threads = args.threads or auto_threads(state.num_processes)
    torch.set_num_threads(threads)

    from ..budget import BudgetError, check_fits, resolve_budget
    from ..config import RunConfig
    from ..models import load_generator
    from ..rewards import load_reward
    from .efficiency import aggregate, load_prompts, run_prompt
    from .engine_speed import engine_section
    from .report import efficiency_table, engine_table, figure, write_png

    rank, world, main_proc = state.process_index, state.num_processes, state.is_main_process
    prompts = load_prompts(args.prompts)[: args.limit or None]
    lm = load_generator(args.model, dtype=args.dtype)
    reward = load_reward(args.reward)
    base = RunConfig(prompt="-", n=max(args.ns), max_new_tokens=args.max_new_tokens, seed=args.seed,
                     budget=args.budget, decision=args.decision, progress_every=0)
    budget = resolve_budget(base, lm)
    meta = {"mode": "quick" if args.quick else "full", "prompt_set": args.prompts, "model": args.model,
            "reward": args.reward, "ns": sorted(args.ns), "alphas": args.alphas, "max_new_tokens": args.max_new_tokens,
            "budget": budget, "decision": args.decision, "seed": args.seed, "processes": world,
            "threads_per_process": threads, "device": str(lm.device), "generator_params": lm.n_params,
            "dtype": str(lm.dtype).replace("torch.", ""), "kv_sharing": "shared" if lm.shares_prefix else "copied",
            "reward_params": reward.n_params, "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "load_average_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "torch": torch.__version__, "command": " ".join(["python -m specrej.bench", *(argv or sys.argv[1:])]),
            "compute_accounting": (
                "Best-of-k = candidates 0..k-1 of one Best-of-N_max run: generator FLOPs 2 x params x (prompt + "
                "their tokens), reward FLOPs by their share of tokens, wall time by their share of FLOPs. SR and "
                "the reference are measured ledgers. Relative compute = sum over prompts / reference's sum.")}

    records: list[dict] = []
    if not args.engine_only:
        mine = list(enumerate(prompts))[rank::world]
        for _, row in mine:   # fail before hours of work, with the fix in the message
            try:
                check_fits(replace(base, prompt=row["prompt"]), len(lm.render(row["prompt"])), budget,
                           lm.max_positions, lm.shares_prefix)
            except BudgetError as e:
                raise SystemExit(f"prompt {row['id']}: {e} (set --budget, or lower --ns / --max-new-tokens)")
        from tqdm.auto import tqdm
        bar = tqdm(total=len(mine) * (1 + len(args.alphas)), desc=f"bench {rank + 1}/{world}" if world > 1 else "bench",
                   position=rank, file=sys.stderr, dynamic_ncols=True, mininterval=1.0)
        for i, row in mine:
            def tick(label, row=row):
                bar.set_postfix_str(f"{row['id']} {label}")
                bar.update(1)
            records.append({"order": i, **run_prompt(lm, reward, row, base, args.ns, args.alphas, tick)})
        bar.close()
        if world > 1:
            from accelerate.utils import gather_object
            records = gather_object(records)
        records.sort(key=lambda r: r["order"])
    if not main_proc:
        return None

    result: dict = {"meta": meta, "prompts": records}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = []
    if records:
        agg = aggregate(records, args.ns, args.alphas)
        result["efficiency"] = agg
        text.append(efficiency_table(agg, meta))
        title = (f"Speculative Rejection vs Best-of-N: {agg['prompts']} prompts, {args.model} generator, "
                 f"{args.reward} reward, N={agg['n_max']}, budget {budget}")
        figure(agg, title).write_html(out / "bench.html", include_plotlyjs=True)
        if not write_png(agg, title, out / "bench.png"):
            print("note: matplotlib is not installed, so no bench.png (the HTML figure is written).", file=sys.stderr)
    if not args.no_engine:
        log = lambda msg: print(f"[engine] {msg}", file=sys.stderr, flush=True)  # noqa: E731
        result["engine"] = engine_section(lm, reward, prompts[0]["prompt"], base, rows=args.engine_rows,
                                          length=args.engine_length, sweep=args.sweep,
                                          repeats=args.repeats, log=log)
        text.append(engine_table(result["engine"]))
    meta["wall_s"] = time.perf_counter() - started
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    print("\n\n".join(text))
    print(f"\nwrote {out / 'bench.json'}" + (f", {out / 'bench.html'}, {out / 'bench.png'}" if records else "")
          + f" in {meta['wall_s']:.0f} s")
    return result
