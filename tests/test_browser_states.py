"""Every button in every state, in a real Chromium (issue 39: one session, one play).

The page is driven into each phase of ``components/state/play.py`` (warming, idle, racing, replaying, stepping,
done, stopped) and every button is pressed there. Throughout, the page must show one play: every chart drawn
carries the id of the play that drew it (``layout.meta.play``) and the status line the same (a ``play-N`` class);
the status line, recorded at every change, never goes back to an earlier play; and nothing on the page says
"Error". One server (the tiny test models, the page's smallest defaults: N = 8, 24 new tokens) and one browser
for the module. A race here is made to last by a pause between its events (``DELAY``), so that a button can be
pressed while it runs; the warm-up is held by a gate the test opens.
"""
from __future__ import annotations

import os
import threading
import time

import pytest
from conftest import CHROMIUM, launch_local

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
DELAY = {"s": 0.0}   # seconds between a race's events (set per test: a race that lasts while buttons are pressed)
HANG_MS = int(os.environ.get("HANG_MS", 120_000))    # only a hang guard


def slow_events(*args, **kw):
    """The app's race, each event after ``DELAY`` seconds (on the torch thread, as the race runs)."""
    from components.session.stream import race_events

    for event in race_events(*args, **kw):
        if DELAY["s"]:
            time.sleep(DELAY["s"])
        yield event


