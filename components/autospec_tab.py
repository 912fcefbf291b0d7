"""The "Parallel sampling lab" tab: exact parallel sampling by autospeculation, animated.

All of the tab is here: ``build_autospec_tab()`` lays it out, wires its own events and returns its
named handles; the handlers below turn library results (``specrej.autospec``) into HTML, figures
and markdown. No sampling logic lives here. One public API route, ``/autospec_sample``; the rest
are private.
"""
from __future__ import annotations

import html
import json
import math
import time
from dataclasses import dataclass

import gradio as gr

from specrej.autospec import LABELS, make_target, trace
from specrej.autospec.exactness import empirical, score
from specrej.autospec.report import scaling_figure
from specrej.autospec.scaling import curve
from specrej.autospec.targets import all_states

from .session import memory
from .session.context import ASSETS
from .deploy.guard import check_choice, check_number, started

MAX_N = 1024           # cells on the grid
MAX_EXACT_N = 10
MAX_EXACT_STATES = 4096
MAX_EXACT_SAMPLES = 100_000
EXACT_CHUNK = 2000     # the exactness check samples this many chains at a time: its memory is one chunk's
MEASURE_NS = (32, 64, 128, 256)
MEASURE_CHAINS = 4
MAX_DELAY = 1.5        # seconds per frame of the animation (the slider's range)
MAX_FRAMES = 80        # a sequential run is shown in at most this many frames
TARGET_CHOICES = [("Mixture of product distributions", "mixture"), ("Curie–Weiss (mean field)", "curie-weiss"),
                  ("Ising / Potts chain", "potts")]
SAMPLER_CHOICES = [("block verification", "block"), ("token verification", "token"),
                   ("block verification, adaptive block", "block-adaptive"), ("sequential", "sequential")]
RECORDED = ASSETS / "autospec_quick.json"
# The default sample (Curie–Weiss, n = 64, beta = 0.5, block verification) at this seed drafts three blocks:
# two end in a rejected draft and its correction, so the first Sample shows every step (6 rounds, not 64).
DEFAULT_SEED = 7
# Cell colours with their own text colour, so the grid reads the same in light and dark themes.
STYLE = {
    "open": "background:transparent;color:#8a8f98;border:1px dashed #8a8f98;",
    "fixed": "background:#c9d1db;color:#1f2328;border:1px solid #9aa4b1;",
    "drafted": "background:#56B4E9;color:#08131c;border:1px solid #2b7fae;",
    "accepted": "background:#009E73;color:#ffffff;border:1px solid #006e50;",
    "corrected": "background:#D55E00;color:#ffffff;border:1px solid #9c4500;",
    "discarded": "background:#f1f1f1;color:#9a3b3b;border:1px solid #d08c8c;text-decoration:line-through;",
    "sampled": "background:#0072B2;color:#ffffff;border:1px solid #004f7c;",
}
LEGEND = [("open", "open"), ("fixed", "fixed earlier"), ("drafted", "drafted (round A)"),
          ("accepted", "accepted draft"), ("corrected", "corrected"), ("discarded", "discarded draft"),
          ("sampled", "sampled (sequential)")]
SYMBOLS = "0123456789ABCDEF"


@dataclass
class AutospecTab:
    target: gr.Dropdown
    n: gr.Number
    beta: gr.Number
    components: gr.Number
    lam: gr.Number
    q: gr.Number
    sampler: gr.Radio
    seed: gr.Number
    delay: gr.Slider
    sample: gr.Button
    status: gr.Markdown
    counter: gr.Markdown
    grid: gr.HTML
    scaling_plot: gr.Plot
    measure: gr.Button
    scaling_note: gr.Markdown
    exact_n: gr.Number
    exact_samples: gr.Number
    exact_run: gr.Button
    exact_plot: gr.Plot
    exact_note: gr.Markdown

    def target_inputs(self) -> list:
        return [self.target, self.beta, self.components, self.lam, self.q]


# ---------------------------------------------------------------- validation
# Every field is checked as it arrives (the events take raw values: preprocess=False), with
# messages that name the field and show at most a short excerpt of the value (``guard``).

def _int(name: str, value, lo: int, hi: int) -> int:
    return check_number(name, value, lo, hi, whole=True)


