"""One session, one play (issue 39): the states x buttons table, the session's play ids, and the rules that keep
state as enums. No models, no server: the table and ``Session`` are plain Python."""
from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from components.state.play import (PLAYING, TABLE, Button, Effect, Phase, Session, docs_block, phase_after, rule,
                                   step_rule)
from components.state.update import Kind, Update
from components.state.view import RunState, RunView

from specrej import RunConfig

ROOT = Path(__file__).resolve().parents[1]


def test_every_phase_and_button_has_one_rule_with_words():
    assert set(TABLE) == {(p, b) for p in Phase for b in Button}
    for (p, b), r in TABLE.items():
        assert isinstance(r.effect, Effect) and r.words.strip(), (p, b)


def test_one_play_at_a_time_in_the_table():
    for p in Phase:
        for b in (Button.RUN, Button.REPLAY, Button.PAPER, Button.LIVE):
            # a play button never starts a second play beside the one in progress: it stops it first, and says so
            assert rule(p, b).effect is (Effect.RESTART if p in PLAYING else Effect.START), (p, b)
            if p in PLAYING:
                assert "stops this" in rule(p, b).label
        stop = rule(p, Button.STOP).effect
        assert stop is (Effect.STOP if p in PLAYING else Effect.CLOSE_STEPS if p is Phase.STEPPING else Effect.IGNORED)
        for b in (Button.PREV, Button.NEXT, Button.END):
            assert (rule(p, b).effect is Effect.STEP) == (p is Phase.STEPPING), (p, b)


def test_the_step_buttons_say_where_they_are():
    assert not step_rule(Button.PREV, 0, 3).interactive and "decision 1" in step_rule(Button.PREV, 0, 3).label
    assert step_rule(Button.PREV, 1, 3).effect is Effect.STEP
    assert not step_rule(Button.NEXT, 2, 3).interactive and "Last decision" in step_rule(Button.NEXT, 2, 3).label
    assert step_rule(Button.NEXT, 1, 3).effect is Effect.STEP
    one = step_rule(Button.NEXT, 0, 1)   # one decision: it is the first and the last
    assert not one.interactive and not step_rule(Button.PREV, 0, 1).interactive


def _view(**kw) -> RunView:
    return RunView(RunConfig(prompt="-", n=2), **kw)


def test_a_stale_play_draws_nothing_more_and_closes_its_stream():
    s = Session()
    closed = []

    def stream(view):
        try:
            yield Update(Kind.WARMING, message="w")
            yield Update(Kind.START, view)
            for _ in range(100):
                yield Update(Kind.LIVE, view)
        finally:
            closed.append(view)

    first = s.begin(Phase.RACING)
    a = s.follow(first, stream(_view()))
    got = [next(a), next(a)]
    assert [u.play for u in got] == [first, first] and s.phase is Phase.RACING
    second = s.begin(Phase.REPLAYING)           # Replay pressed mid-race
    assert not s.current(first) and s.current(second)
    assert list(a) == [] and len(closed) == 1     # the race's next update is dropped, and the race is closed
    s.leave(first)                                # its handler ends
    b = list(s.follow(second, [Update(Kind.START, _view(), replay={"speed": 1.0}), Update(Kind.END, _view())]))
    assert [u.play for u in b] == [second, second] and b[0].phase is Phase.REPLAYING
    assert s.phase is Phase.DONE and s.resting is Phase.DONE


def test_a_play_gone_stale_wakes_its_handler_at_once():
    """A handler waiting on its play's next event (a decoding step under load) is woken the moment the play goes
    stale, by a new play or by Stop, so it ends and frees its place for the new play; once, and never after the
    play ended on its own."""
    s = Session()
    s.SETTLE_S = 0.01   # no handler here leaves: nothing waits for one
    woken = []
    first = s.begin(Phase.RACING)
    s.on_stale(first, lambda: woken.append("first"))
    assert woken == []
    second = s.begin(Phase.REPLAYING)              # Replay pressed during the race
    assert woken == ["first"]
    s.on_stale(second, lambda: woken.append("second"))
    s.press(Button.RUN)                            # Run during the replay: it stops at once
    assert woken == ["first", "second"]
    s.on_stale(second, lambda: woken.append("late"))   # already stale: called at once
    assert woken[-1] == "late"
    third = s.begin(Phase.RACING)
    s.on_stale(third, lambda: woken.append("third"))
    list(s.follow(third, [Update(Kind.END, _view())]))   # it ended on its own: nothing to wake later
    s.begin(Phase.RACING)
    assert "third" not in woken


