"""The HTTP gate: ASGI middleware in front of every one of Gradio's routes.

- any route off the public surface (``surface.py``; uploads, monitoring ...): 404;
- ``/gradio_api/file=<path>``: only the app's own downloads (a trace file in Gradio's cache folder, named
  ``specrej-trace-*.json``); anything else, a URL above all (Gradio would fetch it from the server), 404;
- every POST body is read (at most ``MAX_BODY`` bytes, else 413; each part within ``BODY_TIMEOUT_S`` and the whole
  within ``BODY_TOTAL_S``, else 408) and parsed before Gradio sees it: a body
  that is not JSON, or nested deeper than ``MAX_DEPTH`` (Python's parser raises RecursionError on a few
  thousand ``[``), or not an object where a route takes one, gets a short 400: no body reaches a 500;
- ``call/<name>``, ``call/v2/<name>``: 404 unless ``name`` is a public endpoint;
- ``run/<name>``, ``api/<name>`` (direct: outside the queue, its concurrency and validators): only the page's
  unqueued events (``Guard.direct_fns``, by ``fn_index`` or by name), else 404;
- ``queue/join``: 404 for an ``fn_index`` the app does not have;
- ``queue/join``, ``call/<name>``, ``run/<name>``, ``api/<name>``: 400 for fewer or more input values than the
  event takes, and for a value its input components would refuse (``inputs.py``: a choice not among a
  dropdown's, an example index past the list; Gradio's own check answered 500 and logged a traceback); any
  other 400 or 422 of Gradio's there becomes a short message (Gradio's and FastAPI's text can name a handler
  and echo the whole body), and on ``run/`` and ``api/`` a handler's error (Gradio's 500) a 400 that keeps
  Gradio's ``error`` field (the page's own client shows it);
- ``queue/join`` of the race when the queue is full, or the visitor or its address is at its cap, and the race
  has a labelled recording: moved to the event that plays it at once, which says why (``Guard.move_when_full``,
  ``Guard.move_when_capped``; the plan: ``planner.plan`` with ``Press.FULL_QUEUE``);
- ``cancel``: noted for ``Guard.note_cancel``; its 422 (no ``event_id``) one short line too; one naming an event
  another session queued 404, passed to nobody (Gradio would drop that event from its queue and close its stream,
  and the other visitor's race ended);
- every body's ``session_hash`` is noted per household (``memory.HouseholdSessions``): past
  ``SPECREJ_SESSIONS_PER_ADDRESS`` (100) sessions that did nothing, that household's least recently seen one goes;
- every body's ``session_hash`` (``queue/join``, ``cancel``, ``run/``, ``api/``, ``call/``) and the
  ``event_id`` of ``cancel`` and ``reset``: 400 unless 1 to 64 of ``[A-Za-z0-9_-]``;
- ``GET heartbeat/<session_hash>``: 400 for a malformed session hash (Gradio's stream put it into a URL and
  logged a 95-line ``httpx.InvalidURL`` traceback for ``%00`` or ``%0d%0a``);
- ``GET queue/data`` and ``GET call/<name>/<event_id>``: 400 for a malformed session hash or event id, 404 for
  one Gradio holds no event stream for (Gradio would start a 200 and then log a traceback per request);
- every GET's 422 (FastAPI's, which echoes the value it could not read: ``GET /pwa_icon/abc``) one short line,
  as a POST's.
Every refusal is a short JSON ``{"detail": ...}`` (at most ``fields.MAX_MESSAGE_CHARS`` characters, values cut
to ``fields.EXCERPT_CHARS``, numbers as numbers); what passes reaches Gradio byte for byte.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import re
from urllib.parse import parse_qs
from collections.abc import Sequence
from typing import Any

import gradio as gr
from starlette.requests import Request

from specrej.core.config import env_int

from components.state.fields import excerpt, short
from components.deploy import gradio_private, memory
from components.deploy.clients import Guard, address_group, client_address
from components.deploy.inputs import refuse_values, value_words

NOT_SERVED = "Not served by this deployment."   # the gate's 404 for a route off the public surface
MALFORMED = "This request does not match the event it names: send the values the page sends (gradio_client does)."
NOT_JSON = "The request body must be a JSON object (nested at most {depth} deep), as gradio_client sends it."
CANCEL_BODY_LIMIT = 4096
BODY_TIMEOUT_S = 10.0   # each part of a POST's body must arrive within this (connections.py: the head's own clock)
BODY_TOTAL_S = 30.0     # ... and the whole body within this: a body dripped a few bytes a part never ends otherwise
MAX_BODY = 1 << 20     # bytes of a POST the gate reads (prompts are capped at a few kB)
MAX_DEPTH = 32         # nesting of a body's JSON: the app's inputs need three or four levels
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")   # a session hash or event id: the page's (11 of a-z0-9), a uuid
NO_STREAM = "No event stream for this {what}: join the queue first (the page and gradio_client do)."
BAD_ID = "A {what} is 1 to 64 letters, digits, '-' or '_'."
TOO_LONG_NUMBER = "A number in the request body has more than 4300 digits."
SESSIONS_ENV = "SPECREJ_SESSIONS_PER_ADDRESS"   # sessions that did nothing kept per household (memory.HouseholdSessions)
HEARTBEAT = "/gradio_api/heartbeat/"   # GET heartbeat/<session_hash>: the page's keep-alive stream

class ApiGate:
    """ASGI middleware in front of Gradio's routes (this module's docstring says what it refuses)."""

    def __init__(self, app, guard: Guard, sessions: memory.HouseholdSessions | None = None):
        self.app, self.guard = app, guard
        self._kept = False   # the sessions table evicts idle sessions first (issue 65, 1), set at the first request
        # made-up sessions per household (SPECREJ_SESSIONS_PER_ADDRESS; 0: no cap): past it, its own idle ones go
        self.sessions = sessions or memory.HouseholdSessions(
            env_int(SESSIONS_ENV, memory.SESSIONS_PER_HOUSEHOLD, lo=0))

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        if not self._kept and self.guard.blocks is not None:
            self._kept = gradio_private.keep_active_sessions(self.guard.blocks, memory.did_something)
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root + "/"):
            path = path[len(root):]
        if not self.guard.serves(scope.get("method", ""), path):
            return await _json(send, 404, {"detail": NOT_SERVED}, [(b"x-specrej-gate", b"not-served")])
        path = path.rstrip("/")
        if scope.get("method") != "POST":   # the surface's other routes are GET and HEAD: no body is read
            refused = self._refuse_stream(path, scope.get("query_string", b""))
            if refused:
                return await _json(send, refused[0], {"detail": refused[1]})
            return await self.app(scope, receive, _plain_errors(send, plain_400=False))
        route = path[len("/gradio_api/"):].split("/") if path.startswith("/gradio_api/") else [path]
        head = route[0]
        if head == "call":
            name = route[2] if len(route) > 2 and route[1] == "v2" else route[1] if len(route) > 1 else ""
            if name not in self.guard.public_api:
                return await _json(send, 404, {"detail": short(
                    f"No API endpoint {excerpt(name)}: this app's API is "
                    + ", ".join(f"/{n}" for n in sorted(self.guard.public_api)))})
        limit = CANCEL_BODY_LIMIT if head == "cancel" else MAX_BODY
        read, size, more = [], 0, True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + BODY_TOTAL_S
        while more and size <= limit:   # no more than the limit, each part within BODY_TIMEOUT_S, all within BODY_TOTAL_S
            try:
                message = await asyncio.wait_for(receive(), max(0.0, min(BODY_TIMEOUT_S, deadline - loop.time())))
            except asyncio.TimeoutError:   # a slow body (a few bytes every few seconds) holds nothing for long
                return await _json(send, 408, {"detail": f"The request's body did not arrive within {BODY_TIMEOUT_S:g} "
                                                         f"s a part, {BODY_TOTAL_S:g} s in all: send it again."},
                                   [(b"connection", b"close")])   # the rest of that body is never read: close
            read.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        if more or size > limit:
            return await _json(send, 413, {"detail": f"The request is larger than {limit} bytes."})
        body, why = parse_body(b"".join(m.get("body", b"") for m in read))
        if why:
            return await _json(send, 400, {"detail": why})
        keyword = head == "call" and len(route) > 1 and route[1] == "v2"   # the body is the endpoint's parameters
        for key, what in (("session_hash", "session_hash"), ("event_id", "event id")):
            if keyword or (key == "event_id" and head not in ("cancel", "reset")):
                continue   # a direct call's event id is dropped by Gradio unread; a join has none
            if body.get(key) is not None and not (isinstance(body[key], str) and SESSION_ID.fullmatch(body[key])):
                return await _json(send, 400, {"detail": BAD_ID.format(what=what)})
        session = body.get("session_hash")
        if not keyword and isinstance(session, str) and self.guard.blocks is not None:   # a well-formed one (above)
            seen = Request(scope)
            household = address_group(client_address(_Joiner(seen.headers, seen.client, session),
                                                     self.guard.trusted_proxy), self.guard.ipv6_prefix)
            self.sessions.seen(self.guard.blocks, session, household)
        if head == "cancel":
            owner = gradio_private.event_owner(self.guard.blocks, body["event_id"]) \
                if isinstance(body.get("event_id"), str) and self.guard.blocks is not None else None
            if owner is not None and owner != body.get("session_hash"):   # another session's run: only it may end it
                return await _json(send, 404, {"detail": "No such event in this session."})
            self.guard.note_cancel(body)
            if self.guard.blocks is not None:   # a cancel racing its run's end raised KeyError in Gradio
                gradio_private.forgive_dropped_iterators(self.guard.blocks)
        if head in ("run", "api") or route == ["queue", "join"]:
            refused = self._refuse(head, route[1] if len(route) > 1 else "", body)
            if refused:
                return await _json(send, 404, {"detail": short(refused)})
        elif head == "call" and route[1] == "v2":
            refused = self._refuse_keywords(route[2], body)
            if refused:
                return await _json(send, 400, {"detail": short(refused)})
        if head in ("run", "api", "queue", "call") and not (head == "call" and route[1] == "v2"):
            wrong = self._wrong_count(head, route, body) or refuse_values(self._event(head, route, body),
                                                                            body.get("data"))
            if wrong:
                return await _json(send, 400, {"detail": wrong})

        if route == ["queue", "join"]:   # a full queue or a cap: the race's recording, at once, where there is one
            moved = await asyncio.to_thread(self.guard.move_when_full, body.get("fn_index"), body.get("data"))
            if moved is None:
                seen = Request(scope)
                who = _Joiner(seen.headers, seen.client, body.get("session_hash"))
                moved = await asyncio.to_thread(self.guard.move_when_capped, body.get("fn_index"), body.get("data"), who)
            if moved is not None:
                raw = json.dumps(dict(body, fn_index=moved)).encode()
                read = [{"type": "http.request", "body": raw, "more_body": False}]
                scope = dict(scope, headers=[(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
                             + [(b"content-length", str(len(raw)).encode())])

        async def resend():   # hand Gradio the messages already read, then the rest
            return read.pop(0) if read else await receive()

        return await self.app(scope, resend, _plain_errors(send, plain_400=head != "cancel",
                                                           plain_500=head in ("run", "api")))

    def _refuse_stream(self, path: str, query: bytes) -> tuple[int, str] | None:
        """(status, why) for an event stream Gradio would open and then fail inside (a traceback in the log per
        request, after a 200 has started): ``queue/data`` of a session with no stream, ``call/<name>/<event_id>``
        of an event with none; a malformed session hash or event id: 400. None: the stream exists. A heartbeat's
        session hash (a path segment Gradio puts into a URL when the heartbeat ends) must be well formed: 400."""
        if path.startswith(HEARTBEAT) and not SESSION_ID.fullmatch(path[len(HEARTBEAT):]):
            return 400, BAD_ID.format(what="session_hash")
        if self.guard.blocks is None:
            return None
        if path == "/gradio_api/queue/data":
            hashes = parse_qs(query.decode("latin-1"), keep_blank_values=True).get("session_hash", [])
            if len(hashes) != 1 or not SESSION_ID.fullmatch(hashes[0]):
                return 400, BAD_ID.format(what="session_hash")
            if not gradio_private.has_stream(self.guard.blocks, hashes[0]):
                return 404, NO_STREAM.format(what="session")
            return None
        route = path[len("/gradio_api/call/"):].split("/") if path.startswith("/gradio_api/call/") else []
        if len(route) in (2, 3) and (len(route) == 2 or route[0] == "v2"):
            if not SESSION_ID.fullmatch(route[-1]):
                return 400, BAD_ID.format(what="event id")
            if not gradio_private.event_has_stream(self.guard.blocks, route[-1]):
                return 404, NO_STREAM.format(what="event")
        return None

    def _wrong_count(self, head: str, route: list[str], body: Any) -> str | None:
        """Why a positional call (``data``: a list) has too few or too many values for its event (None: it
        has as many as the event takes, or Gradio refuses it otherwise). Gradio's own message names the
        handler, and Gradio drops extra values unread."""
        data = body.get("data") if isinstance(body, dict) else None
        fn = self._event(head, route, body)
        if fn is None or not isinstance(data, list):
            return None
        needed = fn.inputs
        if len(data) == needed or (head == "call" and len(data) == fn.shown_inputs):
            return None
        return f"This event takes {needed} input values; the request has {len(data)}."

    def _event(self, head: str, route: list[str], body: Any):
        """The event (``gradio_private.EventInfo``) a positional call names: by ``fn_index``, else (``call/``,
        ``run/``, ``api/``) by the route's API name; None where it names none."""
        fns = self.guard.events
        index = body.get("fn_index") if isinstance(body, dict) else None
        if head in ("call", "run", "api") and not (isinstance(index, int) and index in fns):
            name = route[1] if len(route) > 1 else ""
            index = next((i for i, fn in fns.items() if fn.api_name == name), None)
        return fns.get(index) if isinstance(index, int) and not isinstance(index, bool) else None

    def _refuse(self, head: str, name: str, body: Any) -> str | None:
        """Why a direct call or a queue join may not reach Gradio (None: it may)."""
        fns = self.guard.events
        index = body.get("fn_index") if isinstance(body, dict) else None
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index not in fns):
            return f"No event with fn_index {value_words(index)} in this app."
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
        fn = next((fn for fn in self.guard.events.values() if fn.api_name == name), None)
        if not isinstance(body, dict):
            return "call/v2 takes a JSON object of the endpoint's parameters by name."
        sig = inspect.signature(fn.handler) if fn is not None and fn.handler is not None else inspect.Signature()
        params = {p: v for p, v in sig.parameters.items() if p != "request" and v.annotation is not gr.Request}
        unknown = [k for k in body if k not in params]
        if unknown:
            return f"/{name} has no parameter {excerpt(unknown[0])}; its parameters are: {', '.join(params)}."
        missing = [p for p, v in params.items() if v.default is inspect.Parameter.empty and p not in body]
        if missing:
            return f"/{name} needs a value for {', '.join(missing)}."
        return None


