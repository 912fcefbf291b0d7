"""The third round of the public deployment's guards (issue 26), alone and through real HTTP against the
app served on 127.0.0.1: the public surface is README's list exactly (no uploads, no /monitoring); a
visitor is a session, so ten visitors behind one address each get a place in the queue while one session
stays capped; X-Forwarded-For is read one hop and only behind a trusted proxy; a malformed join's 400
names no handler; /cancel answers while the torch step it interrupts is still running. Outcomes are
counted in runs, steps and HTTP statuses, never in seconds."""
from __future__ import annotations

import dataclasses
import re
import threading
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from conftest import HANG_GUARD_S, launch_local, request_values, tiny_app_context, wait_for

pytest.importorskip("gradio")
httpx = pytest.importorskip("httpx")

README = Path(__file__).resolve().parents[1] / "README.md"
PROMPT = "Give me three tips for staying healthy."
TINY = dict(n=4, alpha=0.5, budget=0, decision="budget", interval=16, max_new_tokens=6, temperature=0.9,
            top_p=0.95, seed=1)


def readme_surface() -> set[tuple[str, str]]:
    """README's list of the routes the public app answers (between the public-surface markers)."""
    text = README.read_text(encoding="utf-8")
    block = text.split("<!-- public-surface -->", 1)[1].split("<!-- /public-surface -->", 1)[0]
    routes = re.findall(r"^- `([A-Z]+) (/[^`]*)`", block, flags=re.M)
    assert routes, "README has no public-surface list"
    return set(routes)


def template(path: str) -> str:
    """A route with its placeholders blanked and no trailing slash: Gradio's and README's spellings meet."""
    return re.sub(r"\{[^}]*\}", "{}", path).rstrip("/") or "/"


# ---------------------------------------------------------------- alone

def test_readme_lists_exactly_the_gates_public_routes():
    from components.deploy.surface import PUBLIC_ROUTES

    assert readme_surface() == set(PUBLIC_ROUTES)
    assert len(PUBLIC_ROUTES) == len(set(PUBLIC_ROUTES))


@pytest.mark.parametrize("method,path,monitoring,answers", [
    ("POST", "/gradio_api/upload", False, False),
    ("POST", "/gradio_api/upload/", False, False),
    ("GET", "/gradio_api/upload_progress", False, False),
    ("GET", "/monitoring", False, False),
    ("GET", "/monitoring/summary", False, False),
    ("GET", "/monitoring/summary", True, True),
    ("GET", "/monitoring/abc", True, True),
    ("GET", "/gradio_api/file=/tmp/gradio/x/trace.json", False, False),   # issue 32: only the app's downloads
    ("GET", "/gradio_api/file/tmp/x", False, False),
    ("POST", "/gradio_api/queue/join/", False, True),
    ("GET", "/gradio_api/queue/join", False, False),
    ("POST", "/gradio_api/call/v2/run", False, True),
    ("POST", "/gradio_api/call/run/extra/segments", False, False),
    ("GET", "/gradio_api/call/run/event123", False, True),
    ("GET", "//config", False, False),
    ("POST", "/gradio_api/vibe-edit", False, False),
    ("GET", "/openapi.json", False, False),
])
def test_the_surface_answers_only_its_routes(method, path, monitoring, answers):
    from components.deploy.surface import served

    assert served(method, path, monitoring=monitoring) is answers


def test_the_proxy_is_trusted_only_when_the_deployment_says_so():
    from components.deploy.clients import Guard, client_address

    def request(peer, *forwarded):
        headers = NS(getlist=lambda name: list(forwarded) if name == "x-forwarded-for" else [])
        return NS(client=NS(host=peer), headers=headers, session_hash=None)

    spoofed = request("10.16.0.3", "1.2.3.4")
    assert client_address(spoofed) == "10.16.0.3"   # not trusted: the header changes nothing
    # behind the proxy: the entry it added (right-most), never what the client wrote left of it
    assert client_address(request("10.16.0.3", "6.6.6.6, 203.0.113.9"), trusted_proxy=True) == "203.0.113.9"
    assert client_address(request("10.16.0.3", "6.6.6.6", "203.0.113.9"), trusted_proxy=True) == "203.0.113.9"
    assert client_address(request("10.16.0.3", "203.0.113.9, junk"), trusted_proxy=True) == "10.16.0.3"
    assert client_address(request("10.16.0.3"), trusted_proxy=True) == "10.16.0.3"
    assert not Guard.from_env({}).trusted_proxy
    assert Guard.from_env({"SPACE_ID": "user/space"}).trusted_proxy
    assert not Guard.from_env({"SPACE_ID": "user/space", "SPECREJ_TRUSTED_PROXY": "0"}).trusted_proxy
    assert Guard.from_env({"SPECREJ_TRUSTED_PROXY": "1"}).trusted_proxy
    assert Guard.from_env({"SPECREJ_MAX_RUNS_PER_ADDRESS": "25"}).max_runs_per_address == 25
    assert not Guard.from_env({}).monitoring and Guard.from_env({"SPECREJ_MONITORING": "1"}).monitoring
    with pytest.raises(ValueError, match="SPECREJ_TRUSTED_PROXY"):
        Guard.from_env({"SPECREJ_TRUSTED_PROXY": "maybe"})


