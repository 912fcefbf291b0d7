"""Guards for a public deployment, hooked into the app with a few lines (``app.py``).

What a hostile client tried, and what stops it here (no algorithm logic, no page layout):

- **Wrong types and broken text** (``check_request``): every field of a request must be a plain
  value of its kind (text for the prompt, the model, the reward ...), and text must be valid
  Unicode (a lone UTF-16 surrogate sent through the API cannot be tokenised, written or sent back
  as JSON). The message names the field; the text itself is never echoed.
- **One visitor filling the queue** (``Guard.admit``, Gradio's validator of the race: it runs when a
  run joins the queue, before it waits): at most ``SPECREJ_MAX_RUNS_PER_CLIENT`` (default 2) runs
  queued plus running per visitor, and ``SPECREJ_MAX_RUNS_PER_ADDRESS`` (default 10) per network
  address. A visitor is a session (the page's tab, a gradio_client ``Client``); a request without one
  of its own (``/gradio_api/call/<name>``, where Gradio makes up a session per request) is its
  address. Many visitors behind one address (a school, a proxy) each get their runs, up to the
  address's cap; one visitor making up sessions is held by the address's cap.
- **Addresses a client makes up** (``client_address``): the address is the TCP peer, unless a proxy
  is in front (``SPECREJ_TRUSTED_PROXY=1``; on by default on a Hugging Face Space, ``SPACE_ID``): then
  it is the right-most ``X-Forwarded-For`` entry, the one the proxy added; what the client wrote left of
  it is never read. ``app.launch`` turns uvicorn's own reading of ``X-Forwarded-For`` off, so that this
  is the one place that decides.
- **Anonymous routes the page does not use** (``ApiGate`` with ``surface.py``): uploads, Gradio's
  monitoring dashboard (``SPECREJ_MONITORING=1`` opens it), streaming inputs, login pages ... answer
  404; only the routes in ``surface.PUBLIC_ROUTES`` (README's list) answer.
- **Internal names in errors** (``ApiGate``): a queue join or API call with fewer input values than
  its event takes is refused with the counts; any other 400 Gradio would send on those routes (its
  text can name a handler and echo values) becomes a plain message.
- **A cancelled run that goes on computing** (``Guard.note_cancel``): ``/cancel`` without an
  event id (gradio_client's ``Job.cancel()`` while the job is starting) cancels nothing in Gradio
  and the run went on unread; with one, Gradio cancels the task but not the thread computing it.
  ``ApiGate`` notes every cancel; the run it names (or, without an id, every run of that session
  that joined before the cancel) stops at its next event. The handler waiting for the torch thread's
  next event is woken at once (``StopFlag``), so ``/cancel`` answers without waiting for the step in
  progress.
- **One client filling the queue with anything** (``Guard.bind``): the cap counts every queued
  endpoint together (races, replays, the lab's samples, measurements and exactness checks); each
  gets the same validator.
- **Private handlers called through the REST API** (``ApiGate``, with ``demo.queue(api_open=False)``):
  ``/gradio_api/call/<name>`` (and ``call/v2/<name>``) answers only for public endpoints; the direct
  routes ``/gradio_api/run/<name>`` and ``/gradio_api/api/<name>``, which call a handler outside the
  queue, serve only the page's own unqueued events (visibility toggles, status lines, Stop), never a
  queued handler; ``queue/join`` and the direct routes answer 404 for an unknown ``fn_index``; a
  request body over ``MAX_BODY`` bytes is refused (413).
- **Stop through the API** (``Guard.stop_session``): the page's Stop cancels in the browser; an API
  client's ``/stop`` marks its own session's runs (the events Stop cancels) as cancelled, and each
  stops at its next event (within one decoding step for a race).
- **Values echoed in messages** (``excerpt``): at most a short excerpt of any value a client sent.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import ipaddress
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Sequence

import gradio as gr

from specrej.config import check_text, env_int

from . import surface

log = logging.getLogger("specrej.app")
MAX_RUNS_ENV = "SPECREJ_MAX_RUNS_PER_CLIENT"
DEFAULT_MAX_RUNS = 2
MAX_ADDRESS_RUNS_ENV = "SPECREJ_MAX_RUNS_PER_ADDRESS"
DEFAULT_MAX_ADDRESS_RUNS = 10   # ten visitors behind one address each get a run queued (SPECREJ_MAX_QUEUE: 10)
TRUSTED_PROXY_ENV = "SPECREJ_TRUSTED_PROXY"
NOT_SERVED = "Not served by this deployment."   # the gate's 404 for a route off the public surface
MALFORMED = "This request does not match the event it names: send the values the page sends (gradio_client does)."
TEXT_FIELDS = ("prompt", "model", "reward", "preference", "decision", "second_decision", "x_axis")
IN_FLIGHT_S = 10.0   # an admitted run shows up in Gradio's queue within milliseconds; forget it after this
CANCEL_BODY_LIMIT = 4096
MAX_BODY = 1 << 20     # bytes of a POST the gate reads (prompts are capped at a few kB)
MAX_NAME_CHARS = 200   # model, reward, decision ... names are short
EXCERPT_CHARS = 40


# ---------------------------------------------------------------- request values

def _kind(value: Any) -> str:
    return {list: "a list", tuple: "a list", dict: "an object", bool: "true/false", type(None): "nothing"}.get(
        type(value), f"a {type(value).__name__}")


def excerpt(value: Any) -> str:
    """A short, printable excerpt of a value a client sent (for messages: never the whole of it)."""
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")   # a lone surrogate as its escape
    short = text[:EXCERPT_CHARS]
    return repr(short + ("…" if len(text) > EXCERPT_CHARS else ""))


def check_text_field(label: str, value: Any, max_chars: int = MAX_NAME_CHARS) -> str:
    """``value`` as text of at most ``max_chars`` valid characters; ValueError naming ``label``."""
    if not isinstance(value, str):
        raise ValueError(f"{label} must be text, not {_kind(value)}.")
    check_text(label, value)
    if len(value) > max_chars:
        raise ValueError(f"{label} is {len(value)} characters long; at most {max_chars} are allowed.")
    return value


def check_choice(label: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``; ValueError naming ``label`` and the choices."""
    check_text_field(label, value)
    if value not in choices:
        raise ValueError(f"{label} {excerpt(value)} is not one of: {', '.join(choices)}.")
    return value


