"""What the app adds to a race: the same race through the library (as the CLI runs it) and through
the app's ``/run`` API, timed on one machine, one after the other. Run it on a quiet machine:

    python scripts/app_cost.py                      # the page's defaults, the default example prompt
    python scripts/app_cost.py --set n=16 --set max_new_tokens=48 --repeats 3

1. library: models loaded and the race run in the main thread, drained (``run_to_completion``),
   as ``python -m specrej`` does; the time from the race's start to its last event.
2. app: ``python app.py`` in a subprocess (it warms the models before it listens), one
   ``gradio_client`` call of ``/run`` with the same settings; the time from submit to the final frame.
Each side runs ``--repeats`` races after one warm-up race; the medians and their ratio are printed
(and written as JSON with ``--out``). The API client draws nothing: a browser's own redraws are not
counted here.
"""
from __future__ import annotations

import argparse
import json
import os
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
    from components.context import AppContext

    ctx = AppContext.from_env()
    kw = {"prompt": ctx.examples[0], "model": ctx.default_model, "reward": ctx.default_reward,
          "preference": ctx.default_preference}
    for item in sets:
        key, _, val = item.partition("=")
        kw[key.strip()] = _value(val.strip())
    return kw


def library_times(kw: dict, repeats: int) -> list[float]:
    from components.context import AppContext, get_models
    from components.stream import RunRequest
    from specrej.arms import race_arms

    ctx = AppContext.from_env()
    req = RunRequest(**kw)
    cfg, arms = req.config(0), req.arms(ctx.arms)
    lm, reward = get_models(*ctx.resolve(req.model, req.reward, req.preference))
    out = []
    for i in range(repeats + 1):
        t = time.perf_counter()
        for _ in race_arms(lm, reward, cfg, arms):
            pass
        if i:
            out.append(time.perf_counter() - t)
        print(f"[library] race {i} {'(warm-up) ' if not i else ''}{time.perf_counter() - t:.1f} s", flush=True)
    return out


def app_times(kw: dict, repeats: int) -> list[float]:
    from gradio_client import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_ANALYTICS_ENABLED": "False", "SPECREJ_MAX_RUNS_PER_CLIENT": "100"}
    server = subprocess.Popen([sys.executable, str(ROOT / "app.py")], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.time() + 600
        while True:
            try:
                client = Client(url, verbose=False, analytics_enabled=False)
                break
            except Exception:
                if server.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the app did not start")
                time.sleep(1)
        out = []
        for i in range(repeats + 1):
            t = time.perf_counter()
            job = client.submit(api_name="/run", **{k: v for k, v in kw.items()})
            last = None
            for last in job:
                pass
            dt = time.perf_counter() - t
            status = str(last[0] if last else "")
            if "Done" not in status:
                raise RuntimeError(f"the app's race did not finish: {status[:300]}")
            if i:
                out.append(dt)
            print(f"[app] race {i} {'(warm-up) ' if not i else ''}{dt:.1f} s", flush=True)
        return out
    finally:
        server.terminate()
        server.wait(30)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a RunRequest field (the /run API's parameters), e.g. n=16; default: the page's defaults")
    p.add_argument("--repeats", type=int, default=2, help="timed races on each side (after one warm-up)")
    p.add_argument("--out", type=Path, help="write the figures here as JSON")
    args = p.parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    kw = request_kwargs(args.set)
    lib = library_times(kw, args.repeats)
    app = app_times(kw, args.repeats)
    result = {"settings": {k: v for k, v in kw.items() if k != "prompt"}, "prompt": kw["prompt"],
              "library_s": lib, "app_s": app, "library_median_s": statistics.median(lib),
              "app_median_s": statistics.median(app),
              "ratio": statistics.median(app) / statistics.median(lib), "load": os.getloadavg()[0]}
    print(f"library {result['library_median_s']:.1f} s, app {result['app_median_s']:.1f} s: "
          f"the app takes {result['ratio']:.2f}x the library's time")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
