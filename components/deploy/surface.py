"""The public surface: every route the deployed app answers without a login, and nothing else.

Gradio 6 serves about seventy routes whatever the page holds: file uploads (``/gradio_api/upload``:
64 MB files, 500 per request, served back publicly), the analytics dashboard
(``/monitoring``, ``/monitoring/summary``: per-handler counts and timings; a ``GET /monitoring`` prints
the dashboard's secret URL into the log), streaming inputs, recordings, run history, the vibe editor,
login pages. The page uses a few. ``ApiGate`` (``gate.py``) lets through only the routes listed here
and answers 404 to every other; what a route listed here accepts is the gate's and the handlers'
business (``gate.py``, ``components/state/request.py``). A new Gradio route stays closed until it is added here and to README.

README's list (section "Running it publicly", between the ``public-surface`` markers) is this list,
one route a line; ``tests/test_guard_surface.py`` checks the README, this list and the routes the
served app answers against each other.

Placeholders: ``{path}`` matches any rest of the path (slashes included), any other ``{name}`` one
segment. A trailing slash is ignored (Gradio declares most routes with and without one).
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable

# (method, route): the page, its assets and the queue the page and gradio_client use; the REST API.
PUBLIC_ROUTES: tuple[tuple[str, str], ...] = (
    # the page and what it loads
    ("GET", "/"), ("HEAD", "/"),
    ("GET", "/config"),
    ("GET", "/assets/{path}"), ("GET", "/static/{path}"), ("GET", "/svelte/{path}"),
    ("GET", "/favicon.ico"), ("GET", "/robots.txt"), ("GET", "/manifest.json"),
    ("GET", "/pwa_icon"), ("GET", "/pwa_icon/{size}"),
    ("GET", "/theme.css"), ("GET", "/gradio_api/theme.css"),
    ("GET", "/gradio_api/info"), ("GET", "/gradio_api/app_id"),
    ("GET", "/gradio_api/startup-events"),   # launch() calls it once to start the queue
    # the trace download: only the app's own files (specrej-trace-*.json in Gradio's cache; ``served``)
    ("GET", "/gradio_api/file={path}"), ("HEAD", "/gradio_api/file={path}"),
    # the queue (the page and gradio_client)
    ("POST", "/gradio_api/queue/join"), ("GET", "/gradio_api/queue/data"),
    ("GET", "/gradio_api/heartbeat/{session_hash}"),
    ("POST", "/gradio_api/cancel"), ("POST", "/gradio_api/reset"),
    # the page's unqueued events (the gate serves no queued handler here)
    ("POST", "/gradio_api/run/{api_name}"), ("POST", "/gradio_api/api/{api_name}"),
    # the REST API (the gate serves the public endpoints only)
    ("POST", "/gradio_api/call/{api_name}"), ("GET", "/gradio_api/call/{api_name}/{event_id}"),
    ("POST", "/gradio_api/call/v2/{api_name}"), ("GET", "/gradio_api/call/v2/{api_name}/{event_id}"),
)

# Gradio's analytics dashboard: open only where the operator sets SPECREJ_MONITORING=1.
MONITORING_ENV = "SPECREJ_MONITORING"
MONITORING_ROUTES: tuple[tuple[str, str], ...] = (
    ("GET", "/monitoring"), ("GET", "/monitoring/summary"), ("GET", "/monitoring/{key}"),
)


def _pattern(route: str) -> re.Pattern:
    parts = re.split(r"(\{[a-z_]+\})", route)
    body = "".join(".+" if p == "{path}" else "[^/]+" if p.startswith("{") else re.escape(p) for p in parts)
    return re.compile(body)


@lru_cache(maxsize=None)   # bounded: one entry per route of the two lists above
def _compiled(routes: tuple[tuple[str, str], ...]) -> tuple[tuple[str, re.Pattern], ...]:
    return tuple((method, _pattern(route)) for method, route in routes)


FILE_ROUTE = "/gradio_api/file="


def served(method: str, path: str, *, monitoring: bool = False, download: Callable[[str], bool] | None = None) -> bool:
    """Whether the public app answers ``method path`` (a request's path, after any root path). A ``file=``
    path answers only where ``download`` says it is one of the app's own downloads (without it: none does;
    Gradio would serve any file in its cache, and fetch any ``http(s)://`` URL from the server)."""
    if path.startswith(FILE_ROUTE) and method in ("GET", "HEAD"):
        return download is not None and download(path[len(FILE_ROUTE):])
    path = path.rstrip("/") or "/"
    routes = PUBLIC_ROUTES + (MONITORING_ROUTES if monitoring else ())
    return any(m == method and p.fullmatch(path) for m, p in _compiled(routes))
