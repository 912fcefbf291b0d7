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
"""
from __future__ import annotations

import json

from specrej import Candidate
from specrej.rewards import scale_of

from .looks import colour as arm_colour
from .theme import FONT, GRID, PRUNED, PRUNED_MARK, TEXT, THRESHOLD, WINNER, hover_text
from .session.view import ArmView, RunView

HEIGHT = 430
X_AXES = {"flops": "compute spent (FLOPs)", "tokens": "tokens generated (all candidates)"}


# ---------------------------------------------------------------- shared layout

def _layout(x_title: str, y_title: str, x_range: list | None, y_range: list | None, *, revision: str) -> dict:
    axis = {"gridcolor": GRID, "zeroline": False, "showline": True, "linecolor": "#B0B0B0",
            "ticks": "outside", "tickcolor": "#B0B0B0", "title": {"font": {"size": 15}}}
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
        "yaxis": {**axis, "title": {**axis["title"], "text": y_title},
                  **({"range": y_range, "autorange": False} if y_range else {})},
        "annotations": [], "shapes": [],
    }


def reward_title(view: RunView, what: str = "reward") -> str:
    """A reward axis's title: which reward, and (smaller) what its numbers mean (``specrej.rewards.Scale``)."""
    scale = scale_of(view.reward_label)
    return f"{what} ({scale.name})<br><span style='font-size:12px'>{scale.unit}</span>"


def _note(text: str) -> dict:
    """A grey hint in the middle of an empty chart."""
    return {"text": text, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5, "showarrow": False,
            "font": {"size": 15, "color": "#777"}}


def _cursor(x: float | None, y_range: list, colour: str, name: str) -> dict:
    """A dotted vertical line at ``x``: where this arm is now."""
    xs = [] if x is None else [x, x]
    return {"type": "scatter", "mode": "lines", "name": name, "x": xs, "y": [y_range[0], y_range[1]][: len(xs)],
            "line": {"color": colour, "width": 1.5, "dash": "dot"}, "hoverinfo": "skip", "showlegend": False}


def _r(v: float | None) -> float | None:
    return None if v is None else round(float(v), 4)


# ---------------------------------------------------------------- per arm

def arm_chart(view: RunView, arm_id: str) -> dict:
    """The chart an arm's registry entry asks for."""
    chart = view.arms[arm_id].chart
    return pruning_chart(view, arm_id) if chart == "pruning" else final_chart(view, arm_id)


def _reference(view: RunView, arm: ArmView, chart: str) -> ArmView | None:
    """The first other arm with the given chart kind (None if there is none)."""
    return next((a for a in view.arms.values() if a is not arm and a.chart == chart), None)


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
        _cursor(None if won else arm.position, y_range, colour, "now"),
    ]
    layout = _layout("tokens generated", reward_title(view), [-2, view.cfg.max_new_tokens + 4], y_range, revision=arm_id)
    for m in arm.rounds:  # the decision tokens, as faint vertical lines
        layout["shapes"].append({"type": "line", "xref": "x", "yref": "paper", "x0": m.position, "x1": m.position,
                                 "y0": 0, "y1": 1, "line": {"color": "#C8C8C8", "width": 1}, "layer": "below"})
    if not any(c.history for c in cands):
        layout["annotations"].append(_note("partial answers are scored when memory fills<br>"
                                           "(the decision token), then the lowest are pruned"))
    return _spec(arm_id, data, layout)


def _spec(chart: str, data: list[dict], layout: dict) -> dict:
    """Stable ``uid``s: plotly matches traces across updates by them (legend toggles survive)."""
    for i, trace in enumerate(data):
        trace["uid"] = f"{chart}-{i}"
    return {"data": data, "layout": layout}


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
         **pts(cut, lambda c: f"{pruner} pruned it in round {sr_pruned[c.id].round_pruned}"),
         "marker": {"symbol": "circle-open", "size": 10, "color": colour, "line": {"width": 2, "color": colour}},
         "hovertemplate": hover},
        _star(arm.leader() if done else None, "winner" if won else "leader", partial=False),
        _cursor(None if won else arm.position, y_range, colour, "now"),
    ]
    layout = _layout("tokens generated", reward_title(view), [-2, view.cfg.max_new_tokens + 4], y_range, revision=arm_id)
    if not done:
        layout["annotations"].append(_note("each answer is scored once, when it is complete"))
    return _spec(arm_id, data, layout)


