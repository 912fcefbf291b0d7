"""What the page states a race will take, from a server started quiet and from one started with other processes
spinning (issue 61: "a busy start-up is never taken for quiet"):

    python scripts/stated_time.py [--spinners 3] [--json out.json]

Each start is ``python app.py``'s warm-up (the embedded models, the step compiled and the machine profiled) in a
process of its own; then the
planner is asked what a press of Run with the page's defaults does, on the normal page and in lecture mode, for
every example prompt. It prints, per start, the profile's own words and per prompt: the plan (live or a
recording), the time the page states before it plays (a live race's estimate; a lecture recording's stated time)
and, for the loaded start, that over the quiet start's. The spinners (``while True: pass``, each in a session of
its own, as another user's process) start before the server and stop when its plans are read. Three starts: quiet
(its profile kept in a file of its own), with spinners and no kept profile (a fresh clone's first start), and with
spinners and the quiet start's kept profile (``SPECREJ_PROFILE_FILE``, as every later start here). Figures, never
assertions; run it on an otherwise quiet machine (``uptime``) and say the CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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
            # what the page states before it plays: a recording's stated time; a live race's time here when quiet
            # (``Fit.quiet_s``, the status line's "about N s"; its estimate now, under this moment's load, beside it)
            stated = (p.fallback or {}).get("stated_s") if p.action == planner.RECORDING else \
                (p.fit.quiet_s if p.fit is not None else None)
            now = p.fit.estimate_s if p.action != planner.RECORDING and p.fit is not None else None
            row[mode] = {"action": p.action, "stated_s": None if stated is None else round(stated, 2),
                         "now_s": None if now is None else round(now, 2)}
        rows.append(row)
    print(json.dumps({"warm_s": round(warm_s, 1), "profile": ctx.machine.profile().when(ctx.default_model),
                      "loadavg": os.getloadavg()[0], "plans": rows}), flush=True)


def start(spinners: int, profile: str) -> dict:
    env = {**os.environ, "SPECREJ_PROFILE_FILE": profile, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"}
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
    kept = str(Path(tempfile.mkdtemp(prefix="specrej-profile-")) / "machine-profile.json")
    starts = {"quiet start": start(0, kept),
              f"{a.spinners} spinning, no kept profile": start(a.spinners, "off"),
              f"{a.spinners} spinning, the quiet start's profile kept": start(a.spinners, kept)}
    for name, s in starts.items():
        print(f"{name}: warm-up {s['warm_s']} s, load average {s['loadavg']:.1f}; profile {s['profile']}")
    quiet = starts["quiet start"]
    for name, b in list(starts.items())[1:]:
        print(f"\n{name}, against the quiet start (stated s: quiet / this start, the ratio)")
        for q, r in zip(quiet["plans"], b["plans"]):
            cells = []
            for mode in ("page", "lecture"):
                qs, bs = q[mode]["stated_s"], r[mode]["stated_s"]
                ratio = f" = {bs / qs:.2f}x" if qs and bs else ""
                cells.append(f"{mode}: {q[mode]['action']} {qs} / {r[mode]['action']} {bs}{ratio}")
            print(f"  {q['prompt']:42} " + " | ".join(cells))
    if a.json:
        a.json.write_text(json.dumps(starts, indent=1))


if __name__ == "__main__":
    main()
