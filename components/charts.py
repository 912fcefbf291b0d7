"""Chart specs: a ``RunView`` in, a plain plotly figure dict (``{"data", "layout"}``) out.

Plain dicts rather than ``plotly.graph_objects`` because the app rebuilds three charts several
times a second on the same CPU that runs the models, and ``go.Figure`` validation costs ~80 ms
a chart; ``figure(spec)`` turns a spec into a validated ``go.Figure`` (the tests do), and
``as_plot(spec)`` hands it to ``gr.Plot`` without the round trip.

Each arm gets the chart its registry entry names (``specrej.arms``): "pruning" (reward of
every candidate over the tokens it wrote, with the prunes) or "final" (each candidate's final
reward when complete); ``arm_chart`` picks it. The compute race has one line per arm.

Rules (see GRADIO_NOTES "Plotly for a live chart"): a fixed number and order of traces per
chart; many candidates packed into one line trace separated by ``None``; the candidate id and a
text snippet in ``customdata`` for the hover; a constant ``uirevision`` so a viewer's zoom
survives updates; fixed axis ranges, and every arm chart on the same axes. Backgrounds are white
in both the light and the dark theme (a chart is a white card there), so the dark text stays
readable.

For slides: a log axis is labelled with round values chosen from its range (``log_axis``), never
plotly's mantissa-only minor labels; every spec carries in ``layout.meta`` its title, the prompt and
the run's settings (``export_meta``), which the PNG and SVG buttons (``ui._DOWNLOAD_JS``) put around
the exported copy; a dotted "now" line says which token it marks.
"""
from __future__ import annotations

import html
import json
import math

from specrej import Candidate
from specrej.core.config import AUTO
from specrej.rewards import scale_of
from specrej.analysis.verdict import SAME_TIME, show_k

from components.looks import look, signal_axis
from components.looks import colour as arm_colour
from components.theme import FONT, GRID, PRUNED, PRUNED_MARK, TEXT, THRESHOLD, WINNER, fmt_score, hover_text, snippet
from components.state.view import ArmView, RunView, ranked, unit_step

HEIGHT = 430
X_AXES = {"time": "decoding time on this machine (s, log scale)", "flops": "compute (FLOPs, log scale)"}


# ---------------------------------------------------------------- shared layout

def _layout(x_title: str, y_title: str, x_range: list | None, y_range: list | None, *, revision: str) -> dict:
    # ticklabeloverflow "allow": the labels stay whole in the margins (automargin); Plotly's default for a linear
    # axis ("hide past div") measures every tick label's box on every draw, each a forced layout of the page
    axis = {"gridcolor": GRID, "zeroline": False, "showline": True, "linecolor": "#B0B0B0",
            "ticks": "outside", "tickcolor": "#B0B0B0", "ticklabeloverflow": "allow", "title": {"font": {"size": 15}}}
    return {
        "paper_bgcolor": "white", "plot_bgcolor": "white", "height": HEIGHT,
        "font": {"family": FONT, "size": 14, "color": TEXT},
        "margin": {"l": 84, "r": 18, "t": 20, "b": 96},
        "uirevision": revision, "hovermode": "closest",
        "hoverlabel": {"font": {"size": 13, "family": FONT}, "align": "left"},
        # Below the x-axis title: the top-left corner belongs to gr.Plot's label.
        "legend": {"orientation": "h", "x": 0, "y": -0.2, "xanchor": "left", "yanchor": "top",
                   "font": {"size": 13}, "bgcolor": "rgba(255,255,255,0)", "itemclick": "toggle"},
        "xaxis": {**axis, "title": {**axis["title"], "text": x_title},
                  **({"range": x_range, "autorange": False} if x_range else {"rangemode": "tozero"})},
        # automargin: the title (and its small second line) stands clear of the tick labels however wide they
        # are ("-0.005" ran into "higher = more consistent" on ST-BoN's step chart)
        "yaxis": {**axis, "title": {**axis["title"], "text": y_title}, "automargin": True,
                  **({"range": y_range, "autorange": False} if y_range else {})},
        "annotations": [], "shapes": [],
    }


def reward_title(view: RunView, what: str = "reward", *, short: bool = False) -> str:
    """A reward axis's title: which reward, and (smaller) what its numbers mean (``specrej.rewards.Scale``).
    ``short``: ``what`` and the unit only (a short chart, whose axis a long title overflowed at 1280x720 in
    lecture mode; its panel names the reward)."""
    scale = scale_of(view.reward_label)
    if short:
        return f"{what}<br><span style='font-size:12px'>{scale.unit}</span>"
    return f"{what} ({scale.name})<br><span style='font-size:12px'>{scale.unit}</span>"


# ---------------------------------------------------------------- what an exported image carries

ARM_TITLES = {"pruning": "reward of each candidate as it is written",
              "final": "reward of each candidate when complete",
              "signal": "its own signal for each candidate as it is written, its stops and truncation"}
EXPORT_FONT = "Arial, 'Liberation Sans', Helvetica, sans-serif"   # a system font: no web font in an image


def _plain(text: str, limit: int) -> str:
    """Text shown as itself inside a plotly annotation or title (which reads a little HTML), on one line."""
    return html.escape(snippet(str(text), limit), quote=False)


def signal_title(about) -> str:
    """A rival's signal chart, in its own words: "its own consistency for each candidate as it is written (no
    reward), and where it truncated them"."""
    return (f"its own {about.signal or 'signal'} for each candidate as it is written (no reward), and where it "
            f"{about.cut_word} them")


def points_words(view: RunView) -> str:
    """Whose points the verdict chart shows: one method's by its name, several: each method's."""
    names = list(dict.fromkeys(a.spec.kind.name for a in view.arms.values() if a.arm != view.baseline and a.prunes))
    return f"{names[0]}'s point" if len(names) == 1 else "each method's point"


