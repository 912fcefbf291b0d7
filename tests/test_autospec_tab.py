"""The "Parallel sampling lab" tab: its handlers, the whole app served with the tab (no language
model is loaded: the tab never touches one) through gradio_client, and a screenshot in headless
Chromium (saved under tests/artifacts/)."""
from __future__ import annotations

import os

import pytest
from conftest import launch_local
from test_browser import ARGS, ARTIFACTS, CHROMIUM

from components import autospec_tab as tab

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium")


def final(gen):
    frames = list(gen)
    return frames, frames[-1]


@pytest.mark.parametrize("sampler", ["block", "token", "block-adaptive", "sequential"])
def test_sample_animates_round_by_round(sampler):
    frames, (status, counter, _) = final(tab.sample_handler("potts", 40, 0.5, 3, 1.0, 3, sampler, 1, 0))
    assert status.startswith("Done") and "a sequential sampler needs **40**" in counter
    grids = [f[2] for f in frames if isinstance(f[2], str)]
    assert all('data-cells="40"' in g for g in grids)
    assert grids[-1].count("as-cell as-open") == 0                          # every site filled at the end
    if sampler != "sequential":
        assert any("as-cell as-drafted" in g for g in grids) and "fewer rounds" in counter


@pytest.mark.parametrize("args,msg", [
    (("potts", 0, 0.5, 3, 1.0, 2), "n must be a whole number from 2 to 1024"),
    (("potts", 5000, 0.5, 3, 1.0, 2), "n must be"),
    (("potts", 16, 0.5, 3, 1.0, 1), "q must be"),
    (("potts", 16, 0.5, 3, float("nan"), 2), "lambda must be a finite number"),
    (("curie-weiss", 16, float("nan"), 3, 1.0, 2), "beta must be a finite number"),
    (("curie-weiss", 16, 50.0, 3, 1.0, 2), "beta must be between"),
    (("mixture", 16, 0.5, 0, 1.0, 2), "C (components) must be"),
    (("mixture", None, 0.5, 3, 1.0, 2), "n must be a whole number from 2 to 1024, not nothing"), (("mixture", "ten", 0.5, 3, 1.0, 2), "n must be a whole number from 2 to 1024, not &#x27;ten&#x27;"),
    (("mixture", float("inf"), 0.5, 3, 1.0, 2), "n must be"),
])
def test_bad_input_gets_a_message(args, msg):
    frames, (status, counter, grid) = final(tab.sample_handler(*args, "block", 0, 0))
    assert len(frames) == 1 and msg in status and status.startswith("**Cannot run:**")


def test_exactness_panel():
    fig, note = tab.exactness_handler("curie-weiss", 6, 1.0, 3, 1.0, 2, "block", 20000)
    assert "p = " in note and "noise floor" in note and "consistent with exact sampling" in note
    assert len(fig.data) == 2 and len(fig.data[0].x) == 32 and fig.layout.xaxis.type == "category"
    assert "The other 32 states" in note
    assert all(a >= b for a, b in zip(fig.data[0].y, fig.data[0].y[1:]))     # most likely first
    _, note = tab.exactness_handler("potts", 8, 1.0, 3, 1.0, 5, "block", 20000)
    assert "more than 4096" in note
    _, note = tab.exactness_handler("potts", 11, 1.0, 3, 1.0, 2, "block", 20000)
    assert "n (exactness) must be" in note


def test_recorded_and_live_scaling():
    fig, note = tab.recorded_scaling()
    assert fig is not None and "Recorded" in note and len(fig.data) == 12
    fig, note = tab.measure_handler("curie-weiss", 0.5, 3, 1.0, 2)
    assert len(fig.data) == 4 and "Slopes" in note
    _, note = tab.measure_handler("potts", 0.5, 3, 99.0, 2)
    assert "Cannot run" in note


@pytest.fixture(scope="module")
def served():
    import app
    from components.session.context import AppContext

    demo = app.build_demo(AppContext.from_env({}))     # nothing is loaded until a race runs
    url = launch_local(demo)
    yield url
    demo.close()


def test_one_client_can_sample_again_and_again(served):
    """The per-client cap counts runs queued or running: finished lab samples leave it at once."""
    from gradio_client import Client

    client = Client(served, verbose=False, analytics_enabled=False)
    for _ in range(4):   # the cap is 2: a third sample was refused while finished ones were still counted
        out = client.predict("curie-weiss", 32, 0.5, 3, 1.0, 2, "block", 0, 0, api_name="/autospec_sample")
        assert str(out[0]).strip().startswith("Done"), out[0]


def test_tab_through_gradio_client(served):
    from gradio_client import Client

    client = Client(served, verbose=False, analytics_enabled=False)
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert "/autospec_sample" in api and not any("exactness" in k or "measure" in k for k in api)
    job = client.submit(target="curie-weiss", n=128, beta=0.5, components=3, lam=1.0, q=2, sampler="block",
                        seed=3, delay=0, api_name="/autospec_sample")
    status, counter, grid = job.result()
    assert status.startswith("Done") and "needs **128**" in counter and 'data-cells="128"' in grid
    status, _, _ = client.predict(target="potts", n=3, beta=0.5, components=3, lam=1.0, q=40, sampler="token",
                                  seed=0, delay=0, api_name="/autospec_sample")
    assert "q must be" in status


@pytest.fixture(scope="module")
def new_page():
    """A function opening a page of a headless Chromium (one browser for the module)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)

        def open_page(url):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(url)
            return page
        yield open_page
        browser.close()


@needs_chromium
def test_tab_in_a_browser(served, new_page):
    page = new_page(served)
    page.get_by_role("tab", name="Parallel sampling lab").click()
    page.locator("#as-n input").fill("256")
    page.locator("#as-delay input[type=number]").fill("0")
    page.locator("#as-sample").click()
    page.wait_for_function("document.querySelector('#as-status')?.textContent.includes('Done')")
    assert page.locator("#as-grid .as-cell").count() == 256
    page.locator("#as-scaling [data-testid=plotly]").wait_for()
    shot = ARTIFACTS / "autospec_tab.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")


@needs_chromium
def test_tab_in_a_dark_browser_mid_animation(served, new_page):
    """Dark theme, a 3-state Potts chain mid-animation (drafted, accepted, corrected, discarded cells) and
    the exactness panel: saved as tests/artifacts/autospec_tab_dark.png."""
    page = new_page(served + "?__theme=dark")
    page.get_by_role("tab", name="Parallel sampling lab").click()
    page.locator("#as-target input").click()
    page.get_by_role("option", name="Ising / Potts chain").click()
    page.locator("#as-q input").fill("3")
    page.locator("#as-n input").fill("96")
    page.get_by_label("token verification").check()
    page.locator("#as-exact-n input").fill("6")
    page.locator("#as-exact-run").click()
    page.wait_for_function("document.querySelector('#as-exact-note')?.textContent.includes('p = ')")
    page.locator("#as-delay input[type=number]").fill("1.5")
    page.locator("#as-seed input").fill("0")   # this chain at seed 0 rejects and corrects early
    page.locator("#as-sample").click()
    page.wait_for_selector("#as-grid-cells .as-discarded, #as-grid-cells .as-corrected")
    page.screenshot(path=str(ARTIFACTS / "autospec_tab_dark.png"), full_page=True)
    assert "Cannot run" not in page.locator("#as-status").text_content()
