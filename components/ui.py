"""UI builders: each ``build_*()`` returns a small dataclass of named Gradio components, and
``Page.updates(frame)`` maps a ``Frame`` onto them (by name, never by position).

Gradio components are static, so the arena has ``request.max_arms()`` arm slots (Best-of-N, two Speculative
Rejection settings, each registered rival), a chart and a leader each; a run shows one slot per arm, in
``RunView.display_order``, and hides the rest."""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import gradio as gr

from components.deploy import gradio_private

from specrej import RunConfig
from specrej.arms import REGISTRY, rival_keys
from specrej.core.config import DEFAULT_CPU_BUDGET
from specrej.core.rules import RULES

from components import charts
from components.frames import (KEEP, RACE_LABELS, ChartChanges, Frame, changes_leaders, held, leaders_held, since, slots,
                               table_value)
from components.panels import SUMMARY_PLACEHOLDER, status_markdown
from components.state.request import MAX_SEED, PAGE_DEFAULTS, REQUEST_FIELDS, SPECS, max_arms
from components.state.shared import ASSETS, PACES, PAPER_REWARD, PAPER_SCALE, PREFERENCE, PaperPlan, reward_kind_label
from components.state.play import LABELS, PLAY_BUTTONS, PLAYING, Button, Phase, Session, rule, step_rule
from components.state.view import RunView
from components.theme import duration, md_escape

if TYPE_CHECKING:   # the runtime's shared context: read here, never imported at run time
    from components.session.context import AppContext

PAPER = "https://arxiv.org/abs/2410.20290"
HELP = RunConfig.help()
DEFAULTS = {**{f.name: f.default for f in dataclasses.fields(RunConfig)}, **PAGE_DEFAULTS}
DECISIONS = [("when memory is full (the paper)", "budget"), ("every k tokens (and when memory is full)", "interval")]
X_AXES = [("time", "time"), ("FLOPs", "flops")]
SR_STARTS = [("Best-of-N's N", "same"), ("auto: fills memory at token T", "auto")]
# The Settings' title says whose settings the boxes hold: the defaults, or a preset that changed them
SETTINGS_LABELS = {"defaults": "Settings: the defaults just work",
                   "classroom": "Settings: the Classroom preset (change any box to make it yours)",
                   "paper": "Settings: Paper scale", "paper-scaled": "Settings: Paper scale, scaled down to fit here",
                   "recording": "Settings: the recording's, scaled down to fit here",
                   "recording-same": "Settings: the recording's race", "link": "Settings: from the link"}
PAPER_NOTE = ("**Paper scale** sets the paper's *protocol* (not its models, GPUs or answer lengths, so not its "
              "numbers): on this 135M model and this machine, Speculative Rejection opens with the rows that fill "
              "memory at token 16 and Best-of-N writes all 128 answers (or this deployment's largest N) of up to 256 "
              "tokens, scheduled as vLLM pages them in the memory budget (its curve is the verdict's yardstick). It "
              "first measures this machine: "
              "where that takes longer than the run limit (on a CPU it takes minutes), it plays the **recorded** "
              "paper-scale race of an example prompt and sets a scaled-down version that fits for **Run**.")
HEADER = (f"# Speculative Rejection vs Best-of-N\n"
          f"Both methods sample answers from one language model and keep the one a reward model likes best. "
          f"**Best-of-N** writes every answer to the end; **Speculative Rejection** "
          f"([Sun et al., NeurIPS 2024]({PAPER})) starts as many answers as fit in memory at its first decision, "
          f"scores the partial answers whenever memory fills and stops writing the weakest. The paper's claim: the same reward in far less "
          f"time. Press **Run**: the result places Speculative Rejection's answer on Best-of-N's curve (its best "
          f"reward with k answers, for every k up to N) and says how much longer Best-of-N takes to match it, on this "
          f"machine.")


def _read(name: str, fallback: str = "") -> str:
    try:
        return (ASSETS / name).read_text(encoding="utf-8")
    except OSError:
        return fallback


def css_path() -> Path:
    return ASSETS / "style.css"


def page_head() -> str:
    """CSS for the page around the app (Gradio scopes ``css_paths`` to inside the app, so rules on its own
    container go in the page's head): on a phone the container's side padding shrinks to fit 390 px; lecture
    mode's layout and the clicker's keys (``components/lecture.py``); a play pressed while the page still
    cancels the stopped one is held until that cancel is done, then pressed (``assets/presses.js``: Gradio's
    page would drop it); the live charts drawn from changes (``assets/charts.js``)."""
    from components import lecture
    from components.deploy import gradio_private

    chunk = gradio_private.plotly_chunk()   # the page imports it while idle: its first chart does not wait for it
    return (f"<style>{_read('page.css')}</style><script>{_read('presses.js')}</script>"
            f"<script>window.specrejPlotlyChunk = {json.dumps(chunk)};</script><script>{_read('charts.js')}</script>"
            + lecture.head(_read("lecture.css")))


def early_script() -> str:
    """The script the page runs before Gradio's own (``deploy/early.EarlyScript`` puts it first in the page's head):
    Gradio's leaked animation loops slowed while no progress shows (``assets/loops.js``)."""
    return _read("loops.js")


# ---------------------------------------------------------------- controls

def _span(name: str, ctx: AppContext) -> tuple:
    """A slider's (minimum, maximum): the request field's range (``state/request.py``), capped by this
    deployment's limits, so the page offers exactly what a run takes."""
    spec = SPECS[name]
    return spec.lo, spec.upper(ctx.limits)


EXPIRED = {"views": 0}   # race views dropped by their time to live (the memory probe and the tests read it)


def _forget(view) -> None:
    """A session's race view expired (``gr.State``'s time to live): counted, and what it holds dropped at
    once (a run still streaming into it keeps its own reference)."""
    if isinstance(view, RunView):
        EXPIRED["views"] += 1

