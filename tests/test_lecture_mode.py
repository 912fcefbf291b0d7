"""Lecture mode without a browser (issue 39): the rehearsal is the lecture (``pace.lecture_plan``, a pure function
of the measurement, the limit and the race's recording), a lecture-mode Run plays live or its recording at its
recorded pace (issue 61: never stretched to a quiet time measured under load), decided before the race starts; charts for a room; the controls locked while a play
runs; the link of the race on screen, short, with its QR code; Paper scale's scaled-down race from the
deployment's limits alone. The browser's side (the layout measured at 1280x720, the clicker's keys):
``tests/test_browser_lecture.py``."""
from __future__ import annotations

import dataclasses
import math

import pytest
from conftest import profiled, race_frames, run_request, tiny_app_context

from specrej.core.cost import StepCost

# ---------------------------------------------------------------- the choice: a pure function

LIMIT = 120.0


def plan(estimate_s, load, recorded_s=None, limit_s=LIMIT):
    from components.session.pace import lecture_plan

    return lecture_plan(estimate_s, load, limit_s, recorded_s)


def test_a_quiet_machine_races_live_and_states_its_estimate():
    p = plan(20.0, 1.0, recorded_s=30.0)
    assert p.mode == "live" and p.stated_s == 20.0 and p.target_s == pytest.approx(24.0)


def test_a_little_load_still_races_live_within_the_tolerance():
    from components.session.pace import TOLERANCE

    # the quiet time is 20 s; 1.15x slower now: 23 s, within 1.2 x 20 s
    p = plan(23.0, 1.15, recorded_s=30.0)
    assert p.mode == "live" and p.stated_s == 23.0 and 23.0 <= TOLERANCE * 20.0


def test_a_busy_machine_plays_the_recording_at_its_recorded_pace():
    # 3x slower now: 60 s live; the recording (recorded in 30 s) plays at its own pace and states its 30 s
    p = plan(60.0, 3.0, recorded_s=30.0)
    assert p.mode == "recording" and p.stated_s == pytest.approx(30.0) and p.speed == 1.0


@pytest.mark.parametrize("load", [1.0, 1.5, 2.0, 3.0, 6.0])
def test_the_stated_time_is_the_time_shown_whatever_the_load(load):
    """Live, the quiet time (within the tolerance); where the load would make it late, the recording at its
    recorded pace, stating the recorded time: the same two times on a quiet rehearsal and a busy lecture."""
    from components.session.pace import TOLERANCE

    quiet = 20.0
    p = plan(quiet * load, load, recorded_s=45.0)
    assert (p.mode == "live") == (load <= TOLERANCE)
    if p.mode == "live":
        assert quiet <= p.stated_s <= TOLERANCE * quiet, p
    else:
        assert p.stated_s == 45.0 and p.speed == 1.0, p


def test_without_a_recording_it_races_live_while_the_limit_allows_and_else_says_it_is_too_long():
    from components.session.pace import LIVE_SHARE

    p = plan(60.0, 3.0)                               # late against the quiet 20 s, but well inside the limit
    assert p.mode == "live" and p.stated_s == 60.0    # its time now, stated plainly
    assert plan(LIVE_SHARE * LIMIT + 1, 5.0).mode == "too_long"


def test_a_race_longer_than_the_limit_even_when_quiet_plays_its_recording_within_the_limit():
    from components.session.pace import LIVE_SHARE

    p = plan(400.0, 1.0, recorded_s=300.0)    # 400 s quiet, against a 120 s limit
    assert p.mode == "recording" and p.stated_s == pytest.approx(LIVE_SHARE * LIMIT)
    assert p.speed == pytest.approx(300.0 / (LIVE_SHARE * LIMIT))


def test_nothing_estimated_races_live():
    assert plan(0.0, 1.0, recorded_s=30.0).mode == "live"


# ---------------------------------------------------------------- a lecture-mode Run, end to end on tiny models

SETTINGS = dict(prompt="Name three rivers.", n=8, max_new_tokens=24, budget=160, first_decision=8)
QUIET = StepCost((1, 8, 32, 128), (0.001, 0.0012, 0.002, 0.005))


@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def recorded(ctx, tmp_path_factory):
    from components.session import stream

    folder = tmp_path_factory.mktemp("page-races")
    stream.record(ctx, run_request(ctx, SETTINGS), folder / "rivers.json.gz")
    return dataclasses.replace(ctx, page_races=folder, machine=ctx.machine.copy())


def machine(monkeypatch, load: float, model: str):
    """This machine's profile: the quiet step, probed ``load`` times slower (no test times anything)."""
    profiled(monkeypatch, model, QUIET, load)