PARAMS = {   # each target's parameters: (the name messages use, the library's name); make_target checks ranges
    "mixture": (("C (components)", "C"),),
    "curie-weiss": (("beta", "beta"),),
    "potts": (("lambda", "lam"), ("q", "q")),
}


def _params(name, beta, components, lam, q) -> dict:
    """The chosen target's parameters as numbers (the other targets' fields are ignored; the
    library says which values are in range)."""
    name = check_choice("target", name, [v for _, v in TARGET_CHOICES])
    given = {"beta": beta, "C": components, "lam": lam, "q": q}
    params = {key: check_number(label, given[key]) for label, key in PARAMS[name]}
    return {**params, "seed": 0} if name == "mixture" else params


def _target(name, n, beta, components, lam, q):
    """The library target for the tab's inputs; ValueError with a message otherwise."""
    n = _int("n", n, 2, MAX_N)
    params = _params(name, beta, components, lam, q)
    return make_target(name, n, **params)


def _sampler(sampler) -> str:
    return check_choice("sampler", sampler, [v for _, v in SAMPLER_CHOICES])


def _error(e: Exception) -> str:
    return f"**Cannot run:** {html.escape(str(e))}"


# ---------------------------------------------------------------- the grid

def _frames(target, sampler: str, seed: int):
    """(cells status by site, values by site, rounds, queries, fixed) per frame of one sample."""
    n = target.n
    steps = list(trace(target, sampler, seed))
    every = max(1, math.ceil(len(steps) / MAX_FRAMES)) if sampler == "sequential" else 1
    status = ["open"] * n
    values = [-1] * n
    for k, st in enumerate(steps):
        status = ["fixed" if s in ("accepted", "corrected", "sampled", "fixed") else "open" for s in status]
        if st.kind == "sequential":
            site = st.order[st.known_before]
            status[site], values[site] = "sampled", st.state[site]
            if k % every == every - 1 or k == len(steps) - 1:
                yield list(status), list(values), st.rounds, st.queries, st.known_before + 1
            continue
        block = [st.order[st.known_before + j] for j in range(len(st.drafted))]
        drafted_status = list(status)
        drafted_values = list(values)
        for site, y in zip(block, st.drafted):
            drafted_status[site], drafted_values[site] = "drafted", y
        yield drafted_status, drafted_values, st.rounds - 1, None, st.known_before
        for j, site in enumerate(block):
            if j < st.accepted:
                status[site], values[site] = "accepted", st.drafted[j]
            elif j == st.accepted and st.corrected >= 0:
                status[site], values[site] = "corrected", st.corrected
            else:
                status[site], values[site] = "discarded", st.drafted[j]
        if st.corrected >= 0 and st.accepted == len(block):        # the bonus site after a short block
            site = st.order[st.known_before + st.accepted]
            status[site], values[site] = "corrected", st.corrected
        yield list(status), list(values), st.rounds, st.queries, sum(v >= 0 for v in st.state)
        values = list(st.state)


def grid_html(status: list[str], values: list[int]) -> str:
    """The grid as HTML: one small <div> per site (a class per status, styled once per frame)."""
    n = len(status)
    cols = max(8, math.ceil(math.sqrt(n * 2)))
    size, font = (26, 13) if n <= 256 else (18, 10)
    css = (f".as-cell{{width:{size}px;height:{size}px;font-size:{font}px;line-height:{size - 2}px;text-align:center;"
           f"border-radius:4px;font-weight:600;font-family:ui-monospace,monospace;box-sizing:border-box;}}"
           # !important: the theme's own text colour (e.g. white in dark mode) must not win over the cell's
           + "".join(f".as-{k}{{{v.replace(';', ' !important;')}}}" for k, v in STYLE.items()))
    cells = "".join(f'<div class="as-cell as-{s}">{SYMBOLS[v] if 0 <= v < len(SYMBOLS) else ""}</div>'
                    for s, v in zip(status, values))
    legend = "".join(f'<span style="display:inline-flex;align-items:center;gap:5px;margin-right:14px;">'
                     f'<span class="as-{k}" style="display:inline-block;width:16px;height:16px;border-radius:3px;">'
                     f'</span>{label}</span>' for k, label in LEGEND)
    return (f'<style>{css}</style><div id="as-grid-cells" data-cells="{n}" style="display:grid;'
            f'grid-template-columns:repeat({cols},{size}px);gap:3px;margin:6px 0 10px 0;">{cells}</div>'
            f'<div style="font-size:0.9rem;line-height:2;">{legend}</div>')


