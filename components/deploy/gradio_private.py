"""Every read and write of Gradio's private state, in one place.

The guard needs a few things Gradio has no public API for: the app's events (their handlers, inputs and
triggers; it wraps some handlers and gives every queued event its validator), the request behind a
``gr.Request``, which events are waiting in its queue or running
(to count a client's runs and to find the run a ``/cancel`` names), how often its queue loop wakes, which
folder it serves downloads from, the sessions it holds state for (to forget idle ones), and the running events'
iterator table (made to forgive a second delete: a cancel racing its run's end). They are private attributes that a Gradio release may rename or
move; here each is read through one small function, and ``check(blocks)`` looks for every one of them, so
``tests/test_gradio_private.py`` fails loudly, naming the attribute, when a release moves one (checked
against ``TESTED_WITH``). Nothing else in the app reads or writes an event's ``BlockFunction`` (``blocks.fns``: its handler, inputs,
validator, where its progress shows), reads a ``gr.Request``'s ``request``, or reads ``_queue``, ``event_queue_per_concurrency_id``,
``active_jobs``, ``process_time_per_fn``, ``start_times_per_fn``, ``pending_messages_per_session``, ``pending_event_ids_session``, ``event_ids_to_events``, an
event's ``_id``, a function's ``_id``, the ``state_holder`` or the server app's ``iterators``.
"""
from __future__ import annotations

import datetime
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TESTED_WITH = "6.31"   # the Gradio release these names were read from


class GradioMoved(RuntimeError):
    """A private attribute the guard reads is not where this module expects it (a new Gradio release)."""


@dataclass(frozen=True)
class EventInfo:
    """What the guard knows of one of the app's events (Gradio's ``BlockFunction``, read once at bind)."""

    index: int                 # its fn_index (``blocks.fns`` key)
    name: str                  # the handler's name
    api_name: Any
    queued: bool
    handler: Callable | None   # None: a js-only event
    public: bool               # on the API (``api_visibility == "public"``)
    inputs: int                # input values a positional call takes
    shown_inputs: int          # of them, those the API shows (not ``skip_api``: a State)
    targets: Any               # its triggers (the Stop button's, to find what Stop cancels)
    cancels: tuple             # the fn indices it cancels
    has_validator: bool
    components: tuple = ()     # its input components, in order (their kinds and choices: ``inputs.py``)
    shown_components: tuple = ()   # of them, those the API shows (a call may send only their values)
    preprocess: bool = True    # Gradio runs each input component's own check (``preprocess``) before the handler
    group: str = ""            # its concurrency group (``concurrency_id``): the places it shares with other events


def events(blocks) -> dict[int, EventInfo]:
    """Every event of ``blocks`` by fn index."""
    return {i: EventInfo(i, str(fn.name), fn.api_name, bool(fn.queue), fn.fn, fn.api_visibility == "public",
                         len(fn.inputs), sum(not getattr(b, "skip_api", False) for b in fn.inputs), fn.targets,
                         tuple(fn.cancels or ()), fn.validator is not None, tuple(fn.inputs),
                         tuple(b for b in fn.inputs if not getattr(b, "skip_api", False)), bool(fn.preprocess),
                         str(getattr(fn, "concurrency_id", "") or ""))
            for i, fn in blocks.fns.items()}


def wrap_handler(blocks, index: int, wrap: Callable[[Callable], Callable]) -> None:
    """Replace event ``index``'s handler with ``wrap(handler)``."""
    blocks.fns[index].fn = wrap(blocks.fns[index].fn)


def set_validator(blocks, index: int, validator: Callable) -> None:
    """Give event ``index`` a validator (Gradio runs it when the event joins the queue, before it waits)."""
    blocks.fns[index].validator = validator


def progress_on(blocks, target, keep: Callable[[str], bool]) -> None:
    """Every backend event's progress on ``target`` (``show_progress_on``), but those that name their own and those
    whose ``show_progress`` ``keep`` keeps (``app.quiet_progress`` says why)."""
    for fn in blocks.fns.values():
        if fn.fn is not None and fn.show_progress_on is None and not keep(fn.show_progress) and fn.outputs:
            fn.show_progress_on = [target]


def raw_request(request) -> Any:
    """The starlette request behind a ``gr.Request`` (its ``state`` carries the guard's run)."""
    return getattr(request, "request", None)


def _queue(blocks) -> Any:
    return getattr(blocks, "_queue", None)