def test_a_lecture_run_on_a_busy_machine_plays_its_recording_at_its_recorded_pace(recorded, monkeypatch):
    from components.session import recordings

    machine(monkeypatch, 4.0, recorded.default_model)
    paced = []
    real = recordings.play
    monkeypatch.setattr(recordings, "play", lambda path, speed, **kw: paced.append((speed, kw)) or real(path, math.inf, **kw))
    out = race_frames(recorded, run_request(recorded, SETTINGS, lecture=True))
    (speed, kw), = paced
    assert kw["lecture"] is True and kw["fallback"]["reason"] == "lecture"
    fb = kw["fallback"]
    recorded_s = recordings.load(next(recorded.page_races.glob("*.json.gz"))).duration_s
    assert fb["stated_s"] == pytest.approx(recorded_s) and speed == 1.0   # its own pace, its own time stated
    last = out[-1]
    assert last.view.recording is not None and last.view.lecture and last.view.done
    assert "Lecture mode: the recording of this race" in last.status and "4.0x slower" in last.status
    # its charts are drawn for a room
    from components import lecture

    assert last.arm_plots[0]["layout"]["font"]["size"] == lecture.FONT
    # and labelled in words short enough for half of a 1280 px screen at 20 px: the name, no settings
    labels = [label for _, label, _ in next(f.slots for f in reversed(out) if isinstance(f.slots, list))]
    assert labels and all(len(label) <= 48 and "=" not in label for label in labels), labels



def test_stepping_a_lecture_race_and_closing_the_steps_keep_its_charts_for_a_room(recorded, monkeypatch):
    """The step buttons and Stop (which closes stepping) draw frames outside the race's stream: theirs are
    drawn for a room too (a missing name there failed every ArrowRight in lecture mode), and only once."""
    from components import lecture
    from components.frames import as_seen, final_frame, step_frame

    machine(monkeypatch, 4.0, recorded.default_model)
    view = race_frames(recorded, run_request(recorded, SETTINGS, lecture=True))[-1].view
    assert len(view.checkpoints) >= 2
    for f in (as_seen(step_frame(view, 1), view), as_seen(final_frame(view), view)):
        assert f.arm_plots[0]["layout"]["font"]["size"] == lecture.FONT
        assert f.arm_plots[0]["layout"]["height"] == lecture.HEIGHT
    plain = step_frame(view, 1)
    notes = [n["font"]["size"] for n in as_seen(step_frame(view, 1), view).step["plot"]["layout"].get("annotations", [])]
    assert notes == [n["font"]["size"] for n in lecture.for_room(plain.step["plot"])["layout"].get("annotations", [])]
    view.lecture = False
    assert as_seen(step_frame(view, 1), view).arm_plots[0]["layout"]["font"]["size"] != lecture.FONT

def test_a_lecture_run_on_a_quiet_machine_races_live_and_the_link_is_that_race(recorded, monkeypatch):
    from components import links

    from components.session import pace

    machine(monkeypatch, 1.0, recorded.default_model)
    # the profile says quiet; the machine running the suite may not be, and a live race past its stated time
    # switches to its recording (tests/test_lecture.py): not what this test is about
    monkeypatch.setattr(pace, "LATE_SLACK_S", 1e6)
    out = race_frames(recorded, run_request(recorded, SETTINGS, lecture=True))
    view = out[-1].view
    assert view.recording is None and view.lecture and view.done and "Done" in out[-1].status
    # the race's clock stopped when it ended: a pause afterwards (stepping, reading) is not race time
    took = view.elapsed()
    assert view.ended is not None and view.elapsed() == took   # the clock reads the end, not now
    # "Link to this race": the settings it ran with, not the boxes as they are now; defaults left out
    from components.ui import link_defaults

    defaults = link_defaults(recorded)
    q = links.race_query(view, {"prompt": "another prompt", "n": 16, "seed": 9}, defaults, lecture=True)
    assert "prompt=Name+three+rivers." in q and "n=8" in q and "seed" not in q and "lecture=1" in q
    assert "alpha" not in q and "fit" not in q and "temperature" not in q   # the defaults: left out
    assert "reward" not in q and len(q) < 100, q


# ---------------------------------------------------------------- the link of a recording, and its QR code

def test_the_link_of_a_recording_opens_that_recording():
    from components import links
    from components.session.recordings import RECORDINGS, play

    path = sorted(RECORDINGS.glob("*.json.gz"))[0]
    view = next(u.view for u in play(path, math.inf) if u.view is not None)
    q = links.race_query(view, {"prompt": "the box", "n": 4}, {"n": 32})
    assert q.endswith("&replay=1") and "the+box" not in q and "n=" not in q


