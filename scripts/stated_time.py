"""What the page states a race will take, from a server started quiet and from one started with other processes
spinning (issue 61: "a busy start-up is never taken for quiet"):

    python scripts/stated_time.py [--spinners 3] [--json out.json]

Each start is ``python app.py``'s warm-up (the embedded models, the step compiled and the machine profiled) in a
process of its own, with no kept profile (``SPECREJ_PROFILE_FILE=off``: each start measures for itself); then the
planner is asked what a press of Run with the page's defaults does, on the normal page and in lecture mode, for
every example prompt. It prints, per start, the profile's own words and per prompt: the plan (live or a
recording), the time the page states before it plays (a live race's estimate; a lecture recording's stated time)
and, for the loaded start, that over the quiet start's. The spinners (``while True: pass``, each in a session of
its own, as another user's process) start before the server and stop when its plans are read. Figures, never
assertions; run it on an otherwise quiet machine (``uptime``) and say the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child() -> None:
    """One start: warm as the app does, then print the plans as one JSON line."""
    import dataclasses

    from components import ui
    from components.session import planner, startup
    from components.session.context import AppContext
    from components.state.request import RunRequest

    t0 = time.perf_counter()
    ctx = AppContext.from_env(os.environ)
    startup.warm(ctx)
    warm_s = time.perf_counter() - t0
    values = {f.name: f.default for f in dataclasses.fields(RunRequest)}
    values.update({k: v for k, v in ui.link_defaults(ctx).items() if v not in ("", None)})   # as the page sends
    values.update(model=ctx.default_model)
    rows = []
    for prompt in ctx.examples:
        row = {"prompt": prompt[:40]}
        for mode, lecture in (("page", False), ("lecture", True)):
            p = planner.plan(ctx, planner.Press.RUN, {**values, "prompt": prompt, "lecture": lecture})
            stated = (p.fallback or {}).get("stated_s") if p.action == planner.RECORDING else \
                (p.fit.estimate_s if p.fit is not None else None)
            row[mode] = {"action": p.action, "stated_s": None if stated is None else round(stated, 2)}
        rows.append(row)
    print(json.dumps({"warm_s": round(warm_s, 1), "profile": ctx.machine.profile().when(ctx.default_model),
                      "loadavg": os.getloadavg()[0], "plans": rows}), flush=True)


def start(spinners: int) -> dict:
    env = {**os.environ, "SPECREJ_PROFILE_FILE": "off", "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(spinners)]
    try:
        time.sleep(1.0 if spinners else 0.0)
        out = subprocess.run([sys.executable, __file__, "--child"], env=env, cwd=ROOT, capture_output=True,
                             text=True, check=True)
    finally:
        for s in spin:
            s.kill()
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spinners", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child()
        return
    from specrej.origin import cpu_name

    print(f"{cpu_name()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} before the first start")
    quiet = start(0)
    loaded = start(a.spinners)
    for name, s in (("quiet start", quiet), (f"start with {a.spinners} spinning", loaded)):
        print(f"{name}: warm-up {s['warm_s']} s; profile {s['profile']}")
    print(f"{'prompt':42} {'page: quiet / loaded start':>34} {'lecture: quiet / loaded start':>40}")
    for q, b in zip(quiet["plans"], loaded["plans"]):
        cells = []
        for mode in ("page", "lecture"):
            qs, bs = q[mode]["stated_s"], b[mode]["stated_s"]
            ratio = f" ({bs / qs:.2f}x)" if qs and bs else ""
            cells.append(f"{q[mode]['action'][:9]} {qs} s / {b[mode]['action'][:9]} {bs} s{ratio}")
        print(f"{q['prompt']:42} {cells[0]:>34} {cells[1]:>40}")
    if a.json:
        a.json.write_text(json.dumps({"quiet": quiet, "loaded": loaded}, indent=1))


if __name__ == "__main__":
    main()