def check_number(label: str, value: Any, lo: float | None = None, hi: float | None = None, *,
                 whole: bool = False) -> float | int:
    """``value`` as a number (a number written as text, as a page's number box may send it, is read);
    with ``lo`` and ``hi``, a finite one in [lo, hi] (a whole number when ``whole``). ValueError
    naming ``label`` otherwise."""
    kind = "a whole number" if whole else "a number"
    span = f" from {lo:g} to {hi:g}" if lo is not None and hi is not None else ""
    if isinstance(value, str):
        check_text_field(label, value, 40)
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{label} must be {kind}{span}, not {excerpt(value)}.") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{label} must be {kind}{span}, not {_kind(value)}.")
    if span and (not math.isfinite(value) or not lo <= value <= hi or (whole and value != int(value))):
        raise ValueError(f"{label} must be {kind}{span}, got {value:g}.")
    return int(value) if whole or isinstance(value, int) else float(value)


def check_request(request) -> None:
    """Raise ValueError naming the first field of ``request`` (a RunRequest) whose value is not a
    plain value of its kind, or whose text is not valid Unicode, or (but for the prompt and the
    preference, whose limits ``RunConfig`` and the context check) longer than a name can be."""
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
        if isinstance(value, str) and f.name not in ("prompt", "preference") and len(value) > MAX_NAME_CHARS:
            raise ValueError(f"{label} is {len(value)} characters long; at most {MAX_NAME_CHARS} are allowed.")


# ---------------------------------------------------------------- clients and their runs

def _flag(env, name: str, default: bool) -> bool:
    value = str(env.get(name, "")).strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value[:40]!r}: use 1 or 0.")


def _headers(request, name: str) -> list[str]:
    headers = getattr(request, "headers", None)
    if headers is None:
        return []
    if hasattr(headers, "getlist"):
        return [str(v) for v in headers.getlist(name)]
    value = headers.get(name) if hasattr(headers, "get") else None
    return [] if value is None else [str(value)]