def queued_events(blocks) -> list:
    """Every event waiting in Gradio's queue (any concurrency group) or running now."""
    queue = _queue(blocks)
    out: list = []
    for q in getattr(queue, "event_queue_per_concurrency_id", {}).values():
        out += list(getattr(q, "queue", []))
    for job in getattr(queue, "active_jobs", []) or []:
        out += list(job or [])
    return out


def event_fn(event) -> int | None:
    """The fn index (``blocks.fns`` key) of a queued event."""
    return getattr(getattr(event, "fn", None), "_id", None)


def event_id(event) -> str | None:
    """The event id Gradio gave a queued event (what ``/cancel`` and ``/queue/data`` name)."""
    return getattr(event, "_id", None)


def event_request(event) -> Any:
    """The starlette request a queued event was joined with (the guard knows its runs by it)."""
    return getattr(event, "request", None)


def has_stream(blocks, session_hash: str) -> bool:
    """Whether Gradio holds an event stream's messages for this session (it made one when the session joined
    the queue): ``/queue/data`` of any other session raises inside Gradio's stream after a 200 has started."""
    return session_hash in getattr(_queue(blocks), "pending_messages_per_session", {})


def event_has_stream(blocks, event_id: str) -> bool:
    """Whether ``GET /call/<name>/<event_id>`` would find the event's stream, as Gradio looks for it: the event
    queued or running, else a session still holding its id, else (a call without a session) the id itself."""
    queue = _queue(blocks)
    event = getattr(queue, "event_ids_to_events", {}).get(event_id)
    if event is not None:
        return has_stream(blocks, getattr(event, "session_hash", event_id))
    held = getattr(queue, "pending_event_ids_session", {})
    session = next((s for s, ids in list(held.items()) if event_id in ids), event_id)
    return has_stream(blocks, session)


def event_owner(blocks, event_id: str) -> str | None:
    """The session that queued the event ``event_id`` while Gradio holds it (queued, running, or its messages
    pending); None when no session holds it."""
    queue = _queue(blocks)
    event = getattr(queue, "event_ids_to_events", {}).get(event_id)
    if event is not None and isinstance(getattr(event, "session_hash", None), str):
        return event.session_hash
    held = getattr(queue, "pending_event_ids_session", {})
    return next((s for s, ids in list(held.items()) if event_id in ids), None)


def waiting(blocks) -> int:
    """How many events wait in Gradio's queue (every concurrency group; not those running): what its
    ``max_size`` counts."""
    return sum(len(getattr(q, "queue", [])) for q in getattr(_queue(blocks), "event_queue_per_concurrency_id", {}).values())


def group_load(blocks, group: str) -> tuple[int, int, int | None]:
    """(running, waiting, places) of the concurrency group ``group`` in Gradio's queue now (places: its
    ``concurrency_limit``; None where it has none or the group has not been used yet)."""
    q = getattr(_queue(blocks), "event_queue_per_concurrency_id", {}).get(group)
    if q is None:
        return 0, 0, None
    return int(getattr(q, "current_concurrency", 0)), len(getattr(q, "queue", [])), getattr(q, "concurrency_limit", None)


def group_clock(blocks, group: str) -> tuple[float | None, list[float]]:
    """(the mean seconds a finished event of the concurrency group ``group`` took, None before one finished;
    seconds each of its running events has run so far), from Gradio's own bookkeeping (``Queue.process_time_per_fn``,
    ``EventQueue.start_times_per_fn``: what Gradio's rank/eta estimate reads)."""
    import time

    queue = _queue(blocks)
    q = getattr(queue, "event_queue_per_concurrency_id", {}).get(group)
    if q is None:
        return None, []
    times = [t for fn, t in getattr(queue, "process_time_per_fn", {}).items()
             if getattr(fn, "concurrency_id", None) == group and getattr(t, "count", 0)]
    mean = sum(t.process_time for t in times) / sum(t.count for t in times) if times else None
    now = time.time()   # Gradio stamps a start with time.time()
    running = [max(0.0, now - start) for starts in getattr(q, "start_times_per_fn", {}).values() for start in starts]
    return mean, running


def blocks_of(request) -> Any:
    """The Blocks a ``gr.Request`` was made by (None when it was made by none: a direct call)."""
    app = getattr(raw_request(request), "app", None)
    try:
        return app.get_blocks() if app is not None else None
    except Exception:
        return None