def counter_markdown(sampler: str, rounds: int, queries, fixed: int, n: int, done: bool) -> str:
    head = f"**{rounds}** oracle round{'s' * (rounds != 1)} ({LABELS[sampler]})"
    tail = f" · a sequential sampler needs **{n}** · {fixed}/{n} sites fixed"
    if queries is not None:
        tail += f" · {queries} conditionals read"
    if done:
        tail += f" · **{n / max(rounds, 1):.1f}x fewer rounds**" if sampler != "sequential" else ""
    return head + tail


def sample_handler(target, n, beta, components, lam, q, sampler, seed, delay, request: gr.Request = None):
    """One exact sample, animated round by round: yields (status, round counter, grid HTML)."""
    started(request)
    try:
        t = _target(target, n, beta, components, lam, q)
        sampler = _sampler(sampler)
        seed = _int("seed", seed, 0, 2 ** 31 - 1)
        delay = 0.0 if delay is None else check_number("seconds per frame", delay, 0.0, MAX_DELAY)
    except ValueError as e:
        yield _error(e), gr.skip(), gr.skip()
        return
    yield f"Sampling {html.escape(t.describe())}…", gr.skip(), grid_html(["open"] * t.n, [-1] * t.n)
    last = None
    for status, values, rounds, queries, fixed in _frames(t, sampler, seed):
        last = (rounds, queries, grid_html(status, values))
        yield gr.skip(), counter_markdown(sampler, rounds, queries, fixed, t.n, False), last[2]
        if delay:
            time.sleep(delay)
    memory.release()
    rounds, queries, grid = last
    # The last frame repeats the grid, so that an API caller's result is complete.
    yield (f"Done: one exact sample of the {html.escape(t.describe())}.",
           counter_markdown(sampler, rounds, queries, t.n, t.n, True), grid)


# ---------------------------------------------------------------- scaling and exactness panels

def recorded_scaling():
    """The recorded rounds-against-n figure and its note (assets/autospec_quick.json)."""
    try:
        data = json.loads(RECORDED.read_text())
    except (OSError, ValueError):
        return None, "No recorded scaling run (`python -m specrej.autospec --quick`); press **Measure live**."
    meta = data.get("meta", {})
    note = (f"Recorded by `python -m specrej.autospec --quick`: mean rounds over {meta.get('chains', '?')} samples "
            f"per point. Lines are least-squares fits on log-log axes; sequential has slope 1. Rounds are oracle "
            f"calls (parallel depth), not timings.")
    return scaling_panels(data["scaling"]), note


def scaling_panels(scaling: list[dict]):
    """The library's rounds-against-n figure with one legend under each panel (plotly's legend2, legend3):
    one shared legend wrapped across the panels put a target's title over its neighbour's axis title."""
    fig = scaling_figure(scaling)
    axes = sorted({t.xaxis or "x" for t in fig.data}, key=lambda a: int(a[1:] or 1))
    for trace in fig.data:
        k = axes.index(trace.xaxis or "x")
        trace.legend = "legend" if k == 0 else f"legend{k + 1}"
    for k, axis in enumerate(axes):
        domain = fig.layout["xaxis" + axis[1:]].domain
        fig.layout["legend" if k == 0 else f"legend{k + 1}"] = dict(
            x=domain[0], y=-0.2, xanchor="left", yanchor="top", orientation="v", groupclick="toggleitem",
            bgcolor="rgba(0,0,0,0)", font=dict(size=12))
    fig.update_layout(height=560, margin=dict(b=150))
    return fig


def measure_handler(target, beta, components, lam, q, request: gr.Request = None):
    """Rounds against n = 32…256 for the chosen target, live (4 samples per point)."""
    started(request)
    try:
        _target(target, 32, beta, components, lam, q)
        params = _params(target, beta, components, lam, q)
    except ValueError as e:
        return gr.skip(), _error(e)
    try:
        curves = [curve(target, s, list(MEASURE_NS), chains=MEASURE_CHAINS, params=params).as_dict()
                  for _, s in SAMPLER_CHOICES]
    finally:
        memory.release()
    slopes = ", ".join(f"{c['sampler']} {c['slope']:.2f}" for c in curves)
    return scaling_panels(curves), f"Measured live, 4 samples per point, n = 32…256. Slopes: {slopes}."


