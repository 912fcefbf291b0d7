"""Frames as changes (issue 62, 1): a live frame's charts as what changed since the frame sent before
(``frames.ChartChanges``), rebuilt here the way ``assets/charts.js`` rebuilds them, equal to the whole figures of
every frame of every committed recording; and far fewer bytes than the whole figures."""
from __future__ import annotations

import copy
import json
import math
import random
import re
from pathlib import Path

import pytest

from components import frames
from components.frames import KEEP, ChartChanges, array_ops, chart_changes, since
from components.session import recordings

RECORDINGS = sorted(Path(recordings.RECORDINGS).glob("*.json.gz"))


def rebuild(old: list, ops: list) -> list:
    out = []
    for op in ops:
        if op[0] == "c":
            out.extend(old[op[1]:op[1] + op[2]])
        elif op[0] == "v":
            out.extend(op[1])
        else:
            out.extend([op[1]] * op[2])
    return out


def apply(chart: dict | None, change: dict) -> dict:
    """One chart's change applied to its copy, as assets/charts.js applies it."""
    if "react" in change:
        return copy.deepcopy(change["react"])
    for i, t in change.get("traces", {}).items():
        trace = chart["data"][int(i)]
        for k, ops in t.get("ops", {}).items():
            trace[k] = rebuild(trace.get(k) or [], ops)
        for k, v in t.get("set", {}).items():
            if v is None:
                trace.pop(k, None)
            else:
                trace[k] = v
    for path, v in change.get("layout", {}).items():
        *head, last = re.sub(r"\[(\d+)\]", r".\1", path).split(".")
        d = chart["layout"]
        for p in head:
            d = d[int(p)] if isinstance(d, list) else d.setdefault(p, {})
        if isinstance(d, list):
            if v is None:
                del d[int(last)]
            elif int(last) == len(d):
                d.append(v)
            else:
                d[int(last)] = v
        elif v is None:
            d.pop(last, None)
        else:
            d[last] = v
    return chart


def streamed(frames_):
    """(frame sent, change line) for each frame, as ``ui.Page.stream`` sends them."""
    changes, shown = ChartChanges("test"), None
    for f in frames_:
        out, line = changes.step(since(f, shown) if f.results_visible is KEEP else f)
        shown = f
        yield out, line


def size(obj) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


@pytest.mark.parametrize("ops_case", range(200))
def test_array_ops_rebuild_any_array(ops_case):
    rng = random.Random(ops_case)
    pool = [None, 1, 2.5, [3, "a"], [3, "b"], "x", "#12: a hover snippet of ninety characters", [7, "a long row"]]
    old = [rng.choice(pool) for _ in range(rng.randrange(0, 40))]
    new = list(old)
    for _ in range(rng.randrange(0, 6)):
        kind = rng.choice(["insert", "delete", "append", "replace"])
        at = rng.randrange(0, len(new) + 1)
        if kind == "insert" or kind == "append":
            at = len(new) if kind == "append" else at
            new[at:at] = [rng.choice(pool)] * rng.randrange(1, 5)
        elif kind == "delete" and new:
            del new[at:at + rng.randrange(1, 4)]
        elif new:
            new[min(at, len(new) - 1)] = rng.choice(pool)
    assert rebuild(old, array_ops(old, new)) == new


def test_a_grown_array_is_one_copy_and_its_new_items():
    assert array_ops([1, 2], [1, 2, 3, 3, 3, 4]) == [["c", 0, 2], ["r", 3, 3], ["v", [4]]]
    assert chart_changes({"data": [{"type": "scatter", "uid": "a", "x": [1]}], "layout": {}},
                         {"data": [{"type": "scatter", "uid": "a", "x": [1]}], "layout": {}}) is None
    # another number of traces: the whole chart
    new = {"data": [{"type": "scatter", "uid": "a"}, {"type": "bar", "uid": "b"}], "layout": {}}
    assert chart_changes({"data": [{"type": "scatter", "uid": "a"}], "layout": {}}, new) == {"react": new}


