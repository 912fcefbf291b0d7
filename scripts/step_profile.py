"""Where a decoding step's time goes, against its roofline (the embedded model, fp32, this CPU).

    python scripts/step_profile.py               # rows 1, 8, 32, 128; profile at 32 rows
    python scripts/step_profile.py --rows 32 --steps 20

Prints, from one process on one machine (run it quiet):
1. the roofline: the larger of (weights / measured read bandwidth) and (2 x params x rows /
   measured matmul FLOP/s), both measured here by the bench's probes;
2. ms per step at each row count with the linears prepacked for oneDNN (``specrej/packed.py``)
   and with the plain ``nn.Linear`` weights, alternating step by step on the same rows (paired);
3. at the profile's row count, ``torch.profiler``'s ops grouped: the linears (30 layers x 7), the
   head (timed alone on the same hidden states), sampling (top-k / top-p / inverse CDF, timed alone),
   attention's matmuls, and the rest (per-layer Python, norms, rotary, small element-wise ops).
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
    from specrej import load_generator
    from specrej.bench.engine_speed import MatmulLimit, ReadBandwidth, weight_bytes
    from specrej.backends.hf import Engine, Sampling, sample
    from specrej.packed import PackedLinear

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 128])
    p.add_argument("--profile-rows", type=int, default=32)
    p.add_argument("--steps", type=int, default=12, help="timed steps per variant and row count")
    args = p.parse_args(argv)

    lm = load_generator("embedded", dtype="fp32")
    ids = lm.render("Give me three tips for staying healthy.")
    lm.eos_ids = frozenset()   # rows never end here: every step keeps its row count
    packed = [(m, name, c) for m in lm.model.modules() for name, c in m.named_children() if isinstance(c, PackedLinear)]
    plain = {id(c): torch.nn.Linear(c.in_features, c.out_features, bias=c.bias is not None) for _, _, c in packed}
    for _, _, c in packed:
        plain[id(c)].weight, plain[id(c)].bias = c.weight, c.bias

    def use(kind: str) -> None:
        for m, name, c in packed:
            setattr(m, name, c if kind == "packed" else plain[id(c)])

    mm, bw = MatmulLimit(lm.device), ReadBandwidth(lm.device)
    for _ in range(5):
        mm.measure(2)
        bw.measure(2)
    flops_s, bytes_s = mm.summary()["flops_per_s"], bw.summary()["bytes_per_s"]
    print(f"machine: matmul {flops_s / 1e9:.0f} GFLOP/s, read {bytes_s / 1e9:.1f} GB/s (medians), "
          f"{torch.get_num_threads()} threads; model {lm.n_params / 1e6:.0f} M params, "
          f"{weight_bytes(lm) / 2**20:.0f} MiB fp32, packed linears: {len(packed)}")
    print("\n| rows | roofline ms | packed ms | plain ms | packed / roofline |\n|---:|---:|---:|---:|---:|")
    rows_at = {}
    for rows in args.rows:
        eng = Engine(lm, ids, sampling=Sampling(), seed=0, n_total=rows, max_new_tokens=10**6, stats=False)
        r = eng.start(list(range(rows)))
        for _ in range(3):
            r.step()
        times = {"packed": [], "plain": []}
        for _ in range(args.steps):
            for kind in times:
                use(kind)
                t = time.perf_counter()
                r.step()
                times[kind].append(time.perf_counter() - t)
        use("packed")
        roof = max(weight_bytes(lm) / bytes_s, 2 * lm.n_params * rows / flops_s) * 1000
        pk, pl = (1000 * statistics.median(times[k]) for k in ("packed", "plain"))
        print(f"| {rows} | {roof:.1f} | {pk:.1f} | {pl:.1f} | {pk / roof:.2f}x |", flush=True)
        rows_at[rows] = (r, roof, pk)
        if rows != args.profile_rows:
            r.release()
            eng.release()

    rows = args.profile_rows
    r = rows_at[rows][0] if rows in rows_at else None
    if r is None:
        return 0
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            r.step()
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) / args.steps / 1000
    by = {e.key: e.self_cpu_time_total / args.steps / 1000 for e in prof.key_averages()}
    h = torch.randn(rows, lm.model.config.hidden_size)
    head = lm.model.get_output_embeddings()
    head_ms = _median_ms(lambda: head(h), 20)
    logits = torch.randn(rows, lm.vocab_size)
    u = torch.rand(rows, dtype=torch.float64)
    sample_ms = _median_ms(lambda: sample(logits, u, Sampling()), 20)
    linear_ms = by.get("mkldnn::_linear_pointwise", 0.0) + by.get("aten::mm", 0.0) + by.get("aten::addmm", 0.0)
    attn_ms = by.get("aten::bmm", 0.0) + by.get("aten::matmul", 0.0)
    parts = [("linears of the 30 layers (matmuls)", linear_ms - head_ms), ("the head (49,152 x 576, timed alone)", head_ms),
             ("attention's matmuls (prefix part and own part)", attn_ms),
             ("sampling: top-k, top-p, inverse CDF (timed alone)", sample_ms)]
    rest = total - sum(ms for _, ms in parts)
    parts.append(("the rest: per-layer Python, norms, rotary, copies, element-wise ops", rest))
    print(f"\nwhere a {rows}-row step goes (profiled: {total:.1f} ms a step; roofline {rows_at[rows][1]:.1f} ms)\n")
    print("| part | ms | share |\n|---|---:|---:|")
    for name, ms in parts:
        print(f"| {name} | {ms:.1f} | {ms / total:.0%} |")
    top = sorted(by.items(), key=lambda kv: -kv[1])[:8]
    print("\ntop ops: " + ", ".join(f"{k} {v:.1f} ms" for k, v in top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