@dataclass(kw_only=True)
class Controls:
    """The inputs, named as ``RunRequest``'s fields (``stream.REQUEST_FIELDS``) except the
    buttons; ``by_name()`` maps those names onto the components."""

    prompt: gr.Textbox
    run: gr.Button
    stop: gr.Button
    model: gr.Dropdown
    reward: gr.Dropdown
    preference: gr.Textbox
    n: gr.Slider
    alpha: gr.Slider
    budget: gr.Number
    decision: gr.Radio
    interval: gr.Slider
    max_new_tokens: gr.Slider
    temperature: gr.Slider
    top_p: gr.Slider
    seed: gr.Number
    second: gr.Checkbox
    second_alpha: gr.Slider
    second_decision: gr.Radio
    second_group: gr.Row
    sr_start: gr.Radio
    first_decision: gr.Slider
    stop_when_matched: gr.Checkbox
    paper: gr.Button
    replay: gr.Button
    pace: gr.Radio
    settings: gr.Accordion
    paper_note: gr.Markdown
    rule: gr.Dropdown
    fit: gr.Checkbox
    step: gr.Checkbox
    classroom: gr.Button
    link: gr.Button
    link_box: gr.Textbox
    link_qr: gr.HTML
    rivals: gr.CheckboxGroup
    lecture: gr.Checkbox

    def by_name(self) -> dict[str, gr.components.Component]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def build_controls(ctx: AppContext) -> Controls:
    with gr.Row(equal_height=True, elem_id="prompt-row"):
        prompt = gr.Textbox(label="Prompt", placeholder="Ask the model something, or pick an example below",
                            value=ctx.examples[0] if ctx.examples else "", lines=2, max_lines=6, scale=5,
                            max_length=SPECS["prompt"].upper(ctx.limits), elem_id="prompt")
        with gr.Column(scale=1, min_width=150, elem_id="buttons"):
            run = gr.Button("▶ Run", variant="primary", size="lg", elem_id="run")
            stop = gr.Button("■ Stop", variant="stop", size="lg", elem_id="stop")
            lecture = gr.Checkbox(value=False, label="Lecture mode", elem_id="lecture", container=False,
                                  info=None)
    gr.Examples(examples=[[e] for e in ctx.examples], inputs=[prompt], label="Examples",
                examples_per_page=len(ctx.examples) or 1, api_visibility="private")
    with gr.Row(elem_id="mode-row"):
        step = gr.Checkbox(value=False, label="Step through the decisions",
                           info="After the race, pause at each decision: who is kept, who is cut, and why.",
                           elem_id="step")
        fit = gr.Checkbox(value=True, label="Recording when too busy",
                          info="The race always runs as set. When this machine is too busy for it to end in time, "
                               "play the labelled recording of the same race instead.", elem_id="fit")
        classroom = gr.Button("Classroom preset", variant="secondary", size="md", scale=0, min_width=170,
                              elem_id="classroom", elem_classes=["action"])
    with gr.Row(elem_id="replay-row"):
        paper = gr.Button("Paper scale", variant="secondary", size="md", scale=0, min_width=150,
                          elem_id="paper-scale", elem_classes=["action"])
        replay = gr.Button(LABELS[Button.REPLAY], variant="secondary", size="md", scale=0, min_width=250,
                           elem_id="replay", elem_classes=["action"])
        pace = gr.Radio(PACES, value="inf", label="Replay pace", scale=1, elem_id="pace")
    paper_note = gr.Markdown(PAPER_NOTE, elem_id="paper-note")
    with gr.Row(elem_id="link-row"):
        link = gr.Button("Link to this race", variant="secondary", size="md", scale=0, min_width=190,
                         elem_id="link", elem_classes=["action"])
        link_box = gr.Textbox(label="Open this link (or scan the code) to get the race on screen: its settings "
                                    "and seed, those left at the defaults left out",
                              interactive=False, buttons=["copy"], visible=False, elem_id="link-box", scale=4,
                              lines=2, max_lines=4, min_width=300)
        link_qr = gr.HTML("", visible=False, elem_id="link-qr", padding=False)
    with gr.Accordion(SETTINGS_LABELS["defaults"], open=False, elem_id="settings") as settings:
        with gr.Row():
            model = gr.Dropdown(choices=list(ctx.models), value=ctx.default_model, label="Generator",
                                info="The language model both methods sample from.", elem_id="model")
            reward = gr.Dropdown(choices=list(ctx.rewards), value=ctx.default_reward, label="Reward",
                                 info="What scores the answers, partial or complete.", elem_id="reward")
            preference = gr.Textbox(value=ctx.default_preference, label="Preference",
                                    info="The answer you want, in words; answers are scored by similarity.",
                                    visible=ctx.default_reward == PREFERENCE, max_length=SPECS["preference"].max_chars, lines=2,
                                    elem_id="preference")
        with gr.Row():
            n = gr.Slider(*_span("n", ctx), value=min(DEFAULTS["n"], ctx.limits.max_n), step=1,
                          label="Best-of-N with N =", info="How many answers Best-of-N writes to the end. Keep it at least as large "
                          "as Speculative Rejection's first batch, so Best-of-N has written every answer it could "
                          "pick.", elem_id="n")
            alpha = gr.Slider(*_span("alpha", ctx), value=DEFAULTS["alpha"], step=0.05, label="alpha (share cut at each decision)",
                              info="0.5: each decision stops writing half of the answers in progress.", elem_id="alpha")
            budget = gr.Number(value=0, minimum=SPECS["budget"].lo, maximum=SPECS["budget"].upper(ctx.limits), precision=0,
                               label="Memory (tokens held at once)",
                               info="How many tokens of answers both methods may keep in memory at once (answers × "
                                    f"length). 0 = automatic ({DEFAULT_CPU_BUDGET} on a CPU). Less memory: earlier decisions.",
                               elem_id="budget")
        with gr.Row():
            sr_start = gr.Radio(SR_STARTS, value="auto", label="Speculative Rejection starts with",
                                info="The paper's first batch is 'auto': as many rows as fill the memory budget "
                                     "at the first decision, far more than Best-of-N fits at full length.",
                                elem_id="sr_start")
            first_decision = gr.Slider(*_span("first_decision", ctx), value=DEFAULTS["first_decision"], step=1,
                                       label="auto: first decision at token T =", info="Speculative Rejection starts as many answers as fill the "
                                       "memory at T tokens: the first decision comes there.",
                                       elem_id="first_decision")
            stop_when_matched = gr.Checkbox(value=False, label="Stop Best-of-N once it matches",
                                            info="The race ends when Best-of-N's best finished reward reaches "
                                                 "Speculative Rejection's winner's; the result says what that took "
                                                 "(a lower bound if it never does).", elem_id="stop_when_matched")
        with gr.Row():
            decision = gr.Radio(DECISIONS, value=DEFAULTS["decision"], label="Speculative Rejection decides",
                                elem_id="decision")
            rule = gr.Dropdown(choices=[(getattr(r, "label", k), k) for k, r in RULES.items()],
                               value=DEFAULTS["rule"], label="Which candidates a decision keeps",
                               info="Which answers survive a decision: the paper keeps the highest partial rewards.",
                               elem_id="rule")
            interval = gr.Slider(*_span("interval", ctx), value=DEFAULTS["interval"], step=1, label="k (tokens between decisions)",
                                 info="Decide every k tokens (and whenever memory is full).", visible=DEFAULTS["decision"] == "interval",
                                 elem_id="interval")
        with gr.Row(elem_id="second-row"):
            second = gr.Checkbox(value=False, label="Compare a second setting",
                                 info="Race a second Speculative Rejection setting (its own alpha and decision "
                                      "rule) against the same Best-of-N: three arms.", elem_id="second", scale=1)
            with gr.Row(visible=False, elem_id="second-settings") as second_group:
                second_alpha = gr.Slider(*_span("second_alpha", ctx), value=0.9, step=0.05, label="second alpha",
                                         info="The rejection rate of the second setting.", elem_id="second_alpha")
                second_decision = gr.Radio(DECISIONS, value=DEFAULTS["decision"], label="second setting decides",
                                           elem_id="second_decision")
        with gr.Row(elem_id="rivals-row"):
            rival_group = gr.CheckboxGroup(choices=rival_choices(), value=[], label="Also race",
                                           info=rivals_info(), elem_id="rivals", visible=bool(rival_keys()))
        with gr.Row():
            max_new_tokens = gr.Slider(*_span("max_new_tokens", ctx), step=1, label="Max new tokens",
                                       value=min(DEFAULTS["max_new_tokens"], ctx.limits.max_new_tokens),
                                       info="The longest an answer may grow, in tokens (a token is about ¾ of a word).",
                                       elem_id="max_new_tokens")
            temperature = gr.Slider(*_span("temperature", ctx), value=DEFAULTS["temperature"], step=0.05, label="Temperature",
                                    info="Higher: more varied answers; lower: more alike.",
                                    elem_id="temperature")
            top_p = gr.Slider(*_span("top_p", ctx), value=DEFAULTS["top_p"], step=0.05, label="Top-p", info="Only the likeliest words that together make up this share are sampled.",
                              elem_id="top_p")
            seed = gr.Number(value=DEFAULTS["seed"], minimum=SPECS["seed"].lo, maximum=SPECS["seed"].hi, precision=0, label="Seed", info="The same seed gives the same answers; answer i is the same text in both methods.",
                             elem_id="seed")
    return Controls(prompt=prompt, run=run, stop=stop, model=model, reward=reward, preference=preference, n=n,
                    alpha=alpha, budget=budget, decision=decision, interval=interval, max_new_tokens=max_new_tokens,
                    temperature=temperature, top_p=top_p, seed=seed, second=second, second_alpha=second_alpha,
                    second_decision=second_decision, second_group=second_group, sr_start=sr_start,
                    first_decision=first_decision, stop_when_matched=stop_when_matched, paper=paper, replay=replay,
                    pace=pace, settings=settings, paper_note=paper_note, rule=rule, fit=fit, step=step,
                    classroom=classroom, link=link, link_box=link_box, link_qr=link_qr, rivals=rival_group,
                    lecture=lecture)


