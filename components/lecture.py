"""Lecture mode: the page on a projector, driven by a presenter's clicker. Presentation only (``locks`` alone builds Gradio
updates: the frame builders use the rest).

- **The layout** (``assets/lecture.css``, in the page's head): the class ``lecture`` on the page's root, set by
  the toggle or a link's ``?lecture=1`` (``HEAD_JS`` sets it before the app draws, so the page never opens in
  the other layout). At 1280x720 the prompt, Run/Stop and the status sit at the top, the race's charts fill
  the width below them inside the first screen, body text is 24 px; the rest of the page follows.
- **Charts for the back of a room** (``for_room``): a chart spec with larger fonts, a taller plot and room for
  the larger tick labels; ``frames.draw`` applies it to every chart of a frame of a lecture-mode run.
- **One play at a time** (``locks``): one function maps playing / not playing to the controls' updates: while
  something plays every control but Stop is locked.
- **The clicker** (``HEAD_JS``): right arrow / Page Down = the next decision, left arrow / Page Up = the
  previous one, space = the next decision while stepping, else Run (Stop while something plays: Run is locked
  then). These keys never scroll the page in lecture mode (the race stays on screen). Only in lecture mode, and
  never while typing in a field.

The runtime's side of lecture mode (the race plays live or as its recording paced to the live time, decided
before it starts) is ``components/session/pace.py``'s ``lecture_plan``; the request carries ``lecture``.
"""
from __future__ import annotations

import copy
from typing import Any


FONT = 20          # a chart's text in lecture mode (the page's charts: 14)
TICKS = 18
TITLE = 21
LEGEND = 17
HEIGHT = 400       # a chart's height: two across, under the bar and the status, inside 720 px
BOTTOM = 168       # its bottom margin: the ticks, the x-axis title and up to three rows of legend under them
LEGEND_BELOW_PX = 88   # the legend's top, this far under the plot: below the x-axis title

# ------------------------------------------------------------------ charts


def for_room(spec: dict | None) -> dict | None:
    """``spec`` (a chart spec, ``components/charts.py``) with fonts readable from the back of a 200-seat
    room: text at ``FONT`` px, ticks at ``TICKS``, axis titles at ``TITLE``, the legend at ``LEGEND``,
    annotations 5 px larger, margins grown to hold them, the height ``HEIGHT``. A copy; None stays None."""
    if not isinstance(spec, dict) or "layout" not in spec:
        return spec
    out = copy.deepcopy(spec)
    layout = out["layout"]
    layout["font"] = {**layout.get("font", {}), "size": FONT}
    layout["height"] = HEIGHT
    margin = layout.get("margin", {})
    top = margin.get("t", 20)
    layout["margin"] = {**margin, "l": max(margin.get("l", 0), 100), "b": BOTTOM}
    for key in [k for k in layout if k.startswith(("xaxis", "yaxis"))]:
        axis = layout[key]
        axis["tickfont"] = {**axis.get("tickfont", {}), "size": TICKS}
        title = axis.get("title")
        if isinstance(title, dict):
            text = title.get("text")
            if isinstance(text, str):   # a unit under the title, in small type: larger too
                text = text.replace("font-size:12px", f"font-size:{TICKS - 2}px")
            axis["title"] = {**title, "text": text, "font": {**title.get("font", {}), "size": TITLE}}
    if isinstance(layout.get("legend"), dict):
        legend = {**layout["legend"], "font": {**layout["legend"].get("font", {}), "size": LEGEND}}
        if legend.get("orientation") == "h" and legend.get("yanchor") == "top":   # under the x-axis title
            legend["y"] = -LEGEND_BELOW_PX / max(1, HEIGHT - top - BOTTOM)
        layout["legend"] = legend
    for note in layout.get("annotations", []) or []:
        font = note.get("font") or {}
        note["font"] = {**font, "size": max(TICKS, font.get("size", 12) + 5)}
    for trace in out.get("data", []):   # a trace's own words (the "writing token" line) as an annotation's
        if isinstance(trace.get("textfont"), dict):
            trace["textfont"] = {**trace["textfont"], "size": max(TICKS, trace["textfont"].get("size", 12) + 5)}
    return out


def in_lecture(view: Any) -> bool:
    """The run on ``view`` was asked for in lecture mode."""
    return bool(getattr(view, "lecture", False))


# ------------------------------------------------------------------ one play at a time


