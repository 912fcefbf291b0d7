"""Every button in every state, clicked in Chromium at 1280x720 with other processes spinning: seconds from each
click to the page's first movement, and the planner's own time.

    python scripts/click_latency.py [--spinners 3] [--spin-first] [--json out.json]

Serves the app as ``python app.py`` builds it (the embedded models, the page's defaults, warmed first: the machine
profile is measured then, before the spinners start; with ``--spin-first`` after, as a server started on a busy
machine), starts ``--spinners`` processes that spin (``while True: pass``, each in a session of its own as another
user's process would be: the kernel shares the cores between sessions first; killed at the end), and drives the
page through its states twice: in lecture mode (``?lecture=1``: every control but Stop is locked while something plays, and the space bar is Run or Stop) and on the normal page (Run,
Replay and Run it live pressed while something plays stop it and start their own play). For each click it prints
the state, what was pressed and the seconds until the page moved:

- a play button (Run, Replay, Run it live, the space bar as Run): the status line carries the new play's id (the
  ``play-N`` class of a frame drawn by the new play's own handler, not the instant "Starting…" of the press);
  ``chart_s``: a chart of the new play on screen with data;
- Stop (and the space bar as Stop): the status says "Stopped" / "Stepping ended" / "Nothing to stop";
- Paper scale: its note says what it set; the step buttons: the status names the decision shown or the result.

Figures, never assertions; say the CPU and the load when quoting them. The planner's time is every
``planner.plan`` call made meanwhile (median and maximum).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from lecture_load import ARGS, CHROMIUM, serve, spinners  # noqa: E402  (the same server, browser flags and spinners)
from specrej.origin import cpu_name  # noqa: E402
from playwright.sync_api import TimeoutError as PlaywrightTimeout  # noqa: E402

HANG_MS = 300_000
LOCK_S = 2.0
ANSWER_MS = 60_000
STATUS = "document.querySelector('#status [data-testid=markdown]').innerText"
CLS = "document.querySelector('#status').className"
PLAY = "(() => { const c = [...document.querySelector('#status').classList].find(c => c.startsWith('play-')); " \
       "return c ? Number(c.slice(5)) : 0; })()"
CHART = "(() => Math.max(0, ...[...document.querySelectorAll('.js-plotly-plot')].filter(el => el.offsetParent !== null " \
        "&& el.layout && el.layout.meta && el.layout.meta.play && (el.data || []).some(t => (t.x || []).length))" \
        ".map(el => el.layout.meta.play)))()"
PLANS: list[float] = []


def watch_planner() -> None:
    from components.session import planner

    real = planner.plan

    def timed(*a, **kw):
        p = real(*a, **kw)
        PLANS.append(p.planned_s)
        return p

    planner.plan = timed


def server_threads() -> None:
    """The app's threads now (the server runs in this process), on stderr: where a click that never answered waits."""
    import traceback

    for tid, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame)[-10:])
        if any(k in stack for k in ("specrej", "components", "app.py")):
            print(f"--- thread {tid}\n{stack}", file=sys.stderr, flush=True)


