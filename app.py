"""specrej web app: Speculative Rejection racing Best-of-N (and a second setting), live in the browser.

Run ``python app.py`` and open the URL it prints. This file only assembles the page from
``components``, wires the events and sets the queue; it loads the shared models once (an
``AppContext``). ``build_demo(ctx)`` builds the app for any context (the tests use tiny
models); ``app.demo`` is built on first access from the environment (SPECREJ_MODEL,
SPECREJ_REWARD, see ``components/session/context.py``), so importing this module loads nothing.
"""
from __future__ import annotations

from components.session import gpu  # noqa: I001  first: on ZeroGPU `spaces` must be imported before torch

import dataclasses
import inspect
import logging
import threading

import gradio as gr

from components import charts, lecture, links, panels, ui
from components.autospec_tab import build_autospec_tab
from components.deploy import connections, gradio_private
from components.deploy.clients import FullQueue, Guard, forwarded_headers_ignored
from components.deploy.gate import ApiGate
from components.frames import Frame, as_seen, drawn, end_frame, final_frame, race_label, step_frame
from components.panels import STOPPED
from components.deploy import memory
from components.session import planner, startup, stream
from components.session.context import AppContext
from components.session.planner import Press
from components.session.stream import race_events
from components.state.play import Button, Effect, Phase, Session, Sessions
from components.state.request import RunRequest
from components.state.shared import PREFERENCE
from specrej.core.config import env_int

TITLE = "Speculative Rejection vs Best-of-N"
log = logging.getLogger("specrej.app")
# A play button pressed while its own play runs (Run during a race): the page's default, "once", drops the new
# trigger while the old one is pending, so the old race stopped and nothing started (issue 47). The old play's
# handler ends at once (``Session.on_stale``), and the newest press runs right after it. A press deferred so
# while Stop's cancel of that play is in flight is dropped by the page when the cancel clears it: the page's head
# holds such a press until the cancel is done (``assets/presses.js``).
PRESSED_AGAIN = "always_last"
THEME = gr.themes.Default(primary_hue="orange", neutral_hue="slate")


def build_demo(ctx: AppContext | None = None, *, events_fn=race_events, guard: Guard | None = None) -> gr.Blocks:
    """The whole app for one context; the queue is set, nothing is launched.

    ``events_fn`` (tests only: fault injection) replaces the function that runs the race; it is
    never reachable from a request. The queue holds at most ``ctx.max_queue`` waiting runs
    (SPECREJ_MAX_QUEUE): past that a new run is refused with "Queue is full, try again". ``guard``
    (``components/deploy/clients.py``, from the environment by default) caps each client's runs, checks the
    raw inputs, stops runs cancelled before they had an event id or by /stop, and keeps the API to
    /run, /stop and /autospec_sample: every other handler is reachable only as the page's own event."""
    ctx = ctx or AppContext.from_env()
    guard = guard or Guard.from_env()
    with gr.Blocks(title=TITLE, delete_cache=(3600, 3600)) as demo:
        with gr.Tab("Speculative Rejection race"):
            page = ui.build_page(ctx)
        with gr.Tab("Parallel sampling lab"):
            build_autospec_tab()
        sessions = Sessions()   # each browser session's play (page.session), found by its hash where no input carries it
        plays = wire_plays(ctx, page, guard, events_fn, sessions)
        wire_stop(page, guard, plays, sessions)
        lecture.wire(page, ends=plays)
        wire_steps(page, sessions)
        wire_links(ctx, page, demo)
        # each browser session's play registered as the page loads: the queued handlers (Run, Replay, Paper scale)
        # and /stop find it by the session's hash, so their inputs stay the API's and the page protocol's own
        def register(session, request: gr.Request) -> None:
            own(sessions, session, request)

        demo.load(register, [page.session], None, queue=False, api_visibility="private")
        wire_toggles(page)
        quiet_progress(demo, page.arena.progress)
    # api_open=False: Gradio's direct routes (run/<name>, api/<name>) refuse every queued event; the
    # guard's gate lets through only the page's unqueued ones.
    # the guard's validator refuses a run past ctx.max_queue waiting (saying how long the queue is) or moves a
    # race with a recording to it (``Press.FULL_QUEUE``); Gradio's own bare "Queue is full" only past twice that
    demo.queue(default_concurrency_limit=ctx.concurrency, max_size=ctx.max_queue and 2 * ctx.max_queue, api_open=False)
    quiet_queue(demo)
    guard.bind(demo, queue_size=ctx.max_queue, full=FullQueue(
        race="run", busy="recorded_race",
        recorded=lambda data: planner.plan(ctx, Press.FULL_QUEUE, data).action == planner.RECORDING,
        message=lambda waiting: planner.full_message(waiting, run_s=ctx.limits.max_run_seconds,
                                                     at_once=ctx.concurrency)))
    demo.specrej_guard = guard   # for launch(): the HTTP gate in front of the app
    # sessions idle for SPECREJ_SESSION_TTL_S are forgotten whole (Gradio's copy of the page per session too)
    demo.specrej_sweeper = memory.SessionSweeper(demo, ctx.session_ttl_s)
    return demo


