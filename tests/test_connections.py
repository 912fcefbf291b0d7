"""The server's own connection limits (issue 65, 2; components/deploy/connections.py): a connection that sends no
request head, or sends it a line at a time (slowloris), is closed once its head is late; one address opens at most
its cap of connections; a request that arrives in time is served, and so are keep-alive requests after it. On a
bare uvicorn server with the protocol, a 1 s head timeout and a cap of 4. Outcomes: closed or served."""
from __future__ import annotations

import socket
import threading
import time

import pytest

uvicorn = pytest.importorskip("uvicorn")

from components.deploy import connections, gradio_private  # noqa: E402

WAIT_S = 30.0   # a hang guard: how long a test waits for the server to act (never a figure asserted)


async def hello(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(scope="module")
def server():
    protocol = connections.GuardedH11.configured(head_s=1.0, per_address=4)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with gradio_private.uvicorn_options(http=protocol):   # as app.launch hands it to Gradio's Config
        config = uvicorn.Config(hello, host="127.0.0.1", port=port, log_level="warning")
    assert config.http is protocol
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not srv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield port, protocol
    srv.should_exit = True
    thread.join(WAIT_S)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes this connection before the hang guard (recv returns b"" or the peer resets)."""
    sock.settimeout(WAIT_S)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_a_silent_connection_is_closed_once_its_head_is_late(server):
    port, protocol = server
    before = protocol.closed_slow
    with socket.create_connection(("127.0.0.1", port)) as s:
        assert closed_by_server(s)
    assert protocol.closed_slow == before + 1


def test_a_slowloris_head_is_closed_and_a_prompt_one_is_served_with_keep_alive(server):
    port, _ = server
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.4)
        s.sendall(b"X-A: 1\r\n")   # a line at a time, never the blank line that ends the head
        assert closed_by_server(s)
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(2):   # two requests on one keep-alive connection, each head sent at once
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(WAIT_S)
            assert s.recv(1024).startswith(b"HTTP/1.1 200")


def test_one_address_opens_at_most_its_cap_of_connections(server):
    port, protocol = server
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    try:
        for s in held:   # each of the four is served
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(WAIT_S)
            assert s.recv(1024).startswith(b"HTTP/1.1 200")
        before = protocol.closed_over_cap
        with socket.create_connection(("127.0.0.1", port)) as fifth:
            assert closed_by_server(fifth)
        assert protocol.closed_over_cap == before + 1
    finally:
        for s in held:
            s.close()


def test_the_settings_come_from_the_environment_and_a_space_has_no_address_cap():
    assert connections.from_env({}).per_address == connections.MAX_CONNECTIONS
    assert connections.from_env({"SPACE_ID": "someone/specrej"}).per_address == 0
    made = connections.from_env({"SPECREJ_HEAD_TIMEOUT_S": "3", "SPECREJ_MAX_CONNECTIONS": "7"})
    assert (made.head_s, made.per_address) == (3.0, 7)
    with pytest.raises(ValueError, match="0 or more"):
        connections.from_env({"SPECREJ_MAX_CONNECTIONS": "-1"})


def test_a_slow_body_gets_a_408_from_the_gate(monkeypatch):
    """The gate reads a POST's body part by part, each within its clock: a body that stops arriving is answered 408
    (the app behind it never sees the request)."""
    import asyncio
    from types import SimpleNamespace as NS

    from components.deploy import gate

    monkeypatch.setattr(gate, "BODY_TIMEOUT_S", 0.2)
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope)

    guard = NS(serves=lambda method, path: True, blocks=None, public_api=set())
    parts = [{"type": "http.request", "body": b'{"data": [', "more_body": True}]

    async def receive():
        if parts:
            return parts.pop(0)
        await asyncio.sleep(3600)   # the rest never comes

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/gradio_api/queue/join", "root_path": "", "headers": []}
    asyncio.run(asyncio.wait_for(gate.ApiGate(app, guard)(scope, receive, send), WAIT_S))
    assert not reached and sent[0]["status"] == 408 and b"did not arrive" in sent[1]["body"]