class _Joiner:
    """A queue join as the guard's caps read a request (``clients.client_address``, ``client_key``): its headers,
    its TCP peer and the session it names, before Gradio has made a ``gr.Request`` of it."""

    def __init__(self, headers, client, session_hash):
        self.headers, self.client = headers, client
        self.session_hash = session_hash if isinstance(session_hash, str) else None


def parse_body(raw: bytes) -> tuple[Any, str | None]:
    """(the JSON object a POST carries, None), or (None, why the gate refuses it): not JSON, nested deeper
    than MAX_DEPTH (Python's parser raises RecursionError on a few thousand levels), a number past Python's
    4300 digits, or not an object. An empty body is an empty object (Gradio says what it lacks)."""
    why = NOT_JSON.format(depth=MAX_DEPTH)
    try:
        body = json.loads(raw or b"{}")
    except RecursionError:
        return None, why
    except ValueError as e:
        return None, TOO_LONG_NUMBER if "digits" in str(e) and "integer string conversion" in str(e) else why
    if not isinstance(body, dict) or _depth(body) > MAX_DEPTH:
        return None, why
    return body, None


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (without recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _fastapi_words(body: bytes) -> str | None:
    """FastAPI's 422 (``{"detail": [{"loc": ..., "msg": ..., "input": <the value sent>}]}``) as one short
    line without the value; None for any other body (the guard's own 422s pass as they are)."""
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(detail, list) or not detail or not isinstance(detail[0], dict) \
            or not {"loc", "msg"} <= set(detail[0]):   # the caps' refusals: Gradio's validation list
        return None
    first = detail[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")[:40] or "the body"
    return short(f"This request's {where} is not what this route takes: {str(first.get('msg', ''))[:80]}.")


def _plain_errors(send, *, plain_400: bool = True, plain_500: bool = False):
    """``send`` that replaces the body of a 400 response with ``MALFORMED`` (not with ``plain_400=False``: a
    cancel's) and FastAPI's 422 (which echoes the whole body it could not read) with one short line. With
    ``plain_500`` (the direct routes), Gradio's 500 for a handler's error (``{"error": ...}``: an input the page
    never sends, which the guard's wrapper already logged in one line, ``clients._quiet``) becomes a 400 with the
    same fields, the error cut short and also as ``detail`` (the page's own client reads ``error``)."""
    state: dict = {"held": None, "chunks": []}
    caught = ((400, 422) if plain_400 else (422,)) + ((500,) if plain_500 else ())

    async def plain(message):
        if message["type"] == "http.response.start" and message.get("status") in caught:
            state["held"] = message
            return None
        if state["held"] is None or message["type"] != "http.response.body":
            return await send(message)
        state["chunks"].append(message.get("body", b""))
        if message.get("more_body", False):
            return None
        start, body = state["held"], b"".join(state["chunks"])
        state["held"], state["chunks"] = None, []
        if start["status"] == 500:
            payload = _gradio_error(body)
            if payload is None:
                await send(start)
                return await send({"type": "http.response.body", "body": body})
            return await _json(send, 400, payload)
        words = MALFORMED if start["status"] == 400 else _fastapi_words(body)
        if words is None:
            await send(start)
            return await send({"type": "http.response.body", "body": body})
        return await _json(send, start["status"], {"detail": words})

    return plain


def _gradio_error(body: bytes) -> dict | None:
    """Gradio's error payload of a direct call (``{"error": <message or null>, ...}``) as a 400's: the message
    cut to ``fields.MAX_MESSAGE_CHARS`` (``MALFORMED`` where Gradio gives none), also as ``detail``. None for
    any other body (it passes as it is)."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or "error" not in payload:
        return None
    error = payload["error"]
    words = short(error) if isinstance(error, str) and error.strip() else MALFORMED
    return dict(payload, error=words, detail=words)


async def _json(send, status: int, payload: dict, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": data})

