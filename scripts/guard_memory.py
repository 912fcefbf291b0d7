"""Memory of the public app around runs at the deployment's limits (issue 18).

Builds the app (the embedded models, the environment's limits) in this process, calls its handlers
as the queue would (no HTTP: the numbers are the handlers' own) and reads this process's resident memory (RSS, /proc): idle after a warm-up run, the peak during a race
at the public limits (N = SPECREJ_MAX_N, max new tokens, the budget, Speculative Rejection's `auto`
start), idle after it; then the peak of the lab's heaviest exactness check, measurement and sample,
and of an instant replay. ``--no-trim`` turns off the return of memory after runs (for comparison).

    python scripts/guard_memory.py [--no-trim] [--skip-race]

Prints one JSON object. Memory only: wall times on a shared machine mean nothing here.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


class Peak:
    """Samples RSS every 50 ms in a thread while in the ``with`` block."""

    def __init__(self, rss):
        self.rss, self.peak, self._stop = rss, 0, threading.Event()

    def __enter__(self):
        self.peak = self.rss()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())


def idle(rss, settle_s: float = 3.0) -> int:
    time.sleep(settle_s)   # the queue's bookkeeping settles; no work runs
    return rss()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-trim", action="store_true", help="collect garbage only, never malloc_trim")
    ap.add_argument("--skip-race", action="store_true")
    ap.add_argument("--skip-lab", action="store_true")
    args = ap.parse_args()

    import dataclasses

    import app
    from components.deploy import memory
    from components.session.context import AppContext
    from components.session.recordings import RECORDINGS, load
    from components.state.request import RunRequest
    from specrej.core.budget import opening_rows

    if args.no_trim:
        memory._trim = None
    mb = lambda b: round(b / 2**20)   # noqa: E731
    rss = memory.rss_bytes
    ctx = AppContext.from_env()
    from components.session import startup

    startup.warm(ctx)
    demo = app.build_demo(ctx)
    handler = {fn.name: fn.fn for fn in demo.fns.values()}
    lim = ctx.limits
    out = {"trim": not args.no_trim, "limits": {"max_n": lim.max_n, "max_new_tokens": lim.max_new_tokens,
                                                  "max_budget": lim.max_budget, "max_auto_n": lim.max_auto_n,
                                                  "max_run_seconds": lim.max_run_seconds}}
    base = dict(prompt="Give me three tips for staying healthy.", model=ctx.default_model, reward=ctx.default_reward,
                preference="concise, friendly, with a concrete example")

    def race(**settings) -> str:
        values = dataclasses.astuple(RunRequest(**base, **settings))
        last = None
        for last in handler["run"](*values, None):
            pass
        shown = " ".join(str(getattr(v, "value", "")) for v in (last or {}).values())
        return ("finished" if "Done" in shown else "stopped at the time limit" if "MAX_RUN_SECONDS" in shown
                else shown[:200])

    race(n=4, max_new_tokens=8, sr_start="same")   # warm-up: models, kernels, caches
    out["idle_before_mb"] = mb(idle(rss))
    if not args.skip_race:
        with Peak(rss) as p:
            # the race's two arms share SPECREJ_MAX_BUDGET; auto N must stay within SPECREJ_MAX_AUTO_N
            each = lim.max_budget // 2
            first = next(fd for fd in range(1, each + 2) if opening_rows(each, fd) <= lim.max_auto_n)
            out["race_status"] = race(n=lim.max_n, max_new_tokens=lim.max_new_tokens, budget=each,
                                      sr_start="auto", first_decision=first)
        out["race_peak_mb"] = mb(p.peak)
        out["idle_after_race_mb"] = mb(idle(rss))
        out["after_over_before"] = round(out["idle_after_race_mb"] / out["idle_before_mb"], 3)
    print(json.dumps(out), flush=True)
    if not args.skip_lab:
        lab = [("exactness_handler", ["mixture", 10, 0.5, 64, 1.0, 2, "token", 100_000]),
               ("measure_handler", ["mixture", 0.5, 64, 1.0, 2]),
               ("sample_handler", ["mixture", 1024, 0.5, 64, 1.0, 2, "token", 0, 0])]
        for name, data in lab:
            before = rss()
            with Peak(rss) as p:
                result = handler[name](*data)
                if hasattr(result, "__next__"):
                    for _ in result:
                        pass
            out[f"{name}_peak_above_idle_mb"] = mb(p.peak - before)
            print(json.dumps(out), flush=True)
        rec = sorted(RECORDINGS.glob("*.json.gz"))[0]
        before = rss()
        with Peak(rss) as p:
            for _ in handler["replay"](load(rec).meta["prompt"], "inf", None):
                pass
        out["replay_peak_above_idle_mb"] = mb(p.peak - before)
        out["idle_end_mb"] = mb(idle(rss))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
