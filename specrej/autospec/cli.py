"""``python -m specrej.autospec``: exactness (chi² by enumeration) and scaling (rounds against n).

``--quick`` (about half a minute on a small CPU): exactness at n = 10 (and q = 3 at n = 6) with 20k
samples; scaling for n = 64 … 1024 with 16 chains per point. Writes ``--json`` (keys ``exactness``
and ``scaling``) and the plots next to it (``<stem>.html``, ``<stem>.png``)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .exactness import fit
from .report import scaling_figure, text_report, write_png
from .samplers import SAMPLERS
from .scaling import curve
from .targets import make_target


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m specrej.autospec", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small settings that finish in well under a minute")
    ap.add_argument("--json", default="autospec_out/autospec.json", help="where to write the results")
    ap.add_argument("--samples", type=int, help="samples per exactness check (default 20000, 50000 full)")
    ap.add_argument("--chains", type=int, help="chains per scaling point (default 8 quick, 32 full)")
    ap.add_argument("--ns", help="comma-separated n for scaling (default 64,128,256,512,1024)")
    ap.add_argument("--beta", type=float, default=0.5, help="Curie–Weiss inverse temperature")
    ap.add_argument("--C", type=int, default=3, help="mixture components")
    ap.add_argument("--lam", type=float, default=1.0, help="Potts coupling lambda")
    ap.add_argument("--q", type=int, default=2, help="Potts states in the scaling runs")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def run(args) -> dict:
    samples = args.samples or (20_000 if args.quick else 50_000)
    chains = args.chains or (16 if args.quick else 64)
    ns = [int(v) for v in args.ns.split(",")] if args.ns else [64, 128, 256, 512, 1024]
    params = {"mixture": {"C": args.C, "seed": args.seed}, "curie-weiss": {"beta": args.beta},
              "potts": {"lam": args.lam, "q": args.q}}
    small = [("mixture", 10, params["mixture"]), ("curie-weiss", 10, params["curie-weiss"]),
             ("potts", 10, {"lam": args.lam, "q": 2}), ("potts", 6, {"lam": args.lam, "q": 3})]
    if not args.quick:
        small = [(t, 12 if n == 10 else 7, p) for t, n, p in small]
    exactness, scaling = [], []
    for name, n, p in small:
        for s in SAMPLERS:
            f = fit(make_target(name, n, **p), s, samples, seed=args.seed)
            exactness.append(f.as_dict())
            print(f"exactness {name} n={n} q={f.q} {s}: chi2 p = {f.chi2_p:.3f}, TV {f.tv:.4f} "
                  f"(floor {f.tv_floor:.4f})", file=sys.stderr, flush=True)
    for name, p in params.items():
        for s in SAMPLERS:
            c = curve(name, s, ns, chains=chains, seed=args.seed, params=p)
            scaling.append(c.as_dict())
            print(f"scaling {name} {s}: slope {c.slope:.2f}", file=sys.stderr, flush=True)
    return {"exactness": exactness, "scaling": scaling,
            "meta": {"quick": args.quick, "samples": samples, "chains": chains, "ns": ns, "seed": args.seed,
                     "rounds": "oracle calls (parallel depth); queries: conditionals read (work)"}}


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    result = run(args)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    scaling_figure(result["scaling"]).write_html(out.with_suffix(".html"), include_plotlyjs="cdn")
    write_png(result["scaling"], out.with_suffix(".png"))
    print(text_report(result["exactness"], result["scaling"]))
    print(f"wrote {out}, {out.with_suffix('.html')}, {out.with_suffix('.png')} "
          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 0
