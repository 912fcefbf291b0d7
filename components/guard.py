"""Guards for a public deployment, hooked into the app with a few lines (``app.py``).

What a hostile client tried, and what stops it here (no algorithm logic, no page layout):

- **Wrong types and broken text** (``check_request``): every field of a request must be a plain
  value of its kind (text for the prompt, the model, the reward ...), and text must be valid
  Unicode (a lone UTF-16 surrogate sent through the API cannot be tokenised, written or sent back
  as JSON). The message names the field; the text itself is never echoed.
- **One client filling the queue** (``Guard.admit``, Gradio's validator of the race: it runs when a
  run joins the queue, before it waits): at most ``SPECREJ_MAX_RUNS_PER_CLIENT`` (default 2) runs
  queued plus running per client. The client is the address Gradio reports
  (``request.client.host``; behind a proxy set uvicorn's ``FORWARDED_ALLOW_IPS`` so that it is the
  user's), else the session.
- **A run cancelled before it had an event id** (``Guard.stop_requested``): ``/cancel`` without an
  event id (gradio_client's ``Job.cancel()`` while the job is starting) cancels nothing in Gradio
  and the run went on unread. ``ApiGate`` notes such cancels; a run of that session that joined
  before the cancel stops at its next event.
- **Private handlers called through the REST API** (``ApiGate``): ``/gradio_api/call/<name>``
  answers only for public endpoints (``/run`` and ``/stop``).
"""
from __future__ import annotations

import inspect
import json
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

import gradio as gr

from specrej.config import check_text, env_int

MAX_RUNS_ENV = "SPECREJ_MAX_RUNS_PER_CLIENT"
DEFAULT_MAX_RUNS = 2
TEXT_FIELDS = ("prompt", "model", "reward", "preference", "decision", "second_decision", "x_axis")
IN_FLIGHT_S = 10.0   # an admitted run shows up in Gradio's queue within milliseconds; forget it after this
CANCEL_BODY_LIMIT = 4096


# ---------------------------------------------------------------- request values

def _kind(value: Any) -> str:
    return {list: "a list", tuple: "a list", dict: "an object", bool: "true/false", type(None): "nothing"}.get(
        type(value), f"a {type(value).__name__}")


def check_request(request) -> None:
    """Raise ValueError naming the first field of ``request`` (a RunRequest) whose value is not a
    plain value of its kind, or whose text is not valid Unicode."""
    for f in fields(request):
        value = getattr(request, f.name)
        label = f.name.replace("_", " ")
        if f.name in TEXT_FIELDS:
            if not isinstance(value, str):
                raise ValueError(f"{label} must be text, not {_kind(value)}.")
            check_text(label, value)
        elif isinstance(value, str):
            check_text(label, value)   # e.g. n="auto"; RunConfig says whether the word is allowed
        elif value is not None and not isinstance(value, (int, float)):
            raise ValueError(f"{label} must be a number, not {_kind(value)}.")


# ---------------------------------------------------------------- clients and their runs

def client_key(request) -> str:
    """The address Gradio reports for a request, else its session."""
    client = getattr(request, "client", None)
    host = getattr(client, "host", None) if client is not None else None
    if isinstance(host, str) and host:
        return f"address:{host}"
    return f"session:{getattr(request, 'session_hash', None)}"


@dataclass
class _Run:
    """A run the guard admitted: whose it is, and whether its client cancelled it."""

    key: str
    session: str | None
    since: float               # time.monotonic() at admission
    seen: bool = False         # found in Gradio's queue or started
    cancelled: bool = False