@pytest.fixture(scope="module")
def served(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    import app
    from components.session.context import AppContext

    env = {"SPECREJ_MODEL": tiny_lm_dir, "SPECREJ_REWARD": f"hf:{tiny_reward_dir}", "SPECREJ_MAX_N": "8",
           "SPECREJ_MAX_NEW_TOKENS": "24"}
    ctx = AppContext.from_env(env, trace_dir=str(tmp_path_factory.mktemp("traces")), min_frame_interval=0.1)
    from components.session import startup

    startup.warm(ctx)
    demo = app.build_demo(ctx, events_fn=slow_events)
    url = launch_local(demo)
    yield url, ctx
    demo.close()


# Every status the line shows, with the play that drew it, recorded at each change (a flash a poll would miss too).
WATCH = """() => { window.__log = [];
  const s = document.querySelector('#status');
  const note = () => { const c = [...s.classList].find(c => c.startsWith('play-'));
                       window.__log.push([s.querySelector('[data-testid=markdown]').innerText, c ? Number(c.slice(5)) : null]); };
  note();
  new MutationObserver(note).observe(s, {subtree: true, childList: true, characterData: true, attributes: true}); }"""
# The play ids of the charts on screen, and the status line's.
PLAYS = """() => { const charts = [...document.querySelectorAll('.js-plotly-plot')]
      .filter(el => el.offsetParent !== null && el.layout && el.layout.meta && el.layout.meta.play)
      .map(el => el.layout.meta.play);
  const c = [...document.querySelector('#status').classList].find(c => c.startsWith('play-'));
  return [charts, c ? Number(c.slice(5)) : null]; }"""
ONE_PLAY = f"() => {{ const [charts, status] = ({PLAYS})(); return status !== null && charts.length > 0 && " \
           "charts.every(p => p === status); }"


def open_page(browser, url):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(HANG_MS)
    page.goto(url)
    page.wait_for_selector("#run")
    page.evaluate(WATCH)
    return page


def status(page) -> str:
    """The status line's own words (never Gradio's loading timer, "processing | 1.1s", drawn in the same box)."""
    return page.inner_text("#status [data-testid=markdown]")


def wait_status(page, pattern: str):
    try:
        page.wait_for_function(f"/{pattern}/.test(document.querySelector('#status [data-testid=markdown]').innerText)", timeout=HANG_MS)
    except Exception:
        raise AssertionError(f"waited for /{pattern}/; the status shows {status(page)!r}; "
                             f"seen: {page.evaluate('window.__log')[-8:]}") from None


def mark(page) -> int:
    """Where the status log stands now: ``wait_seen`` looks at what the line showed after it."""
    return page.evaluate("window.__log.length")


def wait_seen(page, pattern: str, since: int):
    """The status line showed ``pattern`` at some change after ``since`` (``mark``): a status that lasts a moment
    (a tiny race's "Racing", on a loaded machine drawn in the same task as what follows it) counts where it was
    recorded, not only where a poll caught it."""
    try:
        page.wait_for_function(f"window.__log.slice({since}).some(([t]) => /{pattern}/.test(t))", timeout=HANG_MS)
    except Exception:
        raise AssertionError(f"never showed /{pattern}/; the status shows {status(page)!r}; "
                             f"seen: {page.evaluate('window.__log')[since:][-8:]}") from None


def one_play(page) -> int:
    """Every chart on screen is the status line's play: its id."""
    try:
        page.wait_for_function(ONE_PLAY, timeout=HANG_MS)
    except Exception:
        raise AssertionError(f"not one play: {page.evaluate(PLAYS)}; status {status(page)!r}") from None
    charts, shown = page.evaluate(PLAYS)
    assert charts and all(p == shown for p in charts), (charts, shown)
    return shown


def no_error(page):
    assert page.locator(".error, .toast-body.error").count() == 0
    body = page.inner_text("body")
    assert "Error" not in body.replace("status-error", "") and "went wrong" not in body, status(page)


def never_back(page):
    """The status line never showed an earlier play after a later one."""
    log = [(text, p) for text, p in page.evaluate("window.__log") if p is not None]
    back = [i for i in range(1, len(log)) if log[i][1] < log[i - 1][1]]
    assert not back, [(log[i - 1][1], log[i - 1][0][:80], log[i][1], log[i][0][:80]) for i in back]   # what came back


def label(page, sel) -> str:
    return page.inner_text(sel).strip()


def disabled(page, sel) -> bool:
    return page.eval_on_selector(sel, "b => b.disabled")


def set_pace(page, text: str):
    page.locator("#pace label", has_text=text).click()


def test_warming_idle_and_stopped(browser, served):
    """Idle: Stop has nothing to stop, the step buttons are hidden. Warming (a Run waiting for the server's
    warm-up): Replay stops the waiting Run and plays, Run stops the replay and waits again, Stop stops it."""
    url, ctx = served
    DELAY["s"] = 0.0
    page = open_page(browser, url)
    assert "Press **Run**" in page.evaluate("document.querySelector('#status [data-testid=markdown]').innerText") or "Press Run" in status(page)
    page.click("#stop")
    wait_status(page, "Nothing to stop")
    assert not page.is_visible("#step-panel")
    gate = threading.Event()
    ctx.loaded.warm_thread = threading.Thread(target=gate.wait, daemon=True)   # the server still warming up
    ctx.loaded.warm_thread.start()
    try:
        page.click("#run")
        wait_status(page, "Warming up")
        assert "stops this race" in label(page, "#replay")
        set_pace(page, "real pace")
        page.click("#replay")                        # stops the waiting Run, plays the recording
        wait_status(page, "Replaying a recording")
        first = one_play(page)
        assert "stops this replay" in label(page, "#run")
        page.click("#run")                           # stops the replay, waits for the warm-up again
        wait_status(page, "Warming up")
        time.sleep(1.0)   # the replay's next frames would land here: none may
        assert "Warming up" in status(page)
        page.click("#stop")
        wait_status(page, "Stopped")
        time.sleep(1.0)
        assert "Stopped" in status(page)
        page.click("#stop")                          # stopped: nothing to stop
        wait_status(page, "Nothing to stop")
    finally:
        gate.set()
        ctx.loaded.warm_thread.join()
    page.click("#run")                               # warm: it races to the end
    wait_status(page, "Done in")
    assert one_play(page) > first and label(page, "#run") == "▶ Run"
    never_back(page)
    no_error(page)
    page.close()


def test_racing_and_replaying_one_play_at_a_time(browser, served):
    """Replay during a race, Run during a replay, Paper scale during a race, Stop during each: the page shows one
    play, the newest, and the older one never draws again."""
    url, ctx = served
    DELAY["s"] = 0.5   # a race lasts (about 30 s) while buttons are pressed
    page = open_page(browser, url)
    try:
        set_pace(page, "real pace")
        page.click("#run")
        wait_status(page, "Racing")
        race = one_play(page)
        page.click("#replay")                        # stops the race, plays the recording
        wait_status(page, "Replaying a recording")
        replay = one_play(page)
        assert replay > race
        time.sleep(1.5)
        assert "Replaying" in status(page) and one_play(page) == replay
        page.click("#run")                           # stops the replay, races
        wait_status(page, "Racing")
        race = one_play(page)
        assert race > replay
        time.sleep(1.5)
        assert "Racing" in status(page) and one_play(page) == race
        page.click("#stop")
        wait_status(page, "Stopped")
        time.sleep(1.5)
        assert "Stopped" in status(page)
        page.click("#replay")
        wait_status(page, "Replaying a recording")
        page.click("#stop")
        wait_status(page, "Stopped")
        time.sleep(1.0)
        assert "Stopped" in status(page)
        page.click("#run")
        wait_status(page, "Racing")
        page.click("#paper-scale")                   # stops the race, measures, sets the protocol (it fits here)
        page.wait_for_function("/Paper scale set|Paper scale live would take/.test("
                               "document.querySelector('#paper-note').innerText)", timeout=HANG_MS)
        wait_status(page, "Paper scale set|Paper scale live would take")   # the stopped race's frames are over
        time.sleep(1.0)
        assert "Racing" not in status(page), status(page)
        page.click("#stop")
        wait_status(page, "Nothing to stop|Stopped")
        never_back(page)
        no_error(page)
    finally:
        DELAY["s"] = 0.0
        page.close()


def test_stop_that_arrives_after_the_race_ended(browser, served):
    """Issue 61 (7): on a loaded server a Stop pressed while the page showed "Racing" reached the server after the
    race had ended, and its "Nothing to stop" replaced the race's result. Reproduced by holding the Stop's request
    until the race is over: the page ends on the race's own result, never on "Nothing to stop"."""
    url, ctx = served
    DELAY["s"] = 0.05   # a race of a few seconds
    page = open_page(browser, url)
    held = []

    def hold(route):
        if "run/predict" in route.request.url:
            held.append(route)   # the Stop's own request, held while the race runs to its end
        else:
            route.continue_()

    try:
        page.click("#run")
        wait_status(page, "Racing")
        page.route("**/gradio_api/**", hold)
        page.click("#stop")
        page.wait_for_function("/Done in/.test(document.querySelector('#status [data-testid=markdown]').innerText)"
                               " || document.querySelector('#status').classList.contains('status-done')",
                               timeout=HANG_MS)
        deadline = time.monotonic() + HANG_MS / 1000
        while not held and time.monotonic() < deadline:
            page.wait_for_timeout(100)
        assert held, "the Stop's request was never sent"
        for r in held:
            r.continue_()
        page.unroute("**/gradio_api/**")
        wait_status(page, "Done in")
        page.wait_for_timeout(1500)   # the Stop's answer and its follow-up have landed
        shown = [text for text, _ in page.evaluate("window.__log")]
        assert "Done in" in status(page), shown[-4:]
        assert not any("Nothing to stop" in t for t in shown), shown[-4:]
        assert page.is_visible("#summary table")
        one_play(page)
        no_error(page)
    finally:
        DELAY["s"] = 0.0
        page.close()


def test_done_stepping_and_the_step_buttons(browser, served):
    """Done: Stop has nothing to stop. Stepping: Previous disabled at decision 1, Next disabled at the last (it
    never ends stepping), Stop ends stepping with the result shown, Run to the end shows it, Run and Replay close
    the panel and play. A replay's "Run it live" races; Classroom and Link only change the settings."""
    url, ctx = served
    DELAY["s"] = 0.0
    page = open_page(browser, url)
    page.click("#run")
    wait_status(page, "Done in")
    one_play(page)
    page.click("#stop")
    wait_status(page, "Nothing to stop")
    assert not page.is_visible("#step-panel") and page.is_visible("#summary table")

    page.check("#step input")
    page.click("#run")
    wait_status(page, "Stepping through the decisions")
    play = one_play(page)
    assert disabled(page, "#step-prev") and "decision 1" in label(page, "#step-prev")
    count = int(status(page).split(" of ")[1].split(".")[0])
    for k in range(2, count + 1):
        page.click("#step-next")
        wait_status(page, f"decision {k} of {count}")
    assert disabled(page, "#step-next") and "Last decision" in label(page, "#step-next")
    assert not disabled(page, "#step-prev") or count == 1
    if count > 1:
        page.click("#step-prev")
        wait_status(page, f"decision {count - 1} of {count}")
    assert one_play(page) == play
    page.click("#stop")                              # ends stepping: the panel closes, the result shows
    wait_status(page, "Stepping ended")
    page.wait_for_selector("#step-panel", state="hidden")
    assert page.is_visible("#summary table")

    page.click("#run")
    wait_status(page, "Stepping through the decisions")
    page.click("#step-end")
    page.wait_for_selector("#step-panel", state="hidden")
    wait_status(page, "Done in")

    page.click("#run")
    wait_status(page, "Stepping through the decisions")
    at = mark(page)
    page.click("#run")                               # from stepping: the panel closes, a new race
    wait_seen(page, "Racing|Starting", at)
    wait_status(page, "Stepping through the decisions")
    page.uncheck("#step input")
    set_pace(page, "instant")
    t0 = time.monotonic()
    page.click("#replay")                            # from stepping: the panel closes, the recording plays
    wait_status(page, "Replay done")
    print(f"replay done after {time.monotonic() - t0:.1f} s")
    page.wait_for_selector("#step-panel", state="hidden")
    one_play(page)
    assert page.is_visible("#run-live")
    at = mark(page)
    page.click("#run-live")                          # the recording's settings, run here (scaled to fit)
    wait_seen(page, "Racing|Done in|Done from|past this deployment", at)
    at = mark(page)
    page.click("#stop")                              # a tiny race can end before Stop reaches the server
    wait_seen(page, "Stopped|Nothing to stop|Already over", at)
    page.click("#classroom")
    wait_status(page, "Classroom preset set")
    page.click("#link")
    page.wait_for_selector("#link-box", state="visible")
    never_back(page)
    no_error(page)
    page.close()