def rival_choices() -> list[tuple[str, str]]:
    """The "Also race" options: every registered rival (``specrej.arms.rival_keys``) by its name and citation."""
    return [(REGISTRY[k].name, k) for k in rival_keys()]


def rivals_info() -> str:
    """What the rivals are, from each one's ``About.blurb``: the "Also race" options' help."""
    said = " ".join(f"{REGISTRY[k].short or REGISTRY[k].name}: {REGISTRY[k].about.blurb or REGISTRY[k].about.decides_by}."
                    for k in rival_keys())
    return ("Methods that need no reward model while writing, on the same engine, memory and coupled answers; the "
            f"reward picks each one's winner. {said}")


def paper_outputs(page: "Page") -> list:
    """What "Paper scale" changes: the preset's controls, the Settings, the note, the prompt, and
    the page's outputs (for the recording it plays when the paper's setting does not fit)."""
    c, named = page.controls, page.controls.by_name()
    same = [named[k] for k in REQUEST_FIELDS if k not in ("model", "x_axis")]   # "Run it live" sets them back
    return list(dict.fromkeys([named[k] for k in PAPER_SCALE] + [c.reward, c.settings, c.paper_note, c.prompt]
                              + same + page.outputs()))


def paper_scale_words(ctx: AppContext, plan: PaperPlan) -> str:
    """What pressing "Paper scale" did, for the status line and the note under the button."""
    s = plan.settings
    reward = (f", reward {reward_kind_label(PAPER_REWARD)}" if any(k == PAPER_REWARD for _, k in ctx.rewards)
              else "")
    what = (f"Speculative Rejection starts with the rows that fill memory at token {s['first_decision']}; "
            f"Best-of-N N = {s['n']}; up to {s['max_new_tokens']} new tokens; memory budget {s['budget']}; "
            f"alpha {s['alpha']}{reward}; "
            + ("Best-of-N stops once it matches" if s.get("stop_when_matched") else
               f"Best-of-N writes all {s['n']} answers (its curve is the verdict's yardstick)"))
    capped = "" if plan.paper["n"] == PAPER_SCALE["n"] else \
        f" (the paper's N = {PAPER_SCALE['n']} is above this deployment's largest N)"
    if plan.fits:
        return (f"**Paper scale set** (see Settings): {what}{capped}. Live here it takes at most about "
                f"{duration(plan.paper_s)} (estimated from this machine's measured decoding speed). Press **Run** "
                "to run it, or **Replay** for a recorded race of an example prompt.")
    played = (f"Playing the recorded paper-scale race of \u201c{md_escape(plan.replay_prompt)}\u201d instead. "
              if plan.replay_prompt else "")
    return (f"**Paper scale live would take about {duration(plan.paper_s)} here**, more than this deployment's "
            f"limit of {plan.limit_s} s (estimated from this machine's measured decoding speed). {played}"
            f"**Run** now runs the paper's protocol scaled down to fit (about {duration(plan.scaled_s)}): {what}.")