def export_meta(view: RunView, title: str) -> dict:
    """What the download buttons put around a chart (``layout.meta``, read by ``ui._DOWNLOAD_JS``): its
    title, the prompt and the settings of the run shown."""
    return {"title": _plain(title, 160), "prompt": _plain(view.cfg.prompt, 320), "settings": _plain(settings_text(view), 700)}


def _arm_config(view: RunView, arm: ArmView):
    try:
        return arm.spec.config(view.cfg)
    except ValueError:
        return view.cfg


def _arm_words(view: RunView, arm: ArmView) -> str:
    """One arm's settings as it ran: its N (the rows it opened, for n=auto) and, when it prunes, its alpha
    and when it decides."""
    cfg = _arm_config(view, arm)
    n = len(arm.candidates) if arm.candidates else cfg.n
    if not arm.prunes:
        return f"{arm.spec.kind.name}: N = {n}"
    about = arm.spec.kind.about
    if not about.alpha_applies:   # a rival: its own signal decides, in its own schedule
        rows = ("in passes of the rows that fit at full length" if about.schedule == "passes"
                else f"{n} answers at once")
        return f"{arm.spec.kind.name}: N = {n}, {rows}, cut by its {about.decides_by}"
    start = (f"{n} answers at once, filling memory at token {cfg.first_decision}" if cfg.n == AUTO
             else f"{n} answers at once")
    when = ("decides when memory is full" if cfg.decision == "budget"
            else f"decides every {cfg.interval} tokens and when memory is full")
    rule = "" if cfg.rule == "paper" else f", rule {cfg.rule}"
    return f"{arm.spec.kind.name}: {start}, alpha {cfg.alpha:g}, {when}{rule}"


def settings_text(view: RunView) -> str:
    """The settings of the run shown, in one line for an exported chart: every arm's own settings, the
    length and memory they share, the models and, for a recording, where and when it was recorded."""
    budgets = [a.ledger.budget for a in view.arms.values() if a.ledger.budget]
    budget = max(budgets) if budgets else view.cfg.budget
    parts = [_arm_words(view, a) for a in view.display_order()]
    parts.append(f"up to {view.cfg.max_new_tokens} new tokens, memory "
                 + (f"{budget} tokens" if budget else "automatic"))
    parts.append(", ".join(x for x in (view.model_label, f"reward {view.reward_label}" if view.reward_label else "")
                           if x))
    if view.recording is not None:
        rec = view.recording
        parts.append(f"seed {view.cfg.seed}; recorded on {rec.get('hardware', '?')}, {rec.get('date', '?')}")
    else:
        parts.append(f"temperature {view.cfg.temperature:g}, top-p {view.cfg.top_p:g}, seed {view.cfg.seed}")
    return " · ".join(p for p in parts if p)


# ---------------------------------------------------------------- log axes

# The values a log axis labels, coarsest first: one per decade, then 1-3, 1-2-5, ... Plotly's own log
# ticks label a range under a decade "6 7 8 9 1 2" (mantissas only) and pile long labels on each other.
_MANTISSAS = ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 5), (1, 2, 3, 4, 5, 6, 8), (1, 2, 3, 4, 5, 6, 7, 8, 9))
MOST_TICKS = 6


def _nice(v: float) -> float:
    return float(f"{v:.3g}")


def fmt_number(v: float) -> str:
    """A tick of seconds or steps: the number itself ("0.6", "2", "150")."""
    return f"{_nice(v):g}"


def fmt_si(v: float) -> str:
    """A tick of FLOPs: "300G", "1.5T"."""
    for exp, prefix in ((18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k")):
        if abs(v) >= 10 ** exp * 0.9995:
            return f"{_nice(v / 10 ** exp):g}{prefix}"
    return f"{_nice(v):g}"


def log_ticks(lo: float, hi: float) -> tuple[list[float], list[float]]:
    """(range in log10 units, tick values) for a log axis showing ``lo`` .. ``hi`` (> 0): round values,
    the coarsest set of ``_MANTISSAS`` that gives 4 to ``MOST_TICKS`` of them (else the one that gives
    the most up to that, at least 3); a range too short for those gets evenly spaced round values."""
    lo, hi = (lo, hi) if hi > lo else (lo / 1.5, hi * 1.5)
    a, b = math.log10(lo), math.log10(hi)
    pad = max(0.05 * (b - a), 0.015)
    a, b = a - pad, b + pad
    sets = []
    for ms in _MANTISSAS:
        ticks = [_nice(m * 10.0 ** e) for e in range(math.floor(a), math.ceil(b) + 1) for m in ms]
        sets.append(sorted({t for t in ticks if a <= math.log10(t) <= b}))
    fits = [t for t in sets if len(t) <= MOST_TICKS]
    if not fits:   # many decades: every other decade (or every third, ...)
        fits = [sets[0][::math.ceil(len(sets[0]) / MOST_TICKS)]]
    chosen = next((t for t in fits if len(t) >= 4), max(fits, key=len))
    if len(chosen) < 3:   # under one step of 1..9: evenly spaced round values
        span = 10 ** b - 10 ** a
        step = 10 ** math.floor(math.log10(span / 3))
        step *= next(m for m in (1, 2, 5, 10) if span / (step * m) <= MOST_TICKS - 1)
        start = math.ceil(10 ** a / step)
        chosen = [_nice(k * step) for k in range(start, start + MOST_TICKS + 1) if k * step <= 10 ** b]
    return [round(a, 6), round(b, 6)], chosen


def log_axis(values, fmt=fmt_number) -> dict:
    """A log axis over ``values`` with round, readable labels (``log_ticks``), drawn as given."""
    xs = [float(v) for v in values if v is not None and v > 0]
    if not xs:
        return {"type": "log", "autorange": True}
    rng, ticks = log_ticks(min(xs), max(xs))
    return {"type": "log", "range": rng, "autorange": False, "tickmode": "array", "tickvals": ticks,
            "ticktext": [fmt(t) for t in ticks], "rangemode": None}


def _note(text: str) -> dict:
    """A grey hint in the middle of an empty chart."""
    return {"text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
            "font": {"size": 15, "color": "#777"}}


def _cursor(x: float | None, y_range: list, colour: str, name: str, x_max: float) -> dict:
    """A dotted vertical line at ``x``: where this arm is now, named at its top: the token the arm's rows are
    writing now (left of the line once it is past the middle, so the words stay inside the chart). The words are the
    trace's own text, not a layout annotation, and the side they stand on is a per-point array: a live frame then
    changes data alone, which the page redraws for the changed traces only (an annotation that moves, or an attribute
    set anew, makes Plotly replot the whole chart: Best-of-N's line crosses the middle at each of its passes, which
    was a whole replot every time, issue 62)."""
    xs = [] if x is None else [x, x]
    words = [] if x is None else ["", f"writing token {x:g}" if x > 0 else ""]
    side = "bottom left" if x is not None and x > 0.55 * x_max else "bottom right"
    return {"type": "scatter", "mode": "lines+text", "name": name, "x": xs, "y": [y_range[0], y_range[1]][: len(xs)],
            "text": words, "textposition": [side] * len(xs), "cliponaxis": False,
            "textfont": {"size": 12, "color": colour},
            "line": {"color": colour, "width": 1.5, "dash": "dot"}, "hoverinfo": "skip", "showlegend": False}


def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), 4)


