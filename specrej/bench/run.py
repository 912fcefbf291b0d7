"""``python -m specrej.bench``: the command line, sharding across processes, and the outputs."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..backends import BACKENDS
from ..core.cost import FlopModel, flop_model_of

MODES = {
    # 12 prompts in fp32 (exact coupling), shared prompt cache. Budget 2048: Best-of-N fits 7 rows at 256
    # tokens; Speculative Rejection opens with ~125 rows at 16 tokens. Every point of each rule (the paper's,
    # the calibrated one and the schedule, the best rule for a weak early signal: docs/results.md) is replayed
    # by the simulator from the coupled Best-of-128 run; 0.5@16 of each rule also runs for real (wall time,
    # and a check of the simulator), and so does 0.5@8 (its ~250-row first batch exceeds the 128 coupled
    # candidates). The cost is the 12 coupled runs and 72 real SR runs.
    "quick": dict(prompts="quick", n_ref=128, max_new_tokens=256, budget=2048, reward="self-certainty",
                  points="0.5@16,0.7@16,0.9@16,0.5@8,0.5@32", rules="paper,calibrated,schedule", live="0.5@16",
                  dtype="fp32", engine_rows=32, engine_length=32, sweep=[1, 8, 32, 128], repeats=2,
                  rivals="deepconf deepconf:conf_percentile=10 stbon", rivals_live="stbon"),
    # for a GPU (shard with `accelerate launch`): the paper's proportions. Budget = 120 rows at full length
    # (Best-of-120 fits one device, as in the paper), so Speculative Rejection opens with ~3800 rows at 16
    # tokens and Best-of-1024 needs 9 passes.
    "full": dict(prompts="default", n_ref=1024, max_new_tokens=512, budget=120 * 512 + 64, reward="self-certainty",
                 points="0.5@8,0.7@8,0.9@8,0.5@16,0.7@16,0.9@16,0.5@32,0.7@32,0.9@32,0.5@64,0.7@64,0.9@64",
                 rules="paper,calibrated", live="all", dtype="fp32", engine_rows=64, engine_length=128, sweep=[1, 8, 32, 128, 512], repeats=2,
                 rivals="deepconf deepconf:conf_percentile=10 stbon", rivals_live="stbon"),
}


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parse_points(s: str) -> list[tuple[float, int]]:
    """'0.5@16,0.9@8' -> [(0.5, 16), (0.9, 8)]: Speculative Rejection's (alpha, first decision) points."""
    out = []
    for part in (p.strip() for p in s.split(",")):
        if not part:
            continue
        alpha, sep, first = part.partition("@")
        try:
            point = (float(alpha), int(first))
        except ValueError:
            point = None
        if not sep or point is None or not 0 <= point[0] < 1 or point[1] < 1:
            raise SystemExit(f"--points: {part!r} is not alpha@first_decision (alpha in [0, 1), first decision "
                             "a positive number of tokens), e.g. 0.5@16.")
        out.append(point)
    if not out:
        raise SystemExit("--points names no point, e.g. 0.5@16,0.9@16.")
    return out


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m specrej.bench",
        description="Speculative Rejection vs Best-of-N by the paper's protocol (SR opens with the batch that fills "
                    "memory at its first decision; Best-of-N's whole curve by order statistics; speed-ups in decode "
                    "steps, FLOPs and wall time), and the engine's speed. Under `accelerate launch` (or torchrun) "
                    "prompts are sharded across processes.")
    p.add_argument("--quick", action="store_true", help="the quick mode (default: full): " + json.dumps(MODES["quick"]))
    p.add_argument("--prompts", help="bundled prompt set name (default, quick: specrej/data/prompts) or a .json/.jsonl file")
    p.add_argument("--limit", type=int, help="use only the first LIMIT prompts")
    p.add_argument("--n-ref", type=int, help="Best-of-N's largest N: the reference and the top of its curve")
    p.add_argument("--points", help="Speculative Rejection's points, alpha@first_decision, comma-separated "
                                    "(its N fills the budget at the first decision)")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--budget", type=int, help="KV-cache slots both methods obey")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="embedded", help="generator: embedded, a hub id, a folder or a .gguf file")
    p.add_argument("--reward", help="reward spec, as the library's load_reward takes it")
    p.add_argument("--rules", help="rejection rules to compare, comma-separated (specrej.core.rules; 'paper' is the "
                                   "reference and always included)")
    p.add_argument("--live", help="points that also run for real (wall time, drift, a check of the simulator), "
                                  "alpha@first_decision comma-separated, 'all', or 'none'; the rest are simulated from the "
                                  "coupled run")
    from ..arms import rival_keys

    p.add_argument("--rivals", help="rival arms on Best-of-N_ref's candidates, space-separated arm specs of the "
                                    f"registered rivals ({', '.join(rival_keys())}; e.g. 'deepconf deepconf:conf_percentile=10 "
                                    "stbon'; 'none' for none): replayed from the coupled run, each in its own schedule "
                                    "(DeepConf refilled and in passes)")
    p.add_argument("--rivals-live", help="rival specs that also run for real (space-separated; 'none')")
    p.add_argument("--backend", choices=list(BACKENDS), default=None,
                   help="inference engine: transformers (default) or vllm (default: SPECREJ_BACKEND)")
    p.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default=None,
                   help="generator precision (default fp32: exact coupling; bf16 reports the candidates that drift)")
    p.add_argument("--wall-note", default="", help="how the machine was loaded while wall times were taken "
                                                  "(stored in the json's meta and printed under the table)")
    p.add_argument("--gpu-steps", default=None,
                   help="scripts/gpu_check.py's JSON (a file or a folder of them; default: the checkout's assets/gpu): "
                        "also price the decode steps on the GPU step measured for this generator, if one is there "
                        "(with --from: default the one the run priced with, none if it had none)")
    p.add_argument("--out", default="bench_out", help="output folder (bench.json, bench.png)")
    p.add_argument("--from", dest="source", metavar="BENCH_JSON",
                   help="no model: recompute a bench.json's summary, table and figure from its own per-prompt "
                        "numbers with this code (how every committed table in docs/results.md is regenerated)")
    p.add_argument("--threads", type=int, help="torch threads per process (default: the idle cores / processes)")
    p.add_argument("--engine-rows", type=int, help="rows for the engine-speed comparison")
    p.add_argument("--engine-length", type=int, help="new tokens for the engine-speed comparison")
    p.add_argument("--sweep", type=_ints, help="batch sizes of the one-step decode sweep")
    p.add_argument("--repeats", type=int, help="engine-speed runs of each kind (the fastest counts)")
    sec = p.add_mutually_exclusive_group()
    sec.add_argument("--no-engine", action="store_true", help="skip the engine-speed section")
    sec.add_argument("--engine-only", action="store_true", help="run only the engine-speed section")
    return p