@dataclass
class Guard:
    """Per-app state of the guards: the race's functions, the runs admitted, early cancels."""

    max_runs_per_client: int = DEFAULT_MAX_RUNS
    blocks: Any = None                       # the gr.Blocks, once bound
    race_fns: frozenset[int] = frozenset()   # fn ids of the events that start a race
    public_api: frozenset[str] = frozenset()
    _lock: Any = field(default_factory=threading.Lock)
    _runs: dict = field(default_factory=dict)     # id(join request) -> _Run
    _early: dict = field(default_factory=dict)    # session -> time of an id-less cancel that found no run

    @classmethod
    def from_env(cls, env=None) -> "Guard":
        return cls(max_runs_per_client=env_int(MAX_RUNS_ENV, DEFAULT_MAX_RUNS, env=env))

    def bind(self, blocks, handler) -> None:
        """Remember the app and which of its functions start a race (those that call ``handler``)."""
        self.blocks = blocks
        self.race_fns = frozenset(i for i, fn in blocks.fns.items() if fn.fn is handler)
        self.public_api = frozenset(fn.api_name for fn in blocks.fns.values()
                                    if fn.api_visibility == "public" and isinstance(fn.api_name, str))

    # -- what is queued and running
    def _gradio_runs(self) -> list:
        """Events of the race waiting in Gradio's queue or running now."""
        queue = getattr(self.blocks, "_queue", None)
        out = []
        for q in getattr(queue, "event_queue_per_concurrency_id", {}).values():
            out += list(getattr(q, "queue", []))
        for job in getattr(queue, "active_jobs", []) or []:
            out += list(job or [])
        return [e for e in out if getattr(getattr(e, "fn", None), "_id", None) in self.race_fns]

    def _reconcile(self) -> tuple[list, list[_Run]]:
        """(Gradio's race events, admitted runs not among them yet); forgets runs that are done
        (seen, now gone) or never reached the queue. Call with the lock held."""
        events = self._gradio_runs()
        in_queue = {id(getattr(e, "request", None)) for e in events}
        now, on_the_way = time.monotonic(), []
        for rid, run in list(self._runs.items()):
            if rid in in_queue:
                run.seen = True
            elif run.seen or now - run.since > IN_FLIGHT_S:
                del self._runs[rid]
            else:
                on_the_way.append(run)
        return events, on_the_way

    # -- the per-client cap and early cancels (Gradio's validator for the race)
    def admit(self, request) -> str | None:
        """Why this run may not join the queue (None: it may, and is noted as on its way)."""
        if request is None:
            return None
        key, session = client_key(request), getattr(request, "session_hash", None)
        with self._lock:
            events, on_the_way = self._reconcile()
            if time.monotonic() - self._early.pop(session, -IN_FLIGHT_S) < IN_FLIGHT_S:
                return "This run was cancelled before it reached the queue."
            mine = sum(client_key(_RequestView(e)) == key for e in events)
            mine += sum(r.key == key for r in on_the_way)
            if mine >= self.max_runs_per_client:
                return (f"You already have {self.max_runs_per_client} runs queued or running, the most this "
                        f"deployment allows per client ({MAX_RUNS_ENV}): wait for one to finish, or stop it, "
                        "and try again.")
            raw = getattr(request, "request", None)
            if raw is not None:
                self._runs[id(raw)] = run = _Run(key, session, time.monotonic())
                raw.state.specrej_run = run
        return None

    def validator(self, names: Sequence[str]) -> Callable:
        """Gradio's validator for the race (it runs when a run joins the queue): the per-client cap,
        shown on the first input (the page paints it there; the API answers 422 with it). The
        values themselves are checked by ``check_request`` when the run starts."""
        def admit(*args):
            *values, request = args
            refused = self.admit(request)
            return tuple(gr.validate(not (refused and i == 0), refused if i == 0 and refused else "")
                         for i in range(len(values)))

        return with_request(admit, names)

    # -- cancels without an event id
    def note_cancel(self, body: dict) -> None:
        """``/cancel`` without an event id (the client did not know it yet): Gradio cancels only a
        task already running, so mark every admitted run of that session as cancelled; if it has
        none, its run has not joined yet, and is refused when it does."""
        if not isinstance(body, dict) or body.get("event_id") or body.get("fn_index") not in self.race_fns:
            return
        session = body.get("session_hash")
        if not isinstance(session, str):
            return
        with self._lock:
            self._reconcile()
            runs = [r for r in self._runs.values() if r.session == session]
            for r in runs:
                r.cancelled = True
            now = time.monotonic()
            for s, t in list(self._early.items()):   # sessions whose run never came: forget them
                if now - t > IN_FLIGHT_S:
                    del self._early[s]
            if not runs:
                self._early[session] = now

    def on_start(self, request) -> Callable[[], bool]:
        """A run starts; returns whether its client has cancelled it (asked at every event)."""
        run = getattr(getattr(getattr(request, "request", None), "state", None), "specrej_run", None)
        if run is None:
            return lambda: False
        run.seen = True
        return lambda: run.cancelled


def with_request(fn: Callable, names: Sequence[str]) -> Callable:
    """``fn(*values, request)`` declared as taking the parameters ``names`` and then Gradio's
    request: Gradio passes a ``gr.Request`` only to a positional parameter annotated with it."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    params.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request))
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {"request": gr.Request}
    return fn


class _RequestView:
    """A queued Gradio ``Event`` seen as a request (its join request's client and its session)."""

    def __init__(self, event):
        self.client = getattr(getattr(event, "request", None), "client", None)
        self.session_hash = getattr(event, "session_hash", None)


# ---------------------------------------------------------------- the HTTP gate

class ApiGate:
    """ASGI middleware: notes ``/cancel`` calls (for ``Guard.note_cancel``) and answers 404 to
    ``/gradio_api/call/<name>`` for a name that is not public."""

    def __init__(self, app, guard: Guard):
        self.app, self.guard = app, guard

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        path = scope.get("path", "").rstrip("/")
        if "/gradio_api/call/" in path:
            name = path.rsplit("/gradio_api/call/", 1)[1].split("/")[0]
            if name not in self.guard.public_api:
                return await _json(send, 404, {"detail": f"No API endpoint {name[:40]!r}: this app's API is "
                                               + ", ".join(f"/{n}" for n in sorted(self.guard.public_api))})
        if not path.endswith("/gradio_api/cancel"):
            return await self.app(scope, receive, send)
        read, size, more = [], 0, True
        while more and size <= CANCEL_BODY_LIMIT:   # a cancel is a few dozen bytes: read no more than this
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        if not more and size <= CANCEL_BODY_LIMIT:
            try:
                self.guard.note_cancel(json.loads(b"".join(m.get("body", b"") for m in read) or b"{}"))
            except ValueError:
                pass

        async def replay():   # hand Gradio the messages already read, then the rest
            return read.pop(0) if read else await receive()

        return await self.app(scope, replay, send)


async def _json(send, status: int, payload: dict) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
