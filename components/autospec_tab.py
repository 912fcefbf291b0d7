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
import threading
import time
from dataclasses import dataclass, field

import gradio as gr

from specrej.autospec import CurieWeiss, MixtureProduct, make_target, trace
from specrej.autospec.exactness import empirical, score
from specrej.autospec.report import scaling_figure
from specrej.autospec.scaling import curve
from specrej.autospec.targets import all_states

from components.deploy import gradio_private, memory
from components.state.shared import ASSETS
from components.deploy.clients import started
from components.state.fields import FieldError, check_choice, check_number

MAX_N = 1024           # cells on the grid
MAX_EXACT_N = 10
MAX_EXACT_STATES = 4096
MAX_EXACT_SAMPLES = 100_000
EXACT_CHUNK = 2000     # the exactness check samples this many chains at a time: its memory is one chunk's
MEASURE_NS = (32, 64, 128, 256)
MEASURE_CHAINS = 4
MAX_DELAY = 1.5        # seconds per frame of the animation (the slider's range)
MAX_FRAMES = 80        # a sequential run is shown in at most this many frames
GROUP = "autospec"     # the lab's concurrency group: its places are shared by every visitor
PLACES = 4             # lab runs at once on the server
SHARE_S = 20.0         # a lab run's share of its place while others wait: past it, it ends its animation at once
# Plain names on the page; the values (what the handlers and the API receive) are the library's names.
# The technical name of each is in the "Details for specialists" accordion (GLOSSARY).
TARGET_CHOICES = [("One of a few hidden patterns", "mixture"), ("Every cell leans toward the majority", "curie-weiss"),
                  ("Each cell leans toward its neighbours", "potts")]
SAMPLER_CHOICES = [("Guess them all, check the guesses together", "block"),
                   ("Guess them all, check one by one until a miss", "token"),
                   ("Guess a growing batch, check it together", "block-adaptive"),
                   ("One cell at a time, no guessing", "sequential")]
PLAIN_SAMPLERS = {v: label[0].lower() + label[1:] for label, v in SAMPLER_CHOICES}
SHORT_SAMPLERS = {"block": "check together", "token": "check one by one", "block-adaptive": "growing batch",
                  "sequential": "one at a time"}     # the chart's legend: narrow, under each panel
# What the tab shows first: three sentences a teacher can read aloud (no jargon: tests/test_autospec_tab.py).
OPENING = ("This lab shows a shortcut for filling a grid of cells at random: instead of choosing one cell at a time, "
           "the model guesses many cells at once and then checks its guesses, and the result is just as random as "
           "the slow way. Press **▶ Sample** to watch one grid fill in, round by round. Look at the count of rounds "
           "above the grid: it is far smaller than the number of cells, which is how many rounds the "
           "one-at-a-time way needs.")
GLOSSARY = """**What the lab does, in the paper's words.** Exact samples from an *any-order* model in far fewer rounds than sites,
by letting the model **speculate about itself** and verifying the guesses exactly
([Anari et al., 2025](https://arxiv.org/abs/2511.07869)). The page's plain names, and what they stand for:

| on the page | technical name |
|---|---|
| a cell | a site; *n* sites, each with *q* states |
| a round (a round of questions to the model) | an oracle call: one batch of conditional marginals asked at once (parallel depth) |
| questions asked | conditionals read (queries, total work) |
| One of a few hidden patterns; number of hidden patterns (C) | mixture of C product distributions |
| Every cell leans toward the majority; how strongly the cells agree (β) | Curie–Weiss (mean field) model at inverse temperature β (β = 1 is critical) |
| Each cell leans toward its neighbours; how strongly neighbours agree (λ); values per cell (q) | 1D Ising (q = 2) / Potts chain with coupling λ |
| Guess them all, check the guesses together | autospeculation with block verification ([Sun et al., arXiv 2403.10444](https://arxiv.org/abs/2403.10444)) |
| Guess them all, check one by one until a miss | autospeculation with token verification |
| Guess a growing batch, check it together | block verification with an adaptive block (starts at ⌈√n⌉) |
| One cell at a time, no guessing | the sequential sampler (n rounds) |
| rounds grow ×r each time n doubles | r = 2^slope, the slope of the least-squares fit of log rounds on log n (sequential: slope 1, ×2) |
| the samples match the exact probabilities | χ² goodness of fit against the law enumerated exactly; total variation against its Monte Carlo noise floor |
"""
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
LEGEND = [("open", "not filled yet"), ("fixed", "filled earlier"), ("drafted", "guessed this round"),
          ("accepted", "guess kept"), ("corrected", "guess corrected"), ("discarded", "guess thrown away"),
          ("sampled", "filled one at a time")]
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


