"""What the app adds to a race: the same race through the library (as the CLI runs it) and through
the app's ``/run`` API, timed on one machine, one after the other. Run it on a quiet machine:

    python scripts/app_cost.py                      # the page's defaults, the default example prompt
    python scripts/app_cost.py --set n=16 --set max_new_tokens=48 --repeats 3

1. library: models loaded and the race run in the main thread, drained (``run_to_completion``),
   as ``python -m specrej`` does; the time from the race's start to its last event.
2. app: ``python app.py`` in a subprocess (the first race waits for its warm-up), one
   ``gradio_client`` call of ``/run`` with the same settings; the time from submit to the final frame.
After one warm-up race on each side, ``--repeats`` pairs run in turn (library, app, library, ...),
so a drift in the machine's speed hits both sides; the medians and the median of the pairs'
ratios are printed (and written as JSON with ``--out``). The API client draws nothing: a browser's own redraws are not
counted here.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def request_kwargs(sets: list[str]) -> dict:
    from components.session.context import AppContext

    ctx = AppContext.from_env()
    kw = {"prompt": ctx.examples[0], "model": ctx.default_model, "reward": ctx.default_reward,
          "preference": ctx.default_preference}
    for item in sets:
        key, _, val = item.partition("=")
        kw[key.strip()] = _value(val.strip())
    return kw


def _cpu_self() -> float:
    """CPU seconds this process has used (every thread: the API client's included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_pid(pid: int) -> float:
    """CPU seconds process ``pid`` has used (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Library:
    """The race through the library, as ``python -m specrej`` runs it: models loaded here, the race
    drained in the main thread; ``race()`` is the time from the race's start to its last event."""

    def __init__(self, kw: dict):
        from components.session.context import AppContext, get_models
        from components.state.request import RunRequest

        ctx = AppContext.from_env()
        req = RunRequest(**kw)
        self.cfg, self.arms = req.config(0), req.arms(ctx.arms)
        # the app's dtype (SPECREJ_DTYPE, fp32 by default), not the library's "auto" (bf16 on a CPU with
        # avx512_bf16, itself ~1.4x faster there): a pair compares the app with the library, nothing else
        self.dtype = ctx.dtype
        self.lm, self.reward = get_models(*ctx.resolve(req.model, req.reward, req.preference), dtype=ctx.dtype)

    def race(self) -> float:
        from specrej.arms import race_arms

        t, cpu = time.perf_counter(), _cpu_self()
        for _ in race_arms(self.lm, self.reward, self.cfg, self.arms):
            pass
        self.cpu_s = _cpu_self() - cpu
        return time.perf_counter() - t


class App:
    """``python app.py`` in a subprocess; ``race()`` is one ``/run`` call, from submit to the final frame."""

    def __init__(self, kw: dict, threads: int):
        from gradio_client import Client

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
               "GRADIO_ANALYTICS_ENABLED": "False", "SPECREJ_MAX_RUNS_PER_CLIENT": "1000",
               # the library's thread count, whatever the load (the app's probe would otherwise fall back to one
               # thread on a busy machine, and a pair would compare thread counts)
               "SPECREJ_THREADS": str(threads)}
        self.kw = kw
        self.server = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 600
        while True:
            try:
                self.client = Client(f"http://127.0.0.1:{port}/", verbose=False, analytics_enabled=False)
                return
            except Exception:
                if self.server.poll() is not None or time.time() > deadline:
                    self.close()
                    raise RuntimeError("the app did not start")
                time.sleep(1)

    def race(self) -> float:
        """One /run; ``self.parts`` then says where the time went: the first frame's arrival, the race
        on the app's own clock ("Done in X s": the run's start to its end), and the final frame's
        arrival after the one before it."""
        t, client0, server0 = time.perf_counter(), _cpu_self(), _cpu_pid(self.server.pid)
        last, arrivals = None, []
        for last in self.client.submit(api_name="/run", **self.kw):
            arrivals.append(time.perf_counter() - t)
        dt = time.perf_counter() - t
        client_cpu, server_cpu = _cpu_self() - client0, _cpu_pid(self.server.pid) - server0
        status = str(last[0] if last else "")
        if "Done" not in status:
            raise RuntimeError(f"the app's race did not finish: {status[:300]}")
        clock = re.search(r"Done\W*in ([0-9.]+) s", status)
        self.parts = {"first_frame_s": arrivals[0], "app_clock_s": float(clock.group(1)) if clock else None,
                      "final_frame_after_s": arrivals[-1] - arrivals[-2] if len(arrivals) > 1 else None,
                      "server_cpu_s": server_cpu, "client_cpu_s": client_cpu}
        return dt

    def close(self) -> None:
        self.server.terminate()
        self.server.wait(30)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a RunRequest field (the /run API's parameters), e.g. n=16; default: the page's defaults")
    p.add_argument("--repeats", type=int, default=5, help="timed pairs of races (after one warm-up each)")
    p.add_argument("--out", type=Path, help="write the figures here as JSON")
    p.add_argument("--threads", type=int, help="torch threads on both sides (default: torch's default here)")
    args = p.parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    kw = request_kwargs(args.set)
    import torch

    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    app = App(kw, threads)
    try:
        lib = Library(kw)
        from specrej.engine import compiled

        # what both sides run with: the same dtype (the app's, SPECREJ_DTYPE), torch threads (SPECREJ_THREADS for
        # the app's server, set above) and engine (SPECREJ_COMPILE, SPECREJ_BACKEND: the server inherits this
        # environment), printed as the library resolved them
        eng = lib.lm.backend
        same = {"dtype": str(lib.lm.dtype).replace("torch.", ""), "threads": torch.get_num_threads(),
                "engine": getattr(eng, "name", type(eng).__name__),
                "compile": compiled.mode(), "backend": os.environ.get("SPECREJ_BACKEND", "default")}
        print(f"[both sides] {same}", flush=True)
        print(f"[warm-up] library {lib.race():.1f} s, app {app.race():.1f} s", flush=True)
        libs, apps, parts = [], [], []
        for i in range(args.repeats):   # in turn, so a drift in the machine's speed hits both sides
            libs.append(lib.race())
            apps.append(app.race())
            parts.append({**app.parts, "library_cpu_s": lib.cpu_s})
            print(f"[pair {i + 1}] library {libs[-1]:.1f} s, app {apps[-1]:.1f} s: {apps[-1] / libs[-1]:.2f}x "
                  f"(app: first frame at {app.parts['first_frame_s']:.2f} s, race {app.parts['app_clock_s']} s on "
                  f"its clock, final frame {app.parts['final_frame_after_s']:.2f} s after the one before; CPU: "
                  f"library {lib.cpu_s:.1f} s, app server {app.parts['server_cpu_s']:.1f} s + API client "
                  f"{app.parts['client_cpu_s']:.1f} s)", flush=True)
    finally:
        app.close()
    ratios = [a / b for a, b in zip(apps, libs)]
    result = {"settings": {k: v for k, v in kw.items() if k != "prompt"}, "prompt": kw["prompt"],
              "library_s": libs, "app_s": apps, "library_median_s": statistics.median(libs),
              "app_median_s": statistics.median(apps), "app_parts": parts, "ratios": ratios, "ratio": statistics.median(ratios), "both_sides": same,
              "load": os.getloadavg()[0]}
    print(f"library {result['library_median_s']:.1f} s, app {result['app_median_s']:.1f} s (medians); "
          f"pair by pair the app takes {result['ratio']:.2f}x the library's time (median of "
          f"{min(ratios):.2f}-{max(ratios):.2f}x)")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
