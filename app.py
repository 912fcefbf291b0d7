"""specrej web app: Speculative Rejection racing Best-of-N (and a second setting), live in the browser.

Run ``python app.py`` and open the URL it prints. This file only assembles the page from
``components``, wires the events and sets the queue; it loads the shared models once (an
``AppContext``). ``build_demo(ctx)`` builds the app for any context (the tests use tiny
models); ``app.demo`` is built on first access from the environment (SPECREJ_MODEL,
SPECREJ_REWARD, see ``components/context.py``), so importing this module loads nothing.
"""
from __future__ import annotations

from components.session import gpu  # noqa: I001  first: on ZeroGPU `spaces` must be imported before torch

import dataclasses
import inspect

import gradio as gr

from components import charts, lecture, links, panels, ui
from components.autospec_tab import build_autospec_tab
from components.deploy import gradio_private
from components.deploy.clients import Guard, forwarded_headers_ignored
from components.deploy.gate import ApiGate
from components.frames import Frame, drawn, error_frame, final_frame, race_label, step_frame
from components.panels import STOPPED
from components.deploy import memory
from components.session import paper
from components.session.context import AppContext
from components.session.replay import check_replay, replay_updates
from components.session.stream import race_events, updates
from components.state.request import RunRequest
from components.state.shared import PREFERENCE

TITLE = "Speculative Rejection vs Best-of-N"
THEME = gr.themes.Default(primary_hue="orange", neutral_hue="slate")


def build_demo(ctx: AppContext | None = None, *, events_fn=race_events, guard: Guard | None = None) -> gr.Blocks:
    """The whole app for one context; the queue is set, nothing is launched.

    ``events_fn`` (tests only: fault injection) replaces the function that runs the race; it is
    never reachable from a request. The queue holds at most ``ctx.max_queue`` waiting runs
    (SPECREJ_MAX_QUEUE): past that a new run is refused with "Queue is full, try again". ``guard``
    (``components/deploy/guard.py``, from the environment by default) caps each client's runs, checks the
    raw inputs, stops runs cancelled before they had an event id or by /stop, and keeps the API to
    /run, /stop and /autospec_sample: every other handler is reachable only as the page's own event."""
    ctx = ctx or AppContext.from_env()
    guard = guard or Guard.from_env()
    with gr.Blocks(title=TITLE, delete_cache=(3600, 3600)) as demo:
        with gr.Tab("Speculative Rejection race"):
            page = ui.build_page(ctx)
        with gr.Tab("Parallel sampling lab"):
            build_autospec_tab()
        on_run = wire_race(ctx, page, guard, events_fn)
        on_replay, on_paper = wire_recordings(ctx, page, guard, on_run)
        wire_stop(page, guard, [on_run, on_replay, on_paper])
        lecture.wire(page, ends=[on_run, on_replay, on_paper])
        wire_steps(page)
        wire_links(ctx, page, demo)
        wire_toggles(page)
    # api_open=False: Gradio's direct routes (run/<name>, api/<name>) refuse every queued event; the
    # guard's gate lets through only the page's unqueued ones.
    demo.queue(default_concurrency_limit=ctx.concurrency, max_size=ctx.max_queue, api_open=False)
    quiet_queue(demo)
    guard.bind(demo, queue_size=ctx.max_queue)
    demo.specrej_guard = guard   # for launch(): the HTTP gate in front of the app
    # sessions idle for SPECREJ_SESSION_TTL_S are forgotten whole (Gradio's copy of the page per session too)
    demo.specrej_sweeper = memory.SessionSweeper(demo, ctx.session_ttl_s)
    return demo


