"""How long ``python app.py`` takes to serve its page, and to be ready to race, on this machine:

    python scripts/startup_time.py                     # this checkout, the inductor cache as it is, 3 starts
    python scripts/startup_time.py --cold              # each start with an empty inductor cache (a fresh clone)
    python scripts/startup_time.py --checkout ../old   # another checkout (e.g. an older commit), to pair with

Each start: ``python app.py`` in a subprocess on a free port; **page**: seconds until ``GET /`` answers 200;
**ready**: seconds until the app prints that the models are loaded and the decoding step compiled and measured
(``startup.warm_in_background``; a checkout that warms before it listens is ready when its page answers).
Then the server is stopped. Run it on a quiet machine (``uptime``): it times whole processes.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_start(checkout: Path, cold: bool, timeout_s: float) -> tuple[float, float]:
    """(seconds to serve the page, seconds to be ready to race) of one ``python app.py``."""
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "PYTHONUNBUFFERED": "1"}
    cache = tempfile.mkdtemp(prefix="inductor-") if cold else None
    if cache:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=checkout, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    ready: list[float] = []
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if "ready to race" in line and not ready:
                ready.append(time.perf_counter() - t0)

    threading.Thread(target=read, daemon=True).start()
    page = None
    try:
        while time.perf_counter() - t0 < timeout_s and proc.poll() is None:
            if page is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                        if r.status == 200:
                            page = time.perf_counter() - t0
                except OSError:
                    pass
            if page is not None and (ready or not any("warm" in x or "while the page is served" in x for x in lines)):
                break
            time.sleep(0.1)
        if page is None:
            raise SystemExit(f"the page never answered in {timeout_s:.0f} s:\n" + "".join(lines[-20:]))
        return page, ready[0] if ready else page
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkout", type=Path, default=ROOT)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cold", action="store_true", help="an empty inductor cache at every start")
    p.add_argument("--timeout-s", type=float, default=300.0)
    args = p.parse_args(argv)
    # what every start runs with, from this environment (each app.py inherits it): pair two checkouts by running
    # this script for each in turn under the same settings, which it prints
    same = {k: os.environ.get(k, "default") for k in ("SPECREJ_DTYPE", "SPECREJ_THREADS", "SPECREJ_COMPILE",
                                                      "SPECREJ_BACKEND")}
    print("[every start] " + ", ".join(f"{k}={v}" for k, v in same.items()) + f", {os.cpu_count()} CPUs", flush=True)
    pages, readies = [], []
    for i in range(args.repeats):
        page, ready = one_start(args.checkout.resolve(), args.cold, args.timeout_s)
        pages.append(page)
        readies.append(ready)
        print(f"start {i + 1}: page {page:.1f} s, ready to race {ready:.1f} s", flush=True)
    print(f"median of {args.repeats}: page {statistics.median(pages):.1f} s, ready {statistics.median(readies):.1f} s "
          f"({args.checkout.resolve().name}, {'cold' if args.cold else 'warm'} inductor cache, load "
          f"{os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
