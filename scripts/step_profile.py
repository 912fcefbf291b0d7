"""Where a decoding step's time goes, against its roofline: the embedded model, compiled and eager, fp32 and bf16.

    python scripts/step_profile.py               # rows 1, 8, 32, 128, both dtypes (bf16 where the CPU has it)
    python scripts/step_profile.py --rows 32 --steps 20 --dtypes fp32
    python scripts/step_profile.py --groups 1 3 --rows 8 32 --steps 40 --dtypes fp32   # layers a graph, paired

Prints, from one process on one machine (run it quiet):
1. per dtype, the roofline: the larger of (weights / measured read bandwidth) and (2 x params x rows /
   measured matmul FLOP/s), both measured here in that dtype by the bench's probes;
2. ms per step at each row count, the compiled step (``specrej/engine/compiled.py``, the default) and the eager
   forward (transformers' modules, prepacked linears in fp32), alternating step by step on rows of the same
   size (paired), and each against the roofline;
3. at the profile's row count (fp32), the compiled step's parts, timed alone on inputs of its shapes: the
   linears (prepacked oneDNN, 4 fused ones a layer), the head, sampling; the rest by subtraction (inductor's
   fused kernels: norms, rotary, attention, element-wise; the per-layer calls).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402


def _median_ms(f, n: int) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return 1000 * statistics.median(ts)


def main(argv=None) -> int:
    from specrej.engine import compiled, precision
    from specrej import load_generator
    from specrej.backends.hf import Engine, Sampling, sample
    from specrej.bench.engine_speed import MatmulLimit, ReadBandwidth, weight_bytes

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 128])
    p.add_argument("--profile-rows", type=int, default=32, help="0: no profile")
    p.add_argument("--steps", type=int, default=12, help="timed steps per variant and row count")
    p.add_argument("--dtypes", nargs="+", default=None, choices=("fp32", "bf16"),
                   help="default: fp32, and bf16 where the CPU has bf16 matrix instructions")
    p.add_argument("--groups", type=int, nargs=2, default=None, metavar=("A", "B"),
                   help="instead: pair the compiled step built with A and with B layers a graph "
                        "(SPECREJ_LAYERS_PER_GRAPH) at each --rows, alternating step by step, and check both write "
                        "the same tokens")
    args = p.parse_args(argv)
    dtypes = args.dtypes or (["fp32", "bf16"] if precision.cpu_prefers_bf16() else ["fp32"])
    if args.groups:
        return compare_groups(args.groups, args.rows, dtypes, args.steps)
    ids = None
    print("| dtype | rows | roofline ms | compiled ms | eager ms | compiled / roofline | eager / compiled |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    notes, profiled = [], None
    for dt in dtypes:
        lm = load_generator("embedded", dtype=dt)
        ids = lm.render("Give me three tips for staying healthy.")
        lm.eos_ids = frozenset()   # rows never end here: every step keeps its row count
        t = time.perf_counter()
        step = compiled.step_for(lm.model)
        notes.append(f"{dt}: compiled step ready in {time.perf_counter() - t:.1f} s")
        mm, bw = MatmulLimit(lm.device, lm.dtype), ReadBandwidth(lm.device, lm.dtype)
        for _ in range(5):
            mm.measure(2)
            bw.measure(2)
        flops_s, bytes_s = mm.summary()["flops_per_s"], bw.summary()["bytes_per_s"]
        notes.append(f"{dt}: matmul {flops_s / 1e9:.0f} GFLOP/s, read {bytes_s / 1e9:.1f} GB/s (medians), "
                     f"{torch.get_num_threads()} threads; weights {weight_bytes(lm) / 2**20:.0f} MiB")
        for rows in args.rows:
            rs = {}
            for kind in ("compiled", "eager"):
                compiled.use(lm.model, step if kind == "compiled" else None)
                eng = Engine(lm, ids, sampling=Sampling(), seed=0, n_total=rows, max_new_tokens=10**6, stats=False)
                rs[kind] = eng.start(list(range(rows)))
                for _ in range(3):
                    rs[kind].step()
            compiled.use(lm.model, step)
            times = {"compiled": [], "eager": []}
            for _ in range(args.steps):
                for kind in times:
                    t = time.perf_counter()
                    rs[kind].step()
                    times[kind].append(time.perf_counter() - t)
            roof = max(weight_bytes(lm) / bytes_s, 2 * lm.n_params * rows / flops_s) * 1000
            c, e = (1000 * statistics.median(times[k]) for k in ("compiled", "eager"))
            print(f"| {dt} | {rows} | {roof:.1f} | {c:.1f} | {e:.1f} | {c / roof:.2f}x | {e / c:.2f}x |", flush=True)
            if dt == "fp32" and rows == args.profile_rows:
                profiled = (lm, rs["compiled"], roof, c)
            else:
                rs["compiled"].release()
            rs["eager"].release()
    print("\n" + "\n".join(notes))
    if profiled is None:
        return 0
    lm, r, roof, ms = profiled
    rows = args.profile_rows
    step = compiled.step_for(lm.model)
    # by subtraction, not torch.profiler (its per-op records of compiled code cost more than the step itself):
    # the step's 4 x layers linears and the head replayed alone on hidden states of the step's shapes
    c = lm.model.config
    x = torch.randn(rows, c.hidden_size)
    ins = {c.hidden_size: x, step.heads * step.head_dim: torch.randn(rows, step.heads * step.head_dim),
           step.inter: torch.randn(rows, step.inter)}

    def linears():
        for ln1, ln2, kqkv, ko, kgu, kdown, qn, kn in step.layer_w:
            step._lin(ins[c.hidden_size], kqkv, 0)
            step._lin(ins[step.heads * step.head_dim], ko, 0)
            step._lin(ins[c.hidden_size], kgu, 0)
            step._lin(ins[step.inter], kdown, 0)

    with torch.inference_mode():
        lin_ms = _median_ms(linears, 10)
        head_ms = _median_ms(lambda: step._lin(x, step.head, 0), 20)
        logits = torch.randn(rows, lm.vocab_size)
        u = torch.rand(rows, dtype=torch.float64)
        sample_ms = _median_ms(lambda: sample(logits, u, Sampling()), 20)
    parts = [(f"linears of the {step.layers_n} layers (4 fused, prepacked oneDNN)", lin_ms),
             ("the head (prepacked oneDNN)", head_ms), ("sampling: top-k, top-p, inverse CDF", sample_ms)]
    parts.append(("the rest: inductor's fused kernels (norms, rotary, attention), calls, copies",
                  ms - sum(v for _, v in parts)))
    print(f"\nwhere a compiled {rows}-row fp32 step goes ({ms:.1f} ms; roofline {roof:.1f} ms), by parts timed "
          "alone\n")
    print("| part | ms | share |\n|---|---:|---:|")
    for name, v in parts:
        print(f"| {name} | {v:.1f} | {v / ms:.0%} |")
    return 0


def compare_groups(groups, rows_list, dtypes, steps: int) -> int:
    """Paired steps of the compiled step built with ``groups[0]`` and with ``groups[1]`` layers a graph."""
    import os

    from specrej import load_generator
    from specrej.backends.hf import Engine, Sampling
    from specrej.engine import compiled

    print(f"| dtype | rows | {groups[0]} a graph ms | {groups[1]} a graph ms | ratio | paired ratio | same tokens |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for dt in dtypes:
        lm = load_generator("embedded", dtype=dt)
        ids = lm.render("Give me three tips for staying healthy.")
        lm.eos_ids = frozenset()
        built = {}
        for g in groups:
            os.environ[compiled.LAYERS_ENV] = str(g)
            t = time.perf_counter()
            built[g] = compiled.Step(lm.model)
            compiled.warm(built[g])
            print(f"<!-- {dt}: {built[g].group} layers a graph, built in {time.perf_counter() - t:.1f} s -->", flush=True)
        for rows in rows_list:
            rs = {}
            for g, st in built.items():
                compiled.use(lm.model, st)
                rs[g] = Engine(lm, ids, sampling=Sampling(), seed=0, n_total=rows, max_new_tokens=10**6,
                               stats=False).start(list(range(rows)))
                for _ in range(3):
                    rs[g].step()
            times = {g: [] for g in rs}
            for _ in range(steps):
                for g in rs:
                    compiled.use(lm.model, built[g])
                    t = time.perf_counter()
                    rs[g].step()
                    times[g].append(time.perf_counter() - t)
            a, b = (1000 * statistics.median(times[g]) for g in groups)
            paired = statistics.median(x / y for x, y in zip(times[groups[0]], times[groups[1]]))
            same = rs[groups[0]].tokens == rs[groups[1]].tokens
            print(f"| {dt} | {rows} | {a:.1f} | {b:.1f} | {a / b:.3f}x | {paired:.3f}x | "
                  f"{'yes' if same else 'NO'} ({sum(map(len, rs[groups[0]].tokens))} tokens) |", flush=True)
            for r in rs.values():
                r.release()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