def paper_scale_updates(ctx: AppContext, page: "Page", plan: PaperPlan, prompt: str | None = None) -> dict:
    """Pressing "Paper scale": the setting that fits, the Settings opened to show it, the status line
    and the note saying what was set (and the prompt of the recording about to play)."""
    c, named = page.controls, page.controls.by_name()
    out = {named[k]: v for k, v in plan.settings.items() if k in named}
    if any(k == PAPER_REWARD for _, k in ctx.rewards):
        out[c.reward] = PAPER_REWARD
    out[c.settings] = gr.Accordion(open=True, label=SETTINGS_LABELS["paper" if plan.fits else "paper-scaled"])
    words = paper_scale_words(ctx, plan)
    out[c.paper_note] = words
    out[page.arena.status] = gr.Markdown(words, elem_classes=["status-idle"])
    if plan.replay_prompt and plan.replay_prompt != prompt:
        out[c.prompt] = plan.replay_prompt
    return out


PAPER_MEASURING = ("**Paper scale:** checking whether the paper's setting fits this deployment's time limit on "
                   "this machine's decoding speed (measured at start-up)…")
PAPER_WARMING = (" This server has just started: it first finishes loading the models and compiling the decoding "
                 "step.")


def paper_measuring(ctx: AppContext):
    """Paper scale's first status: what it measures, and, on a server still warming up, what it waits for."""
    return gr.Markdown(PAPER_MEASURING + (PAPER_WARMING if ctx.warming else ""), elem_classes=["status-live"])


def waiting_status(ctx: AppContext):
    """The status line the moment Run is pressed: "Waiting" only when every slot is taken by a run in
    flight (Gradio's overlay on this line then shows the place in the queue), else "Starting"."""
    busy = ctx.machine.busy()
    if busy >= ctx.concurrency:
        runs = f"{busy} run{'s' * (busy != 1)}"
        return gr.Markdown(f"**Waiting for a free slot:** {runs} in progress share this machine; your place in "
                           f"the queue shows on this line.", elem_classes=["status-live"])
    return gr.Markdown("**Starting** the race…", elem_classes=["status-live"])


# ---------------------------------------------------------------- the race


@dataclass
class Slot:
    """One arm's column: its chart and its leader (hidden when the run has fewer arms)."""

    column: gr.Column
    plot: gr.Plot
    leader: gr.Textbox


@dataclass(kw_only=True)
class StepPanel:
    """Step mode: one decision at a time (``frames.step_frame``)."""

    group: gr.Column
    plot: gr.Plot
    text: gr.Markdown
    prev: gr.Button
    next: gr.Button
    end: gr.Button
    index: gr.State


@dataclass(kw_only=True)
class Arena:
    badge_row: gr.Row
    badge: gr.Markdown
    live: gr.Button          # "Run it live": the recording's settings, scaled to fit, run here
    status: gr.Markdown
    slots: list[Slot]
    race_plot: gr.Plot
    x_axis: gr.Radio
    summary: gr.Markdown
    step: StepPanel
    changes: gr.Textbox      # a run's chart changes, lines of JSON (``ChangesBox``): drawn by assets/charts.js
    progress: gr.HTML        # where the plays' progress goes (``show_progress_on``): never drawn, so no tracker runs


def _colour_class(colour: str) -> str:
    """The CSS class that colours a leader's label in its arm's colour (assets/style.css)."""
    return "arm-c-" + colour.lstrip("#").lower()


