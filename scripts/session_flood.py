"""Memory before and after a flood of made-up sessions (issue 50, item 1): the app as ``python app.py`` builds it
(its models not loaded: a page load reads no model), served on loopback, then ``--sessions`` fresh session hashes
each calling what a page calls as it loads (``run/register``, ``run/from_link``). Prints the process's RSS before
and after and how many sessions Gradio holds, at this app's cap (``SPECREJ_MAX_SESSIONS``, default 1000) and, with
``--cap 10000``, at Gradio's own default. From one address (the default) the made-up sessions are also capped per
household (``SPECREJ_SESSIONS_PER_ADDRESS``, 100); ``--households K`` spreads them over K addresses (the app then
reads the right-most ``X-Forwarded-For``, as behind a Space's proxy).

    python scripts/session_flood.py [--sessions 10000] [--cap N] [--households K]

A figure, not a test: say the machine when quoting it."""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--cap", type=int)
    ap.add_argument("--households", type=int, default=1, help="addresses the sessions come from")
    a = ap.parse_args()
    if a.cap is not None:
        os.environ["SPECREJ_MAX_SESSIONS"] = str(a.cap)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    import httpx

    import app
    from components.session.context import AppContext
    from tests.conftest import launch_local

    demo = app.build_demo(AppContext.from_env({}))
    demo.specrej_guard.trusted_proxy = a.households > 1   # the script plays a proxy: one address per household
    url = launch_local(demo).rstrip("/")
    try:
        with httpx.Client(timeout=60) as client:
            for route in ("register", "from_link"):   # one session first: what every session shares
                client.post(f"{url}/gradio_api/run/{route}", json={"data": [None] if route == "register" else [],
                                                                  "session_hash": "warm"})
            gc.collect()
            before, t0, codes = rss_mb(), time.perf_counter(), {}
            for i in range(a.sessions):
                for route in ("register", "from_link"):
                    data = [None] if route == "register" else []   # register takes the page's session state
                    r = client.post(f"{url}/gradio_api/run/{route}", json={"data": data, "session_hash": f"flood-{i}"},
                                    headers={"X-Forwarded-For": f"10.{i % a.households // 256}.{i % a.households % 256}.1"})
                    codes[r.status_code] = codes.get(r.status_code, 0) + 1
            gc.collect()
            after = rss_mb()
        print(f"sessions made up: {a.sessions} from {a.households} address(es) ({dict(sorted(codes.items()))} by status) in "
              f"{time.perf_counter() - t0:.0f} s; cap {demo.state_session_capacity}; Gradio holds "
              f"{len(demo.state_holder.session_data)}; RSS {before:.0f} MB -> {after:.0f} MB "
              f"(+{after - before:.0f} MB)")
    finally:
        demo.close()


if __name__ == "__main__":
    main()
