"""Frame builders: a ``RunView`` in, one streamed update (``Frame``, plain data) out.

A frame names what changes by field, per arm in the page's order (``RunView.display_order``):
one chart and one leader per arm slot, the race chart, the status line and its kind, and the
results. ``KEEP`` leaves a component as it is; ``None`` clears it. ``ui.Page.updates`` maps a
frame onto the components; nothing here knows Gradio.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

from components import charts, lecture, panels
from components.looks import colour, look
from components.state.summary import summary_dict
from components.state.update import Kind, Update
from components.state.view import RunView

KEEP: Any = object()  # a Frame field left as it is ("skip")


@dataclass
class Frame:
    """One streamed update; ``KEEP`` leaves a component as it is, ``None`` clears it."""

    status: Any = KEEP
    status_kind: Any = KEEP    # idle | live | done | error | stopped (the status line's style)
    slots: Any = KEEP          # [(arm id, chart label, leader colour)] in page order: set when a run starts
    arm_plots: Any = KEEP      # chart specs (dicts), one per slot
    arm_leaders: Any = KEEP    # (label, text), one per slot
    race_plot: Any = KEEP
    summary: Any = KEEP        # markdown
    table: Any = KEEP          # {"headers", "datatype", "column_widths", "data"}
    trace_path: Any = KEEP
    summary_json: Any = KEEP
    view: Any = KEEP           # the RunView, kept in the session's gr.State
    results_visible: Any = KEEP  # the table, the trace and the JSON appear with the result
    step: Any = KEEP           # step mode: {"plot", "text", "k", "count"} for the decision shown; None hides it
    badge: Any = KEEP          # the recording badge's markdown ("" hides it)
    race_label: Any = KEEP     # the race chart's label: how the methods spend time while racing, then the verdict
    play: Any = KEEP           # the session's play that drew this frame (``state/play.py``): marked on the page,
                               # on every frame (``since`` keeps it): each chart's layout.meta.play, the status' class
    phase: Any = KEEP          # the session's phase once this frame is drawn: the buttons follow it (``play.TABLE``)
    lecture: bool = False      # a lecture-mode run's frame: while it plays, every button but Stop stays locked


RACE_LABELS = {"work": "While racing: rows decoding at each step against time (a wide, short race and a narrow, long one)",
               "verdict": "Result: Best-of-N's reward for every k against its time here, and Speculative Rejection's point",
               "verdict-flops": "Result: Best-of-N's reward for every k against its compute (FLOPs), and Speculative "
                                "Rejection's point"}
CHART_LABELS = {"pruning": "reward of each candidate as it is written",
                "final": "reward of each candidate when complete",
                "signal": "its own signal for each candidate as it is written (no reward), and where it cuts them"}


def race_label(view: RunView, x_axis: str | None = None) -> str:
    """The race chart's label: the work while racing, then the verdict against the x-axis it is drawn on."""
    if not view.verdicts():
        return RACE_LABELS["work"]
    label = RACE_LABELS["verdict-flops" if (x_axis or view.x_axis) == "flops" else "verdict"]
    label = label.replace("Speculative Rejection's point", charts.points_words(view))
    return label.replace("its time here", "its time on the recording's machine") if view.recording else label


ROOM_CHART_LABELS = {"pruning": "reward as it is written", "final": "reward when complete",
                     "signal": "its own signal (no reward)"}   # lecture mode: one line at 20 px in half of 1280 px


def slots(view: RunView) -> list[tuple[str, str, str]]:
    """Each arm's chart: its id, its label (the method's name, its settings and what the chart shows; in
    lecture mode the name and the short words alone, so the label fits its half of the screen) and colour."""
    arms = view.display_order()
    if lecture.in_lecture(view):
        names = [a.spec.kind.name for a in arms]
        return [(a.arm, f"{name if names.count(name) == 1 else a.spec.short}: "   # two arms of one method: their settings
                        f"{ROOM_CHART_LABELS[look(a.spec.method).chart]}", colour(a.spec)) for a, name in zip(arms, names)]
    return [(a.arm, f"{a.spec.label}: " + (charts.signal_title(a.spec.kind.about) if look(a.spec.method).chart == "signal"
                                           else CHART_LABELS[look(a.spec.method).chart]), colour(a.spec)) for a in arms]