class Driver:
    def __init__(self, page, mode: str):
        self.page, self.mode, self.rows = page, mode, []

    def status(self) -> str:
        return self.page.evaluate(STATUS)

    def wait(self, js: str) -> None:
        self.page.wait_for_function(js, timeout=HANG_MS, polling="raf")

    def click(self, state: str, what: str, sel: str | None, moved: str, *, key: str | None = None,
              play: bool = False) -> dict:
        """Press ``sel`` (or ``key``) in ``state``; seconds until ``moved`` (JS) holds.

        A button named "(locked)" is one the state should have locked: it is given ``LOCK_S`` to lock (a lock that
        lands later is a window a visitor can press it in, so it is then pressed and the row says so). Any other
        button is waited for until it is enabled (``unlock_s`` in the row: a pause after a Stop is a dead pause the
        visitor sees, counted apart from the click)."""
        row = {"mode": self.mode, "state": state, "pressed": what}
        if sel is not None and "(locked)" in what:
            try:
                self.page.wait_for_function(f"document.querySelector('{sel}').disabled", timeout=LOCK_S * 1000)
                row.update(s=None, note="locked (disabled)")
                self.rows.append(row)
                print(json.dumps(row), flush=True)
                return row
            except PlaywrightTimeout:
                row["note"] = f"not locked {LOCK_S} s into the state: pressed"
        elif sel is not None:
            t = time.perf_counter()
            self.wait(f"!document.querySelector('{sel}').disabled")
            if (u := time.perf_counter() - t) > 0.05:
                row["unlock_s"] = round(u, 2)
        before = self.page.evaluate(PLAY)
        row["at"] = round(time.time(), 3)   # the wall clock of the click: to line it up with a server's own log
        t0 = time.perf_counter()
        if key is not None:
            self.page.keyboard.press(key)
        else:
            self.page.click(sel)
        cond = f"({PLAY}) > {before} && ({moved})" if play else moved
        try:
            self.page.wait_for_function(cond, timeout=ANSWER_MS, polling="raf")
            row["s"] = round(time.perf_counter() - t0, 2)
            if play:
                self.page.wait_for_function(f"({CHART}) > {before}", timeout=ANSWER_MS, polling="raf")
                row["chart_s"] = round(time.perf_counter() - t0, 2)
        except PlaywrightTimeout:   # a click that never answered: the row says what the page showed, the tour goes on
            row.setdefault("s", None)
            server_threads()
            row["note"] = f"no answer in {ANSWER_MS // 1000} s: status {self.status()[:120]!r}, " \
                          f"class {self.page.evaluate(CLS)[:60]!r}"
        row["status"] = self.status()[:90].replace("\n", " ")
        self.rows.append(row)
        print(json.dumps(row), flush=True)
        return row

    def until(self, pattern: str) -> None:
        self.wait(f"/{pattern}/.test({STATUS})")


MOVING = f"/Racing|Replaying|Starting|Done|Stepping|Can.t|Warming/.test({STATUS})"
STOPPED = f"/Stopped|Stepping ended|Nothing to stop/.test({STATUS})"


def pace(page, label: str) -> None:
    """Pick a replay pace (a resting control: waited for until it unlocks)."""
    page.locator("#pace label", has_text=label).locator("input").check()


def lecture_tour(d: Driver) -> None:
    p = d.page
    pace(p, "real pace")
    d.click("idle", "Run", "#run", MOVING, play=True)
    d.click("racing", "Replay (locked)", "#replay", MOVING, play=True)
    d.click("racing", "Stop", "#stop", STOPPED)
    d.click("stopped", "Replay", "#replay", MOVING, play=True)
    d.click("replaying", "Run (locked)", "#run", MOVING, play=True)
    d.click("replaying", "space (Stop)", None, STOPPED, key=" ")
    d.click("stopped", "space (Run)", None, MOVING, key=" ", play=True)
    d.click("racing", "space (Stop)", None, STOPPED, key=" ")
    d.click("stopped", "Run", "#run", MOVING, play=True)
    d.until("Done in|Done from|Replay done")
    d.click("done", "Replay (the paper-scale recording)", "#replay", MOVING, play=True)
    d.click("replaying", "Stop", "#stop", STOPPED)
    pace(p, "instant")
    d.click("stopped", "Replay (instant)", "#replay", MOVING, play=True)
    d.until("Replay done")
    pace(p, "real pace")
    d.click("done (a replay)", "Run it live", "#run-live", MOVING, play=True)
    d.click("racing", "Stop", "#stop", STOPPED)
    d.click("stopped", "Paper scale", "#paper-scale",
            "/Paper scale set|Paper scale live would take|Replaying/.test(document.querySelector('#paper-note').innerText"
            f" + {STATUS})")
    d.click("after Paper scale", "Stop", "#stop", STOPPED)
    p.check("#step input")
    d.click("stopped (step mode)", "Run", "#run", MOVING, play=True)
    d.click("racing (step mode)", "Stop", "#stop", STOPPED)
    pace(p, "instant")
    d.click("stopped (step mode)", "Replay (instant)", "#replay", MOVING, play=True)
    d.until("Stepping through the decisions")
    d.click("stepping, decision 1", "Next", "#step-next", f"/decision 2 of/.test({STATUS})")
    d.click("stepping, decision 2", "Previous", "#step-prev", f"/decision 1 of/.test({STATUS})")
    d.click("stepping, decision 1", "space (Next)", None, f"/decision 2 of/.test({STATUS})", key=" ")
    d.click("stepping, decision 2", "Page Down (Next)", None, f"/decision 3 of|decision 2 of/.test({STATUS})",
            key="PageDown")
    d.click("stepping", "Run to the end", "#step-end", f"/Done in|Done from|Replay done/.test({STATUS})")
    d.click("done (stepped)", "Replay (instant)", "#replay", MOVING, play=True)
    d.until("Stepping through the decisions")
    d.click("stepping", "Stop", "#stop", STOPPED)
    pace(p, "real pace")
    p.uncheck("#step input")