def test_a_cancel_wakes_a_reader_waiting_for_the_step_in_progress():
    """The handler waits for the torch thread's next event; a cancel ends that wait at once, and the
    torch thread stops after the step in progress (the generator is closed on it, never stepped again)."""
    from components.deploy.clients import StopFlag
    from components.session.worker import TorchWorker

    w = TorchWorker()
    in_step, go_on, closed = threading.Event(), threading.Event(), threading.Event()
    made: list = []

    def gen():
        try:
            for i in range(100):
                if i == 1:
                    in_step.set()
                    go_on.wait(HANG_GUARD_S)
                made.append(i)
                yield i
        finally:
            closed.set()

    flag = StopFlag()
    s = w.stream(gen, cancelled=flag)
    assert next(s) == 0
    got: list = []
    reader = threading.Thread(target=lambda: got.append(next(s, "ended")))
    reader.start()
    assert in_step.wait(HANG_GUARD_S)
    flag.set()
    reader.join(HANG_GUARD_S)
    assert got == ["ended"] and not go_on.is_set()   # the reader returned while the step still runs
    s.close(wait=False)
    go_on.set()
    assert closed.wait(HANG_GUARD_S)
    assert made == [0, 1]


# ---------------------------------------------------------------- in the app

@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def served(ctx):
    """The app (one race at a time, per-client cap 2, per-address cap half the queue of 10, trusting one proxy
    hop so that the tests can play two addresses) whose race
    waits at a gate before it starts, and the race of the prompt "held" in its third event."""
    import app

    from components.deploy.clients import Guard

    gate = {"open": threading.Event(), "in_step": threading.Event(), "go_on": threading.Event(),
            "closed": threading.Event(), "events": 0}
    gate["open"].set()

    def gated(model_spec, reward_spec, cfg, **kw):
        from components.session.stream import race_events

        gate["open"].wait(HANG_GUARD_S)
        try:
            for i, event in enumerate(race_events(model_spec, reward_spec, cfg, **kw)):
                if cfg.prompt == "held":
                    gate["events"] = i + 1
                    if i == 2:   # a long torch step
                        gate["in_step"].set()
                        gate["go_on"].wait(HANG_GUARD_S)
                yield event
        finally:
            if cfg.prompt == "held":
                gate["closed"].set()

    one = dataclasses.replace(ctx, concurrency=1, machine=ctx.machine.copy())
    demo = app.build_demo(one, events_fn=gated, guard=Guard(max_runs_per_client=2))
    url = launch_local(demo)
    try:
        yield demo, one, url, gate
    finally:
        gate["open"].set()
        gate["go_on"].set()
        demo.close()


def run_index(demo) -> int:
    return next(i for i, fn in demo.fns.items() if fn.api_name == "run")


def values(ctx, **overrides) -> list:
    return list(request_values(ctx, dict(prompt=PROMPT, **TINY), **overrides).values())


def join(url, demo, ctx, session, headers=None, data=None):
    body = {"data": values(ctx) if data is None else data, "fn_index": run_index(demo), "session_hash": session,
            "event_data": None, "trigger_id": None}
    return httpx.post(url.rstrip("/") + "/gradio_api/queue/join", json=body, headers=headers or {}, timeout=30)


