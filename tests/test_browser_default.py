"""The first Run a visitor makes: the page's defaults on the embedded models, in a real Chromium.

Press Run without touching anything and wait for "Done": Speculative Rejection must have made at
least 2 decisions and the result must state the verdict in time to equal reward; the same with both
cores busy with other processes (the race is fitted to the machine first). A recording in step mode,
its badge, chart downloads, a link that reproduces the settings, and every width (390 px, 1280x720,
light and dark). The time from the click to "Done" is printed and written to
``tests/artifacts/default_run.json`` (a figure, never an assertion).

Also a tool on a quiet machine: ``python tests/test_browser_default.py`` prints the same figures.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
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
    from components.session import startup

    startup.warm(ctx)
    demo = app.build_demo(ctx)
    return demo, launch_local(demo), ctx


def with_browser(fn, *args, browser=None):
    """``fn(browser, *args)`` with ``browser``, or with a Chromium of its own (one playwright per thread)."""
    if browser is not None:
        return fn(browser, *args)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            return fn(b, *args)
        finally:
            b.close()


def ready_page(browser, url: str):
    """A new page on ``url``, loaded (its Run button drawn), with the hang guard as its timeout."""
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(HANG_GUARD_MS)
    page.goto(url)
    page.wait_for_selector("#run")
    return page


def _first_run(browser, url: str, shot: Path | None) -> dict:
    page = ready_page(browser, url)
    try:
        start = time.perf_counter()
        page.click("#run")
        page.wait_for_function("/Done in|Done from|Replay done/.test(document.querySelector('#status [data-testid=markdown]').innerText)",
                               timeout=HANG_GUARD_MS)
        seconds = time.perf_counter() - start
        page.wait_for_selector("#summary table")
        time.sleep(0.5)   # the last frame's drawing
        if shot is not None:
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        return {"seconds_to_done": round(seconds, 1), "status": page.inner_text("#status [data-testid=markdown]"),
                "summary": page.inner_text("#summary"), "leader": page.input_value("#leader-0 textarea")}
    finally:
        page.close()


def first_run(url: str, shot: Path | None = None, browser=None) -> dict:
    """Press Run with every default; seconds from the click to "Done", and what the page says then."""
    return with_browser(_first_run, url, shot, browser=browser)


def decisions(summary: str) -> int:
    """Speculative Rejection's decisions, from the result table's 'decisions / passes' row."""
    row = next(line for line in summary.splitlines() if line.startswith("decisions / passes"))
    return int(re.search(r"(\d+) decision", row).group(1))


# The verdict in time to equal reward: "Best-of-N needs about k answers (t s) to reach ...: ... took X.Yx less
# time", "... never reach ...: ... took at least X.Yx less time", or "... took X.Yx more time".
VERDICT = re.compile(r"(?:needs (?:about \d+ answers?|all \d+ answers)|never reach|none of|below what a single)"
                     r".*?took (?:at least |at most )?(?:[\d.]+x (?:less|more) time|about the same time)", re.S)


@pytest.fixture(scope="module")
def default_url():
    pytest.importorskip("playwright.sync_api")
    from specrej.engine.models import EMBEDDED_GGUF, wheel_folder

    if wheel_folder(EMBEDDED_GGUF[0]) is None:
        pytest.skip("needs the embedded model wheel (scripts/setup.sh)")
    demo, url, ctx = default_app()
    yield url, ctx
    demo.close()


def test_the_default_first_run_decides_and_states_the_time_to_equal_reward(browser, default_url):
    url, ctx = default_url
    out = first_run(url, ARTIFACTS / "default-first-run.png", browser)
    print(f"\ndefault first run in Chromium: Done {out['seconds_to_done']} s after the click "
          f"(screenshot: {ARTIFACTS / 'default-first-run.png'})")
    (ARTIFACTS / "default_run.json").write_text(json.dumps(out, indent=1))
    # live, or (where this machine, measured under load, could not end it within the deployment's time limit) the
    # recording of the same race, saying why: either way decided, with the verdict
    assert "Done" in out["status"] or ("Replay done" in out["status"]
                                       and "recording of the same race" in out["status"]), out["status"]
    assert decisions(out["summary"]) >= 2, out["summary"]
    assert VERDICT.search(out["summary"]), out["summary"]
    assert "Improvement score" in out["summary"] and "FLOPs:" in out["summary"]


def replayed(browser, url, *, step: bool, viewport=VIEWPORT, dark: bool = False):
    """The first example's recorded paper-scale race, replayed instantly (optionally in step mode)."""
    page = browser.new_page(viewport=viewport, color_scheme="dark" if dark else "light")
    page.set_default_timeout(120_000)
    page.goto(url + ("?__theme=dark" if dark else ""))
    page.wait_for_selector("#run")
    if step:
        page.check("#step input")
    page.click("#replay")
    page.wait_for_function("/Replay done|Stepping/.test(document.querySelector('#status [data-testid=markdown]').innerText)")
    time.sleep(0.5)
    return page