# ---------------------------------------------------------------- per arm

def arm_chart(view: RunView, arm_id: str) -> dict:
    """The chart an arm's registry entry asks for."""
    chart = look(view.arms[arm_id].spec.method).chart
    if chart == "signal":
        return signal_chart(view, arm_id)
    return pruning_chart(view, arm_id) if chart == "pruning" else final_chart(view, arm_id)


def _reference(view: RunView, arm: ArmView, chart: str) -> ArmView | None:
    """The first other arm with the given chart kind (None if there is none)."""
    return next((a for a in view.arms.values() if a is not arm and look(a.spec.method).chart == chart), None)


# ---------------------------------------------------------------- pruning (Speculative Rejection)

def _lines(cands: list[Candidate]) -> tuple[list, list, list]:
    xs, ys, cd = [], [], []
    for c in cands:
        if not c.history:
            continue
        tip = hover_text(c.text)
        for t, s in c.history:
            xs.append(t), ys.append(_r(s)), cd.append([c.id, tip])
        xs.append(None), ys.append(None), cd.append([None, None])
    return xs, ys, cd


def pruning_chart(view: RunView, arm_id: str) -> dict:
    """Each candidate's reward over generated tokens: kept in colour, pruned grey ending in an x,
    finished with a circle, each round's threshold dashed, the leader a star. With an arm that
    writes every candidate to the end (a "final" chart, Best-of-N), a dotted line from each x to
    what that candidate became there."""
    arm = view.arms[arm_id]
    bon = _reference(view, arm, "final")
    colour, y_range = arm_colour(arm.spec), view.padded_y()
    cands = list(arm.candidates)
    alive = [c for c in cands if c.status != "pruned"]
    pruned = [c for c in cands if c.status == "pruned" and c.history]
    finished = [c for c in cands if c.status == "finished" and c.history]
    leader = arm.leader()
    hover = "<b>#%{customdata[0]}</b> · reward %{y:.3f} at token %{x}<br>%{customdata[1]}<extra>%{fullData.name}</extra>"

    kx, ky, kcd = _lines(alive)
    # Live candidates have written past their last score: a faint dotted tail to where they are now
    # (the score is not known there yet; the line only shows that they are still being written).
    wx, wy = [], []
    if arm.finished is None:
        for c in alive:
            if c.status in ("live", "kept") and c.history and arm.position > c.history[-1][0]:
                wx += [c.history[-1][0], arm.position, None]
                wy += [_r(c.history[-1][1])] * 2 + [None]
    px, py, pcd = _lines(pruned)
    # Coupled randomness: Best-of-N's finished candidate i is what a pruned candidate i would
    # have become. Dotted lines from the x to that final score (off by default: legend toggles).
    bon_final = {c.id: c for c in bon.candidates if c.status == "finished"} if bon is not None else {}
    cx, cy, ccd = [], [], []
    for c in pruned:
        f = bon_final.get(c.id)
        if f is not None and c.history:
            t, s = c.history[-1]
            cx += [t, f.tokens, None]
            cy += [_r(s), _r(f.score), None]
            ccd += [[c.id, hover_text(f.text)]] * 2 + [[None, None]]
    thr_x, thr_y, thr_cd = [], [], []
    half = max(2.0, 0.06 * view.cfg.max_new_tokens)
    for m in arm.rounds:
        if m.threshold is not None:
            thr_x += [m.position - half, m.position + half, None]
            thr_y += [_r(m.threshold)] * 2 + [None]
            thr_cd += [[m.index, m.n_kept, m.n_pruned]] * 2 + [[None, None, None]]
    won = arm.finished is not None
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "kept", "x": kx, "y": ky, "customdata": kcd,
         "line": {"color": colour, "width": 2}, "marker": {"size": 5, "color": colour}, "opacity": 0.9,
         "hovertemplate": hover, "connectgaps": False},
        {"type": "scatter", "mode": "lines", "name": "still writing", "x": wx, "y": wy, "showlegend": False,
         "line": {"color": colour, "width": 1.2, "dash": "dot"}, "opacity": 0.6, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines+markers", "name": "pruned", "x": px, "y": py, "customdata": pcd,
         "line": {"color": PRUNED, "width": 1.5}, "marker": {"size": 4, "color": PRUNED}, "opacity": 0.85,
         "hovertemplate": hover, "connectgaps": False},
        {"type": "scatter", "mode": "markers", "name": "pruned here", "showlegend": False,
         "x": [c.history[-1][0] for c in pruned], "y": [_r(c.history[-1][1]) for c in pruned],
         "customdata": [[c.id, hover_text(c.text)] for c in pruned],
         "marker": {"symbol": "x-thin", "size": 10, "line": {"width": 2.5, "color": PRUNED_MARK}},
         "hovertemplate": "<b>#%{customdata[0]}</b> pruned · partial reward %{y:.3f} at token %{x}"
                          "<br>%{customdata[1]}<extra></extra>"},
        {"type": "scatter", "mode": "markers", "name": "finished",
         "x": [c.tokens for c in finished], "y": [_r(c.score) for c in finished],
         "customdata": [[c.id, hover_text(c.text)] for c in finished],
         "marker": {"symbol": "circle", "size": 9, "color": colour, "line": {"width": 1.5, "color": "white"}},
         "hovertemplate": "<b>#%{customdata[0]}</b> finished · reward %{y:.3f} · %{x} tokens"
                          "<br>%{customdata[1]}<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "threshold", "x": thr_x, "y": thr_y, "customdata": thr_cd,
         "line": {"color": THRESHOLD, "width": 2.5, "dash": "dash"},
         "hovertemplate": "round %{customdata[0]} threshold %{y:.3f}<br>kept %{customdata[1]}, "
                          "pruned %{customdata[2]}<extra></extra>"},
        _star(leader, "winner" if won else "leader", partial=not won),
        {"type": "scatter", "mode": "lines", "name": "had it continued", "x": cx, "y": cy, "customdata": ccd,
         "line": {"color": PRUNED, "width": 1, "dash": "dot"}, "visible": "legendonly",
         "hovertemplate": "<b>#%{customdata[0]}</b> had it continued: %{y:.3f}<br>%{customdata[1]}"
                          f"<extra>from {bon.spec.kind.name if bon else '-'}</extra>"},
        _cursor(None if won else arm.position, y_range, colour, "now", view.cfg.max_new_tokens),
    ]
    layout = _layout("tokens generated", reward_title(view), [-2, view.cfg.max_new_tokens + 4], y_range, revision=arm_id)
    layout["meta"] = export_meta(view, f"{arm.spec.label}: {ARM_TITLES['pruning']}")
    for m in arm.rounds:  # the decision tokens, as faint vertical lines
        layout["shapes"].append({"type": "line", "xref": "x", "yref": "paper", "x0": m.position, "x1": m.position,
                                 "y0": 0, "y1": 1, "line": {"color": "#C8C8C8", "width": 1}, "layer": "below"})
    if not any(c.history for c in cands):
        layout["annotations"].append(_note("partial answers are scored when memory fills<br>"
                                           "(the decision token), then the lowest are pruned"))
    return _spec(arm_id, data, layout)