def exact_figure(states: list[str], exact: list[float], emp: list[float]):
    import plotly.graph_objects as go

    fig = go.Figure([
        go.Bar(x=states, y=exact, name="exact (enumeration)", marker=dict(color="#0072B2")),
        go.Bar(x=states, y=emp, name="empirical (samples)", marker=dict(color="#E69F00", pattern=dict(shape="/"))),
    ])
    fig.update_layout(template="none", paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      font=dict(color="#7f7f7f", size=13), barmode="group", height=360,
                      margin=dict(l=60, r=20, t=50, b=90), legend=dict(orientation="h", y=1.02, x=1, xanchor="right",
                                                                        yanchor="bottom"),
                      yaxis=dict(title="probability", gridcolor="rgba(128,128,128,0.25)"),
                      xaxis=dict(title="state (the most likely, in order)", tickangle=-45,
                                 type="category"))
    return fig


def chunked_counts(target, sampler: str, samples: int, chunk: int = EXACT_CHUNK):
    """(counts per state, exact law) of ``samples`` draws made ``chunk`` chains at a time (chunk k
    seeded k), so that memory stays that of one chunk, whatever the number of samples."""
    counts, exact = None, None
    for k, start in enumerate(range(0, samples, chunk)):
        c, exact = empirical(target, sampler, min(chunk, samples - start), seed=k)
        counts = c if counts is None else counts + c
    return counts, exact


def exactness_handler(target, n, beta, components, lam, q, sampler, samples, request: gr.Request = None):
    """Empirical against exact probabilities of states (n <= 10), with the chi² p-value and TV."""
    started(request)
    try:
        n = _int("n (exactness)", n, 2, MAX_EXACT_N)
        samples = _int("samples", samples, 1000, MAX_EXACT_SAMPLES)
        t = _target(target, n, beta, components, lam, q)
        if t.q ** t.n > MAX_EXACT_STATES:
            raise ValueError(f"q^n = {t.q}^{t.n} states is more than {MAX_EXACT_STATES} to enumerate: lower n or q")
        sampler = _sampler(sampler)
    except ValueError as e:
        return gr.skip(), _error(e)
    try:
        counts, exact = chunked_counts(t, sampler, samples)
    finally:
        memory.release()
    f = score(t, sampler, counts, exact)
    top = exact.argsort(descending=True)[:32].tolist()
    names = ["".join(SYMBOLS[v] for v in s) for s in all_states(t.n, t.q)[top].tolist()]
    emp = (counts.double() / samples).tolist()
    ex, em = [exact[i].item() for i in top], [emp[i] for i in top]
    rest = len(exact) - len(top)
    others = (f" The other {rest} states (not drawn) hold {1 - sum(ex):.1%} of the probability; the samples put "
              f"{1 - sum(em):.1%} there." if rest else "")
    verdict = "consistent with exact sampling" if f.chi2_p > 0.001 else "**not** consistent with the exact law"
    note = (f"{samples} samples of the {html.escape(t.describe())} by {LABELS[sampler]}: χ² = {f.chi2:.1f} on "
            f"{f.df} degrees of freedom, **p = {f.chi2_p:.3f}** ({verdict}). Total variation **{f.tv:.4f}**, against "
            f"a Monte Carlo noise floor of {f.tv_floor:.4f} (the TV of as many draws from the exact law).{others}")
    return exact_figure(names, ex, em), note


# ---------------------------------------------------------------- layout

