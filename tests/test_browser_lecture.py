"""Lecture mode in a real Chromium at a projector's 1280x720 (issue 39): the page MEASURED, not judged by eye.

One server (the app on the tiny test models) and one browser for the module. Opened with ``?lecture=1``: the
toggle is on; after a race, Run, Stop and both of the race's charts lie inside the first viewport, the body's
computed font size is at least 24 px and the charts fill the width; while the race plays every control but
Stop is locked, and unlocked after. The presenter's keys step a step-mode race (right / left arrow, space).
"""
from __future__ import annotations

import os

import pytest
from conftest import CHROMIUM
from test_browser import ARTIFACTS, serve_tiny

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
PROJECTOR = {"width": 1280, "height": 720}
PROMPT = "Explain how a rainbow forms."


@pytest.fixture(scope="module")
def app_url(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    yield from serve_tiny(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


def lecture_page(browser, url):
    page = browser.new_page(viewport=PROJECTOR)
    page.set_default_timeout(60_000)
    page.goto(url + "?lecture=1")
    page.wait_for_selector("#run")
    page.wait_for_function("document.querySelector('#lecture input').checked")
    return page


def box(page, selector: str) -> dict:
    return page.locator(selector).bounding_box()


def inside_first_viewport(b: dict) -> bool:
    return (b is not None and b["x"] >= 0 and b["y"] >= 0 and b["x"] + b["width"] <= PROJECTOR["width"] + 0.5
            and b["y"] + b["height"] <= PROJECTOR["height"] + 0.5)


def test_at_1280x720_the_race_and_run_stop_are_in_the_first_screen_in_type_for_a_room(browser, app_url):
    url, ctx = app_url
    page = lecture_page(browser, url)
    assert page.evaluate("document.documentElement.classList.contains('lecture')")
    page.fill("#prompt textarea", PROMPT)
    page.click("#run")
    # while it plays every control but Stop is locked (the toggle, Replay, the settings ...)
    page.wait_for_function("document.querySelector('#replay').disabled")
    assert page.is_disabled("#run") and page.is_disabled("#lecture input") and not page.is_disabled("#stop")
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Done')", timeout=120_000)
    # unlocked once it ended (the toggle by the play's end; Replay already by the last frame's buttons)
    page.wait_for_function("!document.querySelector('#replay').disabled && !document.querySelector('#lecture input').disabled")
    assert not page.is_disabled("#run") and not page.is_disabled("#lecture input")
    page.wait_for_timeout(500)   # the last frame's drawing
    assert page.evaluate("window.scrollY") == 0
    for sel in ("#run", "#stop", "#plot-0 .js-plotly-plot", "#plot-1 .js-plotly-plot"):
        assert inside_first_viewport(box(page, sel)), (sel, box(page, sel))
    # the charts fill the width: the two across take nearly all of it
    left, right = box(page, "#plot-0 .js-plotly-plot"), box(page, "#plot-1 .js-plotly-plot")
    assert right["x"] + right["width"] - left["x"] >= 0.9 * PROJECTOR["width"], (left, right)
    px = page.evaluate("""() => ({body: parseFloat(getComputedStyle(document.body).fontSize),
                                  status: parseFloat(getComputedStyle(document.querySelector('#status p, #status')).fontSize),
                                  chart: Math.min(...[...document.querySelectorAll('#plot-0 .xtick text')]
                                                  .map(t => parseFloat(t.style.fontSize || '0')))})""")
    assert px["body"] >= 24 and px["status"] >= 24, px
    assert px["chart"] >= 18, px                         # the charts' tick labels, for the back of the room
    page.screenshot(path=str(ARTIFACTS / "lecture-1280x720.png"))
    # a recording (its badge and its long notes) keeps the race in the first screen too
    page.fill("#prompt textarea", ctx.examples[0])
    page.click("#replay")   # (below the race in lecture mode: the click scrolls to it)
    page.wait_for_function("/Replay done/.test(document.querySelector('#status [data-testid=markdown]').innerText)", timeout=120_000)
    page.wait_for_function("!document.querySelector('#replay').disabled")
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(500)
    for sel in ("#run", "#stop", "#plot-0 .js-plotly-plot", "#plot-1 .js-plotly-plot"):
        assert inside_first_viewport(box(page, sel)), (sel, box(page, sel))
    page.close()


def test_the_presenters_keys_step_a_step_mode_race(browser, app_url):
    url, _ = app_url
    page = lecture_page(browser, url)
    page.fill("#prompt textarea", PROMPT)
    page.check("#step input")
    page.locator("body").click(position={"x": 5, "y": 700})   # focus off the fields: the keys are the clicker's
    page.keyboard.press(" ")                                   # space: Run
    page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Stepping')", timeout=120_000)
    page.wait_for_function("!document.querySelector('#step-next').disabled")
    # the step panel's text is its own component, drawn in a later task than the status on a loaded machine
    page.wait_for_function("document.querySelector('#step-text').innerText.includes('Decision 1 of ')")
    text = page.inner_text("#step-text")
    count = int(text.split("Decision 1 of ", 1)[1].split(":", 1)[0])
    assert count >= 2, text   # two decisions to step between
    page.keyboard.press("ArrowRight")
    page.wait_for_function("document.querySelector('#step-text').innerText.includes('Decision 2 of')")
    page.keyboard.press("ArrowLeft")
    page.wait_for_function("document.querySelector('#step-text').innerText.includes('Decision 1 of')")
    page.keyboard.press(" ")                                   # space while stepping: the next decision
    page.wait_for_function("document.querySelector('#step-text').innerText.includes('Decision 2 of')")
    # typing in a field is typing, not stepping
    page.click("#prompt textarea")
    page.keyboard.press("ArrowLeft")
    page.wait_for_timeout(300)
    assert "Decision 2 of" in page.inner_text("#step-text")
    page.close()
