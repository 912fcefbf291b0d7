"""Gradio's leaked animation loops slowed (``assets/loops.js``), run before Gradio's own scripts
(``components/deploy/early.py``): an idle page stops asking for every animation frame."""
from __future__ import annotations

import asyncio
import time

import pytest

from components.deploy.early import EarlyScript, inject
from tests.conftest import launch_local

TAG = b"<script>first()</script>"
PAGE = b"<!doctype html><html><HEAD><meta charset='utf-8'><script type=module src=index.js></script></HEAD></html>"


def test_the_script_goes_first_in_the_head():
    out = inject(PAGE, TAG)
    assert out.index(TAG) == PAGE.index(b"<HEAD>") + len(b"<HEAD>") and out.replace(TAG, b"") == PAGE
    assert inject(b"<p>no head</p>", TAG) == b"<p>no head</p>"


def served(path: str, method: str = "GET", *, body: bytes = PAGE, headers=None, parts: int = 1) -> tuple[dict, bytes]:
    """What EarlyScript in front of a one-response app sends for ``method path`` (the body in ``parts`` chunks)."""
    headers = headers if headers is not None else [(b"content-type", b"text/html; charset=utf-8"),
                                                   (b"content-length", str(len(body)).encode())]

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        step = -(-len(body) // parts) if body else 1
        chunks = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        for k, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": b"" if method == "HEAD" else chunk,
                        "more_body": k < len(chunks) - 1})

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(EarlyScript(app, "first()")({"type": "http", "method": method, "path": path, "root_path": ""},
                                            receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_page_gets_the_script_and_its_length_and_nothing_else_changes():
    start, body = served("/", parts=3)
    assert body == inject(PAGE, TAG)
    assert dict(start["headers"])[b"content-length"] == str(len(body)).encode()
    start, body = served("/", "HEAD")
    assert body == b"" and dict(start["headers"])[b"content-length"] == str(len(PAGE) + len(TAG)).encode()
    # another route, another type, a compressed page: untouched
    assert served("/gradio_api/info")[1] == PAGE
    assert served("/", headers=[(b"content-type", b"application/json")])[1] == PAGE
    assert served("/", headers=[(b"content-type", b"text/html"), (b"content-encoding", b"gzip")])[1] == PAGE


# every animation frame the browser is asked for (installed before any of the page's scripts, so it counts what
# loops.js passes on, from its timers too), but Gradio's wait for its iframe resizer (in its Blocks chunk: up to 60
# frames once, then it stops)
COUNT = """(() => { const raf = window.requestAnimationFrame.bind(window); window.__frames = 0;
  window.requestAnimationFrame = function (cb) {
    if (!(new Error().stack || '').includes('/Blocks-')) { window.__frames += 1; }
    return raf(cb); }; })();"""


def test_an_idle_page_stops_asking_for_every_frame(browser):
    """Gradio 6.31 leaves its loading tracker's timer and spinner asking for every animation frame for as long as
    the page is open (a five-line app shows it): about 60 a second each. Slowed, they ask about once a second each,
    and they are still there (slowed, not broken)."""
    gr = pytest.importorskip("gradio")
    with gr.Blocks() as demo:
        gr.Textbox(label="words", elem_id="words")
    url = launch_local(demo)
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    try:
        page.add_init_script(COUNT)
        page.goto(url)
        page.wait_for_selector("#words textarea")
        assert "specrejLoops" in page.evaluate("document.head.firstElementChild.textContent")
        # loaded: the app's loading tracker is gone, its loops are not (slowed since)
        page.wait_for_function("window.specrejLoops.count().slowed >= 2", timeout=60_000)
        time.sleep(1.0)
        before = page.evaluate("[window.__frames, window.specrejLoops.count().slowed]")
        time.sleep(3.0)
        after = page.evaluate("[window.__frames, window.specrejLoops.count().slowed]")
        asked, slowed = after[0] - before[0], after[1] - before[1]
        assert slowed >= 2, (asked, slowed)      # the leaked loops run on, once a second
        assert asked <= 10, (asked, slowed)      # not 60 a second each
    finally:
        page.close()
        demo.close()


def test_every_event_keeps_its_progress_on_one_never_drawn_component(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    """Gradio's page gives every component that any event so far had as a progress target its loading status again
    on every streamed message (copying its state: a chart's whole figure). So no event but the lab's two measurements
    (their spinner on purpose) may name more than the one never-drawn component: a Run's page would otherwise work
    harder with every button pressed before it (``app.quiet_progress``)."""
    import app
    from tests.conftest import tiny_app_context

    demo = app.build_demo(tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory))
    config = demo.get_config_file()
    progress = next(c["id"] for c in config["components"] if c.get("props", {}).get("elem_id") == "play-progress")
    backend = [d for d in config["dependencies"] if d.get("backend_fn")]
    targets = {d["api_name"]: d["show_progress_on"] or d["outputs"] for d in backend if d["outputs"]}
    spinners = {d["api_name"] for d in backend if d["show_progress"] == "minimal"}
    assert spinners == {"measure_handler", "exactness_handler"}
    assert {"run", "lock", "ended", "show", "after_stop", "from_link", "rerender_race"} <= set(targets)
    assert {name: t for name, t in targets.items() if t != [progress] and name not in spinners} == {}