# The PNG and SVG buttons: plotly's export of a copy of the chart on the page (window.Plotly is set once
# plotly.js has loaded), laid out for a slide: the chart's title, the prompt and the settings of the run shown
# above it (``layout.meta``, from charts.export_meta), the legend below it with room for every entry, at least
# EXPORT_MIN_WIDTH px wide, a PNG at twice the pixels. The copy is drawn off screen in a system font (a web
# font is not available inside an image: text measured in one font and drawn in another was cut), measured,
# grown until the legend fits, exported and removed; the page's chart is left as it is.
EXPORT_MIN_WIDTH = 900
_DOWNLOAD_JS = """async () => {
  // the charts are drawn one per animation frame (assets/charts.js): a press just after a play ends waits for the
  // drawing the page owes (a few frames; a tab in the background draws nothing, so not for ever)
  const C = window.specrejCharts, chart = () => document.querySelector('#__ELEM__ .js-plotly-plot');
  if (C && C.want) { C.want('__ELEM__'); }   // a chart out of view waits to be drawn until seen: drawn now
  for (let i = 0; i < 300 && ((C && !C.idle()) || !chart()); i++) { await new Promise(r => setTimeout(r, 20)); }
  const P = window.Plotly, el = chart();
  if (!el || !P || !el.data || !el.layout) { return; }
  const W = Math.max(el.clientWidth || 0, __MIN_WIDTH__), font = __FONT__;
  const meta = el.layout.meta || {};
  const wrap = (text, size) => {
    const most = Math.max(20, Math.floor((W - 32) / (0.5 * size))), lines = [];
    let line = '';
    for (const w of String(text || '').split(' ')) {
      if (line && (line + ' ' + w).length > most) { lines.push(line); line = w; } else { line = line ? line + ' ' + w : w; }
    }
    if (line) { lines.push(line); }
    return lines;
  };
  const title = wrap(meta.title, 18), sub = [...wrap(meta.prompt ? 'Prompt: \u201c' + meta.prompt + '\u201d' : '', 13),
                                             ...wrap(meta.settings, 13)];
  const layout = JSON.parse(JSON.stringify(el.layout)), data = JSON.parse(JSON.stringify(el.data));
  const m = Object.assign({l: 84, r: 18, t: 20, b: 96}, layout.margin || {});
  const plotH = Math.max(300, (el.clientHeight || 430) - m.t - m.b);
  const top = 18 + 24 * title.length + 18 * sub.length + 16;
  const plotW = W - m.l - m.r, left = -(m.l - 16) / plotW;
  Object.assign(layout, {width: W, autosize: false, font: Object.assign({}, layout.font, {family: font}),
                         paper_bgcolor: 'white', plot_bgcolor: 'white'});
  layout.margin = Object.assign({}, m, {t: top, b: 96, autoexpand: true});
  layout.annotations = (layout.annotations || []).concat([
    {text: title.map(l => '<b>' + l + '</b>').join('<br>'), xref: 'paper', yref: 'paper', x: left, y: 1,
     xanchor: 'left', yanchor: 'bottom', yshift: 18 * sub.length + 14, align: 'left', showarrow: false,
     font: {size: 18, color: '#1F2328'}},
    {text: sub.join('<br>'), xref: 'paper', yref: 'paper', x: left, y: 1, xanchor: 'left', yanchor: 'bottom',
     yshift: 10, align: 'left', showarrow: false, font: {size: 13, color: '#3D444D'}}]);
  layout.legend = Object.assign({}, layout.legend, {orientation: 'h', x: left, xanchor: 'left', y: -64 / plotH,
                                                    yanchor: 'top', bgcolor: 'rgba(255,255,255,0)'});
  const div = document.createElement('div');
  div.style.cssText = 'position:fixed;left:-20000px;top:0;';
  document.body.appendChild(div);
  try {
    let H = top + plotH + 96;
    layout.height = H;
    await P.newPlot(div, data, layout, {displayModeBar: false, staticPlot: true});
    for (let i = 0; i < 4; i++) {   // grow the image until the legend, every entry whole, fits inside it
      const box = div.getBoundingClientRect(), lg = div.querySelector('.legend .bg');
      if (!lg) { break; }
      const r = lg.getBoundingClientRect();
      if (r.right > box.left + W - 4 && layout.legend.orientation === 'h') {   // an entry wider than a row
        layout.legend.orientation = 'v';
      } else if (r.bottom > box.top + H - 10) {
        H = Math.ceil(r.bottom - box.top + 14);
      } else { break; }
      layout.height = H;
      layout.margin.b = H - top - plotH;
      layout.legend.y = -64 / plotH;
      await P.react(div, data, layout, {displayModeBar: false, staticPlot: true});
    }
    await P.downloadImage(div, {format: '__FMT__', filename: '__NAME__', width: W, height: H, scale: __SCALE__});
  } finally {
    P.purge(div);
    div.remove();
  }
}"""


def download_js(elem: str, fmt: str, name: str, scale: int) -> str:
    """The click handler of one download button (``_DOWNLOAD_JS`` for this chart and format)."""
    js = _DOWNLOAD_JS
    for key, value in (("__ELEM__", elem), ("__FMT__", fmt), ("__NAME__", name), ("__SCALE__", str(scale)),
                       ("__MIN_WIDTH__", str(EXPORT_MIN_WIDTH)), ("__FONT__", json.dumps(charts.EXPORT_FONT))):
        js = js.replace(key, value)
    return js


def download_buttons(elem: str, name: str) -> None:
    """"PNG" and "SVG" under a chart: the chart as the page shows it, with its title, prompt and settings,
    for a slide."""
    with gr.Row(elem_classes=["downloads"]):
        for fmt, scale in (("png", 2), ("svg", 1)):
            b = gr.Button(f"⬇ {fmt.upper()}", size="sm", variant="secondary", scale=0, min_width=70,
                          elem_classes=["download"], elem_id=f"{elem}-{fmt}")
            b.click(None, None, None, js=download_js(elem, fmt, name, scale), api_visibility="private", queue=False)


RACE_LABEL = RACE_LABELS["work"]
STEP_LABEL = "This decision: every candidate ranked by its partial reward"   # a rival's: by its own signal


# The leader's box keeps one height (it scrolls): a box that grows with its text is resized at each of its changes
# (Gradio's textarea reads its scrollHeight: a forced layout of the page, every frame, for each arm) and moves the
# charts below it while a race streams.
LEADER_LINES = 6
CHANGES_JS = "(v) => { if (window.specrejCharts) { window.specrejCharts.feed(v); } }"


def build_arena() -> Arena:
    with gr.Row(visible=False, elem_id="badge-row") as badge_row:
        badge = gr.Markdown("", elem_id="badge")
        live = gr.Button("▶ Run it live", variant="primary", size="md", scale=0, min_width=150, elem_id="run-live",
                         elem_classes=["action"])
    status = gr.Markdown(status_markdown(None), elem_id="status", elem_classes=["status-idle"])
    with gr.Column(visible=False, elem_id="step-panel") as group:
        with gr.Row(elem_id="step-row"):
            with gr.Column(scale=5, min_width=300):
                step_plot = gr.Plot(label=STEP_LABEL, elem_id="step-plot")
                download_buttons("step-plot", "specrej-decision")
            with gr.Column(scale=4, min_width=280):
                step_text = gr.Markdown("", elem_id="step-text")
                with gr.Row(elem_id="step-buttons"):
                    prev = gr.Button("◀ Previous", size="md", elem_id="step-prev", min_width=100)
                    nxt = gr.Button("Next decision ▶", variant="primary", size="md", elem_id="step-next",
                                    min_width=140)
                    end = gr.Button("Run to the end »", size="md", elem_id="step-end", min_width=140)
    step = StepPanel(group=group, plot=step_plot, text=step_text, prev=prev, next=nxt, end=end, index=gr.State(0))
    # The default run's arms lay out the first slots; a run with other arms relabels them.
    view = RunView(RunConfig(prompt="-"))
    order = slots(view)
    out = []
    with gr.Row(equal_height=True, elem_id="arms"):
        for i in range(max_arms()):
            arm_id, label, colour = order[i] if i < len(order) else ("", "", "")
            with gr.Column(visible=i < len(order), elem_classes=["arm"], elem_id=f"slot-{i}", min_width=300) as column:
                plot = gr.Plot(label=label, elem_id=f"plot-{i}")
                download_buttons(f"plot-{i}", f"specrej-arm-{i}")
                leader = gr.Textbox(label=f"{view.arms[arm_id].spec.label} · leader" if arm_id else "leader",
                                    lines=LEADER_LINES, max_lines=LEADER_LINES, interactive=False, elem_id=f"leader-{i}",
                                    elem_classes=["leader"] + ([_colour_class(colour)] if colour else []))
            out.append(Slot(column, plot, leader))
    with gr.Row(elem_id="race-row"):
        with gr.Column(scale=5, min_width=300):   # about half each: a narrower result wrapped its numbers
            race_plot = gr.Plot(label=RACE_LABEL, elem_id="race-plot")
            download_buttons("race-plot", "specrej-verdict")
            x_axis = gr.Radio(X_AXES, value="time", label="Result chart's x-axis", elem_id="x-axis")
        with gr.Column(scale=4, min_width=280):
            summary = gr.Markdown(SUMMARY_PLACEHOLDER, elem_id="summary")
    # one line (an <input>): a textarea of more lines is resized to its text at each change, a forced layout per frame
    changes = gradio_private.ChangesBox("", visible="hidden", elem_id="chart-changes", interactive=False, container=False,
                                        lines=1, max_lines=1)
    changes.change(None, [changes], None, js=CHANGES_JS, queue=False, api_visibility="private",
                   trigger_mode="always_last")
    # The plays' progress: on a component never drawn. A drawn one's tracker, hidden or not, runs an animation-frame
    # loop (its timer, its spinner) through the whole race, and by default Gradio tracks every output (issue 62).
    progress = gr.HTML(visible=False, elem_id="play-progress")
    return Arena(badge_row=badge_row, badge=badge, live=live, status=status, slots=out, race_plot=race_plot, x_axis=x_axis, summary=summary,
                 step=step, changes=changes, progress=progress)