# ---------------------------------------------------------------- signal (the rivals: DeepConf, ST-BoN)

def _signal_lines(cands: list[Candidate]) -> tuple[list, list, list]:
    xs, ys, cd = [], [], []
    for c in cands:
        if not c.signal:
            continue
        tip = hover_text(c.text)
        for t, v in c.signal:
            xs.append(t), ys.append(_r(v)), cd.append([c.id, tip])
        xs.append(None), ys.append(None), cd.append([None, None])
    return xs, ys, cd


def signal_chart(view: RunView, arm_id: str) -> dict:
    """A rival's own signal for each candidate over the tokens it wrote (DeepConf: its group confidence;
    ST-BoN: its consistency with the others), on the arm's own y axis (the signal is not the reward): going on
    in colour, stopped or truncated grey ending in an x, written to the end with a circle; DeepConf's
    threshold dashed from where its warm-up set it; each decision's marks (threshold set, stopped, diverged,
    truncated) as faint vertical lines named at the top. The reward of what it finished is in the leader and
    the table."""
    arm = view.arms[arm_id]
    colour = arm_colour(arm.spec)
    cands = list(arm.candidates)
    ys = [v for c in cands for _, v in c.signal] + [m.signal_threshold for m in arm.round_events
                                                    if m.signal_threshold is not None]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    pad = max(0.08 * (hi - lo), 0.02 * max(abs(lo), abs(hi)), 0.01)
    y_range = [round(lo - pad, 4), round(hi + pad, 4)]
    alive = [c for c in cands if c.status != "pruned"]
    pruned = [c for c in cands if c.status == "pruned" and c.signal]
    finished = [c for c in cands if c.status == "finished" and c.signal]
    hover = "<b>#%{customdata[0]}</b> · %{y:.3f} at token %{x}<br>%{customdata[1]}<extra>%{fullData.name}</extra>"
    kx, ky, kcd = _signal_lines(alive)
    px, py, pcd = _signal_lines(pruned)
    thr_x, thr_y, thr_at = [], [], None
    for r in arm.round_events:
        if r.signal_threshold is not None and r.index == 0:
            # a level every later trace is held to from its first full window on, whichever token its warm-up
            # ended at (drawn from there it was a line of no length when the warm-up ran to the end)
            thr_at = r.position
            own = arm.spec.kind.about.settings_for(_arm_config(view, arm))
            start = min(getattr(own, "window", 0) or 0, view.cfg.max_new_tokens)
            thr_x += [start, view.cfg.max_new_tokens, None]
            thr_y += [_r(r.signal_threshold)] * 2 + [None]
    won = arm.finished is not None
    about = arm.spec.kind.about
    word = about.cut_word
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "going on", "x": kx, "y": ky, "customdata": kcd,
         "line": {"color": colour, "width": 2}, "marker": {"size": 4, "color": colour}, "opacity": 0.9,
         "hovertemplate": hover, "connectgaps": False},
        {"type": "scatter", "mode": "lines+markers", "name": word, "x": px, "y": py, "customdata": pcd,
         "line": {"color": PRUNED, "width": 1.5}, "marker": {"size": 3, "color": PRUNED}, "opacity": 0.85,
         "hovertemplate": hover, "connectgaps": False},
        {"type": "scatter", "mode": "markers", "name": f"{word} here", "showlegend": False,
         "x": [c.signal[-1][0] for c in pruned], "y": [_r(c.signal[-1][1]) for c in pruned],
         "customdata": [[c.id, hover_text(c.text)] for c in pruned],
         "marker": {"symbol": "x-thin", "size": 10, "line": {"width": 2.5, "color": PRUNED_MARK}},
         "hovertemplate": f"<b>#%{{customdata[0]}}</b> {word} · %{{y:.3f}} at token %{{x}}"
                          "<br>%{customdata[1]}<extra></extra>"},
        {"type": "scatter", "mode": "markers", "name": "written to the end",
         "x": [c.signal[-1][0] for c in finished], "y": [_r(c.signal[-1][1]) for c in finished],
         "customdata": [[c.id, hover_text(c.text), _r(c.score)] for c in finished],
         "marker": {"symbol": "circle", "size": 9, "color": colour, "line": {"width": 1.5, "color": "white"}},
         "hovertemplate": "<b>#%{customdata[0]}</b> finished · reward %{customdata[2]}<br>%{customdata[1]}"
                          "<extra></extra>"},
        {"type": "scatter", "mode": "lines", "name": "threshold", "x": thr_x, "y": thr_y,
         "line": {"color": THRESHOLD, "width": 2.5, "dash": "dash"},
         "hovertemplate": "threshold %{y:.3f} (set by the warm-up traces"
                          + (f", written to token {thr_at}" if thr_at is not None else "")
                          + "): a later trace stops below it<extra></extra>"},
        _cursor(None if won else arm.position, y_range, colour, "now", view.cfg.max_new_tokens),
    ]
    layout = _layout("tokens generated", signal_axis(about),
                     [-2, view.cfg.max_new_tokens + 4], y_range, revision=arm_id)
    layout["meta"] = export_meta(view, f"{arm.spec.label}: {signal_title(about)}")
    seen, named = set(), {}
    for r in arm.round_events:
        for what, t in r.marks:
            if (what, t) in seen or (what == "stopped" and len(seen) > 12):
                continue
            seen.add((what, t))
            layout["shapes"].append({"type": "line", "xref": "x", "yref": "paper", "x0": t, "x1": t, "y0": 0, "y1": 1,
                                     "line": {"color": "#C8C8C8", "width": 1}, "layer": "below"})
            if what != "stopped":
                # two names at one token stack ("threshold set" and "filtered" both at the warm-up's last token
                # were drawn over each other); near the right edge a name reads leftwards, inside the plot
                k = named[t] = named.get(t, -1) + 1
                right = t > 0.75 * view.cfg.max_new_tokens
                layout["annotations"].append({"text": what, "x": t, "xref": "x", "y": 0.02 + 0.06 * k,
                                              "yref": "paper", "showarrow": False,
                                              "xanchor": "right" if right else "left", "xshift": -2 if right else 2,
                                              "font": {"size": 11, "color": "#777"}})
    if not any(c.signal for c in cands):
        layout["annotations"].append(_note(f"no reward while it writes: its own {about.signal}<br>"
                                           f"decides which answers are {about.cut_word}"))
    return _spec(arm_id, data, layout)