def busy_cores(window: float = 1.0) -> float:
    """Cores busy right now: /proc/stat's idle share over ``window`` seconds (Linux), else the 1-minute
    load average (which still counts, for a minute, a process that has just ended)."""
    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        return sum(cpu), cpu[3] + (cpu[4] if len(cpu) > 4 else 0)   # total, idle + iowait
    try:
        t0, i0 = read()
        time.sleep(window)
        t1, i1 = read()
        return (os.cpu_count() or 1) * (1.0 - (i1 - i0) / max(1, t1 - t0))
    except (OSError, ValueError, IndexError):
        try:
            return os.getloadavg()[0]
        except OSError:
            return 0.0


def auto_threads(processes: int, busy: float | None = None) -> int:
    """Cores not already busy, split between this run's processes."""
    cores = os.cpu_count() or 1
    busy = busy_cores() if busy is None else busy
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


_ASSETS_GPU = Path(__file__).resolve().parents[2] / "assets" / "gpu"


def _gpu_step(where: str | None, params: int):
    """The GPU step measured for a generator of ``params`` parameters (``specrej.analysis.gpu_steps.pick``) in ``where``
    (a JSON or a folder; default: the checkout's ``assets/gpu``), or None."""
    from ..analysis import gpu_steps

    path = Path(where) if where else _ASSETS_GPU
    try:
        steps = gpu_steps.read(path) if path.is_file() else gpu_steps.load(path)
    except ValueError as e:
        raise SystemExit(f"--gpu-steps: {e}")
    picked = gpu_steps.pick(steps, params)
    if where and picked is None:
        print(f"note: --gpu-steps {where}: no GPU measurement of a {params:,}-parameter generator there (a dry "
              "run's are skipped).", file=sys.stderr)
    return picked