# ---------------------------------------------------------------- the lab's places

@dataclass
class LabClock:
    """When each lab run now running is expected to end, for the place line a waiting visitor reads
    (``wait_words``): a sample knows its own length once its frames are drawn (frames x seconds per frame);
    a measurement or an exactness check is expected to take what the last one of its kind took here."""

    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ends: dict = field(default_factory=dict)     # token -> expected end (time.monotonic()), None: not known
    _last: dict = field(default_factory=dict)     # kind -> seconds the last run of that kind took
    _shared: dict = field(default_factory=dict)   # token -> when its share ends (a sample: it yields then, if others wait)

    def begin(self, kind: str, seconds: float | None = None, share_s: float | None = None) -> object:
        token = object()
        seconds = self._last.get(kind) if seconds is None else seconds
        now = time.monotonic()
        with self._lock:
            self._ends[token] = None if seconds is None else now + seconds
            if share_s is not None:
                self._shared[token] = now + share_s
        return token

    def end(self, token: object, kind: str, since: float) -> None:
        with self._lock:
            self._ends.pop(token, None)
            self._shared.pop(token, None)
            self._last[kind] = time.monotonic() - since

    def remaining(self, waiting: bool = False) -> list[float | None]:
        """Each running run's seconds left; ``waiting`` (someone waits, so a run with a share yields at its end):
        the sooner of its own end and its share's."""
        now = time.monotonic()
        with self._lock:
            out = []
            for token, e in self._ends.items():
                share = self._shared.get(token) if waiting else None
                ends = [x for x in (e, share) if x is not None]
                out.append(max(min(ends) - now, 0.0) if ends else None)
            return out


_CLOCK_LOCK = threading.Lock()


def lab_clock(request) -> LabClock | None:
    """The lab clock of the server a request came to (one per app; None for a direct call)."""
    blocks = gradio_private.blocks_of(request)
    if blocks is None:
        return None
    with _CLOCK_LOCK:
        if getattr(blocks, "specrej_lab", None) is None:
            blocks.specrej_lab = LabClock()
        return blocks.specrej_lab


class _Timed:
    """``with _Timed(request, kind, seconds):`` a lab run on the clock while it runs (``share_s``: it yields its
    place at that age when others wait)."""

    def __init__(self, request, kind: str, seconds: float | None = None, share_s: float | None = None):
        self.clock, self.kind, self.seconds, self.share_s = lab_clock(request), kind, seconds, share_s

    def __enter__(self):
        self.since = time.monotonic()
        self.token = self.clock.begin(self.kind, self.seconds, self.share_s) if self.clock is not None else None
        return self

    def __exit__(self, *exc):
        if self.clock is not None:
            self.clock.end(self.token, self.kind, self.since)