def test_a_new_play_draws_only_once_the_older_plays_handler_has_ended():
    """A stale play's last frame, yielded just before the click and still with Gradio, must reach the page before
    the new play's first (one stream per session, in order): the new play's first update waits for the older
    handler to end (``leave``), at most ``SETTLE_S``."""
    import threading

    s = Session()
    first = s.begin(Phase.RACING)
    second = s.begin(Phase.REPLAYING)
    got = []
    t = threading.Thread(target=lambda: got.extend(s.follow(second, [Update(Kind.START, _view(), replay={"speed": 1})])))
    t.start()
    t.join(0.3)
    assert t.is_alive() and got == []          # waiting for the race's handler
    s.leave(first)
    t.join(5)
    assert not t.is_alive() and [u.play for u in got] == [second]
    third = s.begin(Phase.RACING)
    s.SETTLE_S = 0.05                          # a handler that never ends holds nobody for long
    assert [u.play for u in s.follow(third, [Update(Kind.START, _view())])] == [third]


def test_press_applies_the_table():
    s = Session()
    assert s.press(Button.STOP).effect is Effect.IGNORED and s.phase is Phase.IDLE and s.play == 0
    play = s.begin(Phase.RACING)
    assert s.press(Button.RUN).effect is Effect.RESTART and not s.current(play)   # stopped at once, before the queue
    play = s.begin(Phase.RACING)
    assert s.press(Button.STOP).effect is Effect.STOP and not s.current(play) and s.phase is Phase.STOPPED
    assert s.press(Button.STOP).effect is Effect.IGNORED                          # "Nothing to stop" the second time
    s.phase = s.resting = Phase.STEPPING
    assert s.press(Button.NEXT).effect is Effect.STEP and s.phase is Phase.STEPPING
    assert s.press(Button.STOP).effect is Effect.CLOSE_STEPS and s.phase is Phase.DONE
    s.phase = s.resting = Phase.STEPPING
    assert s.press(Button.END).effect is Effect.STEP and s.phase is Phase.DONE


def test_the_phase_after_each_update():
    view = _view()
    assert phase_after(Update(Kind.ERROR, message="x"), Phase.DONE) is Phase.DONE   # nothing started: as it was
    assert phase_after(Update(Kind.WARMING, message="w"), Phase.IDLE) is Phase.WARMING
    assert phase_after(Update(Kind.START, view), Phase.IDLE) is Phase.RACING
    assert phase_after(Update(Kind.START, view, replay={"speed": 1.0}), Phase.IDLE) is Phase.REPLAYING
    assert phase_after(Update(Kind.END, view), Phase.IDLE) is Phase.DONE
    view.stepping, view.checkpoints = True, [object()]
    assert phase_after(Update(Kind.END, view), Phase.IDLE) is Phase.STEPPING
    assert phase_after(Update(Kind.LIMIT, view), Phase.IDLE) is Phase.STOPPED
    assert phase_after(Update(Kind.FAILURE, view), Phase.IDLE) is Phase.STOPPED


def test_an_error_before_anything_started_leaves_the_page_resting_as_it_was():
    s = Session()
    s.phase = s.resting = Phase.STEPPING
    play = s.begin(Phase.RACING)
    assert [u.phase for u in s.follow(play, [Update(Kind.ERROR, message="bad")])] == [Phase.DONE]
    assert s.phase is Phase.DONE   # the step panel was closed by the press; the last result stays