def recompute(source: Path, out: Path, gpu_steps: str | None = None) -> dict:
    """A bench.json's summary, protocol table and figure recomputed from its own per-prompt numbers (every
    candidate's score and length, each point's steps, FLOPs and wall time, the measured passes) with the analysis
    code of this checkout; nothing is run again. The GPU step it prices with is the one the run used (``meta``'s
    ``gpu_step``: a file of ``assets/gpu``; none for a run that had none), unless ``gpu_steps`` names another
    (``--gpu-steps``). Writes ``out/bench.json`` and ``out/bench.png``."""
    from ..core.cost import StepCost
    from .protocol import aggregate, summary
    from .report import paper_png, paper_table

    try:
        result = json.loads(Path(source).read_text(encoding="utf-8"))
        meta, records, passes = result["meta"], result["prompts"], result.get("step_passes") or []
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"--from {source}: not a bench.json ({type(e).__name__}: {e})")
    if not records:
        raise SystemExit(f"--from {source}: no prompt results to recompute (an --engine-only run?)")
    if gpu_steps is None:   # the GPU step the run priced with (its file in assets/gpu), none where it had none
        used = meta.get("gpu_step")
        gpu = _gpu_step(str(_ASSETS_GPU / used), meta["generator_params"]) if used else None
    else:
        gpu = _gpu_step(gpu_steps, meta["generator_params"])
    gen_flops = generator_flop_model(meta)
    if gen_flops is not None:
        meta["generator_flop_model"] = dataclasses.asdict(gen_flops)
    agg = aggregate(records, gen_params=meta["generator_params"],
                    step_model=StepCost.from_passes(passes) if passes else None, gpu=gpu, gen_flops=gen_flops)
    result["protocol"], result["summary"] = agg, summary(agg)
    meta["recomputed"] = {"from": str(source), "by": "python -m specrej.bench --from",
                          "at": time.strftime("%Y-%m-%d", time.gmtime())}
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    title = (f"Speculative Rejection vs Best-of-N: {agg['prompts']} prompts, {meta['model']}, reward {meta['reward']}, "
             f"{meta['max_new_tokens']} tokens, budget {meta['budget']} slots; SR opens with the batch that fills it")
    paper_png(agg, title, out / "bench.png")
    print(paper_table(agg, meta))
    print(f"\nwrote {out / 'bench.json'}, {out / 'bench.png'} (recomputed from {source})")
    return result


# The embedded generator's FLOPs (SmolLM2-135M-Instruct, read off the loaded model: 134,515,008 parameters, of which
# the tied 49,152 x 576 embedding is 28,311,552; 30 layers, width 576; tests/test_flops.py checks it where the
# embedded wheel is installed): what --from recounts an older bench.json made before the meta kept its own.
EMBEDDED_FLOPS = FlopModel(106_203_456, 30, 576)


def generator_flop_model(meta: dict) -> FlopModel | None:
    """The generator's ``core.cost.FlopModel`` a bench.json was made with (``meta["generator_flop_model"]``), the
    embedded generator's for an older file of it, else None (its FLOPs as recorded)."""
    own = meta.get("generator_flop_model")
    if own:
        return FlopModel(**own)
    if meta.get("model") == "embedded" and meta.get("generator_params") == 134_515_008:
        return EMBEDDED_FLOPS
    return None