def drain(url, demo, ctx, joined):
    """Cancel every joined run (queued ones leave the queue), open the gate, wait until none is left."""
    for session, r in joined:
        if r.status_code == 200:
            httpx.post(url.rstrip("/") + "/gradio_api/cancel", timeout=HANG_GUARD_S,
                       json={"fn_index": run_index(demo), "session_hash": session, "event_id": r.json()["event_id"]})
    return wait_for(lambda: not demo.specrej_guard._gradio_runs() and not ctx.active)


def test_the_served_surface_is_readmes_list_and_uploads_are_refused(served, tmp_path):
    """Every route Gradio serves, asked anonymously: those that answer (anything but the gate's 404) are
    README's list exactly; an upload is refused before Gradio reads a byte of it."""
    from components.deploy.gate import NOT_SERVED

    demo, ctx, url, gate = served
    base = url.rstrip("/")

    def routes(rs, prefix=""):
        for r in rs:
            inner = getattr(r, "original_router", None)
            if inner is not None:
                yield from routes(inner.routes, prefix + getattr(getattr(r, "include_context", None), "prefix", ""))
            elif getattr(r, "methods", None):
                for method in r.methods:
                    yield method, prefix + r.path

    declared = set(routes(demo.app.routes))
    assert ("POST", "/gradio_api/upload") in declared and ("GET", "/monitoring/summary") in declared
    answering, refused = set(), set()
    download = f"{demo.GRADIO_CACHE}/probe/specrej-trace-probe.json"   # the one kind of file= path that answers
    for method, path in sorted(declared):
        concrete = re.sub(r"\{[^}]*\}", "x", path).replace("/file=x", "/file=" + download)
        kw = {"json": {}} if method == "POST" else {}
        with httpx.stream(method, base + concrete, timeout=HANG_GUARD_S, **kw) as r:
            gated = r.status_code == 404 and r.headers.get("x-specrej-gate") == "not-served"
            if gated and method != "HEAD":
                assert r.read() and r.json() == {"detail": NOT_SERVED}
        (refused if gated else answering).add((method, template(path)))
    listed = {(m, template(p)) for m, p in readme_surface()}
    assert answering == listed, (answering - listed, listed - answering)
    assert {("POST", "/gradio_api/upload"), ("GET", "/monitoring"), ("GET", "/monitoring/summary"),
            ("GET", "/gradio_api/upload_progress")} <= refused

    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (4 << 20))
    with big.open("rb") as f:
        r = httpx.post(base + "/gradio_api/upload", files=[("files", f)] * 3, timeout=HANG_GUARD_S)
    assert r.status_code == 404 and r.json() == {"detail": NOT_SERVED}
    upload_dir = Path(demo.app.uploaded_file_dir)
    assert not upload_dir.exists() or not any(p.name == "big.bin" for p in upload_dir.rglob("*"))
    for path in ("/monitoring", "/monitoring/summary"):
        assert httpx.get(base + path, timeout=30).status_code == 404


def test_sessions_from_one_address_get_half_the_queue_and_one_session_stays_capped(served):
    """Issue 32 (4): ten sessions at one address took every place in the queue (per-address cap 10 = the queue's
    size). Now an address gets at most half the queue (5 of 10): its sixth session is refused, and another
    address still gets a place."""
    demo, ctx, url, gate = served
    guard = demo.specrej_guard
    assert ctx.max_queue == 10 and guard.max_runs_per_address == 5
    gate["open"].clear()
    joined: list = []
    try:
        # one session opening many connections: two runs, then refused
        mine = [join(url, demo, ctx, "one-visitor") for _ in range(3)]
        joined += [("one-visitor", r) for r in mine]
        assert [r.status_code for r in mine] == [200, 200, 422]
        assert "You already have 2 runs queued or running" in mine[2].text
        assert drain(url, demo, ctx, joined)
        joined.clear()
        guard.trusted_proxy = True   # the tests play a proxy: 203.0.113.5 is one school, 203.0.113.6 another
        school = {"X-Forwarded-For": "203.0.113.5"}
        ten = [(f"visitor-{i}", join(url, demo, ctx, f"visitor-{i}", headers=school)) for i in range(10)]
        joined += ten
        assert [r.status_code for _, r in ten] == [200] * 5 + [422] * 5, [r.text for _, r in ten]
        assert all("SPECREJ_MAX_RUNS_PER_ADDRESS" in r.text for _, r in ten[5:])
        other = join(url, demo, ctx, "elsewhere", headers={"X-Forwarded-For": "203.0.113.6"})
        joined.append(("elsewhere", other))
        assert other.status_code == 200, other.text
        assert len(guard._gradio_runs()) == 6   # queued or running: half the queue is left to other addresses
    finally:
        guard.trusted_proxy = False
        gate["open"].set()
        assert drain(url, demo, ctx, joined)