def own(sessions: Sessions, session, request) -> "Session":
    """This browser session's play (``page.session``), registered under its hash for the handlers that cannot take
    it as an input (the API's /run and /stop)."""
    return sessions.register(getattr(request, "session_hash", None), session)


def bind(sessions: Sessions, guard: Guard, request, phase: Phase, *, own: bool = True):
    """A play's first line: this browser session's ``Session`` (registered by the page's press), a new play id (any
    other play of the session goes stale: its handler wakes and ends at once, ``Session.on_stale``), and the one
    stop flag the play asks at every event: the guard's (Stop, /stop, a closed tab) or the play gone stale. The
    flag can say when it is set (``on_set``), so a reader waiting on a held decoding step wakes at once. ``own``
    False: a play of its own, which leaves the session's alone (a Run the full queue moved to its recording)."""
    session = sessions.get(getattr(request, "session_hash", None)) if own else Session()
    play = session.begin(phase)
    stop = guard.on_start(request)

    def stop_requested() -> bool:
        return stop() or not session.current(play)

    def on_set(wake) -> None:
        hook = getattr(stop, "on_set", None)
        if hook is not None:
            hook(wake)
        session.on_stale(play, wake)

    stop_requested.on_set = on_set
    return session, play, stop_requested


def playing(page: ui.Page, session, play: int, stop_requested, updates):
    """The one way a play reaches the page: its updates drawn as frames while it is the session's current play
    (the first once every older play's handler has ended: ``Session.settle``), then nothing more (``quiet_end``).

    The moment the play's stop flag is set (Stop, a cancel, a closed tab, a newer play), its stream is closed on
    a thread of its own, between two steps: the race's run leaves the machine and frees its KV cache then, even
    when Gradio never resumes nor closes this handler (a cancel that arrives during the handler's first step
    cancels its task before Gradio holds the generator: it is left suspended until a garbage collection)."""
    sent = page.stream(drawn(session.follow(play, updates)))
    turn = threading.Lock()   # one step of the stream at a time: its next() here, or its close() on a stop
    asked = threading.Lock()  # guards ``in_step``
    in_step = [False]   # inside next(): Gradio asked for the next frame, so it holds every frame yielded so far

    def stopped() -> None:
        with asked:
            if in_step[0]:
                # stale while a decoding step runs: it yields nothing more (it returns once the step ends), and its
                # last frame is with Gradio, so a newer play draws now, not after the step (``Session.settle``)
                session.leave(play)
        threading.Thread(target=end, name=f"end-play-{play}", daemon=True).start()

    def end() -> None:
        with turn:
            sent.close()   # the race's own finally runs now (its run leaves ``machine.active``)
        session.leave(play)

    on_set = getattr(stop_requested, "on_set", None)
    if on_set is not None:
        on_set(stopped)
    try:
        while True:
            with asked:
                if stop_requested():
                    return
                in_step[0] = True
            try:
                with turn:
                    update = next(sent, None)
            finally:
                with asked:
                    in_step[0] = False
            if update is None:
                yield from quiet_end(page, session, play)
                return
            if stop_requested():
                return
            yield update
    finally:
        with turn:
            sent.close()
        session.leave(play)