def lockable(page: Any) -> list:   # page: components.ui.Page (not imported: ui imports this module)
    """Every control a visitor can change or press, but Stop: locked while something plays."""
    c, a = page.controls, page.arena
    skip = {"stop", "settings", "second_group", "paper_note", "link_box", "link_qr"}   # Stop; containers and read-only boxes
    named = [comp for name, comp in c.by_name().items() if name not in skip]
    return named + [a.live, a.x_axis, a.step.prev, a.step.next, a.step.end]


def locks(page: Any, playing: bool, lecture: bool = True) -> dict:
    """The one map from playing / not playing to the controls: while something plays (in lecture mode) every
    control but Stop is locked; when nothing plays all are unlocked. Outside lecture mode nothing is locked."""
    import gradio as gr   # here: the frames that draw charts for the room import this module without Gradio

    if playing and not lecture:
        return {comp: gr.skip() for comp in lockable(page)}
    steps = {id(b) for b in (page.arena.step.prev, page.arena.step.next)}
    # unlocked, Previous and Next stay as the session's table set them (Previous at decision 1 stays disabled);
    # "Run to the end" works at every decision (it is shown only while stepping)
    return {comp: gr.skip() if not playing and id(comp) in steps else gr.update(interactive=not playing)
            for comp in lockable(page)}


def lock_step(page: Any, press: Any = None, pressed: Any = None) -> dict:
    """The first step of every play's chain (Run, Shift+Enter in the prompt, Replay, Paper scale; "Run it live"
    presses Run): the locks, before the play starts, so that they always land before the play's end lifts them (a
    separate event on the same click raced an instant replay and landed after it). ``press(session, request)``,
    when given, runs in the same step and its value goes to ``pressed`` (Run and Paper scale: the press that stops
    what plays, and the status saying what starts): one round trip fewer between a click and its play."""
    import gradio as gr

    def lock(on, session, request: gr.Request):
        if hasattr(session, "pressing"):
            session.pressing()   # a play is on its way: an older play's end lifts no lock meanwhile
        out = locks(page, True, on is True)
        if on is True:   # the page's layout says lecture (a link's ?lecture=1) before the link's load has ticked the box
            out[page.controls.lecture] = gr.update(value=True, interactive=False)
        if press is not None:
            out[pressed] = press(session, request)
        return out

    lock.__annotations__ = {"request": gr.Request}   # Gradio hands the request in (this module imports no Gradio)
    # the lecture layout is the page's class, set before the app draws (``HEAD_JS``): a press that comes before
    # the link's settings have landed on the toggle is still a lecture-mode press, and the play after it reads
    # the ticked toggle
    outputs = lockable(page) + ([pressed] if press is not None else [])
    return dict(fn=lock, inputs=[page.controls.lecture, page.session], outputs=outputs, queue=False,
                js=IN_LECTURE_JS, api_visibility="private")


def merged(locked: dict, settings: dict) -> dict:
    """One step's updates from the locks (``locks``) and settings set on the same controls ("Run it live"): a
    control in both gets its new value and its lock (a lock that skips leaves the value alone)."""
    out = dict(locked)
    for comp, value in settings.items():
        lock = out.get(comp)
        if not isinstance(lock, dict):
            out[comp] = value
        elif isinstance(value, dict):   # an update of its own (``gr.update``)
            out[comp] = {**lock, **value}
        elif hasattr(value, "get_config"):   # a component returned whole: its own properties stand
            out[comp] = value
        else:
            out[comp] = {**lock, "value": value}
    return out


def wire(page: Any, ends: list) -> None:
    """The toggle's layout switch, and the locks lifted when each of ``ends`` (the plays' events, each chained
    after ``lock_step``) ends, and on Stop."""
    c = page.controls
    c.lecture.change(None, [c.lecture], [c.lecture], js=TOGGLE_JS, queue=False, api_visibility="private")
    import gradio as gr

    controls = lockable(page)

    def ended(session):   # a play's event ended: unlock unless a newer play plays or is on its way (its lock first)
        if getattr(session, "busy", lambda: False)():
            return {comp: gr.skip() for comp in controls}
        return locks(page, False)

    for event in ends:
        event.then(ended, [page.session], controls, queue=False, api_visibility="private")
    c.stop.click(lambda: locks(page, False), None, controls, queue=False, api_visibility="private")


# ------------------------------------------------------------------ the page's head: the layout and the clicker


