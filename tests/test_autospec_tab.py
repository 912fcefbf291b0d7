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
    assert status.startswith("Done") and "one cell at a time needs **40**" in counter
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
    (("mixture", None, 0.5, 3, 1.0, 2), "n must be a whole number from 2 to 1024, not nothing"), (("mixture", "ten", 0.5, 3, 1.0, 2), "n must be a whole number from 2 to 1024, not text"),
    (("mixture", float("inf"), 0.5, 3, 1.0, 2), "n must be"),
])
def test_bad_input_gets_a_message(args, msg):
    frames, (status, counter, grid) = final(tab.sample_handler(*args, "block", 0, 0))
    assert len(frames) == 1 and msg in status and status.startswith("**Cannot run:**")


def test_exactness_panel():
    fig, note = tab.exactness_handler("curie-weiss", 6, 1.0, 3, 1.0, 2, "block", 20000)
    assert "p = " in note and "noise floor" in note and "**match** as well as chance allows" in note
    assert len(fig.data) == 2 and len(fig.data[0].x) == 32 and fig.layout.xaxis.type == "category"
    assert "The other 32 grids" in note
    assert all(a >= b for a, b in zip(fig.data[0].y, fig.data[0].y[1:]))     # most likely first
    _, note = tab.exactness_handler("potts", 8, 1.0, 3, 1.0, 5, "block", 20000)
    assert "more than 4096" in note
    _, note = tab.exactness_handler("potts", 11, 1.0, 3, 1.0, 2, "block", 20000)
    assert "n (exactness) must be" in note


def test_recorded_and_live_scaling():
    fig, note = tab.recorded_scaling()
    assert fig is not None and "Recorded" in note and len(fig.data) == 12
    fig, note = tab.measure_handler("curie-weiss", 0.5, 3, 1.0, 2)
    assert len(fig.data) == 4 and "Each time n doubles, the rounds grow" in note
    _, note = tab.measure_handler("potts", 0.5, 3, 99.0, 2)
    assert "Cannot run" in note


JARGON = ("curie", "weiss", "inverse temperature", "oracle", "slope", "mean field", "ising", "potts", "any-order",
          "marginal", "conditional", "autospec", "speculat", "log-log", "χ²", "chi²", "chi-squared", "enumerat", "empirical",
          "total variation", "verification", "target", "sampler", "parallel depth")


def _sentences(text: str) -> list[str]:
    import re
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]


def test_the_tab_opens_with_three_plain_sentences_and_keeps_jargon_in_the_details():
    """A teacher can read the opening aloud: three sentences, none of the jargon words; every label, choice,
    hint, button, chart title and first result line outside the "Details for specialists" accordion is
    plain too. The values the handlers receive are the library's names, unchanged."""
    import gradio as gr

    opening = tab.OPENING
    assert len(_sentences(opening)) == 3, _sentences(opening)
    assert not [w for w in JARGON if w in opening.lower()]
    with gr.Blocks() as demo:
        tab.build_autospec_tab()
    header = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "as-header")
    assert header.value.split("\n", 1)[1] == opening
    details = next(b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "as-details")
    assert isinstance(details, gr.Accordion) and details.open is False and details.label == "Details for specialists"
    inside = {id(c) for c in details.children}
    words = []
    for b in demo.blocks.values():
        if id(b) in inside:
            continue
        for attr in ("label", "info", "value"):
            v = getattr(b, attr, None)
            if isinstance(v, str) and not isinstance(b, gr.HTML) and not (
                    attr == "value" and isinstance(b, (gr.Dropdown, gr.Radio))):   # a choice's value, not shown
                words.append(v)
        words += [label for label, _ in getattr(b, "choices", None) or []]
    fig, note = tab.recorded_scaling()
    words += [note, fig.layout.yaxis.title.text, fig.layout.xaxis.title.text]
    words += [a.text for a in fig.layout.annotations] + [tr.name for tr in fig.data]
    words += [tr.legendgrouptitle.text for tr in fig.data]
    frames = list(tab.sample_handler("potts", 16, 0.5, 3, 1.0, 3, "token", 1, 0))
    words += [frames[0][0], frames[-1][0], frames[-1][1]]
    _, exact_note = tab.exactness_handler("mixture", 4, 0.5, 3, 1.0, 2, "block-adaptive", 1000)
    words.append(exact_note.split("<details>")[0])
    assert {"β: how strongly the cells agree (−5 to 5)", "Every cell leans toward the majority",
            "How the model fills the grid", "▶ Sample"} <= set(words)              # the walk reads the labels
    found = {w: [x for x in words if w in x.lower()] for w in JARGON}
    assert not {w: x for w, x in found.items() if x}, found
    assert "Details for specialists" in exact_note and "χ²" in exact_note    # the technical figures stay, folded
    assert all(w in tab.GLOSSARY for w in ("Curie–Weiss", "inverse temperature", "oracle", "slope"))
    assert [v for _, v in tab.TARGET_CHOICES] == ["mixture", "curie-weiss", "potts"]
    assert [v for _, v in tab.SAMPLER_CHOICES] == ["block", "token", "block-adaptive", "sequential"]


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
    page.get_by_role("option", name="Each cell leans toward its neighbours").click()
    page.locator("#as-q input").fill("3")
    page.locator("#as-n input").fill("96")
    page.get_by_label("Guess them all, check one by one until a miss").check()
    page.locator("#as-exact-n input").fill("6")
    page.locator("#as-exact-run").click()
    page.wait_for_function("document.querySelector('#as-exact-note')?.textContent.includes('p = ')")
    page.locator("#as-delay input[type=number]").fill("1.5")
    page.locator("#as-seed input").fill("0")   # this chain at seed 0 rejects and corrects early
    page.locator("#as-sample").click()
    page.wait_for_selector("#as-grid-cells .as-discarded, #as-grid-cells .as-corrected")
    page.screenshot(path=str(ARTIFACTS / "autospec_tab_dark.png"), full_page=True)
    assert "Cannot run" not in page.locator("#as-status").text_content()


