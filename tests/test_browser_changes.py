"""The live charts drawn from changes, in a real headless Chromium (issue 62, 5): a replay of a committed recording
streams its charts as changes (``frames.ChartChanges`` into the hidden ``#chart-changes`` box) that
``assets/charts.js`` draws once per animation frame. Read from the page's own figure data (the plot div's
``.data`` and ``.layout``): every chart the script drew equals the frame the server meant at that point (the lines
it was sent, rebuilt here as tests/test_frames_changes.py rebuilds them); after the race the script's figures equal
the whole figures Gradio drew from the last frame; a tab in the background draws nothing and catches up once
(each chart drawn once, at the latest frame)."""
from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_browser import CHROMIUM, serve_tiny  # noqa: E402
from test_frames_changes import apply  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
HANG_GUARD_MS = 180_000   # only against a hang: nothing here asserts a speed
ELEMS = {"arm-0": "plot-0", "arm-1": "plot-1", "race": "race-plot"}
DONE = "document.querySelector('#status [data-testid=markdown]').innerText.includes('Replay done')"

# every draw of the script: the seq it drew and what the page's plot divs hold then (data, and the layout's
# threshold-free parts that change while racing: shapes, annotations and axis ranges)
HOOK = """elems => {
  window.__draws = [];
  const read = id => { const gd = document.querySelector('#' + id + ' .js-plotly-plot');
    const z = gd && gd._fullLayout && gd._fullLayout._size;
    return gd ? {drawn: gd.querySelectorAll('.scatterlayer .trace').length, width: gd.clientWidth,
                 margins: z ? [z.l, z.r, z.t, z.b].map(Math.round) : null,
                 data: JSON.parse(JSON.stringify(gd.data)), layout: JSON.parse(JSON.stringify({
      shapes: gd.layout.shapes, annotations: gd.layout.annotations, x: gd.layout.xaxis.range,
      y: gd.layout.yaxis.range, meta: gd.layout.meta}))} : null; };
  window.specrejCharts.onDraw = (seq, keys, whole, way) => {
    window.__draws.push({seq, whole, way, charts: Object.fromEntries(keys.map(k => [k, read(elems[k])]))});
  };
}"""
# as a watcher does: the arm charts at the top of the window (the race chart below them, in view at 900 px)
WATCH = "document.querySelector('#plot-0').scrollIntoView({block: 'start'})"
WHOLE = """id => { const gd = document.querySelector('#' + id + ' .js-plotly-plot');
  return {data: JSON.parse(JSON.stringify(gd.data)), layout: JSON.parse(JSON.stringify(gd.layout))}; }"""


