"""What the live charts cost the browser that draws them: bytes received, main-thread busy time and the longest
task, over the default Run (or a paced replay), in Chromium with its CPU throttled (a slow projector laptop).

    python scripts/chart_load.py [--root CHECKOUT] [--throttle 4] [--replay PACE] [--lecture] [--json out.json]
                                 [--profile out.cpuprofile] [--timeline]

Serves the app of ``--root`` (default: this checkout; another worktree measures "before") in this process as
``python app.py`` builds it (the embedded models, warmed first), opens it in Debian's headless Chromium
(``/usr/bin/chromium``) at 1280x720, throttles the page's CPU through the DevTools protocol
(``Emulation.setCPUThrottlingRate``) once an instant Replay has drawn charts (plotly.js loaded: a lecturer's page
after its first race), and presses Run with the page's defaults (``--replay PACE``: Replay of the
first example prompt's recorded paper-scale race at that pace: 1, 4, 16 or inf). From the click to the end
("Done in", "Replay done") plus 2 s for the last frame's drawing it reads:

- bytes: what the page received on Gradio's event stream (``/queue/data``; CDP ``Network.dataReceived``: on the
  wire and decoded), in all and per second of the race (and, apart, what every request brought);
- busy: the main thread's task time (CDP ``Performance.getMetrics`` ``TaskDuration``, a difference), in seconds
  and as a share of the window;
- long tasks: a ``PerformanceObserver`` of type ``longtask`` (tasks over 50 ms): how many, their sum, the longest.

It prints the CPU (``/proc/cpuinfo``) and the load (``os.getloadavg``) before and after. Figures, never assertions:
the machine's other load is whatever it is; say so when quoting them.

``--profile FILE`` also samples the page's JavaScript over the same window (CDP ``Profiler``, every 1 ms), writes the
profile (Chromium's DevTools open it) and prints where the main thread's time went: self time by script and the
functions that took most. The sampler costs time of its own: quote busy and long tasks from a run without it.
``--timeline`` records Chromium's own timeline over the window (CDP ``Tracing``, category ``devtools.timeline``) and
prints the main thread's self time by kind of work (style, layout, paint, script, parsing...), the split a profile's
"(program)" hides; it too costs time of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HANG_GUARD_MS = 900_000
DONE = "/Done in|Done from|Replay done|Can't|Stopped/"
STATUS = "document.querySelector('#status [data-testid=markdown]')"   # the words, not Gradio's progress timer
LONG_TASKS = """(() => {
  window.__longTasks = [];
  try {
    new PerformanceObserver(list => { for (const e of list.getEntries()) window.__longTasks.push([e.startTime, e.duration]); })
      .observe({type: 'longtask', buffered: true});
  } catch (e) {}
})();"""


def serve(root: Path, warm: bool = True):
    sys.path.insert(0, str(root))
    os.chdir(root)
    import app
    from components.session.context import AppContext

    print(f"serving {Path(app.__file__).resolve()}", flush=True)
    ctx = AppContext.from_env({})
    if warm:   # a replay needs no model: nothing to warm
        t0 = time.perf_counter()
        try:
            from components.session import startup   # the warm-up's room (issue 61)
        except ImportError:   # a checkout from before it (--root): the context warmed itself
            ctx.warm()
        else:
            startup.warm(ctx)
        print(f"warmed in {time.perf_counter() - t0:.1f} s", flush=True)
    demo = app.build_demo(ctx)
    from components.deploy import memory

    memory.freeze_startup()   # as the served app does once warm
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, url, _ = app.launch(demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, url


def metric(cdp, name: str) -> float:
    return next((m["value"] for m in cdp.send("Performance.getMetrics")["metrics"] if m["name"] == name), 0.0)


def where(profile: dict, top: int = 14) -> dict:
    """A CDP CPU profile's self time by script (its file name) and its costliest functions (name, file, line), in
    ms; "(idle)" and "(program)" (the browser's own work outside scripts) apart."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    times = profile.get("timeDeltas") or []
    self_us: dict[int, float] = {}
    for sample, dt in zip(profile.get("samples") or [], times[1:] + [0]):
        self_us[sample] = self_us.get(sample, 0.0) + dt
    by_script, by_fn = {}, {}
    for nid, us in self_us.items():
        f = nodes[nid]["callFrame"]
        script = f.get("url", "").split("?")[0].rsplit("/", 1)[-1] or f.get("functionName") or "(native)"
        by_script[script] = by_script.get(script, 0.0) + us
        fn = f"{f.get('functionName') or '(anonymous)'} {script}:{f.get('lineNumber', -1) + 1}"
        by_fn[fn] = by_fn.get(fn, 0.0) + us
    ms = lambda d: {k: round(v / 1000) for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]}
    return {"by_script_ms": ms(by_script), "top_functions_ms": ms(by_fn)}