def wire_race(ctx: AppContext, page: ui.Page, guard: Guard, events_fn):
    """Run (and Enter in the prompt): the race, streamed; returns its event (Stop cancels it)."""
    c, a = page.controls, page.arena

    def run(*values):
        """Race Speculative Rejection against Best-of-N on one prompt; streams every arm."""
        *values, request = values   # RunRequest's fields (raw: checked in updates, before any work), Gradio's request
        try:
            yield from page.stream(drawn(updates(ctx, values, events_fn=events_fn,
                                                  stop_requested=guard.on_start(request))))
        finally:
            memory.release()   # the allocator keeps freed KV caches otherwise

    run.__signature__ = request_signature()  # the API's parameters: RunRequest's fields, by name
    run.__annotations__ = {"request": gr.Request}
    # preprocess=False: the raw values reach RunRequest.parse (in stream.updates), whose messages name
    # the field; the guard's validator runs when a run joins the queue (the per-client and per-address
    # caps, set by guard.bind on every queued event).
    race = dict(fn=run, inputs=page.run_inputs(), outputs=page.outputs(), concurrency_id="race",
                concurrency_limit=ctx.concurrency, show_progress="full", show_progress_on=[a.status],
                preprocess=False)
    # Run and Enter in the prompt: say at once that the run is starting, or waiting when every slot is
    # taken (the queue position shows on the status line), then start the race in the queue; one handler,
    # one API name.
    on_run = gr.on([c.run.click, c.prompt.submit], **lecture.lock_step(page)) \
        .then(lambda: ui.waiting_status(ctx), None, [a.status], queue=False, api_visibility="private") \
        .then(api_name="run", **race)
    on_run.then(None, None, None, js=ui.SHOW_STEP_JS, queue=False, api_visibility="private")
    return on_run


def wire_recordings(ctx: AppContext, page: ui.Page, guard: Guard, on_run):
    """Replay, Paper scale and "Run it live" (the recording's settings scaled to fit, run here)."""
    c, a = page.controls, page.arena

    def replay(prompt, pace, step, lecture_on, request: gr.Request):
        """Replay the recorded paper-scale race of an example prompt (instantly, or at a pace)."""
        stop_requested = guard.on_start(request)
        for update in page.stream(drawn(replay_updates(prompt, pace, min_frame_interval=ctx.min_frame_interval,
                                                       max_prompt_chars=ctx.limits.max_prompt_chars,
                                                       step=step is True, lecture=lecture_on is True))):
            if stop_requested():
                return
            yield update

    on_replay = c.replay.click(**lecture.lock_step(page)) \
        .then(replay, [c.prompt, c.pace, c.step, c.lecture], page.outputs(), concurrency_id="replay",
                               concurrency_limit=4, api_visibility="private", preprocess=False)
    on_replay.then(None, None, None, js=ui.SHOW_STEP_JS, queue=False, api_visibility="private")

    def paper_scale(prompt, pace, step, lecture_on, request: gr.Request):
        """Paper scale: the paper's setting where it fits the run limit live; else a scaled-down one
        that fits, with the recorded paper-scale race played meanwhile."""
        stop_requested = guard.on_start(request)
        try:
            prompt, _ = check_replay(prompt, pace, ctx.limits.max_prompt_chars)
            plan = paper.plan(ctx, prompt)
        except (ValueError, OSError) as e:   # a bad field, a model that cannot load (PolicyError too)
            yield page.updates(error_frame(str(e)))
            return
        # the outputs by name only: building the updates at page build would place components on the page
        yield ui.paper_scale_updates(ctx, page, plan, prompt)
        if plan.fits or plan.replay_prompt is None:
            return
        for update in page.stream(drawn(replay_updates(plan.replay_prompt, pace,
                                                       min_frame_interval=ctx.min_frame_interval,
                                                       max_prompt_chars=ctx.limits.max_prompt_chars,
                                                       step=step is True, lecture=lecture_on is True))):
            if stop_requested():
                return
            yield update

    on_paper = c.paper.click(**lecture.lock_step(page)) \
        .then(lambda: ui.paper_measuring(ctx), None, [a.status], queue=False, api_visibility="private") \
        .then(paper_scale, [c.prompt, c.pace, c.step, c.lecture], ui.paper_outputs(page), concurrency_id="replay",
              concurrency_limit=4, api_visibility="private", preprocess=False)

    def recorded_settings(prompt, view):
        """The recording's settings set on the page; the race then starts as Run starts it. A recording of
        the page's own race: its settings as they were. A paper-scale one: the paper's protocol scaled down to
        fit this deployment (``paper.plan``)."""
        recording = getattr(view, "recording", None) or {}
        if recording.get("page_race") and isinstance(recording.get("request"), dict):
            return ui.same_race_updates(ctx, page, view.cfg.prompt, recording["request"])
        try:
            plan = paper.plan(ctx, check_replay(prompt, "inf", ctx.limits.max_prompt_chars)[0])
        except (ValueError, OSError) as e:
            return {a.status: gr.Markdown(panels.error_markdown(str(e)), elem_classes=["status-error"])}
        return ui.live_updates(ctx, page, plan)

    # the settings first, then the page's own Run (one handler runs every race: Run, Enter, Run it live)
    a.live.click(recorded_settings, [c.prompt, page.view], ui.paper_outputs(page), api_visibility="private",
                 concurrency_id="replay", concurrency_limit=4) \
        .then(None, None, None, js="() => { document.querySelector('#run')?.click(); }", queue=False,
              api_visibility="private")
    return on_replay, on_paper