@pytest.fixture(scope="module")
def app_url(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    for url, _ in serve_tiny(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
        yield url


def open_page(context, url):
    page = context.new_page()
    page.set_default_timeout(HANG_GUARD_MS)
    page.goto(url)
    page.wait_for_selector("#run")
    page.wait_for_function("window.specrejCharts !== undefined")
    return page


def replay_fast(page, before=None) -> None:
    """The script's draws hooked and the first example's recording replayed at 16x (``before``: a script run just
    before the click)."""
    page.evaluate(HOOK, ELEMS)
    page.click("#pace input[value='16']")
    if before:
        page.evaluate(before)
    page.click("#replay")


def stream_lines(page) -> list[dict]:
    """The lines the page's script applied since the run's first (the box itself ends on the last line alone)."""
    return page.evaluate("window.specrejCharts.lines()")


def meant(lines: list[dict]) -> dict[int, dict]:
    """The charts at each seq, rebuilt from the lines the page was sent."""
    charts, out = {}, {}
    for line in lines:
        if "base" in line:
            charts = copy.deepcopy(line["base"])
        else:
            for key, change in line["charts"].items():
                charts[key] = apply(charts.get(key), change)
        out[line["seq"]] = copy.deepcopy(charts)
    return out


def same_layout(drawn: dict, spec: dict) -> None:
    lay = spec["layout"]
    assert drawn["shapes"] == lay.get("shapes", [])
    assert drawn["annotations"] == lay.get("annotations", [])
    assert drawn["meta"] == lay.get("meta")   # the downloads' words: set on the div as they change, never replotted
    for axis, got in (("xaxis", drawn["x"]), ("yaxis", drawn["y"])):   # where the spec fixes it (Plotly writes an
        if lay[axis].get("range") is not None:                          # autorange's own range back into its layout)
            assert got == lay[axis]["range"], axis


def test_charts_drawn_from_changes_equal_the_whole_figures(browser, app_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = open_page(context, app_url)
        replay_fast(page)
        page.evaluate(WATCH)   # (the click scrolled the page up to the button)
        page.wait_for_function(DONE)
        page.wait_for_function("window.specrejCharts.idle()")   # the last frame drawn, in its turn
        time.sleep(0.5)
        lines = stream_lines(page)
        box = page.evaluate("document.querySelector('#chart-changes textarea, #chart-changes input').value")
        assert [json.loads(x) for x in box.splitlines() if x] == [lines[-1]]   # the last line replaced the text
        draws = page.evaluate("window.__draws")
        at = meant(lines)
        final = lines[-1]
        assert final.get("final") and "base" in lines[0] and len(lines) >= 10
        # while racing: every chart the script drew is the frame the server meant then (points, markers, the
        # threshold, the leader: every trace's data; the decision lines, the words and the axes)
        live = [d for d in draws if 0 < d["seq"] < final["seq"]]
        assert len(live) >= 3, [d["seq"] for d in draws]
        for d in draws:
            for key, got in d["charts"].items():
                spec = at[d["seq"]][key]
                assert got["data"] == spec["data"], (key, d["seq"])
                same_layout(got["layout"], spec)
                # and on the screen: a chart with points shows them (Plotly's animation of a lone trace once left
                # the pruning chart empty, its data intact, until the race's end)
                if any(v is not None for t in got["data"] for v in (t.get("x") or [])):
                    assert got["drawn"] > 0, (key, d["seq"])
        # a change only to traces the legend hides ("had it continued": the pruned candidates' ends, filled in as
        # Best-of-N finishes them, long after Speculative Rejection is done) draws nothing; animated alone, such a
        # trace once made Plotly wipe the chart, and each of its changes cost two whole draws
        hidden_only, last = 0, {}
        for d in draws:
            key = next(iter(d["charts"]))
            spec = at[d["seq"]][key]
            changes = [ln["charts"][key] for ln in lines
                       if last.get(key, -1) < ln["seq"] <= d["seq"] and key in ln.get("charts", {})]
            last[key] = d["seq"]
            if d["whole"] or not changes or any("react" in c or set(c.get("layout", {})) - {"meta"} for c in changes):
                continue
            if all(spec["data"][int(i)].get("visible") == "legendonly" for c in changes for i in c.get("traces", {})):
                hidden_only += 1
                assert d["way"] in ("meta", "react:token"), (key, d["seq"], d["way"])   # (token: Gradio drew it)
        assert hidden_only > 0
        # the margins (grown to fit the legend and the tick labels) never shrink back while the width stays: a chart
        # whose margins change is drawn whole twice and its plot area jumps (charts.js keeps each chart's room)
        for key in ELEMS:
            seen = [(c["width"], c["margins"]) for d in draws for k, c in d["charts"].items() if k == key and c]
            for (w0, m0), (w1, m1) in zip(seen, seen[1:]):
                if w0 == w1 and m0 and m1:
                    assert all(b >= a for a, b in zip(m0, m1)), (key, m0, m1)
        # after the race: the script's figures (the changes, the last one included) equal what Gradio drew whole
        for key, elem in ELEMS.items():
            whole = page.evaluate(WHOLE, elem)
            mine = page.evaluate("k => window.specrejCharts.figure(k)", key)
            assert mine["data"] == whole["data"], key
            assert mine["data"] == at[final["seq"]][key]["data"], key
            for part in ("shapes", "annotations", "meta"):
                assert mine["layout"].get(part) == whole["layout"].get(part), (key, part)
        winner = [t for t in whole_of(page, "plot-0")["data"] if t["name"] == "winner"]
        assert winner and winner[0]["x"], "the winner's star is drawn"
    finally:
        context.close()


def whole_of(page, elem):
    return page.evaluate(WHOLE, elem)


# A tab in the background, as Chromium keeps one: document.hidden, no animation frames until it is shown again
# (then a visibilitychange and the frames asked for meanwhile). Headless Chromium keeps every tab visible, so the
# page is told so here.
BACKGROUND = """() => {
  const asked = [], real = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = cb => { asked.push(cb); return asked.length; };
  Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
  Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
  window.__show = () => {
    delete document.hidden; delete document.visibilityState; window.requestAnimationFrame = real;
    document.dispatchEvent(new Event('visibilitychange'));
    for (const cb of asked.splice(0)) { real(cb); }
  };
}"""


def test_a_background_tab_draws_nothing_and_catches_up_once(browser, app_url):
    """A tab in the background applies the lines as they come and draws nothing; shown again, it draws once: the
    latest frame, equal to what the server meant then."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = open_page(context, app_url)
        replay_fast(page, before=BACKGROUND)
        page.evaluate(WATCH)
        page.wait_for_function("window.specrejCharts.seq() >= 6")
        assert page.evaluate("window.__draws.length") == 0   # hidden: nothing drawn
        seq = page.evaluate("window.__show(); window.specrejCharts.seq()")
        # one draw per chart (one chart per animation frame), each at the latest frame: the backlog in one step
        page.wait_for_function("new Set(window.__draws.map(d => Object.keys(d.charts)[0])).size >= 3")
        draws = page.evaluate("window.__draws")
        first = {}
        for d in draws:
            first.setdefault(next(iter(d["charts"])), d)
        assert set(first) == {"arm-0", "arm-1", "race"}
        at = meant(stream_lines(page))
        for key, d in first.items():
            assert d["seq"] >= seq, (key, d["seq"], seq)
            assert d["charts"][key]["data"] == at[d["seq"]][key]["data"], key
    finally:
        context.close()


def test_a_chart_out_of_view_waits_and_is_drawn_as_it_comes_into_view(browser, app_url):
    """While a play streams, a chart scrolled out of the window is not drawn (its changes wait in the script's
    copy); scrolled into view, it is drawn at once at the latest frame, equal to what the server meant then. A
    download of a chart out of view draws it first."""
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = open_page(context, app_url)
        replay_fast(page)
        page.evaluate("window.scrollTo(0, 0)")   # the buttons in view, every chart below the window
        page.wait_for_function("window.specrejCharts.seq() >= 8")
        assert page.evaluate("document.querySelector('#plot-0').getBoundingClientRect().top") > 720
        # (Gradio's whole figure of the run's first frame is drawn wherever the chart is: on a loaded machine it
        # can come after the script took the next line, so it is told apart by whole, not by its seq)
        mid = [d["seq"] for d in page.evaluate("window.__draws") if d["seq"] > 0 and not d["whole"]]
        assert mid == [], mid
        seq = page.evaluate("window.specrejCharts.seq()")
        page.evaluate(WATCH)
        page.wait_for_function("window.__draws.some(d => d.seq > 0 && !d.whole && 'arm-0' in d.charts)")
        d = next(d for d in page.evaluate("window.__draws") if d["seq"] > 0 and not d["whole"] and "arm-0" in d["charts"])
        assert d["seq"] >= seq
        assert d["charts"]["arm-0"]["data"] == meant(stream_lines(page))[d["seq"]]["arm-0"]["data"]
        # out of view again: the race chart (below the arm charts) drawn up to date for a download
        page.evaluate("window.scrollTo(0, 0)")
        page.wait_for_function("window.specrejCharts.seq() >= " + str(page.evaluate("window.specrejCharts.seq()") + 2))
        page.evaluate("window.specrejCharts.want('race-plot')")
        page.wait_for_function("window.specrejCharts.idle()")
        drawn = page.evaluate(WHOLE, "race-plot")
        assert drawn["data"] == page.evaluate("window.specrejCharts.figure('race')")["data"]
    finally:
        context.close()


def test_plotly_is_loaded_while_the_page_is_idle_before_any_chart(browser, app_url):
    """plotly.js (the module Gradio's gr.Plot imports) is imported while the page is idle, before anything is
    pressed, so a lecturer's first Run does not wait for it; the charts Gradio then draws use that same module (one
    Plotly: the script's hook on it still takes Gradio's draws)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = open_page(context, app_url)
        assert page.evaluate("document.querySelectorAll('.js-plotly-plot').length") == 0   # no chart drawn yet
        page.wait_for_function("!!window.Plotly && typeof window.Plotly.react === 'function'")
        assert page.evaluate("window.Plotly.react.specrej === true")   # hooked (charts.js takes Gradio's draws)
        page.click("#replay")
        page.wait_for_function("document.querySelector('#status [data-testid=markdown]').innerText.includes('Replay done')")
        page.wait_for_function("window.specrejCharts.idle() && document.querySelectorAll('#race-plot .xtick').length > 0")
        assert page.evaluate("window.specrejCharts.draws()") > 0
    finally:
        context.close()