def wait_words(remaining: list[float | None], running: int, waiting: int, places: int) -> str | None:
    """The place line of a lab run about to join the queue: None when a place is free for it now; else its place
    (how many runs wait ahead of it) and when a place frees for it, from the running runs' expected ends
    (``remaining``, seconds each, None where not known; Gradio may count more running than have reported)."""
    free = max(places - running, 0)
    k = waiting - free          # yours takes the (k+1)-th place the running runs free
    if k < 0:
        return None
    remaining = list(remaining) + [None] * max(running - len(remaining), 0)
    known = sorted(r for r in remaining if r is not None)
    ahead = ("no other run waits ahead of yours" if waiting == 0 else
             f"{waiting} run{'s' * (waiting != 1)} wait{'s' * (waiting == 1)} ahead of yours")
    head = (f"**Waiting for a lab place:** the lab's {places} places are shared by every visitor and all are taken; "
            f"{ahead}.")
    if k >= len(known):   # it waits for a run whose length is not known here, or for a run that waits too
        return head + (" How long that takes depends on the settings of the runs ahead; yours starts on its own "
                       "when a place frees.")
    when = "in about" if len(known) == len(remaining) else "at most"   # a run of unknown length may end sooner
    return head + (f" A place for yours frees {when} {max(known[k], 1):.0f} s from now (the running runs' own "
                   "lengths: a sample's frames x seconds per frame); it starts on its own then.")


def others_wait(request) -> bool:
    """Whether a lab run waits for a place now (Gradio's queue of the lab's group)."""
    blocks = gradio_private.blocks_of(request)
    return blocks is not None and gradio_private.group_load(blocks, GROUP)[1] > 0


def lab_place(request: gr.Request = None):
    """What a lab button says the moment it is pressed, before its run joins the queue: why it is refused (the
    guard's cap, which refuses it as it joins), or its place and when a place frees (``wait_words``); nothing when
    a place is free (the run's own first line follows at once). Nothing is measured here."""
    blocks = gradio_private.blocks_of(request)
    if blocks is None:
        return gr.skip()
    guard = getattr(blocks, "specrej_guard", None)
    refused = guard.refusal(request, GROUP) if guard is not None else None
    if refused:
        return f"**Can't start:** {html.escape(refused)}"
    running, waiting, places = gradio_private.group_load(blocks, GROUP)
    clock = lab_clock(request)
    full = running >= (places or PLACES)   # this run would wait: every sample ahead then yields at its share's end
    words = wait_words(clock.remaining(waiting=full) if clock else [], running, waiting, places or PLACES)
    return gr.skip() if words is None else words


# ---------------------------------------------------------------- validation
# Every field is checked as it arrives (the events take raw values: preprocess=False), with
# messages that name the field and show at most a short excerpt of the value (``state/fields.py``).

def _int(name: str, value, lo: int, hi: int) -> int:
    """A whole number in [lo, hi]; text is refused (the page's number boxes send numbers; issue 42: the API took
    ``n="64"``), as the race's fields refuse it."""
    if isinstance(value, str):
        raise FieldError(f"{name} must be a whole number from {lo} to {hi}, not text.")
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


def plain_describe(t) -> str:
    """The target in the page's plain words (the library's ``describe()`` uses the technical names)."""
    if isinstance(t, CurieWeiss):
        return f"{t.n} cells that lean toward the majority (β = {t.beta:g})"
    if isinstance(t, MixtureProduct):
        return f"{t.n} cells from one of {t.components} hidden pattern{'s' * (t.components != 1)}"
    return f"{t.n} cells that lean toward their neighbours (λ = {t.lam:g}, {t.q} values per cell)"


def per_doubling(slope: float) -> str:
    """How rounds grow each time n doubles (2^slope): the plain reading of a log-log slope."""
    return f"×{2 ** slope:.2f}" if math.isfinite(slope) else "×?"


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
    head = f"**{rounds}** round{'s' * (rounds != 1)} of questions to the model ({PLAIN_SAMPLERS[sampler]})"
    tail = f" · one cell at a time needs **{n}** · {fixed}/{n} cells filled"
    if queries is not None:
        tail += f" · {queries} questions asked in all"
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
    yield f"Sampling {html.escape(plain_describe(t))}…", gr.skip(), grid_html(["open"] * t.n, [-1] * t.n)
    last, yielded = None, False
    frames = list(_frames(t, sampler, seed))
    with _Timed(request, "sample", len(frames) * delay, SHARE_S) as timed:
        for status, values, rounds, queries, fixed in frames:
            last = (rounds, queries, grid_html(status, values))
            if not yielded:
                yield gr.skip(), counter_markdown(sampler, rounds, queries, fixed, t.n, False), last[2]
            if delay and not yielded and time.monotonic() - timed.since > SHARE_S and others_wait(request):
                yielded = True   # past its share with visitors waiting: the sample ends now (the same sample, undrawn)
            if delay and not yielded:
                time.sleep(delay)
    memory.release()
    rounds, queries, grid = last
    # The last frame repeats the grid, so that an API caller's result is complete.
    ended = (f" Its animation ended early after {SHARE_S:.0f} s: other visitors waited for a lab place."
             if yielded else "")
    yield (f"Done: one grid of {html.escape(plain_describe(t))}, exactly as random as one filled cell by cell.{ended}",
           counter_markdown(sampler, rounds, queries, t.n, t.n, True), grid)