# ---------------------------------------------------------------- the compute race

def race_chart(view: RunView, x_axis: str | None = None) -> dict:
    """Best reward of a finished answer against compute spent, one step line per arm (the
    baseline first and widest, so every line stays visible), and a dotted line where each arm is now."""
    x_axis = x_axis or view.x_axis
    if x_axis not in X_AXES:
        x_axis = "flops"
    y_range = view.padded_y()
    data, ends = [], {}

    def at(p):
        return p.flops if x_axis == "flops" else p.tokens

    for i, arm in enumerate(view.arms.values()):
        xs, ys, last = [], [], None
        for p in arm.curve:
            if p.best is not None and p.best != last:
                xs.append(at(p)), ys.append(_r(p.best))
                last = p.best
        if arm.curve and last is not None:  # extend the step to where the arm is now
            xs.append(at(arm.curve[-1])), ys.append(_r(last))
        if xs:
            ends[arm.arm] = (xs[-1], ys[-1])
        base = i == 0
        data.append({"type": "scatter", "mode": "lines+markers", "name": arm.spec.label, "x": xs, "y": ys,
                     "line": {"color": arm_colour(arm.spec), "width": 5 if base else 2.5, "shape": "hv"},
                     "marker": {"size": 8 if base else 6, "color": arm_colour(arm.spec)},
                     "opacity": 0.75 if base else 1.0,
                     "hovertemplate": "%{fullData.name}<br>best reward %{y:.3f}<br>after %{x:.3s}"
                                      + (" FLOPs" if x_axis == "flops" else " tokens") + "<extra></extra>"})
    for arm in view.arms.values():
        x = at(arm.curve[-1]) if arm.curve and arm.finished is None else None
        data.append(_cursor(x, y_range, arm_colour(arm.spec), f"{arm.spec.label} now"))
    layout = _layout(X_AXES[x_axis], reward_title(view, "best reward so far"), None, y_range, revision="race")
    layout["xaxis"]["tickformat"] = ".2s"
    layout["xaxis"]["exponentformat"] = "SI"
    base = view.arms[view.baseline]
    if base.finished is not None:
        done = [a for a in view.arms.values() if a is not base and a.finished is not None and a.arm in ends]
        x_max = max((x for x, _ in ends.values()), default=0) or 1
        lo, hi = y_range
        for k, arm in enumerate(done):
            if x_axis == "flops":
                frac = arm.finished.ledger.flops / max(base.finished.ledger.flops, 1e-9)
                what = "FLOPs"
            else:
                frac = arm.finished.ledger.generated_tokens / max(base.finished.ledger.generated_tokens, 1)
                what = "tokens"
            x, y = ends[arm.arm]
            # The labels stack from the bottom of the plot, one above the other (never on top of each
            # other, wherever the arms ended), each with an arrow to its arm's end.
            right = x > 0.55 * x_max
            layout["annotations"].append({
                "x": x, "y": y, "xref": "x", "yref": "y", "axref": "x", "ayref": "y",
                "ax": x, "ay": lo + (0.1 + 0.2 * k) * (hi - lo), "showarrow": True, "arrowhead": 2,
                "xanchor": "right" if right else "left", "yanchor": "middle",
                "text": f"{arm.spec.label} done<br>at {frac:.0%} of {base.spec.label}'s {what}",
                "align": "right" if right else "left", "font": {"size": 13, "color": arm_colour(arm.spec)},
                "bgcolor": "rgba(255,255,255,0.85)"})
    if not any(p.best is not None for a in view.arms.values() for p in a.curve):
        layout["annotations"].append(_note("a line starts when an arm has a finished answer"))
    return _spec("race", data, layout)


# ---------------------------------------------------------------- adapters

def as_plot(spec: dict):
    """A spec ready for ``gr.Plot`` (skips plotly's validation; see the module docstring)."""
    from gradio.components.plot import PlotData

    return PlotData(type="plotly", plot=json.dumps(spec, separators=(",", ":")))


def figure(spec: dict):
    """A validated ``plotly.graph_objects.Figure`` of a spec (raises on a bad attribute)."""
    import plotly.graph_objects as go

    return go.Figure(spec)