def since(frame: Frame, sent: Frame | None) -> Frame:
    """``frame`` with what ``sent`` (the last frame sent) already shows left as ``KEEP``: a live
    frame then carries only what changed (per arm slot for the charts and leaders; a leader whose
    label is unchanged as its text alone). Gradio's work per frame grows with what it carries, and
    on a CPU Space that work takes the cores from the race."""
    if sent is None:
        return frame
    out = Frame(**vars(frame))
    for name in ("status", "slots", "race_plot", "summary", "table", "trace_path", "summary_json",
                 "results_visible", "step", "badge", "race_label", "phase"):
        if getattr(out, name) is not KEEP and getattr(out, name) == getattr(sent, name):
            setattr(out, name, KEEP)
    if out.status is KEEP:   # a changed status carries its style (and its play's mark) again: the page keeps
        out.status_kind = KEEP   # one play's style even where another event of the session ended meanwhile
    if out.slots is KEEP:   # same layout: per slot
        if isinstance(out.arm_plots, list) and isinstance(sent.arm_plots, list):
            out.arm_plots = [KEEP if i < len(sent.arm_plots) and p == sent.arm_plots[i] else p
                             for i, p in enumerate(out.arm_plots)]
        if isinstance(out.arm_leaders, list) and isinstance(sent.arm_leaders, list):
            out.arm_leaders = [KEEP if i < len(sent.arm_leaders) and lead == sent.arm_leaders[i]
                               else lead[1] if i < len(sent.arm_leaders) and lead[0] == sent.arm_leaders[i][0]
                               else lead for i, lead in enumerate(out.arm_leaders)]
    return out


STATUS_EVERY_S = 1.0


def held(sending: Frame, shown: Frame | None, since_told_s: float) -> bool:
    """A live frame (``sending``, as ``since`` left it) whose status line changed only in its words (its counters, its
    clock: the style is the one ``shown`` has) less than ``STATUS_EVERY_S`` after the status last sent: the page keeps
    the one it has until the next. Every message re-renders a changed markdown whole; the charts carry the race
    meanwhile."""
    return (_mid_race(sending, shown, since_told_s) and sending.status is not KEEP
            and sending.status_kind in (KEEP, shown.status_kind))


def _mid_race(sending: Frame, shown: Frame | None, since_told_s: float) -> bool:
    """``sending`` is a live frame of the race ``shown`` drew (no start, result, step or phase change in it), less
    than ``STATUS_EVERY_S`` after the part in question was last sent."""
    return (shown is not None and sending.slots is KEEP and sending.play in (KEEP, shown.play)
            and sending.results_visible is KEEP and sending.step is KEEP and sending.phase is KEEP
            and since_told_s < STATUS_EVERY_S)


def changes_leaders(frame: Frame) -> bool:
    """``frame`` (as ``since`` left it) changes at least one leader's box."""
    return isinstance(frame.arm_leaders, list) and any(lead is not KEEP for lead in frame.arm_leaders)


def leaders_held(sending: Frame, shown: Frame | None, since_told_s: float) -> bool:
    """A live frame (``sending``, as ``since`` left it) that changes a leader's box (its text grows a few tokens, its
    label's counters move) less than ``STATUS_EVERY_S`` after the leaders were last sent: the page keeps the boxes it
    has until the next. Each box's change is a textarea re-rendered (its layout, every frame, for each arm); the
    charts carry the race meanwhile, and a run's start, its result and step mode always send them."""
    return (_mid_race(sending, shown, since_told_s) and changes_leaders(sending)
            and isinstance(shown.arm_leaders, list))


def error_frame(message: str) -> Frame:
    """Bad input: the message, nothing starts."""
    return Frame(status=panels.error_markdown(message), status_kind="error")


def live_frame(view: RunView, *, starting: bool = False) -> Frame:
    order = view.display_order()
    return Frame(status=panels.status_markdown(view, starting=starting),
                 status_kind=panels.status_kind(view, starting=starting),
                 arm_plots=[charts.arm_chart(view, a.arm) for a in order],
                 arm_leaders=[panels.leader(view, a.arm) for a in order],
                 race_plot=charts.race_chart(view))


def start_frame(view: RunView) -> Frame:
    """A run (or its retry) starts: the slots are laid out for its arms, the results cleared."""
    f = live_frame(view, starting=True)
    f.slots, f.summary, f.table, f.trace_path, f.summary_json = slots(view), panels.SUMMARY_PLACEHOLDER, None, None, None
    f.view, f.results_visible, f.step, f.badge = view, False, None, ""
    f.race_label = RACE_LABELS["work"]
    return f


def table_value(view: RunView) -> dict:
    headers, types, widths, rows = panels.candidate_table(view)
    return {"headers": headers, "datatype": types, "column_widths": widths, "data": rows}