def quiet_end(page: ui.Page, session, play: int):
    """A stale play's last message changes nothing: when an event ends, the page applies its last update's
    properties again (a style, a button's label), which would bring back the stale play's over the current one's."""
    if not session.current(play):
        yield page.updates(Frame())


def wire_plays(ctx: AppContext, page: ui.Page, guard: Guard, events_fn, sessions: Sessions) -> list:
    """Every play button through one handler (``play``: bind, plan, execute): Run (and Shift+Enter in the prompt),
    Replay, Paper scale, a Run the full queue moved, and "Run it live" (its settings, then Run); returns the events
    Stop cancels."""
    c, a = page.controls, page.arena

    def play(press: Press, values, request):
        """This session's new play (``bind``), what the press does (``planner.plan``: nothing measured) and the
        plan played (``stream.execute``). The settings a plan sets reach the page at once (no frame of a play
        touches them, so they need not wait for an older play's last frame), the rest once it has ended."""
        moved = press is Press.FULL_QUEUE   # a play of its own: the session's (the race it waits for) goes on
        session, play, stop_requested = bind(sessions, guard, request, PHASES[press], own=not moved)
        try:
            queue = dict(waiting=guard.waiting(), capped=guard.capped(request)) if moved else {}
            p = planner.plan(ctx, press, values, **queue)
            shown = ui.paper_scale_updates(ctx, page, p.paper, p.prompt) if p.paper is not None else {}
            if shown:
                race_owned = {id(x) for x in page.outputs()}
                if session.current(play) and not stop_requested():
                    yield {k: v for k, v in shown.items() if id(k) not in race_owned}
                session.settle(play)   # an older play's last frame first
                if not session.current(play) or stop_requested():
                    return   # another play started (or Stop) meanwhile: it draws nothing
                if not p.plays:
                    session.end(play)   # it only set the settings: the page rests as it was
                yield {**shown, **page.button_updates(session.phase)}
            if p.plays:
                yield from playing(page, session, play, stop_requested, stream.execute(
                    ctx, p, events_fn=events_fn, stop_requested=stop_requested))
        finally:
            session.leave(play)
            if press is Press.RUN:
                memory.release_soon()   # the allocator keeps freed KV caches otherwise; not in this play's slot

    def handler(press: Press, name: str, fields: tuple[str, ...] | None, doc: str):
        """``play`` as one event's function: its name (the API's, and the guard's ``FullQueue.busy``), its
        parameters (``fields``; None: RunRequest's, raw: checked by the planner before any work) and Gradio's
        request."""
        def fn(*values):
            *values, request = values
            yield from play(press, values if fields is None else dict(zip(fields, values)), request)

        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = doc
        fn.__signature__ = request_signature(fields)
        fn.__annotations__ = {"request": gr.Request}
        return fn

    # preprocess=False: the raw values reach the planner (RunRequest.parse), whose messages name the field; the
    # guard's validator runs when a play joins the queue (the per-client and per-address caps, set by guard.bind
    # on every queued event). A play pressed while something plays stops it at once (``play.TABLE``), so the race in
    # progress frees the machine; in lecture mode every other control locks first (``lecture.lock_step``).
    replayed = ("prompt", "pace", "step", "lecture")
    replay_inputs = [c.prompt, c.pace, c.step, c.lecture]
    queued = dict(preprocess=False, trigger_mode=PRESSED_AGAIN)
    # Run and Shift+Enter in the prompt (a two-line box: Enter is a new line): say at once that the run is
    # starting, or waiting when every slot is taken (the queue position shows on the status line), then start
    # the race in the queue; one handler, one API name.
    def press_run(session, request: gr.Request):
        own(sessions, session, request).press(Button.RUN)
        place = guard.place("race", ctx.limits.max_run_seconds)   # every slot taken: its place and wait, in words
        return gr.Markdown(place, elem_classes=["status-live"]) if place else ui.waiting_status(ctx)

    race = "Race Speculative Rejection against Best-of-N on one prompt; streams every arm."
    on_run = gr.on([c.run.click, c.prompt.submit], **lecture.lock_step(page, press_run, a.status)).then(
        handler(Press.RUN, "run", None, race), page.run_inputs(), page.outputs(), api_name="run",
        concurrency_id="race", concurrency_limit=ctx.concurrency, show_progress="hidden", show_progress_on=[a.progress],
        **queued)
    on_run.then(None, None, None, js=ui.SHOW_STEP_JS, queue=False, api_visibility="private")
    # a Run the full queue had no place for: the recording of this exact race, at once (the guard's gate moves such
    # a join here: ``FullQueue.busy`` names this handler)
    gr.Button(visible=False, elem_id="recorded-race").click(
        handler(Press.FULL_QUEUE, "recorded_race", None, "A full queue's Run: the recording of its race, at once."),
        page.run_inputs(), page.outputs(), concurrency_id="replay", concurrency_limit=4, api_visibility="private",
        preprocess=False, show_progress="hidden", show_progress_on=[a.progress])

    # the plays' progress is the status line's own words; Gradio's goes to a component never drawn (``Arena.progress``)
    on_replay = c.replay.click(**lecture.lock_step(page)).then(
        handler(Press.REPLAY, "replay", replayed, "Replay the recorded paper-scale race of an example prompt."),
        replay_inputs, page.outputs(), concurrency_id="replay", concurrency_limit=4, api_visibility="private",
        show_progress="hidden", show_progress_on=[a.progress], **queued)
    on_replay.then(None, None, None, js=ui.SHOW_STEP_JS, queue=False, api_visibility="private")

    # Paper scale's first step says what it sets at once (the planner reads the profile: nothing is measured), the
    # locks and the press that stops what plays with it; its queued handler plays what the plan plays
    set_paper = lecture.lock_step(page)

    def press_paper(on, session, prompt, pace, step, request: gr.Request):
        locked = set_paper["fn"](on, session, request)
        own(sessions, session, request).press(Button.PAPER)
        p = planner.plan(ctx, Press.PAPER, dict(zip(replayed, (prompt, pace, step, on))))
        shown = ui.paper_scale_updates(ctx, page, p.paper, p.prompt) if p.paper is not None else \
            {a.status: ui.paper_measuring(ctx)}
        return lecture.merged(locked, shown)

    on_paper = c.paper.click(
        press_paper, set_paper["inputs"] + [c.prompt, c.pace, c.step],
        list(dict.fromkeys(lecture.lockable(page) + ui.paper_outputs(page))), queue=False,
        js=lecture.IN_LECTURE_JS_WITH, api_visibility="private").then(
        handler(Press.PAPER, "paper_scale", replayed, "Paper scale: the paper's setting where it fits the run limit "
                "live; else a scaled-down one that fits, with the recorded paper-scale race played meanwhile."),
        replay_inputs, ui.paper_outputs(page), concurrency_id="replay", concurrency_limit=4,
        api_visibility="private", show_progress="hidden", show_progress_on=[a.progress], **queued)

    def recorded_settings(prompt, view) -> dict:
        """"Run it live": the recording's settings to set on the page (``planner.plan``)."""
        p = planner.plan(ctx, Press.LIVE, {"prompt": prompt, "view": view})
        if p.same_race is not None:
            return ui.same_race_updates(ctx, page, p.prompt, p.same_race)
        if p.paper is not None:
            return ui.live_updates(ctx, page, p.paper)
        if p.action == planner.WARM:   # answered at once: no worker thread waits for the warm-up (issue 61)
            return {a.status: gr.Markdown(p.message, elem_classes=["status-live"])}
        return {a.status: gr.Markdown(panels.error_markdown(p.message), elem_classes=["status-error"])}

    # "Run it live" in one unqueued step (the locks, the recording's settings set, the press that stops what plays),
    # then the race through the same handler as Run, reading the settings just set: one round trip fewer than
    # setting them and then pressing Run (under three spinners the slowest click of the tour, 2.3 s)
    set_live = lecture.lock_step(page)
    lock = set_live["fn"]

    def press_live(on, session, prompt, view, request: gr.Request):
        locked = lock(on, session, request)   # first: a play is on its way (``Session.pressing``)
        settings = recorded_settings(prompt, view)
        own(sessions, session, request).press(Button.RUN)   # stops what plays, as Run's press does
        return lecture.merged(locked, settings)

    on_live = a.live.click(
        press_live, set_live["inputs"] + [c.prompt, page.view],
        list(dict.fromkeys(lecture.lockable(page) + ui.paper_outputs(page))), queue=False,
        js=lecture.IN_LECTURE_JS_WITH, api_name="recorded_settings", api_visibility="private").then(
        handler(Press.RUN, "live_race", None, "'Run it live': the recording's settings, raced live."),
        page.run_inputs(), page.outputs(), api_visibility="private", concurrency_id="race",
        concurrency_limit=ctx.concurrency, show_progress="hidden", show_progress_on=[a.progress], **queued)
    on_live.then(None, None, None, js=ui.SHOW_STEP_JS, queue=False, api_visibility="private")
    return [on_run, on_replay, on_paper, on_live]