def forwarded_for(request) -> str | None:
    """The right-most ``X-Forwarded-For`` entry (every header of that name, in order): the address
    the nearest proxy saw. None if there is none or it is not an IP address."""
    entries = [e.strip() for v in _headers(request, "x-forwarded-for") for e in v.split(",")]
    entries = [e for e in entries if e]
    if not entries:
        return None
    try:
        return str(ipaddress.ip_address(entries[-1][:64]))
    except ValueError:
        return None


def client_address(request, trusted_proxy: bool = False) -> str | None:
    """A request's network address: the TCP peer; behind a trusted proxy (one hop), the address that
    proxy saw, i.e. the right-most ``X-Forwarded-For`` entry (the peer if the proxy sent none).
    Entries left of it are whatever the client wrote and are never read."""
    if trusted_proxy:
        forwarded = forwarded_for(request)
        if forwarded is not None:
            return forwarded
    client = getattr(request, "client", None)
    host = getattr(client, "host", None) if client is not None else None
    return host if isinstance(host, str) and host else None


def client_key(request, address: str | None = None) -> str:
    """The visitor a request comes from: its session, else (Gradio's ``call/<name>`` routes make up a
    session per request) its address."""
    session = getattr(request, "session_hash", None)
    if isinstance(session, str) and session:
        return f"session:{session}"
    return f"address:{address}" if address else "session:None"


