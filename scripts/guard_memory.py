"""Memory of the public app around runs at the deployment's limits (issue 18).

Serves the app (the embedded models, the environment's limits) in this process on 127.0.0.1 and
reads this process's resident memory (RSS, /proc): idle after a warm-up run, the peak during a race
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
    args = ap.parse_args()

    import app
    from gradio_client import Client

    from components import memory
    from components.context import AppContext
    from components.replay import RECORDINGS, load

    if args.no_trim:
        memory._trim = None
    mb = lambda b: round(b / 2**20)   # noqa: E731
    rss = memory.rss_bytes
    ctx = AppContext.from_env()
    ctx.warm()
    demo = app.build_demo(ctx)
    _, url, _ = app.launch(demo, server_name="127.0.0.1", server_port=_free_port(), prevent_thread_lock=True,
                           quiet=True)
    client = Client(url, verbose=False, analytics_enabled=False)
    lim = ctx.limits
    out = {"trim": not args.no_trim, "limits": {"max_n": lim.max_n, "max_new_tokens": lim.max_new_tokens,
                                                  "max_budget": lim.max_budget, "max_auto_n": lim.max_auto_n,
                                                  "max_run_seconds": lim.max_run_seconds}}
    base = dict(prompt="Give me three tips for staying healthy.", model=ctx.default_model, reward=ctx.default_reward,
                preference="")
    try:
        client.predict(**base, n=4, max_new_tokens=8, api_name="/run")   # warm-up: models, kernels, caches
        out["idle_before_mb"] = mb(idle(rss))
        if not args.skip_race:
            with Peak(rss) as p:
                status = client.predict(**base, n=lim.max_n, max_new_tokens=lim.max_new_tokens,
                                        budget=lim.max_budget, sr_start="auto", api_name="/run")[0]
            out["race_peak_mb"] = mb(p.peak)
            out["race_status"] = str(status.get("value") if isinstance(status, dict) else status)[:160]
            out["idle_after_race_mb"] = mb(idle(rss))
            out["after_over_before"] = round(out["idle_after_race_mb"] / out["idle_before_mb"], 3)
        lab = [("exactness_handler", ["mixture", 10, 0.5, 64, 1.0, 2, "token", 100_000]),
               ("measure_handler", ["mixture", 0.5, 64, 1.0, 2]),
               ("sample_handler", ["mixture", 1024, 0.5, 64, 1.0, 2, "token", 0, 0])]
        for name, data in lab:
            fn = next(fn for fn in demo.fns.values() if fn.name == name)
            before = rss()
            with Peak(rss) as p:
                result = fn.fn(*data)
                if hasattr(result, "__next__"):
                    for _ in result:
                        pass
            out[f"{name}_peak_above_idle_mb"] = mb(p.peak - before)
        rec = sorted(RECORDINGS.glob("*.json.gz"))[0]
        before = rss()
        replay = next(fn for fn in demo.fns.values() if fn.name == "replay").fn
        with Peak(rss) as p:
            for _ in replay(load(rec).meta["prompt"], "inf", None):
                pass
        out["replay_peak_above_idle_mb"] = mb(p.peak - before)
        out["idle_end_mb"] = mb(idle(rss))
    finally:
        demo.close()
    print(json.dumps(out, indent=1))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
