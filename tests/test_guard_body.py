"""Issue 65 (2), found by ``scripts/probe_guard.py``: a POST whose body comes a few bytes every few seconds kept its
connection open for as long as it dripped (each part arrived within the gate's clock of a part). The whole body now
has a clock of its own (``gate.BODY_TOTAL_S``): past it the gate answers 408 and the app never sees the request."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS


def test_a_body_dripped_within_each_parts_clock_gets_a_408_once_the_whole_is_late(monkeypatch):
    from components.deploy import gate

    monkeypatch.setattr(gate, "BODY_TIMEOUT_S", 5.0)    # each drip comes well within a part's clock ...
    monkeypatch.setattr(gate, "BODY_TOTAL_S", 0.3)      # ... but the whole body is late
    reached, sent, drips = [], [], []

    async def app(scope, receive, send):
        reached.append(scope)

    async def receive():
        await asyncio.sleep(0.02)
        drips.append(1)
        return {"type": "http.request", "body": b"1, ", "more_body": True}   # never the last part

    async def send(message):
        sent.append(message)

    guard = NS(serves=lambda method, path: True, blocks=None, public_api=set())
    scope = {"type": "http", "method": "POST", "path": "/gradio_api/queue/join", "root_path": "", "headers": []}
    asyncio.run(asyncio.wait_for(gate.ApiGate(app, guard)(scope, receive, send), 60))
    assert not reached and sent[0]["status"] == 408, sent
    assert b"in all" in sent[1]["body"] and len(drips) > 1   # it dripped, and was cut by the whole body's clock
