"""The app in a real headless Chromium (Debian's ``/usr/bin/chromium`` driven by the ``playwright``
pip package; never ``playwright install``): type a prompt, press Run, wait for both charts and the
winners, and save a screenshot under ``tests/artifacts/`` (the path is printed). The app runs
in-process on the tiny test models.

Also a tool: ``python tests/test_browser.py URL [OUT_PREFIX]`` screenshots a running app mid-race
and at the end (how ``assets/screenshot.png`` was made, on the embedded models).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from conftest import launch_local

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
VIEWPORT = {"width": 1400, "height": 900}

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]


@pytest.fixture(scope="module")
def app_url(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    import app
    from components.context import AppContext

    env = {"SPECREJ_MODEL": tiny_lm_dir, "SPECREJ_REWARD": f"hf:{tiny_reward_dir}"}
    ctx = AppContext.from_env(env, trace_dir=str(tmp_path_factory.mktemp("traces")))
    ctx.warm()
    demo = app.build_demo(ctx)
    url = launch_local(demo)
    yield url, ctx
    demo.close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


def open_page(browser, url):
    page = browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(60_000)
    page.goto(url)
    page.wait_for_selector("#run")
    return page


def plotted_traces(page, elem_id: str) -> int:
    """Traces with data in the Plotly chart inside ``#elem_id`` (0 if not drawn)."""
    return page.evaluate(
        """id => { const el = document.querySelector(`#${id} .js-plotly-plot`);
                   if (!el || !el.data) return 0;
                   return el.data.filter(t => (t.y || []).some(v => v !== null)).length; }""", elem_id)


def test_run_in_a_real_browser_shows_both_charts_and_the_winners(browser, app_url):
    url, ctx = app_url
    page = open_page(browser, url)
    page.fill("#prompt textarea", "Explain how a rainbow forms.")
    page.click("#run")
    page.wait_for_selector("#sr-plot [data-testid=plotly]")
    page.wait_for_selector("#bon-plot [data-testid=plotly]")
    page.wait_for_selector("#summary table", timeout=120_000)  # the winners, side by side
    page.wait_for_function("document.querySelector('#status').innerText.includes('Done')")
    time.sleep(0.5)  # let Plotly finish drawing the last frame
    assert plotted_traces(page, "sr-plot") >= 2       # kept lines, pruned, finished, winner ...
    assert plotted_traces(page, "bon-plot") >= 2      # finished answers and the winner
    assert plotted_traces(page, "race-plot") >= 2     # one line per arm
    summary = page.inner_text("#summary")
    assert "Speculative Rejection" in summary and "Best-of-N" in summary and "winner" in summary
    for leader in ("#sr-leader", "#bon-leader"):
        assert "winner #" in page.inner_text(leader)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / "browser-run.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"\nscreenshot: {path}")
    page.close()


def test_stop_in_a_real_browser_and_run_again(browser, app_url):
    url, ctx = app_url
    page = open_page(browser, url)
    page.click("#run")
    page.wait_for_function("document.querySelector('#status').innerText.includes('Racing')")
    page.click("#stop")
    try:
        page.wait_for_function("document.querySelector('#status').textContent.includes('Stopped')", timeout=30_000)
    except Exception:
        shown = page.evaluate("[document.querySelector('#status').innerText, "
                              "document.querySelector('#status').textContent]")
        page.screenshot(path=str(ARTIFACTS / "stop-failed.png"), full_page=True)
        raise AssertionError(f"no 'Stopped' after Stop; status shows {shown!r} (screenshot stop-failed.png)")
    t0 = time.monotonic()
    while ctx.active and time.monotonic() - t0 < 60:   # a hang guard, not a speed limit
        time.sleep(0.05)
    assert not ctx.active, "Stop did not close the race"
    page.click("#run")
    page.wait_for_function("document.querySelector('#status').innerText.includes('Racing') || "
                           "document.querySelector('#status').innerText.includes('Done')")
    page.click("#stop")
    page.close()


def screenshots(url: str, prefix: str, mid_after_decision_s: float = 15.0) -> None:
    """Screenshot a running app: before, mid-race (after the first decision) and at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = b.new_page(viewport=VIEWPORT)
        page.set_default_timeout(900_000)
        page.goto(url)
        page.wait_for_selector("#run")
        page.screenshot(path=f"{prefix}-start.png", full_page=True)
        t0 = time.monotonic()
        page.click("#run")
        page.wait_for_function("document.querySelector('#status').innerText.includes('1 decision')")
        time.sleep(mid_after_decision_s)
        page.screenshot(path=f"{prefix}-mid.png", full_page=True)
        print(f"mid-race at {time.monotonic() - t0:.0f} s: {prefix}-mid.png", flush=True)
        page.wait_for_selector("#summary table")
        time.sleep(2)
        page.screenshot(path=f"{prefix}-end.png", full_page=True)
        page.screenshot(path=f"{prefix}-end-top.png", full_page=False, clip={"x": 0, "y": 0, "width": 1400,
                                                                              "height": 1500})
        print(f"done at {time.monotonic() - t0:.0f} s: {prefix}-end.png", flush=True)
        b.close()


if __name__ == "__main__":
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshots(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else str(ARTIFACTS / "app"))