# The class before the app draws (a link's ?lecture=1), the toggle's class, and the clicker's keys.
HEAD_JS = """
(() => {
  const MIN_WIDTH = 900;
  const root = document.documentElement;
  try {
    // a projector's layout on a screen that holds it; a lecture link opened on a phone gets the phone's layout
    if (new URLSearchParams(window.location.search).get('lecture') === '1' && window.innerWidth >= MIN_WIDTH) {
      root.classList.add('lecture');
    }
  } catch (e) {}
  const shown = (sel) => { const el = document.querySelector(sel); return el && el.offsetParent !== null ? el : null; };
  const press = (sel) => { const el = shown(sel); if (el && !el.disabled) { el.click(); return true; } return false; };
  // something plays: the status line's style is live (Starting, Waiting, Racing, Replaying)
  const live = () => { const st = document.querySelector('#status'); return !!st && st.classList.contains('status-live'); };
  // a Stop just pressed: a frame of the stopped play already in flight can still say "live" for a moment (the
  // page says "Stopped" again once it lands); space then means Run, never a second Stop
  let stoppedAt = 0;
  document.addEventListener('click', (e) => {
    const t = e.target && e.target.closest ? e.target : null;
    if (t && t.closest('#stop')) { stoppedAt = Date.now(); }
    else if (t && t.closest('#run, #replay, #run-live, #paper-scale')) { stoppedAt = 0; }   // a new play: Stop again
  }, true);
  const justStopped = () => Date.now() - stoppedAt < 2000;
  let waiting = null;
  const runWhenUnlocked = () => {
    if (waiting) { return; }
    const t0 = Date.now();
    waiting = setInterval(() => {
      const run = document.querySelector('#run');
      if ((live() && !justStopped()) || Date.now() - t0 > 10000) { clearInterval(waiting); waiting = null; return; }
      if (run && !run.disabled) { clearInterval(waiting); waiting = null; press('#run'); }
    }, 50);
  };
  document.addEventListener('keydown', (e) => {
    if (!root.classList.contains('lecture') || e.altKey || e.ctrlKey || e.metaKey) { return; }
    const t = e.target;
    const typing = t && t.closest && (t.closest('textarea, select, [contenteditable="true"]')
      || (t.tagName === 'INPUT' && !['radio', 'checkbox', 'button', 'submit'].includes(t.type)));
    if (typing) { return; }   // a pace or a tick just chosen keeps focus: the clicker's keys still drive the race
    const stepping = shown('#step-panel');
    const keys = ['ArrowRight', 'PageDown', 'ArrowLeft', 'PageUp', ' ', 'Spacebar'];
    if (!keys.includes(e.key)) { return; }
    e.preventDefault();   // a clicker's keys never scroll the race off the screen
    if (e.key === 'ArrowRight' || e.key === 'PageDown') { if (stepping) { press('#step-next'); } }
    else if (e.key === 'ArrowLeft' || e.key === 'PageUp') { if (stepping) { press('#step-prev'); } }
    else {
      const run = document.querySelector('#run');
      if (stepping) { press('#step-next'); }
      else if (live() && !justStopped()) { press('#stop'); }   // something plays: Stop, whatever a late unlock left
      else if (run && !run.disabled) { press('#run'); }
      else { runWhenUnlocked(); }   // a play just ended (Stop, its end): its unlock is on its way; Run once it lands
    }
  }, true);
})();
"""

# a play's first step (``lock_step``): lecture mode is the toggle's value, or the layout a lecture link gave the page
IN_LECTURE_JS = "(on, session) => [on === true || document.documentElement.classList.contains('lecture'), session]"
# the same, for a first step with more inputs after the session ("Run it live": the prompt and the view)
IN_LECTURE_JS_WITH = ("(on, session, ...rest) => [on === true || document.documentElement.classList.contains('lecture'), "
                      "session, ...rest]")

TOGGLE_JS = """(on) => {
  document.documentElement.classList.toggle('lecture', !!on && window.innerWidth >= 900);   // a phone: its own layout
  try {
    const url = new URL(window.location.href);
    if (on) { url.searchParams.set('lecture', '1'); } else { url.searchParams.delete('lecture'); }
    window.history.replaceState(null, '', url.toString());
  } catch (e) {}
  return on;
}"""


def head(css: str) -> str:
    """The lecture layout's CSS and the clicker's handler, for the page's head (outside Gradio's scoping)."""
    return f"<style>{css}</style><script>{HEAD_JS}</script>"
