"""The page's defaults, measured: race settings -> decisions, the verdict in time to equal reward, FLOPs,
improvement score.

    python scripts/defaults_table.py                       # the page's defaults on every example prompt
    python scripts/defaults_table.py --set n=16 --prompts 1

Each race runs as the page runs it (``components.session.stream.updates``: this machine's decoding step
measured first, the race as set, the verdict priced at the step times measured then), on the
embedded models and the default reward, without a browser. Prints one markdown row per prompt and the
CPU it ran on; run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                flags = open("/proc/cpuinfo").read()
                return (line.split(":", 1)[1].strip() + (", AVX-512" if "avx512f" in flags else "")
                        + (", bf16" if "avx512_bf16" in flags else ""))
    except OSError:
        pass
    return platform.processor() or "?"


def main(argv=None) -> int:
    from components.session.context import AppContext
    from components.frames import drawn
    from components.session.stream import updates
    from components.state.request import RunRequest

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from app_cost import _value

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="a RunRequest field, e.g. n=16")
    p.add_argument("--prompts", type=int, default=None, help="only the first K example prompts")
    args = p.parse_args(argv)
    ctx = AppContext.from_env()
    from components.session import startup

    startup.warm(ctx)
    settings = {k.strip(): _value(v.strip()) for k, _, v in (s.partition("=") for s in args.set)}
    print(f"CPU: {cpu()}, {__import__('os').cpu_count()} cores; settings: {settings or 'the page defaults'}")
    print("| prompt | SR opens with | decisions (at token) | verdict: Best-of-N needs | time SR / Best-of-k "
          "| speed-up in time | FLOPs SR / Best-of-k | improvement | race s |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    for prompt in ctx.examples[:args.prompts]:
        req = RunRequest(prompt=prompt, model=ctx.default_model, reward=ctx.default_reward,
                         preference=ctx.default_preference, **settings)
        start, last = time.perf_counter(), None
        for last in drawn(updates(ctx, req)):
            pass
        seconds = time.perf_counter() - start
        view = last.view
        if view is None or not view.done:
            print(f"| {prompt[:40]} | did not finish: {last.status[:80]} |")
            continue
        sr = view.arms["sr"]
        v = view.verdicts().get("sr")
        dec = [r.position for r in sr.round_events if r.n_pruned]
        if v is None:
            print(f"| {prompt[:40]} | {len(sr.finished.candidates)} | {len(dec)} | no verdict | | | | | {seconds:.1f} |")
            continue
        if v.kind in ("degenerate", "below"):   # no k: a flat curve, or below one answer's average
            print(f"| {prompt[:40]} | {v.kind}: no time to equal reward |")
            continue
        k = f"> {v.n} (a bound)" if v.beyond else f"k = {v.k:.1f} of {v.n}"
        print(f"| {prompt[:40]} | {len(sr.finished.candidates)} | {len(dec)} ({', '.join(map(str, dec))}) "
              f"| {k} | {v.seconds:.2f} s / {v.bon_seconds:.2f} s | **{v.speedup:.2f}x**{' (at least)' if v.beyond else ''} "
              f"| {v.flops_ratio:.2f}x | {v.improvement:.1f} | {seconds:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