def main(argv: list[str] | None = None) -> dict | None:
    args = parser().parse_args(argv)
    if args.source:
        return recompute(Path(args.source), Path(args.out), args.gpu_steps)
    mode = MODES["quick" if args.quick else "full"]
    for key, value in mode.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    points = parse_points(args.points)
    live = (None if args.live.strip().lower() == "all" else
            () if args.live.strip().lower() == "none" else tuple(parse_points(args.live)))
    rules = tuple(dict.fromkeys(["paper"] + [r.strip() for r in args.rules.split(",") if r.strip()]))
    from ..core.rules import RULES
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        raise SystemExit(f"--rules: {', '.join(unknown)} unknown; choose from {', '.join(RULES)}.")
    rivals = tuple(x for x in (args.rivals or "").split() if x.lower() != "none")
    rivals_live = tuple(x for x in (args.rivals_live or "").split() if x in rivals)
    from ..arms import ArmSpecError, parse_arm, rival_keys
    for spec in rivals:
        try:
            if not parse_arm(spec).kind.about.rival:
                raise SystemExit(f"--rivals: {spec!r} is not a rival (a method that decides on its own signal: "
                                 f"{', '.join(rival_keys())}).")
        except ArmSpecError as e:
            raise SystemExit(f"--rivals: {e}")
    if args.n_ref < 2:
        raise SystemExit("--n-ref must be at least 2 (Best-of-N's curve runs from 1 to it).")

    started = time.perf_counter()
    state = _state()
    import torch
    threads = args.threads or auto_threads(state.num_processes)
    torch.set_num_threads(threads)

    from ..core.budget import BudgetError, KVBudget, sharing
    from ..core.config import RunConfig
    from ..backends import load_lm
    from ..rewards import load_reward
    from .coupled import save_runs
    from .prompts import load_prompts
    from .engine_speed import engine_section
    from ..core.cost import StepCost
    from .protocol import aggregate, measure_pass, run_prompt, summary
    from .report import engine_table, paper_png, paper_table
    from ..origin import Clock, busy_words, package_version, provenance

    rank, world, main_proc = state.process_index, state.num_processes, state.is_main_process
    prompts = load_prompts(args.prompts)[: args.limit or None]
    clock = Clock()
    lm = load_lm(args.model, backend=args.backend, dtype=args.dtype)
    reward = load_reward(args.reward)
    base = RunConfig(prompt="-", n=args.n_ref, max_new_tokens=args.max_new_tokens, seed=args.seed,
                     budget=args.budget, progress_every=0)
    budget = args.budget
    meta = {"mode": "quick" if args.quick else "full", "prompt_set": args.prompts, "model": args.model,
            "reward": args.reward, "n_ref": args.n_ref, "points": [list(p) for p in points],
            "rules": list(rules), "live_points": "all" if live is None else [list(p) for p in live],
            "rivals": list(rivals), "rivals_live": list(rivals_live),
            "wall_note": args.wall_note or None,
            "max_new_tokens": args.max_new_tokens, "budget": budget, "seed": args.seed, "processes": world,
            "threads_per_process": threads, "device": str(lm.device), "generator_params": lm.n_params,
            "generator_flop_model": dataclasses.asdict(flop_model_of(lm)),
            "dtype": str(lm.dtype).replace("torch.", ""), "kv_sharing": "shared" if sharing(lm, lm.backend) else "copied",
            "reward_params": reward.n_params, "cpu_count": os.cpu_count(), "platform": platform.platform(),
            "load_average_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "torch": torch.__version__, "transformers": package_version("transformers"),
            "command": " ".join(["python -m specrej.bench", *(argv or sys.argv[1:])]),
            "provenance": provenance(dtype=lm.dtype, device=lm.device, lm=lm, reward=reward,
                                     command=["python", "-m", "specrej.bench", *(argv or sys.argv[1:])]),
            "protocol": (
                "Reference Best-of-N_ref: one coupled run in one batch (its tokens do not depend on the batch). "
                "Best-of-k for every k: expected best of k random candidates (order statistics) and expected "
                "compute under the budget: tokens, FLOPs, decode steps in fixed passes of the rows that fit at full "
                "length, decode steps with those slots refilled as answers end (static refill), decode steps with a paged "
                "KV cache reserving each answer's real length at its start, engine steps as vLLM v1 schedules Best-of-N "
                "(blocks of 16 slots taken as tokens are written, the latest admitted answer preempted and recomputed "
                "when a block is short: the baseline the claims are priced against); wall time "
                "MODELLED from step times of real passes measured at the budgeted batch and at 1 row (against fixed "
                "passes and against vLLM's schedule, each step at its rows). Speculative "
                "Rejection with each rule: n=auto (the rows that fill the budget at the first decision); points "
                "in live_points run for real (measured), the others are replayed by the simulator from the coupled "
                "run (exact in fp32). Relative compute = sum over prompts / Best-of-N_ref's; speed-up at equal "
                "improvement score by log-interpolation on the curve; improvement raw and capped at Best-of-N_ref's "
                "best per prompt, 90% intervals by bootstrap over prompts; speed-up intervals: the speed-up at each end "
                "of the improvement's interval (ci90), and a bootstrap over prompts resampling curve and point (boot90); "
                "beside them the speed-up had the method scored 0.1 and 1 point less. Oracle ceiling per point: the same replay with a rule keeping the best "
                "final rewards. Winner fate per prompt and point: Best-of-N_ref's winner kept, pruned at decision d, or "
                "never drawn (outside SR's first batch).")}

    records: list[dict] = []
    passes: list[dict] = []
    if not args.engine_only:
        mine = list(enumerate(prompts))[rank::world]
        for _, row in mine:   # fail before hours of work, with the fix in the message
            try:
                KVBudget(budget, len(lm.render(row["prompt"])), sharing(lm, lm.backend)).check(
                    1, base.max_new_tokens, lm.max_positions)
            except BudgetError as e:
                raise SystemExit(f"prompt {row['id']}: {e} (set --budget, or lower --max-new-tokens)")
        from tqdm.auto import tqdm
        bar = tqdm(total=len(mine) * (1 + len(rules) * len(points) + len(rivals)), desc=f"bench {rank + 1}/{world}" if world > 1 else "bench",
                   position=rank, file=sys.stderr, dynamic_ncols=True, mininterval=1.0)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        coupled_runs: list = []
        for i, row in mine:
            def tick(label, row=row):
                bar.set_postfix_str(f"{row['id']} {label}")
                bar.update(1)
            rec = run_prompt(lm, reward, row, base, n_ref=args.n_ref, points=points, budget=budget, rules=rules,
                             live=live, tick=tick, runs_out=coupled_runs, rivals=rivals, rivals_live=rivals_live)
            records.append({"order": i, **rec})
            if not passes:   # step times at the budgeted batch and at 1 row, once, on this process's first prompt
                cfg = replace(base, prompt=row["prompt"])
                for rows in sorted({1, rec["rows_per_pass"]}):
                    passes.append(measure_pass(lm, cfg, rows, stats=reward.uses_token_stats))
            # after every prompt: what finished so far (a run cut short keeps its prompts), and the coupled
            # runs, from which fit_rule can evaluate other rules offline
            suffix = f".{rank}" if world > 1 else ""
            (out / f"bench.partial{suffix}.json").write_text(json.dumps(
                {"meta": {**meta, "partial": True, "elapsed_s": time.perf_counter() - started},
                 "prompts": records, "step_passes": passes}, indent=1))
            save_runs(coupled_runs, out / f"coupled{suffix}.json.gz",
                      {"model": args.model, "dtype": meta["dtype"], "n": args.n_ref,
                       "max_new_tokens": args.max_new_tokens, "seed": args.seed,
                       "ids": [r["id"] for r in records]})
        bar.close()
        if world > 1:
            from accelerate.utils import gather_object
            records = gather_object(records)
            passes = gather_object(passes)
            # no collective after this: shut the process group down before any rank exits (a rank that
            # exits with gloo's threads still running aborts: "terminate called without an active exception")
            import torch.distributed as dist
            if dist.is_initialized():
                dist.barrier()
                dist.destroy_process_group()
        records.sort(key=lambda r: r["order"])
    if not main_proc:
        return None

    result: dict = {"meta": meta, "summary": [], "prompts": records, "step_passes": passes}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = []
    if records:
        gpu = _gpu_step(args.gpu_steps, lm.n_params)
        meta["gpu_step"] = gpu.source if gpu is not None else None   # what --from prices with again
        agg = aggregate(records, gen_params=lm.n_params, step_model=StepCost.from_passes(passes), gpu=gpu,
                        gen_flops=flop_model_of(lm))
        result["protocol"] = agg
        result["summary"] = summary(agg)
        text.append(paper_table(agg, meta))
        title = (f"Speculative Rejection vs Best-of-N: {agg['prompts']} prompts, {args.model}, reward {args.reward}, "
                 f"{args.max_new_tokens} tokens, budget {budget} slots; SR opens with the batch that fills it")
        if not paper_png(agg, title, out / "bench.png"):
            print("note: matplotlib is not installed, so no bench.png.", file=sys.stderr)
    if not args.no_engine:
        log = lambda msg: print(f"[engine] {msg}", file=sys.stderr, flush=True)  # noqa: E731
        result["engine"] = engine_section(lm, reward, prompts[0]["prompt"], replace(base, n=min(32, args.n_ref), max_new_tokens=min(64, base.max_new_tokens)),
                                          rows=args.engine_rows, length=args.engine_length, sweep=args.sweep,
                                          repeats=args.repeats, log=log)
        text.append(engine_table(result["engine"]))
    meta["wall_s"] = time.perf_counter() - started
    meta["load_average_at_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    meta["provenance"]["load"] = clock.stop()   # the load at both ends and the process's CPU time (issue 64, 3)
    if busy := busy_words([meta["provenance"]["load"]], "bench"):
        print(f"note: {busy}", file=sys.stderr)
    (out / "bench.json").write_text(json.dumps(result, indent=1))
    (out / "bench.partial.json").unlink(missing_ok=True)
    print("\n\n".join(text))
    print(f"\nwrote {out / 'bench.json'}" + (f", {out / 'bench.png'}" if records else "")
          + f" in {meta['wall_s']:.0f} s")
    return result


def cli() -> None:
    """The ``specrej-bench`` console script (``main`` returns the result for callers in Python)."""
    main()