def test_a_recording_steps_through_its_decisions_and_looks_like_a_recording(browser, default_url):
    url, _ = default_url
    page = replayed(browser, url, step=True)
    badge = page.inner_text("#badge")
    assert "Recording" in badge and "recorded in" in badge and "replayed in" in badge, badge
    assert "self-certainty" in badge.lower() and page.is_visible("#run-live")
    # step mode: the first decision, the pool ranked, the cut, the rank correlation, Best-of-N's winner
    text = page.inner_text("#step-text")
    assert "Decision 1 of" in text and "threshold" in text and "Spearman" in text and "eventual winner" in text, text
    assert page.evaluate("document.querySelector('#step-plot .js-plotly-plot').data.length") >= 3
    assert "Hidden while you step" in page.inner_text("#summary")
    page.click("#step-next")
    page.wait_for_function("document.querySelector('#step-text').innerText.includes('Decision 2 of')")
    page.click("#step-prev")
    page.wait_for_function("document.querySelector('#step-text').innerText.includes('Decision 1 of')")
    page.screenshot(path=str(ARTIFACTS / "step-mode.png"), full_page=True)
    page.click("#step-end")
    page.wait_for_function("!document.querySelector('#summary').innerText.includes('Hidden while')")
    assert VERDICT.search(page.inner_text("#summary")), page.inner_text("#summary")
    assert not page.is_visible("#step-panel")
    page.close()


def test_charts_download_for_slides(browser, default_url):
    url, _ = default_url
    page = replayed(browser, url, step=False)
    for fmt in ("png", "svg"):
        with page.expect_download() as got:
            page.click(f"#race-plot-{fmt}")
        d = got.value
        assert d.suggested_filename == f"specrej-verdict.{fmt}", d.suggested_filename
        data = Path(d.path()).read_bytes()
        assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data[:500]
    page.close()


def test_a_link_reproduces_the_settings(browser, default_url):
    url, _ = default_url
    page = ready_page(browser, url)   # the hang guard, not playwright's 30 s: the app may still be busy
    page.fill("#prompt textarea", "Name three rivers.")
    page.click("#settings")
    page.wait_for_selector("#seed input", state="visible")
    page.fill("#seed input", "7")
    page.locator("#seed input").press("Enter")
    page.click("#link")
    page.wait_for_function("(document.querySelector('#link-box textarea, #link-box input') || {}).value"
                           "?.includes('seed=7')")
    link = page.input_value("#link-box textarea, #link-box input")
    assert "prompt=Name+three+rivers." in link and page.url == link, (link, page.url)
    other = ready_page(browser, link)
    other.wait_for_function("document.querySelector('#prompt textarea').value === 'Name three rivers.'")
    assert other.input_value("#seed input") == "7"
    page.close(), other.close()
    # a link with a rival ticks it (a link from before ``rivals``, deepconf=1, too), and that page's own link
    # carries it on
    for query in ("rivals=deepconf", "deepconf=1"):
        rivals = ready_page(browser, url + f"?prompt=Name+two+seas.&seed=3&{query}")
        rivals.wait_for_function("document.querySelector('#prompt textarea').value === 'Name two seas.'")
        tick = lambda name: rivals.locator("#rivals label", has_text=name).locator("input")
        rivals.wait_for_function("document.querySelectorAll('#rivals input:checked').length === 1")
        assert tick("DeepConf").is_checked() and not tick("ST-BoN").is_checked()
        rivals.click("#link")
        rivals.wait_for_function("(document.querySelector('#link-box textarea, #link-box input') || {}).value"
                                 "?.includes('seed=3')")
        again = rivals.input_value("#link-box textarea, #link-box input")
        assert "rivals=deepconf" in again and "stbon" not in again, again   # a setting at its default is left out
        rivals.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size", [(390, 844), (1280, 720)], ids=["phone", "projector"])