def test_the_qr_code_is_drawn_by_segno_and_encodes_the_link():
    from components import links

    url = "http://127.0.0.1:7860/?prompt=Name+three+rivers.&n=8&lecture=1"
    svg = links.qr_svg(url)
    assert svg.startswith("<svg") and "path" in svg
    import segno

    code = segno.make(url, error="m")
    assert svg == code.svg_inline(scale=6, dark="#000", light="#fff", border=4, omitsize=True)
    # scaled whole by the page, never clipped: a viewBox with the 4-module quiet zone on each side, no fixed size
    side = (code.symbol_size(scale=1, border=0)[0] + 8) * 6
    assert f'viewBox="0 0 {side} {side}"' in svg and "width=" not in svg.split(">")[0]
    assert links.qr_svg("") == "" and links.qr_svg("x" * (links.MAX_QR_CHARS + 1)) == ""


@pytest.mark.parametrize("url,says", [
    ("http://127.0.0.1:7931/?prompt=x", "127.0.0.1"), ("http://localhost:7860/", "localhost"),
    ("http://[::1]:7860/", "::1"), ("http://0.0.0.0:7860/?n=4", "0.0.0.0"),
    ("https://someone-specrej.hf.space/?n=4", ""), ("http://192.168.1.20:7860/", ""), ("", ""), ("http://[bad", "")])
def test_a_link_that_only_this_computer_can_open_says_so_and_how_to_serve_the_room(url, says):
    from components import links

    note = links.room_note(url)
    if not says:
        assert note == ""
    else:
        assert f"points at {says}" in note and "phones in the room cannot open it" in note
        assert "GRADIO_SERVER_NAME=0.0.0.0" in note and "share link" in note and "Space" in note


def test_a_short_link_leaves_out_the_defaults_and_reads_back():
    from urllib.parse import parse_qsl

    from components import links

    defaults = {"n": 32, "alpha": 0.5, "fit": True, "step": False, "lecture": False, "seed": 0}
    values = {"prompt": "Name two seas.", "n": 32, "alpha": 0.8, "fit": True, "step": True, "seed": 0}
    q = links.query(values, defaults)
    assert dict(parse_qsl(q)) == {"prompt": "Name two seas.", "alpha": "0.8", "step": "1"}
    assert links.settings(dict(parse_qsl(q))) == {"prompt": "Name two seas.", "alpha": 0.8, "step": True}


# ---------------------------------------------------------------- charts for a room, and the locks

def test_charts_for_a_room_have_larger_type_and_leave_the_data_alone():
    from components import charts, lecture
    from components.state.view import RunView
    from specrej import RunConfig

    spec = charts.race_chart(RunView(RunConfig(prompt="x")))
    big = lecture.for_room(spec)
    assert big["data"] == spec["data"] and big is not spec
    assert big["layout"]["font"]["size"] == lecture.FONT > spec["layout"]["font"]["size"]
    assert big["layout"]["xaxis"]["tickfont"]["size"] == lecture.TICKS
    assert big["layout"]["xaxis"]["title"]["font"]["size"] == lecture.TITLE
    assert big["layout"]["height"] == lecture.HEIGHT and lecture.for_room(None) is None


def test_while_something_plays_every_control_but_stop_is_locked(ctx):
    import gradio as gr

    import app
    from components import lecture, ui

    with gr.Blocks():
        page = ui.build_page(ctx)
    locked = lecture.locks(page, True)
    assert page.controls.stop not in locked and page.controls.run in locked and page.controls.lecture in locked
    assert page.controls.n in locked and page.controls.replay in locked and page.arena.step.next in locked
    assert all(u.get("interactive") is False for u in locked.values())
    unlocked = lecture.locks(page, False)
    steps = (page.arena.step.prev, page.arena.step.next)   # the session's table sets these
    assert all(u.get("interactive") is True for c, u in unlocked.items() if c not in steps)
    assert unlocked[page.arena.step.end].get("interactive") is True   # "Run to the end" at every decision
    assert all(unlocked[b].get("__type__") != "update" or "interactive" not in unlocked[b] for b in steps)
    # outside lecture mode a play locks nothing (the page's own rules hold)
    assert all("interactive" not in u for u in lecture.locks(page, True, lecture=False).values())
    assert app   # the page wires these (lecture.wire)


# ---------------------------------------------------------------- Paper scale: the same scaled race whatever the load

def test_the_scaled_down_paper_race_is_sized_from_the_deployment_not_the_load(ctx):
    from components.session import paper

    fast = StepCost((1, 8, 32, 128), (0.01, 0.012, 0.02, 0.05))
    from components.session.context import Machine

    quiet_ctx = dataclasses.replace(ctx, machine=Machine(step_costs={ctx.default_model: fast}, overhead=1.0))
    busy_ctx = dataclasses.replace(ctx, machine=Machine(step_costs={ctx.default_model: fast.scaled(4.0)}, overhead=3.0))
    prompt = ctx.examples[0]
    a, b = paper.plan(quiet_ctx, prompt), paper.plan(busy_ctx, prompt)
    assert a.settings == b.settings and a.scaled_s is not None and b.scaled_s is not None
