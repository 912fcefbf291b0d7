"""Every read of Gradio's private state goes through ``components/deploy/gradio_private.py``; this test
fails loudly, naming the attribute, when a Gradio release moves one of them (issue 32)."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S, wait_for

from components.deploy import gradio_private

gr = pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = ("._queue", "event_queue_per_concurrency_id", "active_jobs", "fn._id", "sleep_when_free",
           "GRADIO_CACHE", "state_holder", ".fns", ".validator =", "skip_api", "pending_messages_per_session",
           "event_ids_to_events", 'getattr(request, "request"', "request.request",   # issue 41 (4): blocks.fns, gr.Request.request
           "server_app", ".iterators")   # issue 50 (6): the running events' iterator table


def test_the_adapter_finds_everything_it_reads_in_this_gradio():
    """A queued app with one event waiting and one running: every private attribute the guard reads is where
    the adapter looks (``check`` raises GradioMoved naming the ones that are not)."""
    import socket

    from gradio_client import Client

    from components.deploy import gradio_private

    hold = threading.Event()

    def slow(x):
        hold.wait(HANG_GUARD_S)
        return x

    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(slow, box, box, api_name="slow", concurrency_limit=1)
    demo.queue(max_size=4)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        gradio_private.check(demo)
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, analytics_enabled=False)
        jobs = [client.submit("a", api_name="/slow"), client.submit("b", api_name="/slow")]
        assert wait_for(lambda: len(gradio_private.queued_events(demo)) == 2)   # one running, one waiting
        events = gradio_private.queued_events(demo)
        for event in events:
            gradio_private.check(demo, event=event)
            assert gradio_private.event_fn(event) in demo.fns
        assert len({gradio_private.event_id(e) for e in events}) == 2
        assert str(ROOT) not in gradio_private.cache_folder(demo)
        hold.set()
        assert [j.result(timeout=HANG_GUARD_S) for j in jobs] == ["a", "b"]
        assert any(h == client.session_hash for h, _ in gradio_private.sessions(demo))
        client.close()
    finally:
        hold.set()
        demo.close()


def test_a_moved_attribute_fails_loudly_naming_it():
    from types import SimpleNamespace as NS

    from components.deploy import gradio_private

    moved = NS(_queue=NS(event_queue_per_concurrency_id={}, sleep_when_free=0.001,
                         progress_update_sleep_when_free=0.01), GRADIO_CACHE="/tmp/gradio")   # no active_jobs
    with pytest.raises(gradio_private.GradioMoved, match=r"Queue.active_jobs.*gradio_private.py"):
        gradio_private.check(moved)
    with pytest.raises(gradio_private.GradioMoved, match=r"Event._id, Event.fn._id"):
        gradio_private.check(NS(_queue=NS(event_queue_per_concurrency_id={}, active_jobs=[], sleep_when_free=0.1,
                                          progress_update_sleep_when_free=0.1), GRADIO_CACHE="/tmp/g"),
                             event=NS(fn=NS(), request=object()))


def test_no_other_module_reads_gradios_private_state():
    """Only the adapter names Gradio's private attributes (the app's own code: components/ and app.py)."""
    found = []
    for path in [ROOT / "app.py", *sorted((ROOT / "components").rglob("*.py"))]:
        if path.name == "gradio_private.py":
            continue
        src = path.read_text(encoding="utf-8")
        found += [f"{path.relative_to(ROOT)}: {name}" for name in PRIVATE if name in src]
    assert not found, found


@pytest.mark.parametrize("lenient", [False, True])
def test_a_cancel_racing_its_runs_end_deletes_the_iterator_once_without_a_key_error(lenient):
    """Gradio's own ``Queue.reset_iterators`` (every run's task calls it as the run ends) checks that the event's
    iterator is stored, then awaits the app's lock; a ``/cancel`` that took the lock first deletes it. On Gradio's
    plain table the reset's delete then raised KeyError (logged as "Task exception was never retrieved", issue 50);
    on the table ``forgive_dropped_iterators`` installs, the second delete does nothing."""
    import asyncio
    from types import SimpleNamespace

    from gradio.queueing import Queue

    async def closed():
        yield None

    async def scenario():
        app = SimpleNamespace(iterators={"ev1": closed(), "ev2": closed()}, lock=asyncio.Lock())
        blocks = SimpleNamespace(server_app=app)
        if lenient:
            assert gradio_private.forgive_dropped_iterators(blocks)
            assert set(app.iterators) == {"ev1", "ev2"}   # the entries kept
        queue = SimpleNamespace(server_app=app)
        async with app.lock:   # /cancel holds the lock...
            reset = asyncio.ensure_future(Queue.reset_iterators(queue, "ev1"))   # ...the run ends: its check passes
            await asyncio.sleep(0)
            del app.iterators["ev1"]   # /cancel deletes the entry
        await reset
        return app

    if lenient:
        app = asyncio.run(scenario())
        assert set(app.iterators) == {"ev2"}
    else:
        with pytest.raises(KeyError, match="ev1"):
            asyncio.run(scenario())


def test_forgiving_needs_a_launched_app():
    from types import SimpleNamespace

    assert gradio_private.forgive_dropped_iterators(SimpleNamespace(server_app=None)) is False