# plotly's toolbar: no logo, no box or lasso select (nothing to select), and no camera (the PNG and SVG
# buttons under each chart export it with its title, prompt and settings); assets/style.css hides it on a phone
CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["toImage", "select2d", "lasso2d"]}


def _spec(chart: str, data: list[dict], layout: dict) -> dict:
    """Stable ``uid``s: plotly matches traces across updates by them (legend toggles survive)."""
    for i, trace in enumerate(data):
        trace["uid"] = f"{chart}-{i}"
    return {"data": data, "layout": layout, "config": CONFIG}


def _star(c: Candidate | None, name: str, *, partial: bool) -> dict:
    has = c is not None and c.score is not None
    if has:
        x = c.history[-1][0] if partial and c.history else c.tokens
    return {"type": "scatter", "mode": "markers", "name": name,
            "x": [x] if has else [], "y": [_r(c.score)] if has else [],
            "customdata": [[c.id, hover_text(c.text)]] if has else [],
            "marker": {"symbol": "star", "size": 17, "color": WINNER, "line": {"width": 1.2, "color": "#1B1B1B"}},
            "hovertemplate": "<b>#%{customdata[0]}</b> " + name + " · reward %{y:.3f}<br>%{customdata[1]}"
                             "<extra></extra>"}


# ---------------------------------------------------------------- final (Best-of-N)

def final_chart(view: RunView, arm_id: str) -> dict:
    """An arm's candidates as they complete: final reward against length. Open circles mark
    the candidates the first pruning arm pruned (exact, thanks to coupled randomness)."""
    arm = view.arms[arm_id]
    sr = _reference(view, arm, "pruning")
    colour, y_range = arm_colour(arm.spec), view.padded_y()
    sr_pruned = {c.id: c for c in sr.candidates if c.status == "pruned"} if sr is not None else {}
    pruner = sr.spec.short if sr is not None else "-"
    done = [c for c in arm.candidates if c.status == "finished"]
    kept = [c for c in done if c.id not in sr_pruned]
    cut = [c for c in done if c.id in sr_pruned]

    def pts(cs, extra):
        return {"x": [c.tokens for c in cs], "y": [_r(c.score) for c in cs],
                "customdata": [[c.id, hover_text(c.text), extra(c)] for c in cs]}

    hover = ("<b>#%{customdata[0]}</b> · final reward %{y:.3f} · %{x} tokens<br>%{customdata[1]}"
             "<extra>%{customdata[2]}</extra>")
    won = arm.finished is not None
    data = [
        {"type": "scatter", "mode": "markers", "name": "finished", **pts(kept, lambda c: ""),
         "marker": {"symbol": "circle", "size": 9, "color": colour, "line": {"width": 1.5, "color": "white"}},
         "hovertemplate": hover},
        {"type": "scatter", "mode": "markers", "name": f"finished · pruned by {pruner}",
         **pts(cut, lambda c: f"{pruner} pruned it at decision {sr_pruned[c.id].round_pruned + 1}"),
         "marker": {"symbol": "circle-open", "size": 10, "color": colour, "line": {"width": 2, "color": colour}},
         "hovertemplate": hover},
        _star(arm.leader() if done else None, "winner" if won else "leader", partial=False),
        _cursor(None if won else arm.position, y_range, colour, "now", view.cfg.max_new_tokens),
    ]
    layout = _layout("tokens generated", reward_title(view), [-2, view.cfg.max_new_tokens + 4], y_range, revision=arm_id)
    layout["meta"] = export_meta(view, f"{arm.spec.label}: {ARM_TITLES['final']}")
    if not done:
        layout["annotations"].append(_note("each answer is scored once, when it is complete"))
    return _spec(arm_id, data, layout)