# ---------------------------------------------------------------- scaling and exactness panels

def recorded_scaling():
    """The recorded rounds-against-n figure and its note (assets/autospec_quick.json)."""
    try:
        data = json.loads(RECORDED.read_text())
    except (OSError, ValueError):
        return None, "No recorded measurement (`python -m specrej.autospec --quick`); press **Measure now**."
    meta = data.get("meta", {})
    note = (f"Recorded earlier: the average number of rounds over {meta.get('chains', '?')} samples for each grid "
            f"size. Both axes double at each tick, so a flat line means the rounds do not grow with the number of "
            f"cells, and one cell at a time doubles them (×2.00 in the legend). A round is one batch of questions "
            f"asked at once, not a time in seconds.")
    return scaling_panels(data["scaling"]), note


PANEL_TITLES = {"mixture": "one of a few hidden patterns", "curie-weiss": "cells lean toward the majority",
                "potts": "cells lean toward their neighbours"}
PARAM_SYMBOLS = {"C": "C", "beta": "β", "lambda": "λ", "q": "q"}


def _plain_params(p: dict) -> str:
    return ", ".join(f"{PARAM_SYMBOLS[k]} = {v:g}" for k, v in p.items() if k in PARAM_SYMBOLS)


def _plain_words(fig, scaling: list[dict]) -> None:
    """The library's figure (technical names, slopes) in the page's words: panel titles, legend entries
    ("×r per doubling of n" for a slope), axis titles. The traces are the library's, in its order."""
    targets = [t for t in PANEL_TITLES if any(s["target"] == t for s in scaling)]
    ordered = [s for t in targets for s in scaling if s["target"] == t]
    assert len(ordered) == len(fig.data)
    for trace, s in zip(fig.data, ordered):
        trace.name = f"{SHORT_SAMPLERS[s['sampler']]}: {per_doubling(s['slope'])}"
        trace.legendgrouptitle.text = "rounds grow, each time n doubles:"
        trace.hovertemplate = "n = %{x} cells<br>%{y:.1f} rounds<extra>" + PLAIN_SAMPLERS[s["sampler"]] + "</extra>"
    for note, t in zip(fig.layout.annotations, targets):
        p = next(s["params"] for s in scaling if s["target"] == t)
        note.text = f"{PANEL_TITLES[t]} ({_plain_params(p)})"
    fig.update_xaxes(title_text="n (cells)")
    fig.update_yaxes(title_text="rounds (average)", row=1, col=1)


def scaling_panels(scaling: list[dict]):
    """The library's rounds-against-n figure, in plain words, with one legend under each panel (plotly's
    legend2, legend3): one shared legend wrapped across the panels put a target's title over its
    neighbour's axis title."""
    fig = scaling_figure(scaling)
    _plain_words(fig, scaling)
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
        with _Timed(request, "measure"):
            curves = [curve(target, s, list(MEASURE_NS), chains=MEASURE_CHAINS, params=params).as_dict()
                      for _, s in SAMPLER_CHOICES]
    finally:
        memory.release()
    growth = "; ".join(f"{PLAIN_SAMPLERS[c['sampler']]} {per_doubling(c['slope'])}" for c in curves)
    return scaling_panels(curves), (f"Measured now, {MEASURE_CHAINS} samples for each grid size, n = 32 to 256. "
                                    f"Each time n doubles, the rounds grow: {growth}.")