def final_frame(view: RunView) -> Frame:
    f = live_frame(view)
    f.summary, f.table = panels.summary_markdown(view), table_value(view)
    f.trace_path, f.summary_json, f.view = view.trace_path, summary_dict(view), view
    f.results_visible, f.step = True, None
    f.race_label = race_label(view)
    return f


def end_frame(view: RunView) -> Frame:
    """The frame a finished race ends on: its result, or in step mode its first decision."""
    if view.stepping and view.checkpoints:
        f = step_frame(view, 0)
        f.trace_path, f.summary_json = view.trace_path, summary_dict(view)
        return f
    return final_frame(view)


STEP_SUMMARY = ("### Result\nHidden while you step through the decisions: press **Run to the end** to see the "
                "verdict.")


def step_frame(view: RunView, k: int) -> Frame:
    """Decision ``k`` of a finished race: every chart as it stood then, and the decision explained."""
    k = max(0, min(k, len(view.checkpoints) - 1))
    cp = view.checkpoints[k]
    then = view.at(cp)
    order = then.display_order()
    arm = cp.arms[cp.arm]
    by = charts.ranked_by(view, arm, arm.round_events[cp.index])
    return Frame(status=f"**Stepping through the decisions:** decision {k + 1} of {len(view.checkpoints)}. "
                        "The charts show the race as it stood at this decision.", status_kind="idle",
                 arm_plots=[charts.arm_chart(then, a.arm) for a in order],
                 arm_leaders=[panels.leader(then, a.arm) for a in order], race_plot=charts.race_chart(then),
                 summary=STEP_SUMMARY, view=view, results_visible=False, race_label=RACE_LABELS["work"],
                 step={"plot": charts.pool_chart(view, view.checkpoints[k]), "text": panels.decision_markdown(view, k),
                       "k": k, "count": len(view.checkpoints),
                       "label": f"This decision: every candidate ranked by its {by}"})


def limit_frame(view: RunView) -> Frame:
    """The run reached the time limit: the charts keep what they showed, the partial result and the
    candidates so far appear, and the trace can be downloaded."""
    f = Frame(status=panels.status_markdown(view), status_kind=panels.status_kind(view), view=view,
              summary=panels.partial_markdown(view), table=table_value(view), summary_json=summary_dict(view),
              trace_path=view.trace_path, results_visible=True)
    return f


def failure_frame(view: RunView) -> Frame:
    """The status line says what happened; the charts and leaders keep what was already shown;
    the trace (marked failed), if written, can be downloaded."""
    f = Frame(status=panels.status_markdown(view), status_kind=panels.status_kind(view), view=view,
              summary_json=summary_dict(view))
    if view.trace_path:
        f.trace_path, f.results_visible = view.trace_path, True
    return f


def draw(update: Update) -> Frame:
    """The frame that shows one of the runtime's updates (``state/update.py``), marked with its play and phase;
    a lecture-mode run's charts drawn for a room (``lecture.for_room``)."""
    f = _draw(update)
    if update.play:
        f.play = update.play
    if update.phase is not None:
        f.phase = update.phase
    return as_seen(f, update.view)


def as_seen(frame: Frame, view) -> Frame:
    """``frame`` as the run on ``view`` is seen: in lecture mode every chart (the arms', the race's, the step
    panel's) drawn for a room (once: ``lecture.for_room`` grows fonts each time); the rest as it is."""
    if not lecture.in_lecture(view):
        return frame
    frame.lecture = True
    if isinstance(frame.arm_plots, list):
        frame.arm_plots = [p if p is KEEP else lecture.for_room(p) for p in frame.arm_plots]
    if frame.race_plot is not KEEP:
        frame.race_plot = lecture.for_room(frame.race_plot)
    if isinstance(frame.step, dict) and "plot" in frame.step:
        frame.step = {**frame.step, "plot": lecture.for_room(frame.step["plot"])}
    return frame


def _draw(update: Update) -> Frame:
    view, replay = update.view, update.replay
    if update.kind is Kind.ERROR:
        return error_frame(update.message)
    if update.kind is Kind.WARMING:
        return Frame(status=update.message, status_kind="live")
    if update.kind is Kind.START:
        f = start_frame(view)
        if replay is not None:   # a recording: nothing loads or prefills, and the badge says what it is
            why = f"{panels.fallback_words(view)}\n\n" if view.fallback else ""
            f.status = why + panels.REPLAY_START + f"\n\n*{panels.md_escape(view.note)}*"
            f.badge = panels.badge_markdown(view, speed=replay.get("speed"))
        return f
    if update.kind is Kind.LIVE:
        return live_frame(view)
    if update.kind is Kind.END:
        f = end_frame(view)
        if replay is not None:
            f.badge = panels.badge_markdown(view, replayed_s=replay.get("replayed_s"))
        return f
    return limit_frame(view) if update.kind is Kind.LIMIT else failure_frame(view)