# ---------------------------------------------------------------- the race and the verdict

def race_chart(view: RunView, x_axis: str | None = None) -> dict:
    """While the race runs, how each method spends its time (``work_chart``); once it is over, the
    paper's comparison (``verdict_chart``): Best-of-N's reward for every k against its time, and
    Speculative Rejection's result as a point on it. ``x_axis``: "time" (decoding time on this
    machine) or "flops"."""
    x_axis = x_axis if x_axis in X_AXES else view.x_axis if view.x_axis in X_AXES else "time"
    verdicts = view.verdicts()
    if verdicts:
        return verdict_chart(view, verdicts, x_axis)
    return work_chart(view)


def time_unit(view: RunView) -> str:
    """Seconds when this machine's step was measured, else decoding steps."""
    return "s" if view.step is not None else "steps"


def work_profile(view: RunView, arm: ArmView) -> tuple[list[float], list[int]]:
    """(time so far, rows decoding) at each step the arm reported: each step priced at this machine's
    measured time for the rows decoding then (one unit per step when unmeasured)."""
    step = view.step.step if view.step is not None else unit_step
    xs, ys, t, last = [0.0], [0], 0.0, (0, 0)
    for steps, rows in arm.work:
        s0, r0 = last
        if steps > s0:
            r = r0 or rows
            t += (steps - s0) * step(max(r, 1))
            xs.append(round(t, 4)), ys.append(r)
        last = (steps, rows)
    return xs, ys


def work_chart(view: RunView) -> dict:
    """Rows decoding at each step against time spent, one line per arm: Speculative Rejection wide and
    short (many rows at first, fewer after each decision), Best-of-N narrow and long (the rows that fit at
    full length, pass after pass). A step's time grows far slower than its rows: the area is tokens, the
    width is time."""
    data, peak, end = [], 1, 0.0
    for i, arm in enumerate(view.arms.values()):
        xs, ys = work_profile(view, arm)
        peak, end = max(peak, max(ys)), max(end, xs[-1])
        data.append({"type": "scatter", "mode": "lines", "name": arm.spec.label, "x": xs, "y": ys,
                     "line": {"color": arm_colour(arm.spec), "width": 3 if i == 0 else 2.5, "shape": "hv"},
                     "fill": "tozeroy", "opacity": 0.8,
                     "hovertemplate": "%{fullData.name}<br>%{y} rows decoding<br>after %{x:.2f} "
                                      + time_unit(view) + "<extra></extra>"})
    unit = time_unit(view)
    title = f"decoding time on {machine(view)} (s)" if unit == "s" else "decoding steps"
    layout = _layout(title, "rows decoding at each step", [0, step_up(max(end, 1e-3) * 1.04)], [0, peak * 1.1 + 1],
                     revision="work")
    layout["meta"] = export_meta(view, "While racing: rows decoding at each step against "
                                 + ("decoding time" if unit == "s" else "decoding steps"))
    if end == 0:
        layout["annotations"].append(_note("each method's rows appear here as it decodes"))
    return _spec("work", data, layout)


_STEPS = (1, 1.5, 2, 3, 5, 7.5, 10)


def step_up(v: float) -> float:
    """The axis end at or above ``v`` from a few round steps (1, 1.5, 2, 3, 5, 7.5 x 10^n): a growing race keeps
    its axis for a while instead of moving it every frame (a moved axis makes the page replot the whole chart, its
    ticks and labels, on every frame: issue 62)."""
    if v <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(v))
    return float(f"{next(m * scale for m in _STEPS if m * scale >= v * (1 - 1e-12)):.6g}")


def machine(view: RunView) -> str:
    """Whose decoding time a chart shows: this machine's, or a replay's recording machine's."""
    return "the recording's machine" if view.recording is not None else "this machine"