def slow_queue_polling(blocks, seconds: float) -> None:
    """Make Gradio's queue loop sleep at least ``seconds`` between looks while no slot is free (its
    progress loop twice that): see ``app.quiet_queue``."""
    q = _queue(blocks)
    q.sleep_when_free = max(q.sleep_when_free, seconds)
    q.progress_update_sleep_when_free = max(q.progress_update_sleep_when_free, 2 * seconds)


def plotly_chunk() -> str | None:
    """The file name of the frontend module in which Gradio's ``gr.Plot`` loads plotly.js (``PlotlyPlot-<hash>.js``
    beside Gradio's own ``index-<hash>.js`` in its built assets), or None where this release has none. The page
    imports it while idle so that its first chart does not wait for 4.6 MB of script (``assets/charts.js``)."""
    import gradio

    folder = Path(gradio.__file__).parent / "templates" / "frontend" / "assets"
    found = sorted(folder.glob("PlotlyPlot-*.js"))
    return found[0].name if found else None


def cache_folder(blocks) -> str:
    """The folder Gradio copies a handler's output files into and serves at ``/gradio_api/file=``."""
    return str(blocks.GRADIO_CACHE)


def sessions(blocks) -> Iterator[tuple[str, Any]]:
    """(session hash, Gradio's state of that session) for every session Gradio holds state for."""
    holder = getattr(blocks, "state_holder", None)
    yield from list(getattr(holder, "session_data", {}).items())


def drop_idle_sessions(blocks, idle_s: float) -> int:
    """Forget every session Gradio has not seen for ``idle_s`` seconds: its states (each State's delete
    callback runs) and Gradio's own copy of the page's configuration for it, which it keeps per session
    (about a megabyte on this page) until 10,000 newer sessions push it out. Returns how many went."""
    holder = getattr(blocks, "state_holder", None)
    if holder is None:   # not launched yet
        return 0
    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=idle_s)
    with holder.lock:
        idle = [h for h, seen in holder.time_last_used.items() if seen < cutoff]
    for h in idle:
        holder.delete_state(h)   # the delete callbacks, as Gradio's own expiry runs them
        with holder.lock:
            holder.session_data.pop(h, None)
            holder.time_last_used.pop(h, None)
    return len(idle)


def drop_session_unless(blocks, session_hash: str, keep: Callable[[Any], bool]) -> bool:
    """Forget one session's state as ``drop_idle_sessions`` does, unless Gradio holds none for it or ``keep`` (its
    ``SessionState``) says it is worth keeping. Returns whether it went."""
    holder = getattr(blocks, "state_holder", None)
    if holder is None or not hasattr(holder, "session_data"):
        return False
    with holder.lock:
        state = holder.session_data.get(session_hash)
    try:
        if state is None or keep(state):
            return False
    except Exception:   # a state it cannot read: not worth keeping over others
        pass
    holder.delete_state(session_hash)
    with holder.lock:
        holder.session_data.pop(session_hash, None)
        getattr(holder, "time_last_used", {}).pop(session_hash, None)
    return True


class _ActiveFirst(OrderedDict):
    """Gradio's table of sessions (``StateHolder.session_data``, least recently used first) whose eviction past its
    capacity (``StateHolder.update``: ``popitem(last=False)``) takes the least recently used session that did nothing
    (``active`` false) before any that did: a flood of made-up sessions evicts its own kind, not a visitor's race."""

    def __init__(self, table, active: Callable[[Any], bool]):
        super().__init__(table)
        self.active = active

    def popitem(self, last: bool = True):
        if not last:
            for key, state in self.items():
                try:
                    kept = self.active(state)
                except Exception:   # a state it cannot read: not worth keeping over others
                    kept = False
                if not kept:
                    return key, super().pop(key)
        return super().popitem(last=last)


def keep_active_sessions(blocks, active: Callable[[Any], bool]) -> bool:
    """Make the launched app evict sessions that did nothing first (``_ActiveFirst``; ``active(SessionState)``: the
    session did something worth keeping). Once; False where the app is not launched yet."""
    holder = getattr(blocks, "state_holder", None)
    if holder is None or not hasattr(holder, "session_data"):
        return False
    with holder.lock:
        if not isinstance(holder.session_data, _ActiveFirst):
            holder.session_data = _ActiveFirst(holder.session_data, active)
    return True


def state_values(session_state) -> list:
    """The values of a session's states (``gr.State``s) as Gradio holds them."""
    return list(getattr(session_state, "state_data", {}).values())


