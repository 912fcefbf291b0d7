"""The decoding step's layer linears alone, on this CPU: what limits them at few rows (docs/performance.md).

    python scripts/linear_kernels.py            # rows 8, 16, 32

The embedded model's shapes (30 layers of 4 fused linears: qkv 576->960, o 576->576, gate_up 576->3072,
down 1536->576; 425 MB of fp32 weights, random here: a kernel's time does not depend on the values), timed as
the step runs them (oneDNN on weights prepacked once, ``specrej/engine/packed.py``), against:
1. reading the same bytes (a ``sum`` over one 425 MB tensor): the read floor;
2. one thread against two (compute-bound kernels halve, read-bound ones do not);
3. oneDNN's batch hint for the packed layout (``packed.BATCH_HINT``) at 8, 32, 128, and whether the results are
   bit-identical across hints;
4. the transposed product ``W @ x.T`` (MKL), and whether a row's result in it is the same in a 64-row batch
   (coupling needs it).
Medians of 15 timed calls after one warm-up; run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_profile import _median_ms  # noqa: E402  (the step profile's own timer)

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]   # (out, in) of each fused linear of a layer
LAYERS = 30


def median_ms(f, n: int = 15) -> float:
    f()   # one warm-up call
    return _median_ms(f, n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 16, 32])
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    hints = (128, 32, 8)
    weights = [torch.randn(n, k) * 0.02 for _ in range(LAYERS) for n, k in SHAPES]
    packed = {h: [torch.ops.mkldnn._reorder_linear_weight(w, h) for w in weights] for h in hints}
    mb = sum(w.numel() for w in weights) * 4 / 1e6
    flat = torch.cat([w.reshape(-1) for w in weights])
    for threads in (1, 2):
        torch.set_num_threads(threads)
        print(f"{threads} thread(s): reading the {mb:.0f} MB of weights takes {median_ms(lambda: flat.sum()):.1f} ms")
    torch.set_num_threads(2)
    print("| rows | threads | packed (hint 128) ms | hint 32 ms | hint 8 ms | W @ x.T ms | GFLOP/s (hint 128) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rows in a.rows:
        xs = {k: torch.randn(rows, k) for k in (576, 1536)}

        def run(ps):
            return lambda: [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "")
                            for w, p in zip(weights, ps)]

        for threads in (1, 2):
            torch.set_num_threads(threads)
            t = {h: median_ms(run(packed[h])) for h in hints} if threads == 2 else {128: median_ms(run(packed[128]))}
            tr = median_ms(lambda: [torch.mm(w, xs[w.shape[1]].t()) for w in weights]) if threads == 2 else None
            cells = [f"{t[128]:.1f}"] + [f"{t[h]:.1f}" if h in t else "" for h in (32, 8)] + [f"{tr:.1f}" if tr else ""]
            print(f"| {rows} | {threads} | " + " | ".join(cells) + f" | {2 * rows * mb / 4 / t[128]:.0f} |")
    torch.set_num_threads(2)
    w, x = weights[2], torch.randn(64, 576)
    outs = [torch.ops.mkldnn._linear_pointwise(x[:8], torch.ops.mkldnn._reorder_linear_weight(w, h), None, "none", [], "")
            for h in hints]
    print("packed results bit-identical across hints:", all(torch.equal(outs[0], o) for o in outs))
    full = torch.mm(w, x.t())
    for r in (1, 8, 16, 32):
        print(f"W @ x.T: rows 1-{r} bit-identical to the same rows in a 64-row batch:",
              torch.equal(torch.mm(w, x[:r].t()), full[:, :r]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