PHASES = {Press.RUN: Phase.RACING, Press.REPLAY: Phase.REPLAYING, Press.PAPER: Phase.REPLAYING,
          Press.FULL_QUEUE: Phase.REPLAYING}


def wire_stop(page: ui.Page, guard: Guard, events: list, sessions: Sessions) -> None:
    c, a = page.controls, page.arena

    # Say "Stopped" again once the cancellation is through: a frame of the cancelled run that was
    # already in flight can land after the first message (seen in the browser test).
    def answer(shown: str | None, request) -> tuple[str, str]:
        """Stop this session's race or replay: at its next decoding step (the page also cancels it); while
        stepping through a finished race's decisions, end stepping. ``shown``: ``PAGE_PLAYING`` when the page
        still showed a play as the button was pressed (``STOP_JS``; an API client sends nothing). Returns the
        status line's words and its class."""
        found = guard.stop_session(getattr(request, "session_hash", None))
        session = sessions.get(getattr(request, "session_hash", None))
        effect = session.press(Button.STOP).effect
        if effect is Effect.CLOSE_STEPS:
            return STEPS_CLOSED, "status-done"
        if found or effect is Effect.STOP:
            return STOPPED, "status-stopped"
        if shown == PAGE_PLAYING:
            # the play ended while this Stop travelled (a loaded server: the press took seconds to arrive): its
            # last frame says how it ended, and stays; never "Nothing to stop" over a play the page showed
            log.info("Stop came after the play ended: %r, resting %s", session, session.resting)
            return ALREADY_OVER, "status-done"
        log.info("Stop found nothing to stop: %r, resting %s", session, session.resting)
        return NOTHING_TO_STOP, "status-stopped"

    def stop(shown: str | None, request: gr.Request):
        words, kind = answer(shown, request)
        return gr.Markdown(words, elem_classes=[kind])

    def api_stop(request: gr.Request) -> str:
        """Stop this session's race or replay (an API client's /stop): at its next decoding step. Returns what
        the page's status line would say."""
        return answer(None, request)[0]

    def after_stop(shown, session, view, request: gr.Request):
        """The page as Stop leaves it: "Stopped" said again (a frame already in flight may have landed after it),
        the buttons of the phase now; after stepping, the step panel closed and the race's result shown."""
        session = own(sessions, session, request)
        if NOTHING_TO_STOP in str(shown):
            return page.updates(Frame())
        if ALREADY_OVER in str(shown):   # the play's own end, drawn again: its result and its status line
            if view is None or not view.done:
                return page.updates(Frame(status=ALREADY_OVER, status_kind="stopped", phase=session.phase))
            f = end_frame(view)
            f.phase, f.play = session.phase, session.play
            return page.updates(as_seen(f, view))
        if STEPS_CLOSED in str(shown) and view is not None and view.done:
            f = final_frame(view)
            f.status, f.status_kind, f.phase, f.play = STEPS_CLOSED, "done", session.phase, session.play
            return page.updates(as_seen(f, view))
        return page.updates(Frame(status=STOPPED, status_kind="stopped", phase=session.phase))

    gr.api(api_stop, api_name="stop", queue=False)
    c.stop.click(stop, [a.status], [a.status], cancels=events, queue=False, api_visibility="private", js=STOP_JS) \
        .then(after_stop, [a.status, page.session, page.view], page.outputs(), queue=False,
              api_visibility="private")