def _spread(values: list) -> dict | None:
    """Median, 90th percentile and largest of some numbers (None for none)."""
    if not values:
        return None
    v = sorted(values)
    return {"median": v[len(v) // 2], "p90": v[min(len(v) - 1, int(0.9 * len(v)))], "max": v[-1]}


def _main_spans(events: list) -> list[dict]:
    """The renderer main thread's complete events (CDP Tracing), in order, an outer one before those nested in it."""
    main = {(e.get("pid"), e.get("tid")) for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("args", {}).get("name") == "CrRendererMain"}
    return sorted((e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid")) in main and e.get("dur")),
                  key=lambda e: (e["ts"], -e["dur"]))


def _self_ms(spans: list[dict], name=lambda e: e["name"], top: int = 14) -> dict:
    """Self time by ``name(event)`` in ms, largest first: each event's duration less that of the events nested in it
    (``spans`` in ``_main_spans``'s order)."""
    self_us: dict[str, float] = {}
    stack: list[list] = []   # [end, name, self]
    def close(until):
        while stack and stack[-1][0] <= until:
            _, what, own = stack.pop()
            self_us[what] = self_us.get(what, 0.0) + own
    for e in spans:
        close(e["ts"])
        if stack:
            stack[-1][2] -= e["dur"]
        stack.append([e["ts"] + e["dur"], name(e), float(e["dur"])])
    close(float("inf"))
    return {k: round(v / 1000) for k, v in sorted(self_us.items(), key=lambda kv: -kv[1])[:top]}


def timeline_split(events: list, top: int = 14) -> dict:
    """Chromium timeline events (CDP Tracing) as the renderer main thread's self time by event name, in ms."""
    return _self_ms(_main_spans(events), top=top)


def _label(e: dict) -> str:
    """A timeline event's name, with what it ran where the trace says (a script's file, an event's type)."""
    data = (e.get("args") or {}).get("data") or {}
    if e["name"] == "FunctionCall" and data.get("url"):
        return f"FunctionCall {data['url'].rsplit('/', 1)[-1].split('?')[0]} {data.get('functionName') or ''}".strip()
    if e["name"] == "EventDispatch" and data.get("type"):
        return f"EventDispatch {data['type']}"
    return e["name"]


def _sampled(profile: dict | None, start_us: float, end_us: float, parts: int) -> dict:
    """A CDP CPU profile's self time between two timeline times (the same clock), by the script a sample's innermost
    frame ran and where the caller chain met one of the page's own scripts or Gradio's: {what: ms}."""
    if not profile:
        return {}
    nodes = {n["id"]: n for n in profile["nodes"]}
    parent = {c: n["id"] for n in profile["nodes"] for c in n.get("children", [])}
    def chain(nid):
        out = []
        while nid in nodes:
            f = nodes[nid]["callFrame"]
            out.append(f"{f.get('functionName') or '(anonymous)'}@{f.get('url', '').split('?')[0].rsplit('/', 1)[-1]}")
            nid = parent.get(nid)
        return out
    got: dict[str, float] = {}
    t = profile.get("startTime", 0)
    for sample, dt in zip(profile.get("samples") or [], profile.get("timeDeltas") or []):
        t += dt
        if start_us <= t <= end_us:
            frames = [f for f in chain(sample) if not f.startswith("(root)")]
            if not frames or frames[0].startswith("(idle)"):
                continue
            outer = next((f for f in reversed(frames) if "@" in f and not f.endswith("@")), frames[0])
            key = f"{frames[0].rsplit('@', 1)[-1] or frames[0]} < {outer}"
            got[key] = got.get(key, 0.0) + dt
    return {k: round(v / 1000) for k, v in sorted(got.items(), key=lambda kv: -kv[1])[:parts]}


def longest_split(events: list, top: int = 5, parts: int = 5, profile: dict | None = None) -> list:
    """The renderer main thread's ``top`` longest tasks (``RunTask``), each as [ms, {what: self ms}] with its
    ``parts`` largest pieces of work by ``_label``: what a long task was made of; with a CPU profile of the same
    window, a third item: its JavaScript by script, innermost < outermost named frame (``_sampled``)."""
    spans = _main_spans(events)
    tasks = []
    for e in sorted((e for e in spans if e["name"] in ("RunTask", "ThreadControllerImpl::RunTask")),
                    key=lambda e: -e["dur"]):
        if not any(t["ts"] <= e["ts"] and e["ts"] + e["dur"] <= t["ts"] + t["dur"] for t in tasks):   # one a task
            tasks.append(e)
        if len(tasks) == top:
            break
    out = []
    for task in tasks:
        end = task["ts"] + task["dur"]
        inner = [e for e in spans if task["ts"] <= e["ts"] and e["ts"] + e["dur"] <= end and e is not task
                 and e["name"] not in ("RunTask", "ThreadControllerImpl::RunTask")]
        out.append([round(task["dur"] / 1000), _self_ms(inner, _label, parts)]
                   + ([_sampled(profile, task["ts"], end, parts)] if profile else []))
    return out


def one(browser, url: str, throttle: float, replay: str | None, lecture: bool, profile: Path | None = None,
        timeline: bool = False) -> dict:
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(HANG_GUARD_MS)
    page.add_init_script(LONG_TASKS)
    cdp = page.context.new_cdp_session(page)
    got = {"wire": 0, "decoded": 0, "on": False, "all": 0}
    urls, by_url = {}, {}

    def sent(e):
        urls[e["requestId"]] = e.get("request", {}).get("url", "")

    def received(e):
        if got["on"]:
            got["all"] += e.get("dataLength", 0) or 0
            url = urls.get(e.get("requestId"), "?").split("?")[0]
            by_url[url] = by_url.get(url, 0) + (e.get("dataLength", 0) or 0)
            if "/queue/data" in url:   # the race's messages: Gradio's event stream (not static files, plotly.js)
                got["wire"] += e.get("encodedDataLength", 0) or 0
                got["decoded"] += e.get("dataLength", 0) or 0

    try:
        cdp.send("Network.enable")
        cdp.on("Network.requestWillBeSent", sent)
        cdp.on("Network.dataReceived", received)
        cdp.send("Performance.enable")
        page.goto(url + ("?lecture=1" if lecture else ""))
        page.wait_for_selector("#run")
        # a page that has drawn charts before, as a lecturer's is after the first race: an instant replay first
        # loads plotly.js (4.6 MB of script, parsed once) and the fonts; then the CPU is throttled
        page.click("#pace input[value='inf']")
        page.click("#replay")
        page.wait_for_function(f"{DONE}.test(document.querySelector('#status').innerText)", polling=250)
        time.sleep(2.0)
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": throttle})
        if replay is not None:
            page.click(f"#pace input[value='{replay}']")
            page.wait_for_function(f"document.querySelector(\"#pace input[value='{replay}']\").checked")
            time.sleep(1.0)
        page.evaluate("window.__longTasks.length = 0")
        script0 = page.evaluate("window.specrejCharts && window.specrejCharts.cost ? window.specrejCharts.cost() : null")
        busy0 = metric(cdp, "TaskDuration")
        if profile is not None:
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 1000})
            cdp.send("Profiler.start")
        traced: list = []
        if timeline:
            cdp.on("Tracing.dataCollected", lambda e: traced.extend(e.get("value", [])))
            cdp.send("Tracing.start", {"categories": "toplevel,devtools.timeline,v8.execute,blink,disabled-by-default-devtools.timeline",
                                       "transferMode": "ReportEvents"})
        got["on"] = True
        start = time.perf_counter()
        before = page.evaluate(f"{STATUS}.innerText")
        clicked = page.evaluate("performance.now()")
        page.click("#replay" if replay is not None else "#run")
        # as a watcher does: the arm charts at the top of the window (the button's click scrolled up to it)
        page.evaluate("document.querySelector('#plot-0').scrollIntoView({block: 'start'})")
        page.wait_for_function(f"old => {STATUS}.innerText !== old", arg=before, polling=100)
        page.wait_for_function(f"{DONE}.test({STATUS}.innerText)", polling=250)
        race_s = time.perf_counter() - start
        ended = page.evaluate("performance.now()")
        status = page.inner_text("#status")
        try:   # the last frame's drawing: charts.js's queue empty (a checkout before it has none), then 2 s more
            page.wait_for_function("!window.specrejCharts || !window.specrejCharts.idle || window.specrejCharts.idle()",
                                   polling=100, timeout=30_000)
        except Exception:   # (a page still drawing after 30 s: counted as it stands)
            pass
        time.sleep(2.0)
        window_s = time.perf_counter() - start
        got["on"] = False
        busy = metric(cdp, "TaskDuration") - busy0
        split = None
        if timeline:
            done = {"yes": False}
            cdp.on("Tracing.tracingComplete", lambda e: done.update(yes=True))
            cdp.send("Tracing.end")
            t_end = time.perf_counter() + 60
            while not done["yes"] and time.perf_counter() < t_end:
                page.wait_for_timeout(100)
        sampled, prof = None, None
        if profile is not None:
            prof = cdp.send("Profiler.stop")["profile"]
            profile.write_text(json.dumps(prof))
            sampled = where(prof)
        if timeline:
            split = {"self_ms": timeline_split(traced), "longest": longest_split(traced, profile=prof)}
        tasks = page.evaluate("window.__longTasks")
        script = page.evaluate("window.specrejCharts && window.specrejCharts.cost ? window.specrejCharts.cost() : null")
        longest = max((d for _, d in tasks), default=0.0)
        played = ("recording" if "Replay" in status else
                  "live, then its recording (fell behind)" if "from the recording" in status else "live")
        return {"played": played, "race_s": round(race_s, 1), "window_s": round(window_s, 1),
                "bytes_wire": got["wire"], "bytes_decoded": got["decoded"], "bytes_any_request": got["all"],
                "bytes_by_url": {k: v for k, v in sorted(by_url.items(), key=lambda kv: -kv[1])[:4]},
                "bytes_per_s": round(got["decoded"] / max(race_s, 1e-9)),
                "busy_s": round(busy, 2), "busy_share": round(busy / window_s, 3),
                "long_tasks": len(tasks), "long_tasks_ms": round(sum(d for _, d in tasks)),
                "longest_task_ms": round(longest),
                # the five longest, each as [seconds from the click, ms]; the race's end was seen at "ended_s"
                "longest_tasks": [[round((t - clicked) / 1000, 2), round(d)] for t, d in sorted(tasks, key=lambda x: -x[1])[:5]],
                "ended_s": round((ended - clicked) / 1000, 2),
                "charts_js": None if script is None else {   # assets/charts.js's own time (absent before it)
                    "draws": script["draws"] - script0["draws"], "draw_ms": round(script["draw_ms"] - script0["draw_ms"]),
                    "draw_max_ms": round(script["draw_max_ms"]), "feed_ms": round(script["feed_ms"] - script0["feed_ms"]),
                    "by_chart_ms": {k: round(v - script0["by"].get(k, 0)) for k, v in script["by"].items()},
                    # how late the draws showed their chart's changes (ms from its oldest change not yet drawn)
                    "lag_ms": _spread(script.get("lags", [])[len(script0.get("lags", [])):]),
                    # by the way a draw went: [draws, ms, longest ms, longest ms before Plotly's later tasks]
                    "by_way": {k: [v[0] - script0.get("ways", {}).get(k, [0, 0])[0],
                                   round(v[1] - script0.get("ways", {}).get(k, [0, 0])[1]), round(v[2]), round(v[3])]
                               for k, v in script.get("ways", {}).items()}},
                **({"profile": sampled} if sampled else {}), **({"timeline": split} if split else {}),
                "status_at_end": status[:300]}
    finally:
        page.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--throttle", type=float, default=4.0)
    ap.add_argument("--replay", choices=["1", "4", "16", "inf"], help="Replay the first example at this pace")
    ap.add_argument("--lecture", action="store_true", help="open the page with ?lecture=1")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", type=Path, help="also sample the page's JavaScript; the profile is written here")
    ap.add_argument("--timeline", action="store_true", help="also split the main thread's time by kind of work")
    a = ap.parse_args()
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    out_path = a.json.resolve() if a.json else None
    from playwright.sync_api import sync_playwright

    demo, url = serve(a.root.resolve(), warm=a.replay is None)
    from specrej.origin import cpu_name   # (the served checkout's: every one has it)
    out = {"root": str(a.root.resolve()), "cpu": cpu_name(), "cores": os.cpu_count(),
           "load_before": [round(x, 2) for x in os.getloadavg()], "throttle": a.throttle,
           "what": f"replay at {a.replay}" if a.replay else "the default Run", "runs": []}
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}), flush=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                for _ in range(a.runs):
                    r = one(browser, url, a.throttle, a.replay, a.lecture, a.profile.resolve() if a.profile else None, a.timeline)
                    r["load_after"] = [round(x, 2) for x in os.getloadavg()]
                    out["runs"].append(r)
                    print(json.dumps(r), flush=True)
            finally:
                browser.close()
    finally:
        demo.close()
    if out_path:
        out_path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