def exact_figure(states: list[str], exact: list[float], emp: list[float]):
    import plotly.graph_objects as go

    fig = go.Figure([
        go.Bar(x=states, y=exact, name="exact probability", marker=dict(color="#0072B2")),
        go.Bar(x=states, y=emp, name="how often it came up", marker=dict(color="#E69F00", pattern=dict(shape="/"))),
    ])
    fig.update_layout(template="none", paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      font=dict(color="#7f7f7f", size=13), barmode="group", height=360,
                      margin=dict(l=60, r=20, t=50, b=90), legend=dict(orientation="h", y=1.02, x=1, xanchor="right",
                                                                        yanchor="bottom"),
                      yaxis=dict(title="probability", gridcolor="rgba(128,128,128,0.25)"),
                      xaxis=dict(title="grid (the most likely first)", tickangle=-45,
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
            raise ValueError(f"{t.q}^{t.n} possible grids is more than {MAX_EXACT_STATES} to list: lower n or q")
        sampler = _sampler(sampler)
    except ValueError as e:
        return gr.skip(), _error(e)
    try:
        with _Timed(request, "exactness"):
            counts, exact = chunked_counts(t, sampler, samples)
    finally:
        memory.release()
    f = score(t, sampler, counts, exact)
    top = exact.argsort(descending=True)[:32].tolist()
    names = ["".join(SYMBOLS[v] for v in s) for s in all_states(t.n, t.q)[top].tolist()]
    emp = (counts.double() / samples).tolist()
    ex, em = [exact[i].item() for i in top], [emp[i] for i in top]
    rest = len(exact) - len(top)
    others = (f" The other {rest} grids (not in the chart) have {1 - sum(ex):.1%} of the probability; the samples "
              f"put {1 - sum(em):.1%} there." if rest else "")
    verdict = "**match** as well as chance allows" if f.chi2_p > 0.001 else "**do not match**"
    note = (f"Drew {samples} grids of {html.escape(plain_describe(t))}, the way “{PLAIN_SAMPLERS[sampler]}”. How often each "
            f"grid came up and its exact probability {verdict} (**p = {f.chi2_p:.3f}**: only a p below 0.001 would show a real "
            f"difference). The two sets of bars differ by {f.tv:.4f} in all; perfect draws would differ by about "
            f"{f.tv_floor:.4f} from chance alone."
            f"{others}\n\n<details><summary>Details for specialists</summary>χ² = {f.chi2:.1f} on {f.df} degrees of "
            f"freedom; total variation {f.tv:.4f} against a Monte Carlo noise floor of {f.tv_floor:.4f} (the TV of "
            f"as many draws from the exact law, enumerated).</details>")
    return exact_figure(names, ex, em), note


# ---------------------------------------------------------------- layout

def build_autospec_tab() -> AutospecTab:
    """Lay out the tab inside the current Blocks/Tab context, wire its events, return its handles.

    The tab opens with three plain sentences (OPENING); every technical name, and the text that was
    once the header, is in the closed "Details for specialists" accordion."""
    gr.Markdown(f"# Parallel sampling lab\n{OPENING}", elem_id="as-header")
    with gr.Accordion("Details for specialists", open=False, elem_id="as-details"):
        gr.Markdown(GLOSSARY + "\n" + (ASSETS / "autospec.md").read_text(encoding="utf-8"), elem_id="as-explain")
    with gr.Row():
        with gr.Column(scale=1, min_width=280):
            target = gr.Dropdown(TARGET_CHOICES, value="curie-weiss", label="How the cells depend on each other",
                                 elem_id="as-target")
            n = gr.Number(value=64, label=f"n: number of cells (2 to {MAX_N})", precision=0, elem_id="as-n")
            beta = gr.Number(value=0.5, label="β: how strongly the cells agree (−5 to 5)", elem_id="as-beta",
                             info="0: each cell on its own; above 1: most cells end up the same; "
                                  "below 0: they split half and half")
            components = gr.Number(value=3, label="C: number of hidden patterns (1 to 64)", precision=0,
                                   elem_id="as-c", visible=False,
                                   info="the grid first picks one pattern at random, then fills each cell from it")
            lam = gr.Number(value=1.0, label="λ: how strongly neighbours agree (−5 to 10)", elem_id="as-lam",
                            visible=False, info="0: each cell on its own; below 0: neighbours tend to differ")
            q = gr.Number(value=2, label="q: values per cell (2 to 16)", precision=0, elem_id="as-q",
                          visible=False)
            sampler = gr.Radio(SAMPLER_CHOICES, value="block", label="How the model fills the grid",
                               elem_id="as-sampler")
            with gr.Row():
                seed = gr.Number(value=DEFAULT_SEED, label="seed", precision=0, elem_id="as-seed",
                                 info="the same seed gives the same grid")
                delay = gr.Slider(0.0, 1.5, value=0.5, step=0.05, label="seconds per frame", elem_id="as-delay")
            run = gr.Button("▶ Sample", variant="primary", elem_id="as-sample")
        with gr.Column(scale=3):
            status = gr.Markdown("Pick how the cells depend on each other and press **Sample**.", elem_id="as-status")
            counter = gr.Markdown("", elem_id="as-counter")
            grid = gr.HTML(grid_html(["open"] * 64, [-1] * 64), elem_id="as-grid")
    with gr.Accordion("How the rounds grow with the number of cells", open=True):
        fig, note = recorded_scaling()
        scaling_plot = gr.Plot(fig, label="rounds against the number of cells", elem_id="as-scaling")
        with gr.Row():
            scaling_note = gr.Markdown(note, elem_id="as-scaling-note")
            measure = gr.Button("Measure now for this grid (n = 32 to 256)", variant="secondary", size="md", scale=0,
                                min_width=300, elem_id="as-measure", elem_classes=["action"])
    with gr.Accordion("Is it still exactly random? (small grids, n ≤ 10)", open=True):
        with gr.Row():
            exact_n = gr.Number(value=8, label=f"n: number of cells (2 to {MAX_EXACT_N})", precision=0,
                                elem_id="as-exact-n")
            exact_samples = gr.Number(value=20000, label="grids to draw (1000 to 100000)", precision=0,
                                      elem_id="as-exact-samples")
            exact_run = gr.Button("Compare with the exact probabilities", elem_id="as-exact-run")
        exact_note = gr.Markdown("Draws many small grids the chosen way and compares how often each grid comes up "
                                 "with its exact probability (worked out by listing every possible grid).",
                                 elem_id="as-exact-note")
        exact_plot = gr.Plot(label="probability of the 32 most likely grids", elem_id="as-exact-plot")
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
    # Each button first says, unqueued, whether its run waits for one of the lab's places and how long
    # (``lab_place``), then the run joins the queue.
    opts = dict(concurrency_id=GROUP, concurrency_limit=PLACES, preprocess=False)
    tab.target.change(show_parameters, tab.target, [tab.beta, tab.components, tab.lam, tab.q], queue=False,
                      api_visibility="private")

    def placed(button, line):
        return button.click(lab_place, None, line, queue=False, api_visibility="private", show_progress="hidden")

    placed(tab.sample, tab.status).then(
        sample_handler, [tab.target, tab.n, tab.beta, tab.components, tab.lam, tab.q, tab.sampler, tab.seed, tab.delay],
        [tab.status, tab.counter, tab.grid], api_name="autospec_sample", show_progress="hidden", **opts)
    placed(tab.measure, tab.scaling_note).then(
        measure_handler, tab.target_inputs(), [tab.scaling_plot, tab.scaling_note], api_visibility="private",
        show_progress="minimal", **opts)
    placed(tab.exact_run, tab.exact_note).then(
        exactness_handler, [tab.target, tab.exact_n, tab.beta, tab.components, tab.lam, tab.q, tab.sampler,
                            tab.exact_samples], [tab.exact_plot, tab.exact_note], api_visibility="private",
        show_progress="minimal", **opts)