def test_a_new_point_s_snippet_is_a_copy_of_its_candidate_s_point_before():
    """Candidates packed in one trace grow in the middle by a point each; a new point's hover snippet (the same on
    each of its candidate's points) is a copy of the point before it, not its 90 characters again."""
    a, b = "#3: Once upon a time there was a small boat", "#9: The ocean is wide and deep and blue"
    old, new = [a, a, b, b], [a, a, a, b, b, b]
    ops = array_ops(old, new)
    assert rebuild(old, ops) == new
    assert a not in json.dumps(ops) and b not in json.dumps(ops), ops
    assert array_ops([1.5, 2.5], [1.5, 2.5, 2.5]) == [["c", 0, 2], ["v", [2.5]]]   # a small item is sent as it is


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.name[:24])
def test_changes_rebuild_every_frame_of_a_recording(path):
    """Every frame of a committed recording (replayed at once: every Round and Finished is a frame): the charts
    rebuilt from the changes equal the whole figures that frame would have sent; a live frame sends no whole chart;
    its run's first and last frames do."""
    drawn = list(frames.drawn(recordings.play(path, float("inf"), sleep=lambda s: None)))
    charts, whole_bytes, sent_bytes, live = {}, 0, 0, 0
    shown = None
    for (out, line), f in zip(streamed(drawn), drawn):
        sent = since(f, shown) if f.results_visible is KEEP else f
        shown = f
        whole = frames.frame_charts(sent)
        whole_bytes += sum(size(s) for s in whole.values())
        sent_bytes += sum(size(s) for s in frames.frame_charts(out).values()) + (size(line) if line else 0)
        if line is None:
            assert not whole
            continue
        if "base" in line:
            charts = copy.deepcopy(line["base"])
            assert frames.frame_charts(out) == whole   # the first frame: whole figures too
        else:
            for key, change in line["charts"].items():
                charts[key] = apply(charts.get(key), change)
            if line.get("final"):
                assert frames.frame_charts(out) == whole
            else:
                live += 1
                assert frames.frame_charts(out) == {}   # a live frame: no whole chart
        for key, spec in whole.items():
            assert charts[key] == json.loads(json.dumps(spec)), (key, line["seq"])
    assert live >= 10
    assert whole_bytes >= 5 * sent_bytes, (whole_bytes, sent_bytes)


def test_a_retry_starts_its_charts_again():
    """A run's start (slots laid out) sends its figures whole and a new base line; a stream that never started a
    run (an error) sends no line."""
    path = RECORDINGS[0]
    drawn = list(frames.drawn(recordings.play(path, float("inf"), sleep=lambda s: None)))
    lines = [line for _, line in streamed(drawn[:5] + drawn)]
    bases = [i for i, line in enumerate(lines) if line and "base" in line]
    assert bases == [0, 5] and lines[5]["seq"] == 0
    assert [line for _, line in streamed([frames.error_frame("no")])] == [None]


def test_a_live_status_line_is_held_at_most_a_second():
    """A live frame whose status line changed only in its words waits until a second has passed since the last one
    sent (``frames.held``); a changed style, the run's start or its result always go."""
    path = RECORDINGS[0]
    drawn = list(frames.drawn(recordings.play(path, float("inf"), sleep=lambda s: None)))
    first, live, last = drawn[0], drawn[3], drawn[-1]
    sending = since(live, drawn[2])
    assert sending.status is not KEEP
    assert frames.held(sending, drawn[2], 0.3) and not frames.held(sending, drawn[2], 1.2)
    assert not frames.held(first, None, 0.0)   # the run's start
    assert not frames.held(last, drawn[-2], 0.0)   # its result
    styled = since(live, drawn[2])
    styled.status_kind = "error"
    assert not frames.held(styled, drawn[2], 0.0)


