"""A lecture-mode Run timed in Chromium at 1280x720, quiet and with other processes spinning on the cores.

    python scripts/lecture_load.py [--spinners 3] [--quiet-too] [--shot assets/lecture-1280x720.png] [--json out.json]

Serves the app as ``python app.py`` builds it (the embedded models, the page's defaults, warmed first), opens
``?lecture=1`` in Debian's headless Chromium (``/usr/bin/chromium``) and presses Run. For each Run it prints:
what played (live, or the labelled recording of the same race), the time the page stated before it started
("of about X s"), seconds from the click to the race moving (the status says "Racing" or "Replaying", a chart
has data), seconds to the end ("Done in" / "Replay done"), and the end over the stated time. ``--spinners N``
starts N processes that spin (``while True: pass``) before the Run and stops them after; ``--quiet-too`` times a
Run without them first; ``--spin-first`` starts them before the server (its warm-up and machine profile under that
load, as a server started on a busy machine; with ``SPECREJ_PROFILE_FILE`` naming an empty file's path, its first
start ever) and keeps them through every Run. ``--shot`` saves the first viewport at the end of the first Run (the README's picture).
Figures, never assertions; the machine's other load is whatever it is: say so when quoting them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HANG_GUARD_MS = 600_000
MOVING = "/Racing ·|Replaying a recording ·|Done in|Done from|Replay done/"


def spinners(n: int) -> list[subprocess.Popen]:
    """``n`` processes that spin (``while True: pass``), each in a session of its own, as other users' processes
    would be (the kernel shares the cores between sessions first); the caller kills them."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(n)]


def serve():
    sys.path.insert(0, str(ROOT))
    import app
    from components.session.context import AppContext

    ctx = AppContext.from_env({})
    t0 = time.perf_counter()
    from components.session import startup

    startup.warm(ctx)
    print(f"warmed in {time.perf_counter() - t0:.1f} s", flush=True)
    demo = app.build_demo(ctx)
    from components.deploy import memory

    memory.freeze_startup()   # as the served app does once warm (``startup.warm_in_background``)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, url, _ = app.launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, url


def one_run(browser, url: str, shot: Path | None) -> dict:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(HANG_GUARD_MS)
    try:
        page.goto(url + "?lecture=1")
        page.wait_for_selector("#run")
        page.wait_for_function("document.querySelector('#lecture input').checked")
        start = time.perf_counter()
        page.click("#run")
        page.wait_for_function(f"{MOVING}.test(document.querySelector('#status').innerText)")
        moving = time.perf_counter() - start
        said = page.inner_text("#status")
        page.wait_for_function("/Done in|Done from|Replay done|Can't|Stopped/.test(document.querySelector('#status').innerText)")
        end = time.perf_counter() - start
        status = page.inner_text("#status")
        stated = re.search(r"of about ([\d.]+) (ms|s|min)", said) or re.search(r"expected about ([\d.]+) (ms|s)", status)
        stated_s = None
        if stated:
            stated_s = float(stated.group(1)) * {"ms": 1e-3, "s": 1.0, "min": 60.0}[stated.group(2)]
        time.sleep(0.8)   # the last frame's drawing
        if shot is not None:
            page.screenshot(path=str(shot))
        played = ("recording" if "Replay" in status else
                  "live, then its recording (fell behind)" if "from the recording" in status else "live")
        return {"played": played, "stated_s": stated_s,
                "seconds_to_moving": round(moving, 1), "seconds_to_end": round(end, 1),
                "end_over_stated": round(end / stated_s, 2) if stated_s else None,
                "status_while_moving": said[:240], "status_at_end": status[:400]}
    finally:
        page.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spinners", type=int, default=3)
    ap.add_argument("--quiet-too", action="store_true")
    ap.add_argument("--spin-first", action="store_true", help="spinners from before the server starts")
    ap.add_argument("--shot", type=Path)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from playwright.sync_api import sync_playwright

    early = spinners(a.spinners) if a.spin_first else []
    if early:
        time.sleep(1.0)
    demo, url = serve()
    out = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                shot = a.shot
                if a.quiet_too and not early:
                    out["quiet"] = one_run(browser, url, shot)
                    shot = None
                    print("quiet:", json.dumps(out["quiet"]), flush=True)
                spinning = [] if early else spinners(a.spinners)
                try:
                    time.sleep(1.0)
                    out[f"{a.spinners} spinning"] = one_run(browser, url, shot)
                finally:
                    for s in spinning:
                        s.kill()
                print(f"{a.spinners} spinning{' from the start' if early else ''}:", json.dumps(out[f"{a.spinners} spinning"]), flush=True)
            finally:
                browser.close()
    finally:
        for s in early:
            s.kill()
        demo.close()
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