def wire_steps(page: ui.Page, sessions: Sessions) -> None:
    """Step mode's buttons: the decision before, the one after, or the whole result (no model work: the
    race is over, its decisions are in the session's view)."""
    s = page.arena.step

    def go(button: Button, delta):
        def show(view, k, session, request: gr.Request):
            session = own(sessions, session, request)
            if view is None or not getattr(view, "checkpoints", None) or session.rule(button).effect is not Effect.STEP:
                return page.updates(Frame(status=f"**Nothing to step through:** {session.rule(button).words}.",
                                          status_kind="idle"))
            session.press(button)
            if delta is None:
                view.step_shown = None   # the result is shown: the x-axis switch redraws the verdict again
                f = final_frame(view)
            else:   # Previous at the first decision and Next at the last stay there (their buttons say so)
                view.step_shown = min(max(0, int(k or 0) + delta), len(view.checkpoints) - 1)
                f = step_frame(view, view.step_shown)
            f.phase, f.play = session.phase, session.play
            return page.updates(as_seen(f, view))
        return show

    for button, key, delta in ((s.prev, Button.PREV, -1), (s.next, Button.NEXT, 1), (s.end, Button.END, None)):
        button.click(go(key, delta), [page.view, s.index, page.session], page.outputs(), queue=False,
                     api_visibility="private")


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
        plain = {k: v for k, v in zip(links.FIELDS, values) if isinstance(v, (str, int, float, bool))
                 or (isinstance(v, list) and all(isinstance(x, str) for x in v))}
        return gr.Textbox(value=links.race_query(view, plain, defaults, plain.get("lecture") is True, ctx.limits),
                          visible=True)

    def draw_qr(url):
        svg = links.qr_svg(url if isinstance(url, str) else "")
        note = links.room_note(url) if svg else ""
        note = f'<p class="qr-note">{links.html_escape(note)}</p>' if note else ""
        return gr.HTML(f'<div class="qr" title="{links.html_escape(url)}">{svg}</div>{note}' if svg else "",
                       visible=bool(svg))

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