def test_live_leader_boxes_are_held_at_most_a_second():
    """A live frame that changes a leader's box waits until a second has passed since the leaders were last sent
    (``frames.leaders_held``); the run's start, its result and step mode always send them."""
    path = RECORDINGS[0]
    drawn = list(frames.drawn(recordings.play(path, float("inf"), sleep=lambda s: None)))
    first, last = drawn[0], drawn[-1]
    k = next(i for i in range(3, len(drawn) - 1) if any(lead is not KEEP for lead in since(drawn[i], drawn[i - 1]).arm_leaders))
    sending = since(drawn[k], drawn[k - 1])
    assert frames.leaders_held(sending, drawn[k - 1], 0.3) and not frames.leaders_held(sending, drawn[k - 1], 1.2)
    assert not frames.leaders_held(first, None, 0.0)          # the run's start
    assert not frames.leaders_held(last, drawn[-2], 0.0)      # its result
    same = since(drawn[k - 1], drawn[k - 1])                  # nothing changed: nothing to hold
    assert not frames.leaders_held(same, drawn[k - 1], 0.0)


def test_the_page_stream_sends_leaders_at_most_once_a_second_and_ends_on_the_result(monkeypatch, tiny_lm_dir,
                                                                                       tiny_reward_dir, tmp_path):
    """Through ``Page.stream`` on a fast replay: a leader box's value goes at the start, at most once per second of
    the stream's clock after it, and whole with the result; what the page was last sent is what it shows."""
    import gradio as gr

    from components import ui
    from components.session.context import AppContext

    ctx = AppContext.from_env({"SPECREJ_MODEL": tiny_lm_dir, "SPECREJ_REWARD": f"hf:{tiny_reward_dir}"},
                              trace_dir=str(tmp_path))
    path = RECORDINGS[0]
    drawn = list(frames.drawn(recordings.play(path, float("inf"), sleep=lambda s: None)))
    clock = {"t": 0.0}
    monkeypatch.setattr(ui.time, "monotonic", lambda: clock["t"])
    with gr.Blocks():
        page = ui.build_page(ctx)

    def paced():
        for f in drawn:
            clock["t"] += 0.25
            yield f

    sent_at = []
    for update in page.stream(paced()):
        boxes = [update[s.leader] for s in page.arena.slots]
        if any(not (isinstance(b, dict) and b.get("__type__") == "update" and len(b) == 1) for b in boxes):
            sent_at.append(clock["t"])
    assert sent_at[0] == 0.25 and sent_at[-1] == clock["t"]    # the start, the result
    gaps = [b - a for a, b in zip(sent_at, sent_at[1:-1])]
    assert gaps and min(gaps) >= 1.0, sent_at


def test_no_axis_asks_plotly_to_measure_each_tick_label():
    """Plotly's default for a linear axis ("hide past div") measures every tick label's box on every draw (a forced
    layout of the page each): a third of Plotly's time in a live Run at 4x throttling. The labels sit in margins
    that grow to fit them, so nothing is hidden either way."""
    from components.session import recordings as rec
    path = sorted((Path(__file__).resolve().parent.parent / "assets/recordings/page").glob("*defaults.json.gz"))[0]
    seen = 0
    for f in map(frames.draw, rec.play(path, math.inf)):
        for spec in ([*f.arm_plots] if isinstance(f.arm_plots, list) else []) + [f.race_plot]:
            if isinstance(spec, dict):
                for axis in ("xaxis", "yaxis"):
                    assert spec["layout"][axis]["ticklabeloverflow"] == "allow", (spec["layout"]["meta"], axis)
                    seen += 1
    assert seen >= 6


def test_the_race_axis_grows_in_round_steps():
    from components.charts import step_up
    assert [step_up(v) for v in (0.9, 1.0, 1.01, 2.2, 3.1, 4.9, 7.6, 12, 151)] == [1, 1, 1.5, 3, 5, 5, 10, 15, 200]