class _RunIterators(dict):
    """Gradio's table of running events' iterators (``App.iterators``), where deleting an event already gone is
    a no-op. Gradio deletes an event's entry in two places, each after checking it is there and then awaiting
    the app's lock: ``/cancel`` and the queue's ``reset_iterators`` (which every run's task calls as it ends).
    A cancel and the end of the run it cancels can both pass the check; the second to take the lock then raised
    KeyError: in the run's task ("Task exception was never retrieved ... KeyError: '<event id>'", issue 50) or
    as a 500 from ``/cancel``."""

    def __delitem__(self, key) -> None:
        self.pop(key, None)


def forgive_dropped_iterators(blocks) -> bool:
    """Make the launched app's iterator table a ``_RunIterators`` (once; its entries kept). False where the
    app is not launched yet. The guard calls it before it lets a ``/cancel`` through."""
    app = getattr(blocks, "server_app", None)
    table = getattr(app, "iterators", None)
    if table is None:
        return False
    if not isinstance(table, _RunIterators):
        app.iterators = _RunIterators(table)
    return True


def check(blocks, *, event: Any = None) -> None:
    """GradioMoved naming every private attribute above that ``blocks`` (queued, not necessarily launched)
    or ``event`` (one of its queued events) lacks."""
    missing = []
    queue = _queue(blocks)
    if queue is None:
        missing.append("Blocks._queue")
    else:
        for name, kind in (("event_queue_per_concurrency_id", dict), ("active_jobs", list),
                           ("pending_messages_per_session", dict), ("pending_event_ids_session", dict),
                           ("event_ids_to_events", dict), ("process_time_per_fn", dict),
                           ("sleep_when_free", (int, float)), ("progress_update_sleep_when_free", (int, float))):
            if not isinstance(getattr(queue, name, None), kind):
                missing.append(f"Queue.{name}")
    if not isinstance(getattr(blocks, "GRADIO_CACHE", None), str):
        missing.append("Blocks.GRADIO_CACHE")
    fns = getattr(blocks, "fns", None)
    if not isinstance(fns, dict):
        missing.append("Blocks.fns")
    else:
        for fn in fns.values():
            for name in ("fn", "name", "api_name", "queue", "api_visibility", "inputs", "targets", "cancels",
                         "validator", "preprocess", "show_progress", "show_progress_on", "outputs"):
                if not hasattr(fn, name):
                    missing.append(f"BlockFunction.{name}")
            break
    import gradio

    if not hasattr(gradio.Request(), "request"):
        missing.append("Request.request")
    holder = getattr(blocks, "state_holder", None)   # set when the app is launched
    if holder is not None:
        for name, kind in (("session_data", dict), ("time_last_used", dict)):
            if not isinstance(getattr(holder, name, None), kind):
                missing.append(f"StateHolder.{name}")
        if not callable(getattr(holder, "delete_state", None)) or getattr(holder, "lock", None) is None:
            missing.append("StateHolder.delete_state/lock")
    if event is not None:
        if not isinstance(event_id(event), str):
            missing.append("Event._id")
        if not isinstance(event_fn(event), int):
            missing.append("Event.fn._id")
        if event_request(event) is None:
            missing.append("Event.request")
    if missing:
        raise GradioMoved(f"Gradio {gradio.__version__} moved what the guard reads (tested with {TESTED_WITH}): "
                          + ", ".join(missing) + ". Update components/deploy/gradio_private.py.")


class uvicorn_options:
    """``with uvicorn_options(http=..., timeout_keep_alive=...): demo.launch(...)``: the ``uvicorn.Config`` Gradio's
    ``launch`` builds (``gradio.http_server.Server``, which passes no protocol or timeouts) gets these settings too."""

    def __init__(self, **options):
        self.options = options

    def __enter__(self):
        import uvicorn

        self._config = real = uvicorn.Config
        options = self.options

        class Config(real):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **{**kwargs, **options})

        uvicorn.Config = Config
        return self

    def __exit__(self, *exc):
        import uvicorn

        uvicorn.Config = self._config
        return False


def _changes_box():
    import gradio as gr

    class ChangesBox(gr.Textbox):
        """The hidden textbox a run's chart changes stream through (``frames.ChartChanges``): lines of JSON, appended
        (Gradio sends a streamed string's appended part alone), read by ``assets/charts.js``. Not part of the API
        (Gradio's ``skip_api``): its lines are the page's drawing, and an API client reads the whole figures of a
        run's last frame. (Gradio writes a .pyi beside the module of any component subclass: .gitignore'd.)"""

        @property
        def skip_api(self):
            return True

        def get_block_name(self) -> str:
            return "textbox"

    return ChangesBox


ChangesBox = _changes_box()
