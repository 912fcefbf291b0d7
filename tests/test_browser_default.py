"""The first Run a visitor makes: the page's defaults on the embedded models, in a real Chromium.

Press Run without touching anything and wait for "Done": Speculative Rejection must have made at
least 2 decisions and pruned at least three quarters of its candidates, and the result must state
the comparison at equal reward (or how much reward was lost). The time from the click to "Done"
is printed and written to ``tests/artifacts/default_run.json`` (a figure, never an assertion).

Also a tool on a quiet machine: ``python tests/test_browser_default.py`` prints the same figures.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_browser import ARTIFACTS, CHROMIUM, ARGS, VIEWPORT  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
HANG_GUARD_MS = 600_000   # only a hang guard: the run takes ~30 s on a quiet 2-core machine


def default_app():
    """The app exactly as ``python app.py`` builds it (embedded models, the page's defaults)."""
    import app
    from components.session.context import AppContext

    from conftest import launch_local

    ctx = AppContext.from_env({})
    ctx.warm()
    demo = app.build_demo(ctx)
    return demo, launch_local(demo), ctx


def first_run(url: str, shot: Path | None = None) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(HANG_GUARD_MS)
            page.goto(url)
            page.wait_for_selector("#run")
            start = time.perf_counter()
            page.click("#run")
            page.wait_for_function("document.querySelector('#status').innerText.includes('Done')",
                                   timeout=HANG_GUARD_MS)
            seconds = time.perf_counter() - start
            page.wait_for_selector("#summary table")
            time.sleep(0.5)   # the last frame's drawing
            if shot is not None:
                shot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(shot), full_page=True)
            return {"seconds_to_done": round(seconds, 1), "status": page.inner_text("#status"),
                    "summary": page.inner_text("#summary"), "leader": page.input_value("#leader-0 textarea")}
        finally:
            browser.close()


def decisions(summary: str) -> int:
    """Speculative Rejection's decisions, from the result table's 'decisions / passes' row."""
    row = next(line for line in summary.splitlines() if line.startswith("decisions / passes"))
    return int(re.search(r"(\d+) decision", row).group(1))


@pytest.fixture(scope="module")
def default_url():
    pytest.importorskip("playwright.sync_api")
    from specrej.models import EMBEDDED_GGUF, wheel_folder

    if wheel_folder(EMBEDDED_GGUF[0]) is None:
        pytest.skip("needs the embedded model wheel (scripts/setup.sh)")
    demo, url, ctx = default_app()
    yield url, ctx
    demo.close()


def test_the_default_first_run_prunes_and_states_the_speed_up(default_url):
    url, ctx = default_url
    out = first_run(url, ARTIFACTS / "default-first-run.png")
    print(f"\ndefault first run in Chromium: Done {out['seconds_to_done']} s after the click "
          f"(screenshot: {ARTIFACTS / 'default-first-run.png'})")
    (ARTIFACTS / "default_run.json").write_text(json.dumps(out, indent=1))
    assert "Done" in out["status"]
    assert decisions(out["summary"]) >= 2, out["summary"]
    # three quarters pruned: the trace of the run says which candidates were pruned
    traces = sorted(Path(ctx.trace_dir).glob("specrej-trace-*.json"), key=lambda p: p.stat().st_mtime)
    trace = json.loads(traces[-1].read_text())
    sr = next(e for e in reversed(trace["events"]) if e["event"] == "finished" and e["arm"] == "sr")
    pruned = sum(c["status"] == "pruned" for c in sr["candidates"])
    assert pruned >= 0.75 * len(sr["candidates"]), (pruned, len(sr["candidates"]))
    # the result says the speed-up at equal reward, or plainly that reward was lost and how much
    assert "Speed-up" in out["summary"]
    assert re.search(r"matched Best-of-N's reward|reached [\d.]+% of Best-of-N's reward", out["summary"]), out["summary"]


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the app, run from anywhere
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    demo, url, _ = default_app()
    try:
        print(json.dumps(first_run(url, ARTIFACTS / "default-first-run.png"), indent=1))
    finally:
        demo.close()
