"""Charts ready for slides, checked without a model or a browser (issue 30, item 5): log axes labelled with
whole round values, a FLOPs chart labelled by its axis, what an exported chart carries (its title, the
prompt and the settings of the run shown, in ``layout.meta``), the labelled "now" line, narrow-column table
headers, and plotly's toolbar kept off the plot. ``test_browser_charts.py`` checks the same in Chromium."""
from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("gradio")
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")


@pytest.fixture(scope="module")
def replayed():
    """Every frame of a committed recording's replay (Best-of-128, paper scale: seconds and FLOPs over decades)."""
    from components.frames import drawn
    from components.session.recordings import index, replay_updates
    from specrej.record import load

    path = next(iter(index().values()))
    return list(drawn(replay_updates(load(path).meta["prompt"], "inf")))


def _value(label: str) -> float:
    """A tick label read back as a number ("0.6", "300G", "1.5T")."""
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
    return float(label[:-1]) * scale[label[-1]] if label[-1] in scale else float(label)


@pytest.mark.parametrize("lo,hi", [(0.6, 3.0), (0.6, 0.9), (0.048, 0.072), (2.5, 95.4), (0.61, 0.66), (20, 200),
                                   (40e9, 3.9e12), (300e9, 900e9), (1e-3, 1e3)])
def test_log_axis_ticks_are_few_whole_round_values(lo, hi):
    from components.charts import MOST_TICKS, fmt_number, fmt_si, log_ticks

    (a, b), ticks = log_ticks(lo, hi)
    assert a < b and 10 ** a <= lo and hi <= 10 ** b
    assert 3 <= len(ticks) <= MOST_TICKS and ticks == sorted(ticks), ticks
    assert all(10 ** a <= t <= 10 ** b for t in ticks), ticks
    for fmt in (fmt_number, fmt_si):
        labels = [fmt(t) for t in ticks]
        # every label is the value itself: 0.6 s reads "0.6", never plotly's minor "6" before "1"
        assert [_value(x) for x in labels] == pytest.approx(ticks, rel=1e-3), labels
        assert all(len(x) <= 5 for x in labels), labels


def test_the_verdict_charts_log_axis_reads_its_own_range(replayed):
    from components import charts

    view = replayed[-1].view
    for axis, suffix in (("time", ""), ("flops", "GT")):
        x = charts.race_chart(view, axis)["layout"]["xaxis"]
        assert x["type"] == "log" and x["tickmode"] == "array" and len(x["tickvals"]) == len(x["ticktext"]) <= 6
        assert [_value(t) for t in x["ticktext"]] == pytest.approx(x["tickvals"], rel=1e-3)
        assert all(t[-1] in suffix for t in x["ticktext"]) if suffix else all(t[-1].isdigit() for t in x["ticktext"])
        lo, hi = 10 ** x["range"][0], 10 ** x["range"][1]
        shown = [p for t in charts.race_chart(view, axis)["data"] for p in t["x"] if p]
        assert lo <= min(shown) and max(shown) <= hi            # every point inside the range it labels
        charts.figure(charts.race_chart(view, axis))            # plotly validates every attribute


def test_a_chart_drawn_on_flops_is_titled_by_flops(replayed):
    import app
    from components import charts
    from components.frames import final_frame

    view = replayed[-1].view
    try:
        flops = app.rerender_race(view, "flops")
        assert "compute (FLOPs)" in flops.label and "time" not in flops.label, flops.label
        assert "FLOPs" in json.loads(flops.value["plot"])["layout"]["xaxis"]["title"]["text"]
        assert "FLOPs" in final_frame(view).race_label    # the result drawn again while FLOPs is chosen
        assert "compute (FLOPs)" in charts.race_chart(view)["layout"]["meta"]["title"]
        timed = app.rerender_race(view, "time")
        assert "time" in timed.label and "FLOPs" not in timed.label, timed.label
    finally:
        view.x_axis = "time"