def test_the_lab_place_line_says_when_a_place_frees_from_the_running_runs_lengths():
    """Issue 50 (2): a waiting visitor's place and estimate. The k-th place to free is the k-th running run to end
    (the runs ahead of it take the earlier ones); a run whose length is not known makes the estimate a bound or
    leaves it unsaid, never a made-up time."""
    from components.autospec_tab import LabClock, wait_words

    assert wait_words([], 3, 0, 4) is None                          # a place is free
    assert wait_words([10.0], 3, 0, 4) is None
    w = wait_words([30.0, 12.0, 50.0, 20.0], 4, 0, 4)
    assert "no other run waits ahead of yours" in w and "about 12 s" in w and "at most" not in w, w
    w = wait_words([30.0, 12.0, 50.0, 20.0], 4, 2, 4)
    assert "2 runs wait ahead of yours" in w and "about 30 s" in w, w
    w = wait_words([30.0, 12.0], 4, 1, 4)                           # two running runs have not said their length
    assert "1 run waits ahead of yours" in w and "about at most 30 s" not in w and "at most 30 s" in w, w
    w = wait_words([30.0, 12.0], 4, 2, 4)                           # the third to free: not known
    assert "depends on the settings" in w and " s " not in w.split("ahead of yours")[1], w
    assert "depends on the settings" in wait_words([5.0] * 4, 4, 4, 4)   # it waits for a run that waits too
    clock = LabClock()
    token = clock.begin("sample", 40.0)
    assert "about 40 s" in wait_words(clock.remaining(), 1, 0, 1)
    clock.end(token, "sample", since=0.0)
    assert clock.remaining() == []
    clock.begin("measure")                                          # a kind never run here: length unknown
    assert clock.remaining() == [None]


def test_a_long_sample_yields_its_place_at_its_share_when_others_wait(monkeypatch):
    """Issue 65 (3): four addresses' slow samples held the lab's four places for 100 s while a fifth waited. A sample
    past its share (``SHARE_S``) with a visitor waiting ends its animation at once (the same sample: its last frame
    is the whole grid), and the waiting visitor's estimate is the share's end, not the slow animation's."""
    from components import autospec_tab as at

    slept, waiting = [], {"now": False}
    monkeypatch.setattr(at, "SHARE_S", 0.0)
    monkeypatch.setattr(at, "others_wait", lambda request: waiting["now"])
    monkeypatch.setattr(at.time, "sleep", lambda s: slept.append(s))
    frames, (status, counter, grid) = final(at.sample_handler("curie-weiss", 64, 0.5, 3, 1.0, 2, "sequential", 7, 1.5))
    assert len(slept) == len(frames) - 2 and "ended early" not in status   # nobody waited: every frame paced
    slept.clear()
    waiting["now"] = True
    frames, (status, counter, grid) = final(at.sample_handler("curie-weiss", 64, 0.5, 3, 1.0, 2, "sequential", 7, 1.5))
    assert slept == [] and "ended early" in status and status.startswith("Done")
    assert grid.count("as-cell as-open") == 0                                # the whole sample, drawn at once
    clock = at.LabClock()
    clock.begin("sample", 100.0, share_s=20.0)
    assert clock.remaining() == [pytest.approx(100.0, abs=1)]               # nobody waits: its own length
    assert clock.remaining(waiting=True) == [pytest.approx(20.0, abs=1)]    # one waits: it yields at its share
    assert "about 20 s" in at.wait_words(clock.remaining(waiting=True), 1, 0, 1)