def wire_stop(page: ui.Page, guard: Guard, events: list) -> None:
    c, a = page.controls, page.arena

    # Say "Stopped" again once the cancellation is through: a frame of the cancelled run that was
    # already in flight can land after the first message (seen in the browser test).
    def stop(request: gr.Request):
        """Stop this session's race or replay: at its next decoding step (the page also cancels it)."""
        found = guard.stop_session(getattr(request, "session_hash", None))
        return stopped() if found else gr.Markdown(NOTHING_TO_STOP, elem_classes=["status-stopped"])

    c.stop.click(stop, None, [a.status], cancels=events, queue=False, api_name="stop") \
        .then(lambda shown: gr.skip() if NOTHING_TO_STOP in str(shown) else stopped(), [a.status], [a.status],
              queue=False, api_visibility="private")


def wire_steps(page: ui.Page) -> None:
    """Step mode's buttons: the decision before, the one after, or the whole result (no model work: the
    race is over, its decisions are in the session's view)."""
    s = page.arena.step

    def go(delta):
        def show(view, k):
            if view is None or not getattr(view, "checkpoints", None):
                return page.updates(Frame(status="**Nothing to step through:** run a race (or replay one) with "
                                                 "'Step through the decisions' on.", status_kind="idle"))
            k = None if delta is None else int(k or 0) + delta
            if k is None or k >= len(view.checkpoints):
                view.step_shown = None   # the result is shown: the x-axis switch redraws the verdict again
                return page.updates(lecture.frame_for_room(final_frame(view)) if view.lecture else final_frame(view))
            view.step_shown = max(0, k)
            frame = step_frame(view, view.step_shown)
            return page.updates(lecture.frame_for_room(frame) if view.lecture else frame)
        return show

    for button, delta in ((s.prev, -1), (s.next, 1), (s.end, None)):
        button.click(go(delta), [page.view, s.index], page.outputs(), queue=False, api_visibility="private")


def wire_links(ctx: AppContext, page: ui.Page, demo: gr.Blocks) -> None:
    """The Classroom preset, "Link to this race", and the settings a link carries applied on load."""
    c = page.controls
    named = c.by_name()
    fields = [named[k] for k in links.FIELDS]
    c.classroom.click(lambda: ui.classroom_updates(ctx, page), None, fields + [c.settings, page.arena.status],
                      queue=False, api_visibility="private")

    defaults = ui.link_defaults(ctx)

    def make_link(view, *values):
        """The short query string of the race on screen (``links.race_query``; the boxes' settings before any
        race): raw values (preprocess=False), so only plain scalars are kept."""
        plain = {k: v for k, v in zip(links.FIELDS, values) if isinstance(v, (str, int, float, bool))}
        return gr.Textbox(value=links.race_query(view, plain, defaults, plain.get("lecture") is True), visible=True)

    def draw_qr(url):
        svg = links.qr_svg(url if isinstance(url, str) else "")
        return gr.HTML(f'<div class="qr" title="{links.html_escape(url)}">{svg}</div>' if svg else "", visible=bool(svg))

    c.link.click(make_link, [page.view, *fields], [c.link_box], queue=False, api_visibility="private",
                 preprocess=False) \
        .then(None, [c.link_box], [c.link_box], js=ui.LINK_JS, queue=False, api_visibility="private") \
        .then(draw_qr, [c.link_box], [c.link_qr], queue=False, api_visibility="private")

    def from_link(request: gr.Request):
        params = dict(getattr(request, "query_params", None) or {})
        return ui.link_updates(ctx, page, params)

    demo.load(from_link, None, fields + [c.settings, c.second_group, c.preference], queue=False,
              api_visibility="private") \
        .then(None, None, None, js=ui.OPEN_REPLAY_JS, queue=False, api_visibility="private")