# ---------------------------------------------------------------- results

@dataclass
class Results:
    group: gr.Column   # hidden until a run has a result
    table: gr.Dataframe
    trace_file: gr.File
    summary_json: gr.JSON


TABLE_LABEL = ("All candidates (click a header to sort). Coupled randomness: candidate i writes the same text in "
               "every method, so Best-of-N's score is what a pruned one would have scored had it continued.")


def build_results() -> Results:
    with gr.Column(visible=False, elem_id="results") as group:
        empty = table_value(RunView(RunConfig(prompt="-", n=1)))
        table = gr.Dataframe(headers=empty["headers"], datatype=empty["datatype"], label=TABLE_LABEL,
                             interactive=False, wrap=True, max_height=420, column_widths=empty["column_widths"],
                             elem_id="candidates")
        with gr.Row():
            trace_file = gr.File(label="Run trace (JSON)", interactive=False, elem_id="trace", scale=1)
            with gr.Column(scale=2):
                with gr.Accordion("Winners and ledgers (JSON)", open=False):
                    summary_json = gr.JSON(label="summary", elem_id="summary-json")
    return Results(group, table, trace_file, summary_json)


def build_how_it_works() -> None:
    with gr.Accordion("How it works", open=True, elem_id="how"):
        gr.Markdown(_read("how_it_works.md", f"See the paper: {PAPER}"))


# ---------------------------------------------------------------- the page