def test_every_width_fits(browser, default_url, size, theme):
    """No horizontal overflow at 390 px or on a 1280x720 projector, with the result showing; the result
    table and the step text inside their boxes. Screenshots under tests/artifacts/."""
    url, _ = default_url
    w, h = size
    page = replayed(browser, url, step=False, viewport={"width": w, "height": h}, dark=theme == "dark")
    assert page.evaluate("document.documentElement.scrollWidth") <= w, page.evaluate(
        "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > "
        f"{w} + 1).slice(0, 5).map(e => e.id || e.className || e.tagName)")
    table, box = page.locator("#summary table").bounding_box(), page.locator("#summary").bounding_box()
    assert table["x"] + table["width"] <= box["x"] + box["width"] + 1, (table, box)
    page.screenshot(path=str(ARTIFACTS / f"width-{w}-{theme}.png"), full_page=True)
    page.close()


SPINNERS = 3   # three processes spinning on the two cores: a shared Space, a lecture hall's busy laptop


@pytest.mark.slow
def test_the_default_run_is_the_same_experiment_with_both_cores_busy(browser, default_url):
    """Three other processes spin on both cores: the race is the one its settings name (N = 32, the first
    decision at token 14, two decisions), live or as the labelled recording of that same race, and never cut
    at the time limit (the time is printed, never asserted)."""
    url, _ = default_url
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(SPINNERS)]
    try:
        time.sleep(1.0)
        out = first_run(url, ARTIFACTS / "default-run-loaded.png", browser)
    finally:
        for s in spinners:
            s.kill()
    print(f"\ndefault run with {SPINNERS} processes spinning: {out['status'][:60]!r} {out['seconds_to_done']} s "
          "after the click")
    (ARTIFACTS / "default_run_loaded.json").write_text(json.dumps(out, indent=1))
    assert "Stopped" not in out["status"] and "shortened" not in out["status"]
    assert "Done in" in out["status"] or "recording of the same race" in out["status"], out["status"]
    assert decisions(out["summary"]) == 2 and "(token 14)" in out["summary"], out["summary"]
    assert VERDICT.search(out["summary"]), out["summary"]


def _classroom_run(browser, url: str) -> dict:
    page = ready_page(browser, url)
    try:
        page.click("#classroom")
        page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Classroom preset set')")
        start = time.perf_counter()
        page.click("#run")
        page.wait_for_function("/Stepping|Can't|Stopped/.test(document.querySelector('#status [data-testid=markdown]').innerText)",
                               timeout=HANG_GUARD_MS)
        seconds = time.perf_counter() - start
        return {"seconds_to_first_decision": round(seconds, 1), "status": page.inner_text("#status [data-testid=markdown]"),
                "decision": page.inner_text("#step-text")[:300]}
    finally:
        page.close()


def classroom_run(url: str, browser=None) -> dict:
    """The Classroom preset, then Run: seconds from the click to the first decision shown (step mode)."""
    return with_browser(_classroom_run, url, browser=browser)


def test_the_classroom_preset_steps_through_a_live_race(browser, default_url):
    url, _ = default_url
    out = classroom_run(url, browser)
    print(f"\nclassroom preset in Chromium: first decision shown {out['seconds_to_first_decision']} s after Run")
    assert "Stepping" in out["status"] and "Decision 1 of" in out["decision"], out
    assert int(re.search(r"Decision 1 of (\d+)", out["decision"]).group(1)) >= 2, out   # two decisions to explain


if __name__ == "__main__":
    # On a quiet machine: the default Run, the Classroom preset, then the default Run with both cores busy.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the app, run from anywhere
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    demo, url, _ = default_app()
    try:
        out = {"quiet": first_run(url, ARTIFACTS / "default-first-run.png"), "classroom": classroom_run(url)}
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(SPINNERS)]
        try:
            time.sleep(1.0)
            out["loaded"] = first_run(url, ARTIFACTS / "default-run-loaded.png")
        finally:
            for s in spinners:
                s.kill()
        for k, v in out.items():
            print(k, {key: (val if key.startswith("seconds") or key == "status" else val[:200]) for key, val in v.items()})
    finally:
        demo.close()