def quiet_progress(demo: gr.Blocks, target: gr.Component) -> None:
    """Every event's progress on ``target`` (a component never drawn), but for those that show a spinner on purpose
    (``show_progress="minimal"``: the lab's measurements, seconds long).

    Gradio 6.31's page keeps a loading status for every component any event so far had as a progress target (its
    outputs, unless ``show_progress_on`` says otherwise), for as long as the page is open, and on every streamed
    message gives each of them its status again: each such component's state is copied (``structuredClone``: a
    chart's whole figure), with that of every component inside it, and its status tracker updated. Locking the
    buttons at a Run (36 outputs), its end (35), Stop and the step buttons (36, the charts among them) each added
    theirs, so a race's page worked harder with every button pressed before it. Progress on one never-drawn
    component keeps that to one status a message; these events are unqueued and quick, so no spinner is lost."""
    gradio_private.progress_on(demo, target, keep=lambda show: show == "minimal")


def request_signature(fields: tuple[str, ...] | None = None) -> inspect.Signature:
    """``fields`` (default: ``RunRequest``'s, with their defaults) as keyword parameters, and Gradio's request."""
    known = {f.name: f.default for f in dataclasses.fields(RunRequest)} if fields is None else dict.fromkeys(fields)
    return inspect.Signature([inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=v)
                              for k, v in known.items()]
                             + [inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                                  annotation=gr.Request)])