def page_tour(d: Driver) -> None:
    pace(d.page, "real pace")
    d.click("idle", "Run", "#run", MOVING, play=True)
    d.click("racing", "Replay", "#replay", MOVING, play=True)
    d.click("replaying", "Run", "#run", MOVING, play=True)
    d.click("racing", "Run", "#run", MOVING, play=True)
    d.click("racing", "Stop", "#stop", STOPPED)
    d.click("stopped", "Replay", "#replay", MOVING, play=True)
    d.click("replaying", "Stop", "#stop", STOPPED)
    pace(d.page, "instant")
    d.click("stopped", "Replay (instant)", "#replay", MOVING, play=True)
    d.until("Replay done")
    pace(d.page, "real pace")
    d.click("done (a replay)", "Run it live", "#run-live", MOVING, play=True)
    d.click("racing", "Paper scale", "#paper-scale",
            "/Paper scale set|Paper scale live would take|Replaying/.test(document.querySelector('#paper-note').innerText"
            f" + {STATUS})")
    d.click("after Paper scale", "Stop", "#stop", STOPPED)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spinners", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", choices=["lecture", "page"])
    ap.add_argument("--spin-first", action="store_true",
                    help="start the spinners before the server (its warm-up and machine profile under that load)")
    a = ap.parse_args()
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from playwright.sync_api import sync_playwright

    spinning = spinners(a.spinners) if a.spin_first else []
    demo, url = serve()
    watch_planner()
    rows = []
    spinning = spinning or spinners(a.spinners)
    try:
        time.sleep(1.0)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                for mode, tour, query in (("lecture", lecture_tour, "?lecture=1"), ("page", page_tour, "")):
                    if a.only and a.only != mode:
                        continue
                    page = browser.new_page(viewport={"width": 1280, "height": 720})
                    page.set_default_timeout(HANG_MS)
                    page.goto(url + query)
                    page.wait_for_selector("#run")
                    d = Driver(page, mode)
                    try:
                        tour(d)
                    finally:
                        rows += d.rows
                        page.close()
            finally:
                browser.close()
    finally:
        for s in spinning:
            s.kill()
        demo.close()
    timed = [r["s"] for r in rows if r["s"] is not None]
    summary = {"clicks": len(rows), "timed": len(timed), "slowest_s": max(timed, default=None),
               "median_s": statistics.median(timed) if timed else None,
               "over_2s": [r for r in rows if r["s"] is not None and r["s"] > 2.0],
               "unlock_over_2s": [r for r in rows if r.get("unlock_s", 0) > 2.0],
               "unanswered": [r for r in rows if str(r.get("note", "")).startswith("no answer")],
               "pressed_unlocked": [r for r in rows if str(r.get("note", "")).startswith("not locked")],
               "planner_ms": {"calls": len(PLANS), "median": round(1000 * statistics.median(PLANS), 1) if PLANS else None,
                              "max": round(1000 * max(PLANS), 1) if PLANS else None},
               "cpu": cpu_name(), "spinners": a.spinners, "spin_first": a.spin_first, "loadavg_end": os.getloadavg()[0]}
    print(json.dumps(summary, indent=1))
    if a.json:
        a.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