def drawn(updates):
    """Each update drawn as it comes; closing this closes ``updates`` (Stop reaches the race)."""
    try:
        for update in updates:
            yield draw(update)
    finally:
        close = getattr(updates, "close", None)
        if close is not None:
            close()


# ---------------------------------------------------------------- frames as changes

# After a run's first frame, a streamed frame's charts travel as what changed since the frame before: per chart,
# per trace, each array as ops over the array the page holds (``array_ops``), the few other attributes set, the
# layout's changed keys as a relayout; the whole figure only where the chart's shape changed. Plain data, drawn
# by the page's script (``assets/charts.js``) with Plotly's incremental calls; the final frame (the result, a
# limit, a failure, step mode) still carries whole figures, as it always did. A recording replays through the
# same frames, so it sends the same changes.

def _key(v):
    """A hashable stand-in for an array item (a customdata row is a list)."""
    if isinstance(v, list):
        return tuple(_key(x) for x in v)
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True)
    return v


def _literal(items: list, ops: list) -> None:
    """``items`` as ops: a run of three or more equal items as ``["r", item, count]``, the rest ``["v", items]``."""
    i, plain = 0, []
    while i < len(items):
        j = i + 1
        while j < len(items) and items[j] == items[i]:
            j += 1
        if j - i >= 3:
            if plain:
                ops.append(["v", plain])
                plain = []
            ops.append(["r", items[i], j - i])
        else:
            plain.extend(items[i:j])
        i = j
    if plain:
        ops.append(["v", plain])


def _copy(ops: list, start: int, count: int) -> None:
    """Copy ``old[start:start + count]``, as one op with the copy before it where they are contiguous."""
    if ops and ops[-1][0] == "c" and ops[-1][1] + ops[-1][2] == start:
        ops[-1][2] += count
    else:
        ops.append(["c", start, count])


def _added(old: list, at: int, items: list, ops: list) -> None:
    """Items added where ``old[at]`` was: a large item (a hover snippet, a customdata row) equal to an item beside
    the place (its candidate's point before or after: a snippet is the same on each of its candidate's points) is a
    copy of it, not its text again; the rest as ``_literal``."""
    near = [i for i in (at - 1, at) if 0 <= i < len(old) and len(json.dumps(old[i])) > 16]
    plain: list = []
    for item in items:
        same = next((i for i in near if old[i] == item), None)
        if same is not None:
            if plain:
                _literal(plain, ops)
                plain = []
            _copy(ops, same, 1)
        else:
            plain.append(item)
    if plain:
        _literal(plain, ops)