def test_exported_charts_carry_a_title_the_prompt_and_the_runs_own_settings(replayed):
    from components import charts
    from components.state.view import RunView
    from specrej import RunConfig

    view = replayed[-1].view
    rec = view.recording
    specs = [charts.arm_chart(view, a.arm) for a in view.display_order()] + [charts.race_chart(view),
                                                                             charts.race_chart(view, "flops")]
    for spec in specs:
        meta = spec["layout"]["meta"]
        assert meta["title"] and meta["prompt"] == view.cfg.prompt, meta
        s = meta["settings"]
        assert "Best-of-N: N = 128" in s and "max_new_tokens" not in s and "up to 256 new tokens" in s and "memory 2048" in s, s
        assert "alpha 0.5" in s and "filling memory at token 16" in s and view.model_label in s, s
        assert f"recorded on {rec['hardware']}, {rec['date']}" in s and "temperature" not in s, s
    assert "reward of each candidate as it is written" in specs[0]["layout"]["meta"]["title"]

    # a live run's own settings, each arm's alpha (not the base config's), and a prompt shown as itself
    live = RunView(RunConfig(prompt="Is <b>this</b> bold?", n=12, alpha=0.5, max_new_tokens=40, budget=300,
                             temperature=0.7, seed=5, decision="interval", interval=6),
                   specs=("bon", "sr", "sr:alpha=0.9"), model_label="tiny-lm", reward_label="variety")
    meta = charts.race_chart(live)["layout"]["meta"]
    s = meta["settings"]
    assert meta["prompt"] == "Is &lt;b&gt;this&lt;/b&gt; bold?", meta
    assert "Best-of-N: N = 12" in s and "alpha 0.5" in s and "alpha 0.9" in s and "decides every 6 tokens" in s, s
    assert "up to 40 new tokens, memory 300 tokens" in s and "tiny-lm, reward variety" in s, s
    assert "temperature 0.7" in s and "seed 5" in s and "recorded" not in s, s
    assert "rows decoding" in meta["title"]


def test_the_download_buttons_read_the_charts_meta_and_draw_a_copy():
    from components import charts, ui

    js = ui.download_js("race-plot", "png", "specrej-verdict", 2)
    assert "layout.meta" in js and "meta.title" in js and "meta.prompt" in js and "meta.settings" in js
    assert "'#race-plot .js-plotly-plot'" in js and "format: 'png'" in js and "filename: 'specrej-verdict'" in js
    # a copy laid out off screen, in a system font, then removed; nothing of the page's chart is relaid
    assert json.dumps(charts.EXPORT_FONT) in js and "Specrej Sans" not in charts.EXPORT_FONT
    assert "P.newPlot(div" in js and "div.remove()" in js and "relayout(el" not in js and "react(el" not in js
    assert not re.search(r"alpha|N = |new tokens", js)      # no setting is written into the button


def test_the_dotted_now_line_is_labelled(replayed):
    """While an arm writes, a dotted line marks the token it is at: named on the chart, in every arm's chart
    (Best-of-N's included), and gone once the arm is done."""
    from components import charts
    from components.frames import KEEP

    seen = set()
    for frame in replayed[1:-1]:
        if frame.arm_plots is KEEP:
            continue
        for spec in frame.arm_plots:
            if spec is KEEP:
                continue
            now = next(t for t in spec["data"] if t["name"] == "now")
            words = [w for w in now.get("text", []) if w.startswith("writing token")]   # the line's own text
            assert words == ([f"writing token {now['x'][0]:g}"] if now["x"] and now["x"][0] > 0 else []), words
            if words:
                seen.add(spec["data"][0]["uid"].split("-")[0])
    assert seen == {"sr", "bon"}, seen
    done = replayed[-1].view
    for arm in ("sr", "bon"):
        assert not any(a["text"].startswith("writing") for a in charts.arm_chart(done, arm)["layout"]["annotations"])


def test_three_arm_table_headers_fit_narrow_columns():
    from components import panels
    from components.state.view import RunView
    from specrej import RunConfig

    view = RunView(RunConfig(prompt="-", n=4), specs=("bon", "sr:alpha=0.5,n=auto", "sr:alpha=0.8,n=auto"))
    headers, _, widths, _ = panels.candidate_table(view)
    # the two settings are told apart by what differs (alpha), not by what they share (n=auto)
    assert "round pruned (SR α=0.5)" in headers and "tokens (SR α=0.8)" in headers, headers
    assert not any("n=auto" in h or "alpha=" in h for h in headers), headers
    shares = [float(w.rstrip("%")) for w in widths]
    assert sum(shares) == pytest.approx(100, abs=0.5) and shares[-1] >= 20
    for h, share in zip(headers[:-1], shares[:-1]):   # a table 1180 px wide: every header word fits its column
        assert max(len(w) for w in h.split()) * 8.5 + 30 <= share / 100 * 1180, (h, share)


def test_the_toolbar_stays_off_the_plot():
    from components import charts
    from components.state.view import RunView
    from components.ui import css_path
    from specrej import RunConfig

    spec = charts.arm_chart(RunView(RunConfig(prompt="-")), "sr")
    assert spec["config"]["displaylogo"] is False and "toImage" in spec["config"]["modeBarButtonsToRemove"]
    css = css_path().read_text()
    phone = css[css.index("@media (max-width: 640px)"):]
    assert re.search(r"\.modebar-container \{ display: none !important; \}", phone)