class StopFlag:
    """Whether a run's client cancelled it: ``flag()`` asks; ``flag.on_set(fn)`` calls ``fn`` when it
    is set (at once if it is already), e.g. to wake a handler waiting for the torch thread."""

    def __init__(self):
        self._set, self._hooks, self._lock = False, [], threading.Lock()

    def __call__(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._lock:
            if self._set:
                return
            self._set, hooks, self._hooks = True, self._hooks, []
        for hook in hooks:
            hook()

    def on_set(self, hook: Callable[[], None]) -> None:
        with self._lock:
            if not self._set:
                self._hooks.append(hook)
                return
        hook()


@dataclass(kw_only=True)
class _Run:
    """A run the guard admitted: whose it is, of which event, and whether its client cancelled it."""

    key: str                   # the visitor (client_key)
    address: str | None        # its network address (client_address)
    session: str | None
    fn: int                    # the event's fn index
    since: float               # time.monotonic() at admission
    seen: bool = False         # found in Gradio's queue or started
    stop: StopFlag = field(default_factory=StopFlag)

    @property
    def cancelled(self) -> bool:
        return self.stop()

    def cancel(self) -> None:
        self.stop.set()


@dataclass
class Guard:
    """Per-app state of the guards: the app's events by kind, the runs admitted, early cancels."""

    max_runs_per_client: int = DEFAULT_MAX_RUNS               # per visitor (session)
    max_runs_per_address: int = DEFAULT_MAX_ADDRESS_RUNS      # per network address, every visitor there
    trusted_proxy: bool = False   # one proxy in front: the address is the right-most X-Forwarded-For entry
    monitoring: bool = False      # Gradio's /monitoring routes answer (SPECREJ_MONITORING=1)
    blocks: Any = None                         # the gr.Blocks, once bound
    queued_fns: frozenset[int] = frozenset()   # every queued event: all count towards the per-client cap
    stop_fns: frozenset[int] = frozenset()     # the events the Stop button cancels (the race, the replay)
    direct_fns: frozenset[int] = frozenset()   # the page's unqueued events: the only ones on direct routes
    public_api: frozenset[str] = frozenset()
    _lock: Any = field(default_factory=threading.Lock)
    _runs: dict = field(default_factory=dict)     # id(join request) -> _Run
    _early: dict = field(default_factory=dict)    # (session, fn) -> time of an id-less cancel that found no run

    @classmethod
    def from_env(cls, env=None) -> "Guard":
        """SPECREJ_MAX_RUNS_PER_CLIENT, SPECREJ_MAX_RUNS_PER_ADDRESS, SPECREJ_TRUSTED_PROXY (default: on
        on a Hugging Face Space, whose proxy is the only way in) and SPECREJ_MONITORING (default off)."""
        env = os.environ if env is None else env
        return cls(max_runs_per_client=env_int(MAX_RUNS_ENV, DEFAULT_MAX_RUNS, env=env),
                   max_runs_per_address=env_int(MAX_ADDRESS_RUNS_ENV, DEFAULT_MAX_ADDRESS_RUNS, env=env),
                   trusted_proxy=_flag(env, TRUSTED_PROXY_ENV, bool(str(env.get("SPACE_ID", "")).strip())),
                   monitoring=_flag(env, surface.MONITORING_ENV, False))

    def serves(self, method: str, path: str) -> bool:
        """Whether the public app answers this route at all (``surface.py``)."""
        return surface.served(method, path, monitoring=self.monitoring)

    def bind(self, blocks) -> None:
        """Sort the app's events (queued, cancelled by Stop, unqueued, public) and give every queued
        event the per-client cap as its validator (Gradio runs it when the event joins the queue)."""
        self.blocks = blocks
        fns = blocks.fns
        self.queued_fns = frozenset(i for i, fn in fns.items() if fn.queue and fn.fn is not None)
        self.direct_fns = frozenset(i for i, fn in fns.items() if not fn.queue and fn.fn is not None)
        # Gradio keeps an event's cancels in a dependency of its own on the same trigger (no function)
        stop_triggers = [fn.targets for fn in fns.values() if fn.api_name == "stop"]
        self.stop_fns = frozenset(c for fn in fns.values() if fn.targets in stop_triggers for c in fn.cancels)
        for i in self.direct_fns:   # the page's own events: a malformed call gets a plain message
            fns[i].fn = _quiet(fns[i].fn)
        self.public_api = frozenset(fn.api_name for fn in fns.values()
                                    if fn.api_visibility == "public" and isinstance(fn.api_name, str))
        for i in self.queued_fns:
            fn = fns[i]
            if fn.validator is not None or not fn.inputs:
                raise ValueError(f"the queued event {fn.name!r} needs inputs and no validator of its own: "
                                 "the guard's per-client cap is its validator")
            fn.validator = self.validator(i, [f"value{k}" for k in range(len(fn.inputs))])

    # -- what is queued and running
    def _gradio_runs(self) -> list:
        """Queued events waiting in Gradio's queue or running now."""
        queue = getattr(self.blocks, "_queue", None)
        out = []
        for q in getattr(queue, "event_queue_per_concurrency_id", {}).values():
            out += list(getattr(q, "queue", []))
        for job in getattr(queue, "active_jobs", []) or []:
            out += list(job or [])
        return [e for e in out if getattr(getattr(e, "fn", None), "_id", None) in self.queued_fns]

    def _reconcile(self) -> tuple[list, list[_Run]]:
        """(Gradio's queued events, admitted runs not among them yet); forgets runs that are done
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

    # -- the per-client cap and early cancels (Gradio's validator of every queued event)
    def admit(self, request, fn: int) -> str | None:
        """Why this run of event ``fn`` may not join the queue (None: it may, and is noted as on its way).
        Two caps: the visitor's (its session, else its address) and its address's, over every run the
        guard admitted that is on its way, queued or running."""
        if request is None:
            return None
        address = client_address(request, self.trusted_proxy)
        key, session = client_key(request, address), getattr(request, "session_hash", None)
        with self._lock:
            self._reconcile()
            if time.monotonic() - self._early.pop((session, fn), -IN_FLIGHT_S) < IN_FLIGHT_S:
                return "This run was cancelled before it reached the queue."
            runs = list(self._runs.values())   # every admitted run on its way, queued or running
            mine = sum(r.key == key for r in runs)
            if mine >= self.max_runs_per_client:
                return (f"You already have {self.max_runs_per_client} runs queued or running (races, replays "
                        f"and lab runs together), the most this deployment allows per client ({MAX_RUNS_ENV}): "
                        "wait for one to finish, or stop it, and try again.")
            here = sum(r.address == address for r in runs)
            if address is not None and here >= self.max_runs_per_address:
                return (f"{here} runs from your network address are queued or running, the most this deployment "
                        f"allows per address ({MAX_ADDRESS_RUNS_ENV}): wait for one to finish and try again.")
            raw = getattr(request, "request", None)
            if raw is not None:
                self._runs[id(raw)] = run = _Run(key=key, address=address, session=session, fn=fn,
                                                 since=time.monotonic())
                raw.state.specrej_run = run
        return None

    def validator(self, fn: int, names: Sequence[str]) -> Callable:
        """Gradio's validator for event ``fn`` (it runs when a run joins the queue): the per-client
        cap, shown on the first input (the page paints it there; the API answers 422 with it). The
        values themselves are checked by the handler when the run starts."""
        def admit(*args):
            *values, request = args
            refused = self.admit(request, fn)
            return tuple(gr.validate(not (refused and i == 0), refused if i == 0 and refused else "")
                         for i in range(len(values)))

        return with_request(admit, names)

    # -- cancels: without an event id, and /stop through the API
    def note_cancel(self, body: dict) -> None:
        """``/cancel`` (the page's Stop, ``Job.cancel()``). With an event id, Gradio cancels the run's
        task, but a thread computing it goes on until it next yields: mark that run as cancelled, so
        its torch thread stops before its next event. Without one (the client did not know it yet),
        Gradio cancels nothing: mark every admitted run of that session and event as cancelled; if it
        has none, its run has not joined yet, and is refused when it does."""
        if not isinstance(body, dict):
            return
        if body.get("event_id"):
            with self._lock:
                for e in self._gradio_runs():
                    if getattr(e, "_id", None) == body["event_id"]:
                        run = self._runs.get(id(getattr(e, "request", None)))
                        if run is not None:
                            run.cancel()
            return
        fn, session = body.get("fn_index"), body.get("session_hash")
        if fn not in self.queued_fns or not isinstance(session, str):
            return
        with self._lock:
            self._reconcile()
            runs = [r for r in self._runs.values() if r.session == session and r.fn == fn]
            for r in runs:
                r.cancel()
            now = time.monotonic()
            for k, t in list(self._early.items()):   # sessions whose run never came: forget them
                if now - t > IN_FLIGHT_S:
                    del self._early[k]
            if not runs:
                self._early[(session, fn)] = now

    def stop_session(self, session: Any) -> int:
        """Stop (``/stop``): mark the session's runs of the events Stop cancels as cancelled; each
        stops at its next event. Returns how many were running or queued."""
        if not isinstance(session, str):
            return 0
        with self._lock:
            self._reconcile()
            runs = [r for r in self._runs.values() if r.session == session and r.fn in self.stop_fns
                    and not r.cancelled]
            for r in runs:
                r.cancel()
        return len(runs)

    def on_start(self, request) -> Callable[[], bool]:
        """A run starts; returns whether its client has cancelled it (asked at every event)."""
        return started(request)


def started(request) -> Callable[[], bool]:
    """Every queued handler calls this first (``request``: its ``gr.Request``): the admitted run is
    marked as started, so the per-client cap forgets it once it leaves Gradio's queue (a run never
    marked is held for IN_FLIGHT_S: a third quick lab sample was refused). Returns the run's
    ``StopFlag``: called, whether its client has cancelled it (``/stop``, ``/cancel``)."""
    run = getattr(getattr(getattr(request, "request", None), "state", None), "specrej_run", None)
    if run is None:
        return lambda: False
    run.seen = True
    return run.stop


def _quiet(fn: Callable) -> Callable:
    """``fn`` whose unexpected errors (a malformed call of one of the page's own events, such as a
    null where the page sends a value) reach the client as a plain message, without a traceback."""
    if getattr(fn, "_specrej_quiet", False) or inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn):
        return fn

    @functools.wraps(fn)
    def quiet(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except gr.Error:
            raise
        except Exception as e:
            log.warning("malformed call of %s: %s", getattr(fn, "__name__", "an event"), type(e).__name__)
            raise gr.Error("This event's input is not what the page sends.", print_exception=False) from None

    quiet._specrej_quiet = True
    return quiet


def with_request(fn: Callable, names: Sequence[str]) -> Callable:
    """``fn(*values, request)`` declared as taking the parameters ``names`` and then Gradio's
    request: Gradio passes a ``gr.Request`` only to a positional parameter annotated with it."""
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    params.append(inspect.Parameter("request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=gr.Request))
    fn.__signature__ = inspect.Signature(params)
    fn.__annotations__ = {"request": gr.Request}
    return fn


# ---------------------------------------------------------------- the server

@contextlib.contextmanager
def forwarded_headers_ignored():
    """While Gradio builds its uvicorn server: uvicorn trusts no ``X-Forwarded-For`` (by default it
    takes the header from any peer on 127.0.0.1, which lets a local caller pose as many clients).
    ``client_address`` alone reads it, one hop, where ``SPECREJ_TRUSTED_PROXY`` says a proxy is in front."""
    old = os.environ.get("FORWARDED_ALLOW_IPS")
    if old:
        log.warning("FORWARDED_ALLOW_IPS is ignored: the app reads X-Forwarded-For itself where %s=1.",
                    TRUSTED_PROXY_ENV)
    os.environ["FORWARDED_ALLOW_IPS"] = ""   # uvicorn reads it when its Config is made, inside launch()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("FORWARDED_ALLOW_IPS", None)
        else:
            os.environ["FORWARDED_ALLOW_IPS"] = old


# ---------------------------------------------------------------- the HTTP gate

class ApiGate:
    """ASGI middleware in front of Gradio's routes:

    - any route off the public surface (``surface.py``; uploads, monitoring ...): 404;
    - ``call/<name>``, ``call/v2/<name>``: 404 unless ``name`` is a public endpoint;
    - ``run/<name>``, ``api/<name>`` (direct: outside the queue, its concurrency and validators):
      only the page's unqueued events (``Guard.direct_fns``, by ``fn_index`` or by name), else 404;
    - ``queue/join``: 404 for an ``fn_index`` the app does not have;
    - ``queue/join``, ``call/<name>``, ``run/<name>``, ``api/<name>``: 400 for fewer input values than
      the event takes; any other 400 of Gradio's there becomes ``MALFORMED`` (Gradio's text can name
      a handler and echo the values);
    - ``cancel``: noted for ``Guard.note_cancel``;
    - a body over ``MAX_BODY`` bytes: 413.
    Every refusal is a short JSON ``{"detail": ...}``; what passes reaches Gradio byte for byte."""

    def __init__(self, app, guard: Guard):
        self.app, self.guard = app, guard

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root + "/"):
            path = path[len(root):]
        if not self.guard.serves(scope.get("method", ""), path):
            return await _json(send, 404, {"detail": NOT_SERVED}, [(b"x-specrej-gate", b"not-served")])
        path = path.rstrip("/")
        if scope.get("method") != "POST" or not path.startswith("/gradio_api/"):
            return await self.app(scope, receive, send)
        route = path[len("/gradio_api/"):].split("/")
        head = route[0]
        if head not in ("call", "run", "api", "queue", "cancel"):
            return await self.app(scope, receive, send)
        if head == "call":
            name = route[2] if len(route) > 2 and route[1] == "v2" else route[1] if len(route) > 1 else ""
            if name not in self.guard.public_api:
                return await _json(send, 404, {"detail": f"No API endpoint {excerpt(name)}: this app's API is "
                                               + ", ".join(f"/{n}" for n in sorted(self.guard.public_api))})
        limit = CANCEL_BODY_LIMIT if head == "cancel" else MAX_BODY
        read, size, more = [], 0, True
        while more and size <= limit:   # read no more than the limit
            message = await receive()
            read.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        complete = not more and size <= limit
        body: Any = None
        if complete:
            try:
                body = json.loads(b"".join(m.get("body", b"") for m in read) or b"{}")
            except ValueError:
                body = None
        if head == "cancel":
            if complete and body is not None:
                self.guard.note_cancel(body)
        elif not complete:
            return await _json(send, 413, {"detail": f"The request is larger than {MAX_BODY} bytes."})
        elif head in ("run", "api") or route == ["queue", "join"]:
            refused = self._refuse(head, route[1] if len(route) > 1 else "", body)
            if refused:
                return await _json(send, 404, {"detail": refused})
        elif head == "call" and route[1] == "v2":
            refused = self._refuse_keywords(route[2], body)
            if refused:
                return await _json(send, 400, {"detail": refused})
        if head != "cancel" and not (head == "call" and route[1] == "v2"):
            short = self._short_of_values(head, route, body)
            if short:
                return await _json(send, 400, {"detail": short})

        async def replay():   # hand Gradio the messages already read, then the rest
            return read.pop(0) if read else await receive()

        return await self.app(scope, replay, send if head == "cancel" else _plain_400(send))

    def _short_of_values(self, head: str, route: list[str], body: Any) -> str | None:
        """Why a positional call (``data``: a list) has too few values for its event (None: it has
        enough, or Gradio refuses it otherwise). Gradio's own message names the handler."""
        fns = getattr(self.guard.blocks, "fns", {})
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            return None
        index = body.get("fn_index")
        if head in ("call", "run", "api") and not (isinstance(index, int) and index in fns):
            name = route[1] if len(route) > 1 else ""
            index = next((i for i, fn in fns.items() if fn.api_name == name), None)
        fn = fns.get(index) if isinstance(index, int) and not isinstance(index, bool) else None
        if fn is None:
            return None
        needed = len(fn.inputs)
        shown = [b for b in fn.inputs if not getattr(b, "skip_api", False)]
        if len(data) >= needed or (head == "call" and len(data) == len(shown)):
            return None
        return f"This event takes {needed} input values; the request has {len(data)}."

    def _refuse(self, head: str, name: str, body: Any) -> str | None:
        """Why a direct call or a queue join may not reach Gradio (None: it may)."""
        fns = getattr(self.guard.blocks, "fns", {})
        index = body.get("fn_index") if isinstance(body, dict) else None
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index not in fns):
            return f"No event with fn_index {excerpt(index)} in this app."
        if head == "queue":
            if index is None or index not in self.guard.queued_fns | self.guard.direct_fns:
                return "A queue join needs the fn_index of one of this app's events."
            return None
        if index is None:
            index = next((i for i, fn in fns.items() if fn.api_name == name), None)
        if index not in self.guard.direct_fns:
            return ("This route runs only the page's own unqueued events; join the queue instead "
                    "(gradio_client, or /gradio_api/call/<name> for this app's API: "
                    + ", ".join(f"/{n}" for n in sorted(self.guard.public_api)) + ").")
        return None


    def _refuse_keywords(self, name: str, body: Any) -> str | None:
        """Why a ``call/v2/<name>`` body (the endpoint's parameters by keyword) may not reach Gradio."""
        fn = next((fn for fn in getattr(self.guard.blocks, "fns", {}).values() if fn.api_name == name), None)
        if not isinstance(body, dict):
            return "call/v2 takes a JSON object of the endpoint's parameters by name."
        sig = inspect.signature(fn.fn) if fn is not None and fn.fn is not None else inspect.Signature()
        params = {p: v for p, v in sig.parameters.items() if p != "request" and v.annotation is not gr.Request}
        unknown = [k for k in body if k not in params]
        if unknown:
            return f"/{name} has no parameter {excerpt(unknown[0])}; its parameters are: {', '.join(params)}."
        missing = [p for p, v in params.items() if v.default is inspect.Parameter.empty and p not in body]
        if missing:
            return f"/{name} needs a value for {', '.join(missing)}."
        return None


def _plain_400(send):
    """``send`` that replaces the body of a 400 response with ``MALFORMED``."""
    state = {"swap": False}

    async def plain(message):
        if message["type"] == "http.response.start" and message.get("status") == 400:
            state["swap"] = True
            data = json.dumps({"detail": MALFORMED}).encode()
            state["body"] = data
            return await send({"type": "http.response.start", "status": 400,
                               "headers": [(b"content-type", b"application/json"),
                                           (b"content-length", str(len(data)).encode())]})
        if state["swap"] and message["type"] == "http.response.body":
            if not message.get("more_body", False):
                await send({"type": "http.response.body", "body": state["body"]})
            return None
        return await send(message)

    return plain


async def _json(send, status: int, payload: dict, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data})