def verdict_chart(view: RunView, verdicts: dict, x_axis: str = "time") -> dict:
    """The paper's comparison: Best-of-N's expected best reward of k answers for every k (order
    statistics over its coupled answers) against what Best-of-k takes (decoding time on this machine
    under the same memory budget, or FLOPs), and each Speculative Rejection setting's result as a
    point, with a dotted line to where Best-of-N's curve reaches the same reward."""
    base = view.arms[view.baseline]
    unit = time_unit(view)
    at = (lambda p: p.seconds) if x_axis == "time" else (lambda p: p.flops)
    curve = next(iter(verdicts.values())).curve
    colour = arm_colour(base.spec)
    xs, ys = [_r6(at(p)) for p in curve], [_r(p.best) for p in curve]
    x_word = "s" if x_axis == "time" and unit == "s" else "steps" if x_axis == "time" else "FLOPs"
    data = [{"type": "scatter", "mode": "lines+markers", "name": f"{base.spec.kind.name}, k = 1 … {len(curve)}",
             "x": xs, "y": ys, "customdata": [p.k for p in curve],
             "line": {"color": colour, "width": 3}, "marker": {"size": 5, "color": colour},
             "hovertemplate": "Best-of-%{customdata}: expected best reward %{y:.3f}<br>%{x:.3s} " + x_word
                              + "<extra></extra>"}]
    x_title = (X_AXES[x_axis].replace("this machine", machine(view)) if unit == "s" or x_axis != "time"
               else "decoding steps")
    # the short title (the result panel names the reward): the long one was cut at 1280x720 ("reward of the winner
    # (preferenc")
    layout = _layout(x_title, reward_title(view, "reward of the winner", short=True), None, None,
                     revision=f"verdict-{x_axis}")
    points = {arm_id: (v.seconds, v.bon_seconds) if x_axis == "time" else (v.flops, v.bon_flops)
              for arm_id, v in verdicts.items()}
    layout["xaxis"].pop("range", None)
    layout["xaxis"].update(log_axis(xs + [x for pair in points.values() for x in pair],
                                    fmt_si if x_axis == "flops" else fmt_number))
    layout["meta"] = export_meta(view, verdict_title(x_axis, unit, points_words(view)))
    for k, (arm_id, v) in enumerate(verdicts.items()):
        arm = view.arms[arm_id]
        c = arm_colour(arm.spec)
        x_sr, x_bon = points[arm_id]
        data.append({"type": "scatter", "mode": "markers", "name": arm.spec.label, "x": [_r6(x_sr)],
                     "y": [_r(v.reward)],
                     "marker": {"symbol": "diamond", "size": 16, "color": c, "line": {"width": 1.5, "color": "#1B1B1B"}},
                     "hovertemplate": f"{arm.spec.label}<br>reward %{{y:.3f}}<br>%{{x:.3s}} {x_word}<extra></extra>"})
        # the dotted line to where Best-of-N's curve has the same reward: only where it has it (not below
        # Best-of-1's reward, nor on a flat curve); the trace stays (fixed traces), empty
        on_curve = v.kind in ("reached", "beyond")
        data.append({"type": "scatter", "mode": "lines+markers", "name": "equal reward", "showlegend": k == 0 and on_curve,
                     "x": [_r6(x_sr), _r6(x_bon)] if on_curve else [], "y": [_r(v.reward)] * 2 if on_curve else [],
                     "hoverinfo": "skip", "line": {"color": c, "width": 2, "dash": "dot"},
                     "marker": {"size": [0, 11], "symbol": "circle-open", "color": c, "line": {"width": 2}}})
        word = verdict_short(v, x_axis)
        at = math.log10(max(x_bon, 1e-12))
        lo, hi = layout["xaxis"].get("range") or (at - 1, at + 1)
        left = (at - lo) / (hi - lo) > 0.5 if hi > lo else True   # the words go where the plot has room for them
        layout["annotations"].append({"x": at, "y": v.reward, "xref": "x", "yref": "y",
                                      "text": word, "showarrow": True, "arrowhead": 0, "ax": -10 if left else 10,
                                      "ay": -34 - 30 * k, "font": {"size": 13, "color": c},
                                      "bgcolor": "rgba(255,255,255,0.85)", "xanchor": "right" if left else "left"})
    return _spec("verdict", data, layout)


def verdict_title(x_axis: str, unit: str = "s", points: str = "Speculative Rejection's point") -> str:
    """An exported verdict chart's title: what its x-axis is, and whose points it shows (``points_words``)."""
    against = ("its compute (FLOPs)" if x_axis == "flops" else
               "its decoding time" if unit == "s" else "its decoding steps")
    return f"Best-of-N's reward for every k against {against}, and {points}"


def verdict_short(v, x_axis: str = "time") -> str:
    """The few words on the chart beside the point where Best-of-N's curve reaches the reward (the
    arm's colour says whose): ``Verdict.kind`` in a line, the time as ``Verdict.time_words`` says it."""
    if v.kind == "degenerate":
        return "nothing to compare: Best-of-N's curve is flat"
    if v.kind == "below":
        return "below one answer's average: a single answer beats it"
    who = f"all {v.n} answers" if v.beyond or v.k >= v.n - 1e-9 else f"Best-of-{show_k(v.k)}"
    if x_axis == "flops":
        r = v.flops_ratio
        if not 0 < r < math.inf:
            return ""
        if abs(math.log(r)) < math.log(1 + SAME_TIME):
            return f"about as many FLOPs as {who}"
        return f"{max(r, 1 / r):.2g}x {'more' if r > 1 else 'fewer'} FLOPs than {who}"
    if v.beyond:
        return f"{who} fall short; {'≥ ' if v.speedup >= 1 + SAME_TIME else ''}{v.time_words(who)}"
    return v.time_words(who)


def _r6(v: float) -> float:
    return float(f"{v:.6g}")


# ---------------------------------------------------------------- adapters

def as_plot(spec: dict):
    """A spec ready for ``gr.Plot`` (skips plotly's validation; see the module docstring)."""
    from gradio.components.plot import PlotData

    return PlotData(type="plotly", plot=json.dumps(spec, separators=(",", ":")))


def figure(spec: dict):
    """A validated ``plotly.graph_objects.Figure`` of a spec (raises on a bad attribute)."""
    import plotly.graph_objects as go

    return go.Figure(spec)



# ---------------------------------------------------------------- one decision (step mode)

def decision_pool(round_event) -> list:
    """The candidates a decision ranked, best first (``components.state.view.ranked``): by partial reward, or
    on a rival's decision by its own signal (every candidate it read)."""
    return [c for c, _ in ranked(round_event)]


def ranked_by(view: RunView, arm: ArmView, r) -> str:
    """What decision ``r`` of ``arm`` ranked its candidates by, in words: "partial reward", "group confidence"."""
    about = arm.spec.kind.about
    if r.signal:
        return about.signal or about.decides_by or "its own signal"
    return f"partial reward ({scale_of(view.reward_label).name})"   # the step chart's axis says only "partial reward"