def test_a_spoofed_forwarded_for_changes_nothing_unless_the_proxy_is_trusted(served):
    """Requests without a session of their own (call/<name>) are their address: cap 2. Varying
    X-Forwarded-For must not multiply that when no proxy is trusted; behind a trusted proxy only the
    entry the proxy added counts."""
    demo, ctx, url, gate = served
    guard = demo.specrej_guard
    base = url.rstrip("/") + "/gradio_api/call/run"

    def post(forwarded):
        return httpx.post(base, json={"data": values(ctx)}, headers={"X-Forwarded-For": forwarded}, timeout=30)

    gate["open"].clear()
    accepted: list = []
    try:
        spoofed = [post(f"6.6.6.{i}") for i in range(6)]
        accepted += [r for r in spoofed if r.status_code == 200]
        assert [r.status_code for r in spoofed] == [200, 200, 422, 422, 422, 422]
        gate["open"].set()
        for r in accepted:
            httpx.get(f"{base}/{r.json()['event_id']}", timeout=HANG_GUARD_S)
        assert wait_for(lambda: not guard._gradio_runs() and not ctx.active)
        gate["open"].clear()
        accepted.clear()
        guard.trusted_proxy = True   # a Space: the proxy appends the address it saw
        chained = [post(f"6.6.6.{i}, 203.0.113.7") for i in range(4)]   # left of it: the client's own words
        accepted += [r for r in chained if r.status_code == 200]
        assert [r.status_code for r in chained] == [200, 200, 422, 422]
        other = post("6.6.6.9, 203.0.113.8")   # another visitor behind the proxy
        accepted.append(other)
        assert other.status_code == 200
    finally:
        guard.trusted_proxy = False
        gate["open"].set()
        for r in accepted:
            if r.status_code == 200:
                httpx.get(f"{base}/{r.json()['event_id']}", timeout=HANG_GUARD_S)
    assert wait_for(lambda: not guard._gradio_runs() and not ctx.active)


def test_a_malformed_join_gets_a_message_naming_no_handler(served):
    demo, ctx, url, gate = served
    gate["open"].set()
    short = join(url, demo, ctx, "short-join", data=values(ctx)[:-1])
    assert short.status_code == 400, short.text
    n = len(values(ctx))
    assert short.json() == {"detail": f"This event takes {n} input values; the request has {n - 1}."}
    r = httpx.post(url.rstrip("/") + "/gradio_api/call/run", json={"data": values(ctx)[:3]}, timeout=30)
    assert r.status_code == 400 and "admit" not in r.text and "handler" not in r.text, r.text
    no_session = httpx.post(url.rstrip("/") + "/gradio_api/queue/join", timeout=30,
                            json={"data": values(ctx), "fn_index": run_index(demo)})
    assert no_session.status_code == 400 and "admit" not in no_session.text


def test_cancel_answers_while_the_torch_step_runs_and_no_step_follows(served):
    """A race's torch step is held; ``job.cancel()`` (gradio_client: /cancel with the event id) returns
    while it is held, and once the step ends the torch thread takes no other."""
    from gradio_client import Client

    demo, ctx, url, gate = served
    gate["open"].set()
    client = Client(url, verbose=False, analytics_enabled=False)
    job = client.submit(*values(ctx, prompt="held", n=8, max_new_tokens=60), api_name="/run")
    assert gate["in_step"].wait(HANG_GUARD_S)
    answered: list = []
    def cancel():
        try:
            answered.append(job.cancel())
        except Exception as e:   # a refused cancel says why in the assertion
            answered.append(None)
            errors.append(repr(e))

    errors: list = []
    canceller = threading.Thread(target=cancel)
    canceller.start()
    canceller.join(HANG_GUARD_S)
    assert answered and not errors and not gate["go_on"].is_set(), errors   # answered while the step still runs
    assert wait_for(lambda: not ctx.active)
    gate["go_on"].set()
    assert gate["closed"].wait(HANG_GUARD_S)
    assert gate["events"] == 3   # the held step's event was the last one computed
    client.close()