def array_ops(old: list, new: list) -> list:
    """``new`` as ops over ``old``: ``["c", start, count]`` copies ``old[start:start + count]``, ``["v", items]``
    adds items, ``["r", item, count]`` adds one item ``count`` times. An array that only grew is
    ``[["c", 0, len(old)], ...]`` (the page extends its trace); candidates packed in one trace grow in the
    middle, each by a point or two, so most of the array is copies, and a new point's large item equal to its
    candidate's point before is a copy of that one too."""
    n = len(old)
    if len(new) >= n and new[:n] == old:
        ops = [["c", 0, n]] if n else []
        _added(old, n, new[n:], ops)
        return ops
    ops = []
    matcher = difflib.SequenceMatcher(None, [_key(v) for v in old], [_key(v) for v in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            _copy(ops, i1, i2 - i1)
        elif j2 > j1:
            _added(old, i1, new[j1:j2], ops)
    return ops


def _arrays(trace: dict) -> set[str]:
    return {k for k, v in trace.items() if isinstance(v, list) and k != "uid"}


def trace_changes(old: dict, new: dict) -> dict:
    """One trace's changes: ``{"ops": {attribute: array ops}, "set": {attribute: value}}`` (either may be absent;
    an attribute gone from ``new`` is set to None)."""
    ops, put = {}, {}
    for k in new.keys() | old.keys():
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if isinstance(a, list) and isinstance(b, list) and k in _arrays(new):
            ops[k] = array_ops(a, b)
        else:
            put[k] = b
    return {**({"ops": ops} if ops else {}), **({"set": put} if put else {})}


def layout_changes(old: dict, new: dict) -> dict:
    """The layout's changed keys as Plotly's ``relayout`` takes them ("xaxis.range": [...]; None removes one). A
    list of items that kept its items and grew (the decision lines, the "writing token" words that move along)
    changes per item: ``"annotations[0].x"`` for a changed key, ``"shapes[3]"`` for an item added; Plotly redraws
    that item alone, and the line carries a number rather than the list."""
    out = {}
    for k in new.keys() | old.keys():
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for s in b.keys() | a.keys():
                if a.get(s) != b.get(s):
                    out[f"{k}.{s}"] = b.get(s)
        elif (isinstance(a, list) and isinstance(b, list) and len(b) >= len(a)
              and all(isinstance(v, dict) for v in a + b)):
            for i, (x, y) in enumerate(zip(a, b)):
                for s in x.keys() | y.keys():
                    if x.get(s) != y.get(s):
                        out[f"{k}[{i}].{s}"] = y.get(s)
            for i in range(len(a), len(b)):
                out[f"{k}[{i}]"] = b[i]
        else:
            out[k] = b
    return out


def chart_changes(old: dict | None, new: dict) -> dict | None:
    """What changed from chart spec ``old`` to ``new`` (``charts._spec``): ``{"traces": {index: trace_changes},
    "layout": relayout}``, or ``{"react": new}`` where the shape changed (another number, kind or uid of traces);
    None where nothing did."""
    if old is None or [(t.get("type"), t.get("uid")) for t in old["data"]] != [(t.get("type"), t.get("uid"))
                                                                              for t in new["data"]]:
        return {"react": new}
    traces = {}
    for i, (a, b) in enumerate(zip(old["data"], new["data"])):
        if a != b:
            traces[str(i)] = trace_changes(a, b)
    layout = layout_changes(old.get("layout", {}), new.get("layout", {}))
    if not traces and not layout:
        return None
    return {**({"traces": traces} if traces else {}), **({"layout": layout} if layout else {})}


def frame_charts(frame: Frame, mark=lambda spec, frame: spec) -> dict[str, dict]:
    """The chart specs a frame carries (not ``KEEP``, not cleared), by key: "arm-<slot>" and "race"; each as the
    page is sent it (``mark(spec, frame)``: the play's mark in ``layout.meta``)."""
    out = {}
    if isinstance(frame.arm_plots, list):
        out.update({f"arm-{i}": mark(p, frame) for i, p in enumerate(frame.arm_plots) if p is not KEEP and p is not None})
    if frame.race_plot is not KEEP and frame.race_plot is not None:
        out["race"] = mark(frame.race_plot, frame)
    return out


class ChartChanges:
    """One stream's charts as changes: ``step(frame)`` returns the frame to send (a live frame's charts left as
    ``KEEP``) and its change line (plain data, or None).

    A run's first frame (its slots laid out) starts the line ``{"stream", "seq": 0, "base": {key: spec}}``: the page's
    script holds the figures the page was sent whole. Each live frame after it: ``{"seq", "charts": {key:
    chart_changes}}`` against the frame sent before (never against an acknowledgement: the server does not wait on
    the page). The run's last frame (its result, a limit, a failure, step mode) goes whole as well and its line says
    ``"final"``, so the script's copy ends equal to what Gradio draws; the run's stream ends there."""

    def __init__(self, stream: str, mark=lambda spec, frame: spec):
        self.stream, self.mark = stream, mark
        self.shown: dict | None = None
        self.seq = 0

    def step(self, frame: Frame) -> tuple[Frame, dict | None]:
        specs = frame_charts(frame, self.mark)
        if frame.slots is not KEEP:   # a run (or its retry) starts
            self.shown, self.seq = dict(specs), 0
            return frame, {"stream": self.stream, "seq": 0, "base": specs}
        if self.shown is None:
            return frame, None
        changes = {}
        for key, spec in specs.items():
            c = chart_changes(self.shown.get(key), spec)
            if c:
                changes[key] = c
            self.shown[key] = spec
        self.seq += 1
        line = {"stream": self.stream, "seq": self.seq, "charts": changes}
        if frame.results_visible is not KEEP or frame.step is not KEEP:
            self.shown = None
            line["final"] = True
            return frame, line
        out = Frame(**vars(frame))
        if isinstance(out.arm_plots, list):
            out.arm_plots = [KEEP] * len(out.arm_plots)
        out.race_plot = KEEP
        return out, line if changes else None