@dataclass
class Page:
    controls: Controls
    arena: Arena
    results: Results
    view: gr.State
    session: gr.State      # the session's play (``state/play.Session``): its phase and the current play's id

    def run_inputs(self) -> list:
        """The run handler's inputs, in ``RunRequest``'s field order (the API's parameters)."""
        named = {**self.controls.by_name(), "x_axis": self.arena.x_axis}
        return [named[name] for name in REQUEST_FIELDS]

    def outputs(self) -> list:
        """The status, each slot's chart and leader, the race, the results; then what the API does
        not return (the session state and the layout)."""
        a, r = self.arena, self.results
        return ([a.status] + [c for s in a.slots for c in (s.plot, s.leader)]
                + [a.race_plot, a.summary, r.table, r.trace_file, r.summary_json, self.view, r.group]
                + [s.column for s in a.slots] + [a.badge_row, a.badge, a.step.group, a.step.plot, a.step.text, a.step.index]
                + list(self.buttons().values()) + [a.changes])

    def buttons(self) -> dict:
        """The buttons that follow the session's phase (``play.TABLE``): Button -> component."""
        c, st = self.controls, self.arena.step
        return {Button.RUN: c.run, Button.REPLAY: c.replay, Button.PAPER: c.paper, Button.LIVE: self.arena.live,
                Button.PREV: st.prev, Button.NEXT: st.next}

    def button_updates(self, phase: Phase, step: dict | None = None, lecture: bool = False) -> dict:
        """Each button's label and whether it can be pressed in ``phase`` (``play.rule``; the step buttons at the
        decision ``step`` shows: ``play.step_rule``). In lecture mode, while something plays, a play button is
        locked (``lecture.locks``: Stop, or the space bar, stops it first)."""
        out = {}
        for b, comp in self.buttons().items():
            r = step_rule(b, step["k"], step["count"]) if step and b in (Button.PREV, Button.NEXT) else rule(phase, b)
            if lecture and phase in PLAYING and b in PLAY_BUTTONS:
                out[comp] = gr.Button(value=LABELS[b], interactive=False)
            else:
                out[comp] = gr.Button(value=r.label or LABELS[b], interactive=r.interactive)
        return out

    def stream(self, frames: Iterable[Frame]) -> Iterator[dict]:
        """Each frame's updates: a live frame carries only what changed since the frame before
        (``frames.since``), its charts as changes (``frames.ChartChanges``: lines appended to the hidden
        ``changes`` box, drawn by ``assets/charts.js``); the first and the last (the result) carry everything.
        Closing this closes ``frames`` at once (the race behind them ends its run there, not whenever the garbage
        collector finds it)."""
        shown, told, led = None, -math.inf, -math.inf
        changes = ChartChanges(f"{id(self):x}-{next(_STREAMS)}", _marked)
        text = ""
        try:
            for frame in frames:
                send = since(frame, shown) if frame.results_visible is KEEP else frame
                now = time.monotonic()
                kept = {}   # what the page keeps showing this frame (``shown`` must say what it shows)
                if held(send, shown, now - told):   # its counters: at most once a second (Gradio renders the markdown anew)
                    send.status, kept["status"] = KEEP, shown.status
                elif send.status is not KEEP:
                    told = now
                if leaders_held(send, shown, now - led):   # the leaders' boxes too
                    send.arm_leaders, kept["arm_leaders"] = KEEP, shown.arm_leaders
                elif changes_leaders(send):
                    led = now
                if kept:
                    frame = Frame(**{**vars(frame), **kept})
                out, line = changes.step(send)
                update = self.updates(out)
                if line is not None:   # the run's last line replaces the text: Gradio's closing message repeats
                    said = json.dumps(line, separators=(",", ":")) + "\n"   # the last value whole: keep it short
                    text = said if line.get("final") else text + said
                if text:   # on every frame, never skipped: Gradio diffs a streamed value against the last one sent,
                    update[self.arena.changes] = text   # a skip included, so only an unbroken string goes as appends
                yield update
                shown = frame
        finally:
            close = getattr(frames, "close", None)
            if close is not None:
                close()

    def updates(self, frame: Frame) -> dict:
        """A frame as {component: new value}; ``gr.skip()`` where the frame keeps a field."""
        a, r = self.arena, self.results

        def val(v, convert=lambda x: x):
            return gr.skip() if v is KEEP else convert(v)

        def table(value):
            if not value:
                return gr.Dataframe(value=None)
            return gr.Dataframe(value={"headers": value["headers"], "data": value["data"]},
                                headers=value["headers"], datatype=value["datatype"],
                                column_widths=value["column_widths"])

        mark = [] if frame.play is KEEP or not frame.play else [f"play-{frame.play}"]   # the play that drew it

        def plot(spec):
            return None if spec is None else charts.as_plot(_marked(spec, frame))

        out = {
            a.status: gr.skip() if frame.status is KEEP else frame.status if frame.status_kind is KEEP else gr.Markdown(
                value=frame.status, elem_classes=[f"status-{frame.status_kind}"] + mark),
            a.race_plot: (val(frame.race_plot, plot) if frame.race_label is KEEP else
                          gr.Plot(label=frame.race_label) if frame.race_plot is KEEP else
                          gr.Plot(value=plot(frame.race_plot), label=frame.race_label)),
            a.summary: val(frame.summary),
            r.table: val(frame.table, table), r.trace_file: val(frame.trace_path),
            r.summary_json: val(frame.summary_json), self.view: val(frame.view),
            r.group: val(frame.results_visible, lambda v: gr.Column(visible=v)),
            a.badge: val(frame.badge), a.badge_row: val(frame.badge, lambda b: gr.Row(visible=bool(b))),
            a.changes: gr.skip(),
        }
        st = a.step
        if frame.step is KEEP:
            out.update({st.group: gr.skip(), st.plot: gr.skip(), st.text: gr.skip(), st.index: gr.skip()})
        elif frame.step is None:
            out.update({st.group: gr.Column(visible=False), st.plot: gr.skip(), st.text: gr.skip(), st.index: 0})
        else:
            out.update({st.group: gr.Column(visible=True),
                        st.plot: gr.Plot(value=plot(frame.step["plot"]), label=frame.step.get("label", STEP_LABEL)),
                        st.text: frame.step["text"], st.index: frame.step["k"]})
        buttons = {comp: gr.skip() for comp in self.buttons().values()}
        if frame.phase is not KEEP:
            buttons.update(self.button_updates(frame.phase, lecture=frame.lecture is True))
        if isinstance(frame.step, dict):   # the decision shown: Previous and Next say where it is
            buttons.update(self.button_updates(Phase.STEPPING, frame.step))
        out.update(buttons)
        layout = frame.slots
        for i, s in enumerate(a.slots):
            here = layout is not KEEP and i < len(layout)
            out[s.column] = gr.skip() if layout is KEEP else gr.Column(visible=here)
            plots, leaders = frame.arm_plots, frame.arm_leaders
            if plots is KEEP or i >= len(plots) or plots[i] is KEEP:
                out[s.plot] = gr.Plot(label=layout[i][1]) if here else gr.skip()
            else:
                out[s.plot] = gr.Plot(value=plot(plots[i]), label=layout[i][1]) if here else plot(plots[i])
            if leaders is KEEP or i >= len(leaders) or leaders[i] is KEEP:
                out[s.leader] = gr.skip()
            elif isinstance(leaders[i], str):   # the text alone: the label and style stay
                out[s.leader] = leaders[i]
            else:
                label, text = leaders[i]
                classes = ["leader"] + ([_colour_class(layout[i][2])] if here else [])
                out[s.leader] = gr.Textbox(value=text, label=label, **({"elem_classes": classes} if here else {}))
        return out


_STREAMS = itertools.count(1)


def _marked(spec: dict, frame: Frame) -> dict:
    """A chart spec marked with the play that drew it (``layout.meta.play``), as the page is sent it."""
    if frame.play is KEEP or not frame.play:
        return spec
    layout = spec.get("layout", {})
    return {**spec, "layout": {**layout, "meta": {**layout.get("meta", {}), "play": frame.play}}}


def build_page(ctx: AppContext) -> Page:
    gr.Markdown(HEADER, elem_id="header")
    if ctx.notes:
        gr.Markdown("\n".join(f"> **Note:** {n}" for n in ctx.notes), elem_id="notes")
    controls = build_controls(ctx)
    arena = build_arena()
    results = build_results()
    build_how_it_works()
    # the race view a session keeps (the step buttons and the x-axis switch read it): dropped session_ttl_s after
    # it last changed, so API sessions that never come back do not hold their races (SPECREJ_SESSION_TTL_S)
    return Page(controls, arena, results, gr.State(None, time_to_live=ctx.session_ttl_s, delete_callback=_forget),
                gr.State(Session()))


# ---------------------------------------------------------------- presets and links