def test_sessions_are_one_per_browser_session_and_thread_safe():
    import copy

    page = Session()
    a, b = copy.deepcopy(page), copy.deepcopy(page)   # what Gradio does for each browser session
    assert a is not b and a.play == b.play == 0
    ids = []
    threads = [threading.Thread(target=lambda: ids.append(a.begin())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(ids) == list(range(1, 9)) and a.current(8) and b.play == 0


def test_updates_and_views_hold_enums():
    assert Update("live", _view()).kind is Kind.LIVE      # a kind's value is accepted, and kept as the enum
    with pytest.raises(ValueError, match="use one of"):
        Update("running")
    view = _view()
    assert view.state is RunState.RUNNING and str(RunState.DONE) == "done"


# A string compared as a state: `state == "done"`, `update.kind in ("error", ...)`, `phase != 'idle'` ... (a run's
# state, a session's phase, an update's kind; a verdict's or a field's kind is a kind of thing, not a state)
STRING_STATE = re.compile(r"""\b(state|phase|update\.kind)\s*(==|!=|\bin\b|\bnot in\b)\s*[(\[{]?\s*["']""")
STRING_STATE_SET = re.compile(r"""\.(state|phase)\s*=\s*["']""")


def test_no_string_states_in_components():
    found = []
    for path in sorted((ROOT / "components").rglob("*.py")):
        if path.name == "autospec_tab.py":   # the lab's sampler state is its own (a list of values), not a phase
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if STRING_STATE.search(code) or STRING_STATE_SET.search(code):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "string states (use the enums in components/state/):\n" + "\n".join(found)


def test_the_grep_finds_what_it_looks_for():
    for bad in ('if view.state == "done":', "if update.kind in ('error', 'limit'):", 'view.state = "stopped"',
                "phase != 'idle'"):
        assert STRING_STATE.search(bad) or STRING_STATE_SET.search(bad), bad
    assert not STRING_STATE.search("if view.state is RunState.DONE:")


def test_docs_carry_the_code_table():
    doc = (ROOT / "docs" / "app.md").read_text(encoding="utf-8")
    assert docs_block() in doc, ("docs/app.md's states x buttons table differs from the code's: run "
                                 "`python -m components.state.play` to write it")


def test_an_older_plays_end_never_unlocks_a_page_whose_next_play_is_on_its_way():
    """Lecture mode's locks: a stopped play's event can end (and ask to unlock) after the next play's lock landed
    (seen under load: Run stayed enabled through a race, and the space bar restarted it instead of stopping it).
    The session says it is busy from the press's first step until the play it pressed for has begun and ended."""
    import gradio as gr

    from components import lecture, ui
    from components.session.context import AppContext
    from components.state.play import Phase, Session

    s = Session()
    assert not s.busy()
    s.pressing()                      # lock_step: the play is on its way, not begun
    assert s.busy()
    play = s.begin(Phase.RACING)
    assert s.busy()
    assert s.end(play, Phase.DONE) and not s.busy()

    with gr.Blocks() as demo:
        page = ui.build_page(AppContext.from_env({}))
        lecture.wire(page, ends=[page.controls.run.click(None)])
    ended = next(fn.fn for fn in demo.fns.values() if getattr(fn.fn, "__name__", "") == "ended")
    busy = Session()
    busy.pressing()
    assert all(v == gr.skip() for v in ended(busy).values())              # a newer play keeps its locks
    assert all(v.get("interactive") is not False for v in ended(Session()).values() if isinstance(v, dict))


def test_stop_pressed_while_a_play_is_on_its_way_stops_it():
    """Replay (or Run) pressed, then Stop before its queued handler began: the page's Stop cancels the queued event,
    so the press stopped something and says so (it said "Nothing to stop" under a "Replaying…" status, seen in
    Chromium after a Replay); with nothing pressed, Stop still finds nothing."""
    from components.state.play import Button, Effect, Phase, Session

    s = Session()
    assert s.press(Button.STOP).effect is Effect.IGNORED          # nothing plays, nothing on its way
    s.pressing()                                                  # a play's lock step ran; its handler has not
    assert s.press(Button.STOP).effect is Effect.STOP
    assert s.phase is Phase.STOPPED and not s.busy()              # the page rests stopped, its locks may lift
    assert s.press(Button.STOP).effect is Effect.IGNORED          # a second Stop: nothing left to stop