def wire_toggles(page: ui.Page) -> None:
    c, a = page.controls, page.arena
    c.reward.change(lambda r: gr.Textbox(visible=r == PREFERENCE), c.reward, c.preference,
                    queue=False, api_visibility="private")
    c.decision.change(lambda d: gr.Slider(visible=d == "interval"), c.decision, c.interval,
                      queue=False, api_visibility="private")
    c.second.change(lambda on: gr.Row(visible=bool(on)), c.second, c.second_group, queue=False,
                    api_visibility="private")
    a.x_axis.change(rerender_race, [page.view, a.x_axis], [a.race_plot], queue=False,
                    api_visibility="private")


QUEUE_POLL_SECONDS = 0.05   # Gradio's own value on Windows


def quiet_queue(demo: gr.Blocks) -> None:
    """Poll the queue every 50 ms, not every 1 ms. On Linux Gradio's queue loop sleeps 1 ms between
    looks while no slot is free, i.e. during every run (and its progress loop 10 ms): ~1,100 wake-ups
    a second, which took ~8% of a core on an idle server and, on a 2-core CPU Space, preempted the
    race's two torch threads a thousand times a second. A queued run now starts up to 50 ms later."""
    gradio_private.slow_queue_polling(demo, QUEUE_POLL_SECONDS)


def request_signature() -> inspect.Signature:
    """``RunRequest``'s fields as keyword parameters with their defaults, and Gradio's request."""
    return inspect.Signature([inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default)
                              for f in dataclasses.fields(RunRequest)]
                             + [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                                  annotation=gr.Request)])


NOTHING_TO_STOP = "**Nothing to stop:** no run or replay of this session is running or queued."


def stopped():
    return gr.Markdown(STOPPED, elem_classes=["status-stopped"])


def rerender_race(view, x_axis):
    if view is None:
        return gr.skip()
    view.x_axis = x_axis  # the run in flight (same object) follows the choice from its next frame
    if view.stepping and view.checkpoints and view.step_shown is not None:
        return gr.skip()   # stepping: the chart shows the race at a decision; the verdict stays hidden until the end
    # the label follows the axis: a verdict on FLOPs is not "against its time"
    spec = charts.race_chart(view, x_axis)
    return gr.Plot(value=charts.as_plot(lecture.for_room(spec) if view.lecture else spec), label=race_label(view, x_axis))


def launch(demo: gr.Blocks, **kwargs):
    """``demo.launch`` with the app's theme and CSS (Gradio 6 takes them here)."""
    from starlette.middleware import Middleware

    opts = dict(theme=THEME, css_paths=[str(ui.css_path())], head=ui.page_head())
    opts.update(kwargs)
    guard = getattr(demo, "specrej_guard", None)
    if guard is not None:
        app_kwargs = dict(opts.get("app_kwargs") or {})
        app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), Middleware(ApiGate, guard=guard)]
        opts["app_kwargs"] = app_kwargs
        with forwarded_headers_ignored():   # the guard alone reads X-Forwarded-For (SPECREJ_TRUSTED_PROXY)
            return demo.launch(**opts)
    return demo.launch(**opts)


def __getattr__(name: str):
    """``app.demo``, built from the environment on first access (importing loads nothing)."""
    if name == "demo":
        globals()["demo"] = built = build_demo()
        return built
    raise AttributeError(name)


if gpu.ZERO_GPU:  # ZeroGPU wants the models loaded at import
    _context = AppContext.from_env()
    _context.warm()
    demo = build_demo(_context)


def main() -> None:
    built = globals().get("demo")
    if built is None:
        ctx = AppContext.from_env()
        print(f"specrej: loading {ctx.default_model} and the {ctx.default_reward} reward, and compiling the "
              "decoding step, while the page is served (a Run pressed before then waits for it)…", flush=True)
        ctx.warm_in_background(log=lambda msg: print(msg, flush=True))   # a failure: the page shows it on Run
        built = globals()["demo"] = build_demo(ctx)
    launch(built)  # prints the local URL; show_error off: no raw Python message reaches a client


if __name__ == "__main__":
    main()