def pool_chart(view: RunView, checkpoint) -> dict:
    """One decision, as a teacher explains it: every candidate ranked by what the decision read (a bar each,
    best left: its partial reward, or a rival's own signal), kept in the arm's colour and cut in grey, the
    threshold dashed where there is one; on a reward's decision a dot on each bar for the reward that candidate
    ends with when written to the end (Best-of-N's coupled copy), so the class sees how well the partial reward
    predicted it (a rival's signal is on another scale: that reward is in each bar's hover); Best-of-N's
    eventual winner marked with a star."""
    arm = checkpoint.arms[checkpoint.arm]
    r = arm.round_events[checkpoint.index]
    pairs = ranked(r)
    pool = [c for c, _ in pairs]
    value = {c.id: v for c, v in pairs}
    by = ranked_by(view, arm, r)
    on_signal = bool(r.signal)
    colour = arm_colour(arm.spec)
    base = view.arms[view.baseline]
    final = {c.id: c.score for c in base.finished.candidates if c.finish_reason is not None} \
        if base.finished is not None and not base.prunes else {}
    winner = base.finished.winner.id if base.finished is not None and not base.prunes else None
    ranks = list(range(1, len(pool) + 1))
    cut = [c.status == "pruned" and c.round_pruned == r.index for c in pool]
    bar = r.signal_threshold if on_signal else r.threshold
    dots = {} if on_signal else final
    ys = [value[c.id] for c in pool] + [dots[c.id] for c in pool if c.id in dots] + ([bar] if bar is not None else [])
    lo, hi = (min(ys + [0.0]), max(ys + [0.0])) if ys else (0.0, 1.0)
    pad = max(0.08 * (hi - lo), 0.01)
    floor = 0.0   # bars grow from zero (down for a negative value): an axis from near the lowest value made
                  # small differences look large

    def bars(name, keep, colour_, skip=None, only=None):
        sel = [(k, c) for i, (k, c, x) in enumerate(zip(ranks, pool, cut)) if x != keep
               and not (skip and skip[i]) and (only is None or only[i])]
        then = [f"finished with {final[c.id]:.3f} (Best-of-N's copy)" if c.id in final else "" for _, c in sel]
        return {"type": "bar", "name": name, "x": [k for k, _ in sel], "y": [_r(value[c.id] - floor) for _, c in sel],
                "base": floor, "customdata": [[c.id, hover_text(c.text), _r(value[c.id]), t]
                                              for (_, c), t in zip(sel, then)],
                "marker": {"color": colour_},
                "hovertemplate": f"<b>#%{{customdata[0]}}</b> {name} · {by} %{{customdata[2]:.3f}}"
                                 + ("<br>%{customdata[3]}" if on_signal else "")
                                 + "<br>%{customdata[1]}<extra></extra>"}

    # a rival's decision over rows still writing (ST-BoN's truncation: n_kept counts those alone) also read the
    # answers already written to the end: it did not decide on those, and the chart says so
    aside = on_signal and sum(c.status == "kept" for c in pool) == r.n_kept and any(c.status == "finished" for c in pool)
    done = [aside and c.status == "finished" for c in pool]
    data = [bars("kept", True, colour, skip=done), bars(arm.spec.kind.about.cut_word if on_signal else "cut", False, PRUNED)]
    if any(done):
        data.append(bars("already written to the end", True, colour, only=done))
        data[-1]["marker"] = {"color": "white", "line": {"color": colour, "width": 2}}
    if not on_signal:
        data.append({"type": "scatter", "mode": "markers", "name": "reward when finished (Best-of-N's copy)",
                     "x": [k for k, c in zip(ranks, pool) if c.id in final],
                     "y": [_r(final[c.id]) for c in pool if c.id in final],
                     "customdata": [[c.id] for c in pool if c.id in final],
                     "marker": {"symbol": "circle", "size": 8, "color": "white",
                                "line": {"width": 2, "color": "#1B1B1B"}},
                     "hovertemplate": "<b>#%{customdata[0]}</b> finished with %{y:.3f}<extra></extra>"})
    data.append({"type": "scatter", "mode": "markers", "name": "Best-of-N's winner",
                 "x": [k for k, c in zip(ranks, pool) if c.id == winner],
                 "y": [_r(value[c.id]) for c in pool if c.id == winner],
                 "marker": {"symbol": "star", "size": 18, "color": WINNER, "line": {"width": 1.2, "color": "#1B1B1B"}},
                 "hovertemplate": f"Best-of-N's eventual winner · {by} %{{y:.3f}}<extra></extra>"})
    y_title = signal_axis(arm.spec.kind.about) if on_signal else reward_title(view, "partial reward", short=True)
    layout = _layout(f"rank by {by} at token {r.position} (best left)", y_title, [0.4, len(pool) + 0.6],
                     [round(lo - pad, 4) if lo < 0 else 0.0, round(hi + pad, 4)],
                     revision=f"pool-{checkpoint.arm}")
    layout.update(bargap=0.15, barmode="overlay")
    # whole ranks only (a few bars were ticked "0.5 1 1.5"), about a dozen ticks at most
    layout["xaxis"].update(tickmode="linear", tick0=1, dtick=max(1, -(-len(pool) // 12)))
    layout["meta"] = export_meta(view, f"{arm.spec.label}, decision at token {r.position}: every candidate ranked by "
                                       f"its {by}")
    if bar is not None:
        layout["shapes"].append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": bar,
                                 "y1": bar, "line": {"color": THRESHOLD, "width": 2, "dash": "dash"}})
        layout["annotations"].append({"xref": "paper", "yref": "y", "x": 1, "y": bar, "xanchor": "right",
                                      "yanchor": "bottom", "showarrow": False,
                                      "text": f"threshold: {fmt_score(bar)}" if on_signal
                                      else "threshold: lowest kept",
                                      # on a plate: the label reads over the bars and markers it sits on
                                      "bgcolor": "rgba(255,255,255,0.88)", "borderpad": 2,
                                      "font": {"size": 13, "color": THRESHOLD}})
    return _spec(f"pool-{checkpoint.arm}", data, layout)