def live_updates(ctx: AppContext, page: "Page", plan: PaperPlan) -> dict:
    """"Run it live": the recording's protocol at the largest setting that fits here (``paper.plan``), set
    on the page, with what was scaled said on the status line; the race then starts as Run starts it."""
    c, named = page.controls, page.controls.by_name()
    s = plan.settings
    out = {named[k]: v for k, v in s.items() if k in named}
    if any(k == PAPER_REWARD for _, k in ctx.rewards):
        out[c.reward] = PAPER_REWARD
    scaled = [f"{what} {PAPER_SCALE[k]} → {s[k]}" for k, what in (("n", "N"), ("max_new_tokens", "new tokens"),
                                                                   ("budget", "memory budget"),
                                                                   ("first_decision", "first decision at token"))
              if s[k] != PAPER_SCALE[k]]
    words = ("**Running the recording's settings live**" + (
        f", scaled down to fit this deployment ({'; '.join(scaled)}): the same protocol, smaller. "
        if scaled else ". ") + "Starting…")
    out[page.arena.status] = gr.Markdown(words, elem_classes=["status-live"])
    out[c.settings] = gr.Accordion(open=True, label=SETTINGS_LABELS["recording" if scaled else "recording-same"])
    out[c.paper_note] = words
    return out


def same_race_updates(ctx: AppContext, page: "Page", prompt: str, fields: dict) -> dict:
    """"Run it live" from a recording of the page's own race: the prompt and every setting it ran with."""
    named = page.controls.by_name()
    out = {named[k]: v for k, v in fields.items() if k in named and named[k] in paper_outputs(page)}
    out[page.controls.prompt] = prompt
    out[page.arena.status] = gr.Markdown("**Racing the recording's settings live** on this machine: the same race. "
                                         "Starting…", elem_classes=["status-live"])
    return out


def classroom_updates(ctx: AppContext, page: "Page") -> dict:
    """The Classroom preset (``links.CLASSROOM``) on the controls, the Settings opened to show it."""
    from components.links import CLASSROOM

    named = page.controls.by_name()
    out = {named[k]: v for k, v in CLASSROOM.items() if k in named}
    out[named["n"]] = min(CLASSROOM["n"], ctx.limits.max_n)
    for k in ("prompt", "reward", "preference", "temperature", "top_p", "interval", "second_alpha",
              "second_decision"):
        out.setdefault(named[k], gr.skip())
    out[page.controls.settings] = gr.Accordion(open=True, label=SETTINGS_LABELS["classroom"])
    out[page.arena.status] = gr.Markdown(
        f"**Classroom preset set** (see Settings): a small race (N = {CLASSROOM['n']}, up to "
        f"{CLASSROOM['max_new_tokens']} tokens, memory {CLASSROOM['budget']}) that steps through its decisions. Press "
        "**Run**: the page measures this machine first and says when the race should end.",
        elem_classes=["status-idle"])
    return out


# Step mode ends a race on its first decision: bring the step panel into view, wherever the page is scrolled
# (at 1280x720 after the Classroom preset it sat ~1,700 px below the fold, and nothing said it was there).
SHOW_STEP_JS = """() => {
  const panel = document.querySelector('#step-panel');
  if (!panel || panel.offsetParent === null) { return; }
  // lecture mode lays the panel out under the status, in the first screen: the bar and the status stay in view
  if (document.documentElement.classList.contains('lecture')) { window.scrollTo({top: 0}); }
  else { panel.scrollIntoView({behavior: 'smooth', block: 'start'}); }
}"""


# Compose the link in the browser (its own address), show it, put it in the address bar and copy it.
LINK_JS = """(q) => {
  const url = window.location.origin + window.location.pathname + (q ? '?' + q : '');
  try { window.history.replaceState(null, '', url); } catch (e) {}
  if (navigator.clipboard) { navigator.clipboard.writeText(url).catch(() => {}); }
  const box = document.querySelector('#link-box');
  if (box) { box.style.display = ''; }
  return url;
}"""


# A link to a recorded race (``links.REPLAY``): once its prompt is set, play that recording as Replay does.
OPEN_REPLAY_JS = """() => {
  try {
    if (new URLSearchParams(window.location.search).get('replay') === '1') {
      setTimeout(() => document.querySelector('#replay')?.click(), 300);
    }
  } catch (e) {}
}"""


def link_defaults(ctx: AppContext) -> dict:
    """The page's defaults as a link names them: a link leaves out every setting equal to these
    (``links.query``), so it stays short and opens the same race."""
    from components.state.request import RunRequest

    return {**{f.name: f.default for f in dataclasses.fields(RunRequest)}, "reward": ctx.default_reward,
            "preference": ctx.default_preference}


def link_updates(ctx: AppContext, page: "Page", params: dict) -> dict:
    """A link's settings on the controls (``links.settings``: unknown or invalid values are dropped)."""
    from components.links import FIELDS, settings

    named = page.controls.by_name()
    choices = {"reward": [k for _, k in ctx.rewards], "decision": [v for _, v in DECISIONS],
               "second_decision": [v for _, v in DECISIONS], "sr_start": [v for _, v in SR_STARTS],
               "rule": list(RULES), "rivals": list(rival_keys())}
    ranges = {"n": (1, ctx.limits.max_n), "alpha": (0, 0.95), "second_alpha": (0, 0.95),
              "max_new_tokens": (1, ctx.limits.max_new_tokens), "temperature": (0.05, 2.0), "top_p": (0.05, 1.0),
              "budget": (0, ctx.limits.max_budget), "interval": (1, 256), "first_decision": (1, 128),
              "seed": (0, MAX_SEED)}
    got = settings(params, choices, ranges)
    out = {named[k]: got[k] if k in got else gr.skip() for k in FIELDS}
    if "prompt" in got:
        out[named["prompt"]] = got["prompt"][:ctx.limits.max_prompt_chars]
    changed = bool(set(got) - {"prompt", "lecture"})   # lecture mode is the page's, not the race's settings
    out[page.controls.settings] = gr.Accordion(open=True, label=SETTINGS_LABELS["link"]) if changed else gr.skip()
    out[page.controls.second_group] = gr.Row(visible=bool(got.get("second"))) if "second" in got else gr.skip()
    out[named["preference"]] = (gr.Textbox(value=got["preference"], visible=got.get("reward") == PREFERENCE)
                                if "preference" in got else
                                gr.Textbox(visible=got["reward"] == PREFERENCE) if "reward" in got else gr.skip())
    return out
