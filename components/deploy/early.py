"""A script the page runs before Gradio's own: ASGI middleware that puts it first in the page's ``<head>``.

Gradio adds a Blocks' ``head`` to the page from its own script, after its modules have run, and some of them keep the
browser's functions they found then (Gradio's status tracker keeps ``requestAnimationFrame``). ``assets/loops.js``
must come before them, so it goes into the HTML Gradio serves for the page (``GET /``, a ``text/html`` 200 without a
content encoding), as the first element of its ``<head>``; every other response passes untouched.
"""
from __future__ import annotations

HEAD = b"<head>"


def inject(html: bytes, tag: bytes) -> bytes:
    """``html`` with ``tag`` right after its ``<head>`` (any case); unchanged where it has none."""
    at = html.lower().find(HEAD)
    return html if at < 0 else html[: at + len(HEAD)] + tag + html[at + len(HEAD):]


def _header(headers, name: bytes) -> bytes | None:
    return next((v for k, v in headers if k.lower() == name), None)


class EarlyScript:
    """ASGI middleware: ``script`` (JavaScript) first in the head of the page Gradio serves at its root."""

    def __init__(self, app, script: str):
        self.app, self.tag = app, b"<script>" + script.encode() + b"</script>"

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http" or scope.get("method") not in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        path, root = scope.get("path", ""), scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):]
        if path.rstrip("/") != "":
            return await self.app(scope, receive, send)
        start, chunks = None, []

        async def held(message):
            nonlocal start
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if (message.get("status") == 200 and (_header(headers, b"content-type") or b"").startswith(b"text/html")
                        and _header(headers, b"content-encoding") is None):
                    start = {**message, "headers": headers}
                    return None
                return await send(message)
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return None
            body = b"".join(chunks)
            if scope["method"] == "HEAD":   # no body: the length a GET's would have
                length = int(_header(start["headers"], b"content-length") or 0) + len(self.tag)
            else:
                body = inject(body, self.tag)
                length = len(body)
            headers = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
            await send({**start, "headers": headers + [(b"content-length", str(length).encode())]})
            return await send({"type": "http.response.body", "body": body})

        return await self.app(scope, receive, held)