NOTHING_TO_STOP = "**Nothing to stop:** no run or replay of this session is running or queued."
ALREADY_OVER = "**Already over:** the play ended before this Stop reached the server; nothing was stopped."
# What the page showed as Stop was pressed: a play drawing (a live status line), or nothing (the status's text)
PAGE_PLAYING = "page: playing"
STOP_JS = f"(shown) => document.querySelector('#status')?.classList.contains('status-live') ? {PAGE_PLAYING!r} : ''"
STEPS_CLOSED = "**Stepping ended:** the step panel is closed and the race's result is shown. Press Run to race again."


def rerender_race(view, x_axis):
    if view is None:
        return gr.skip()
    view.x_axis = x_axis  # the run in flight (same object) follows the choice from its next frame
    if view.stepping and view.checkpoints and view.step_shown is not None:
        return gr.skip()   # stepping: the chart shows the race at a decision; the verdict stays hidden until the end
    # the label follows the axis: a verdict on FLOPs is not "against its time"
    spec = charts.race_chart(view, x_axis)
    return gr.Plot(value=charts.as_plot(lecture.for_room(spec) if view.lecture else spec), label=race_label(view, x_axis))


MAX_SESSIONS = 1000   # SPECREJ_MAX_SESSIONS: browser sessions whose state is kept (Gradio's default: 10,000)


def launch(demo: gr.Blocks, **kwargs):
    """``demo.launch`` with the app's theme and CSS (Gradio 6 takes them here)."""
    from starlette.middleware import Middleware

    from components.deploy.early import EarlyScript

    # every browser session Gradio knows costs a copy of the page's config (about 0.4 MB here): at most this many
    # are kept, the least recently used that did nothing dropped first (a flood of made-up sessions cannot grow
    # memory past it, nor push out a visitor's race: gradio_private.keep_active_sessions)
    opts = dict(theme=THEME, css_paths=[str(ui.css_path())], head=ui.page_head(),
                state_session_capacity=env_int("SPECREJ_MAX_SESSIONS", MAX_SESSIONS))
    opts.update(kwargs)
    # a script that must run before Gradio's own goes first in the page's HTML (Gradio adds ``head`` too late for it)
    app_kwargs = dict(opts.get("app_kwargs") or {})
    app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), Middleware(EarlyScript, script=ui.early_script())]
    opts["app_kwargs"] = app_kwargs
    guard = getattr(demo, "specrej_guard", None)
    if guard is not None:
        app_kwargs = dict(opts.get("app_kwargs") or {})
        app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), Middleware(ApiGate, guard=guard)]
        opts["app_kwargs"] = app_kwargs
        # the guard alone reads X-Forwarded-For (SPECREJ_TRUSTED_PROXY); uvicorn closes a request head that is late
        # and connections past one address's cap (components/deploy/connections.py)
        with forwarded_headers_ignored(), gradio_private.uvicorn_options(http=connections.from_env()):
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
    startup.warm(_context)
    demo = build_demo(_context)
    memory.freeze_startup()


def main() -> None:
    built = globals().get("demo")
    if built is None:
        ctx = AppContext.from_env()
        print(f"specrej: loading {ctx.default_model} and the {ctx.default_reward} reward, and compiling the "
              "decoding step, while the page is served (a Run pressed before then waits for it)…", flush=True)
        startup.warm_in_background(ctx, log=lambda msg: print(msg, flush=True))   # a failure: the page shows it
        built = globals()["demo"] = build_demo(ctx)
    launch(built)  # prints the local URL; show_error off: no raw Python message reaches a client


if __name__ == "__main__":
    main()