def build_autospec_tab() -> AutospecTab:
    """Lay out the tab inside the current Blocks/Tab context, wire its events, return its handles."""
    gr.Markdown("# Parallel sampling lab\nExact samples from an any-order model in far fewer rounds than sites, "
                "by letting the model **speculate about itself** and verifying the guesses exactly "
                "([Anari et al., 2025](https://arxiv.org/abs/2511.07869)).", elem_id="as-header")
    with gr.Row():
        with gr.Column(scale=1, min_width=280):
            target = gr.Dropdown(TARGET_CHOICES, value="curie-weiss", label="Target distribution", elem_id="as-target")
            n = gr.Number(value=64, label=f"n: sites (2 to {MAX_N})", precision=0, elem_id="as-n")
            beta = gr.Number(value=0.5, label="β: Curie–Weiss inverse temperature (−5 to 5; 1 is critical)",
                             elem_id="as-beta")
            components = gr.Number(value=3, label="C: mixture components (1 to 64)", precision=0, elem_id="as-c",
                                   visible=False)
            lam = gr.Number(value=1.0, label="λ: chain coupling (−5 to 10; 0 is independent)", elem_id="as-lam",
                            visible=False)
            q = gr.Number(value=2, label="q: states per site (2 is Ising, up to 16)", precision=0, elem_id="as-q",
                          visible=False)
            sampler = gr.Radio(SAMPLER_CHOICES, value="block", label="Sampler", elem_id="as-sampler")
            with gr.Row():
                seed = gr.Number(value=DEFAULT_SEED, label="seed", precision=0, elem_id="as-seed")
                delay = gr.Slider(0.0, 1.5, value=0.5, step=0.05, label="seconds per frame", elem_id="as-delay")
            run = gr.Button("▶ Sample", variant="primary", elem_id="as-sample")
        with gr.Column(scale=3):
            status = gr.Markdown("Pick a target and press **Sample**.", elem_id="as-status")
            counter = gr.Markdown("", elem_id="as-counter")
            grid = gr.HTML(grid_html(["open"] * 64, [-1] * 64), elem_id="as-grid")
    with gr.Accordion("Rounds against n (log-log)", open=True):
        fig, note = recorded_scaling()
        scaling_plot = gr.Plot(fig, label="oracle rounds against n", elem_id="as-scaling")
        with gr.Row():
            scaling_note = gr.Markdown(note, elem_id="as-scaling-note")
            measure = gr.Button("Measure live for this target (n = 32…256)", variant="secondary", size="md", scale=0,
                                min_width=300, elem_id="as-measure", elem_classes=["action"])
    with gr.Accordion("Exactness check (n ≤ 10)", open=True):
        with gr.Row():
            exact_n = gr.Number(value=8, label=f"n (2 to {MAX_EXACT_N})", precision=0, elem_id="as-exact-n")
            exact_samples = gr.Number(value=20000, label="samples (1000 to 100000)", precision=0,
                                      elem_id="as-exact-samples")
            exact_run = gr.Button("Check exactness", elem_id="as-exact-run")
        exact_note = gr.Markdown("Samples many times with the chosen sampler and compares the frequency of each "
                                 "state with its exact probability (by enumeration).", elem_id="as-exact-note")
        exact_plot = gr.Plot(label="probability of the 32 most likely states", elem_id="as-exact-plot")
    with gr.Accordion("How this relates to speculative decoding and to Speculative Rejection", open=False):
        gr.Markdown((ASSETS / "autospec.md").read_text(encoding="utf-8"), elem_id="as-explain")
    tab = AutospecTab(target, n, beta, components, lam, q, sampler, seed, delay, run, status, counter, grid,
                      scaling_plot, measure, scaling_note, exact_n, exact_samples, exact_run, exact_plot, exact_note)
    _wire(tab)
    return tab


def show_parameters(target):
    """Only the chosen target's parameters are shown: (beta, C, lambda, q)."""
    return (gr.Number(visible=target == "curie-weiss"), gr.Number(visible=target == "mixture"),
            gr.Number(visible=target == "potts"), gr.Number(visible=target == "potts"))


def _wire(tab: AutospecTab) -> None:
    # preprocess=False: the handlers check the raw values (messages that name the field); the app's
    # guard gives every queued event the per-client cap as its validator.
    opts = dict(concurrency_id="autospec", concurrency_limit=4, preprocess=False)
    tab.target.change(show_parameters, tab.target, [tab.beta, tab.components, tab.lam, tab.q], queue=False,
                      api_visibility="private")
    tab.sample.click(sample_handler, [tab.target, tab.n, tab.beta, tab.components, tab.lam, tab.q, tab.sampler,
                                      tab.seed, tab.delay], [tab.status, tab.counter, tab.grid],
                     api_name="autospec_sample", show_progress="hidden", **opts)
    tab.measure.click(measure_handler, tab.target_inputs(), [tab.scaling_plot, tab.scaling_note],
                      api_visibility="private", show_progress="minimal", **opts)
    tab.exact_run.click(exactness_handler, [tab.target, tab.exact_n, tab.beta, tab.components, tab.lam, tab.q,
                                            tab.sampler, tab.exact_samples], [tab.exact_plot, tab.exact_note],
                        api_visibility="private", show_progress="minimal", **opts)
