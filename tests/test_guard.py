"""The public deployment's guards (``components/guard.py``), first alone, then in the app served on
127.0.0.1 and driven as a hostile client would: raw POSTs with a lone surrogate, wrong types, a
storm of runs from one client, a cancel before the job had an event id, private handlers.
Outcomes are counted in decoding steps and events, never in seconds."""
from __future__ import annotations

import dataclasses
import json
import threading

import pytest
from conftest import HANG_GUARD_S, launch_local, request_values, text, tiny_app_context, wait_for

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

PROMPT = "Give me three tips for staying healthy."
TINY = dict(n=4, alpha=0.5, budget=0, decision="budget", interval=16, max_new_tokens=6, temperature=0.9,
            top_p=0.95, seed=1)




# ---------------------------------------------------------------- alone

@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


@pytest.mark.parametrize("field,value,message", [
    ("reward", [1, 2], "reward must be text, not a list"),
    ("model", {"a": 1}, "model must be text, not an object"),
    ("prompt", ["x"], "prompt must be text, not a list"),
    ("prompt", 7, "prompt must be text, not a whole number"),
    ("preference", None, "preference must be text, not nothing"),
    ("n", [3], "n must be a whole number from 1 to 32, not a list"),
    ("alpha", {"v": 0.5}, "alpha must be a number from 0 to 0.95, not an object"),
    ("prompt", "tips \ud800", "prompt contains a character that is not valid text"),
    ("preference", "\udfff", "preference contains a character that is not valid text"),
    ("x_axis", "\ud83d", "x_axis contains a character that is not valid text"),
])
def test_wrong_types_and_broken_text_are_refused_naming_the_field(ctx, field, value, message):
    from components.state.request import RunRequest

    with pytest.raises(ValueError, match=message) as e:
        RunRequest.parse(request_values(ctx, dict(prompt=PROMPT, **TINY), **{field: value}), ctx.limits)
    json.dumps(str(e.value)).encode("utf-8")   # the message itself is valid text
    RunRequest.parse(request_values(ctx, dict(prompt=PROMPT, **TINY)), ctx.limits)   # a good request passes


def test_the_client_is_its_session_else_its_address():
    """Issue 26: many visitors behind one address are many clients (each session); a request with no
    session of its own (Gradio's call/<name>) is its address."""
    from types import SimpleNamespace as NS

    from components.deploy.clients import client_address, client_key

    assert client_key(NS(client=NS(host="10.0.0.7"), session_hash="s1"), "10.0.0.7") == "session:s1"
    assert client_key(NS(client=NS(host="10.0.0.7"), session_hash=None), "10.0.0.7") == "address:10.0.0.7"
    assert client_address(NS(client=NS(host="10.0.0.7"), session_hash="s1")) == "10.0.0.7"
    assert client_address(NS(client=None, session_hash="s1")) is None


def test_an_id_less_cancel_stops_the_runs_of_its_session_or_refuses_its_next_join():
    from types import SimpleNamespace as NS

    from components.deploy.clients import Guard

    g = Guard(queued_fns=frozenset({4, 9}))

    def join(session, host="10.0.0.1"):
        request = NS(session_hash=session, client=NS(host=host), request=NS(state=NS()))
        return request, g.admit(request, 4)

    (a, refused_a), (other, _) = join("s"), join("t", host="10.0.0.2")
    assert refused_a is None
    # both run now: Gradio's queue holds them as running jobs
    running = [NS(fn=NS(_id=4), request=r.request, session_hash=r.session_hash, client=r.client) for r in (a, other)]
    g.blocks = NS(_queue=NS(event_queue_per_concurrency_id={}, active_jobs=[running, None]))
    stop_a, stop_other = g.on_start(a), g.on_start(other)
    g.note_cancel({"fn_index": 4, "session_hash": "s", "event_id": "abc"})   # with an id: Gradio's own cancel
    g.note_cancel({"fn_index": 9, "session_hash": "s", "event_id": None})    # another event of the session
    assert not stop_a()
    g.note_cancel({"fn_index": 4, "session_hash": "s", "event_id": None})
    assert stop_a() and not stop_other()
    # a cancel that finds no run of its session: the session's run joining next is refused, once
    g.note_cancel({"fn_index": 4, "session_hash": "u", "event_id": None})
    assert "cancelled before it reached the queue" in join("u", host="10.0.0.3")[1]
    assert join("u", host="10.0.0.3")[1] is None


def test_a_cancel_with_an_event_id_stops_that_run_at_its_next_event():
    """Gradio cancels the task; the guard also tells the torch thread computing it (and no other run)."""
    from types import SimpleNamespace as NS

    from components.deploy.clients import Guard

    g = Guard(queued_fns=frozenset({4}))
    requests = [NS(session_hash="s", client=NS(host=f"10.0.0.{i}"), request=NS(state=NS())) for i in (1, 2)]
    assert all(g.admit(r, 4) is None for r in requests)
    running = [NS(fn=NS(_id=4), _id=f"event{i}", request=r.request, session_hash="s", client=r.client)
               for i, r in enumerate(requests)]
    g.blocks = NS(_queue=NS(event_queue_per_concurrency_id={}, active_jobs=[running]))
    first, second = (g.on_start(r) for r in requests)
    g.note_cancel({"fn_index": 4, "session_hash": "s", "event_id": "event-unknown"})
    assert not first() and not second()
    g.note_cancel({"fn_index": 4, "session_hash": "s", "event_id": "event1"})
    assert second() and not first()


def test_early_cancels_of_sessions_that_never_join_are_forgotten(monkeypatch):
    from components.deploy import clients as guard_mod

    g = guard_mod.Guard(queued_fns=frozenset({4}))
    clock = {"t": 1000.0}
    monkeypatch.setattr(guard_mod.time, "monotonic", lambda: clock["t"])
    for i in range(1000):   # a flood of id-less cancels for made-up sessions
        g.note_cancel({"fn_index": 4, "session_hash": f"junk{i}", "event_id": None})
    clock["t"] += guard_mod.IN_FLIGHT_S + 1
    g.note_cancel({"fn_index": 4, "session_hash": "last", "event_id": None})
    assert set(g._early) == {("last", 4)}


def test_the_gate_reads_a_cancel_body_of_a_few_bytes_only_and_passes_every_byte_on():
    """A cancel body is a few bytes: read whole, noted and passed on byte for byte; a larger one is refused
    (413) before Gradio parses it (issue 32: a nested one gave Gradio's parser a RecursionError)."""
    import asyncio

    from components.deploy.clients import Guard
    from components.deploy.gate import CANCEL_BODY_LIMIT, ApiGate

    def deliver(chunks):
        g = Guard(queued_fns=frozenset({4}))
        got: list = []

        async def app(scope, receive, send):
            while True:
                m = await receive()
                got.append(m.get("body", b""))
                if not m.get("more_body"):
                    break

        messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

        async def receive():
            return messages.pop(0)

        sent: list = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/gradio_api/cancel"}
        asyncio.run(ApiGate(app, g)(scope, receive, send))
        return g, b"".join(got), sent[0]["status"] if sent else None

    body = json.dumps({"fn_index": 4, "session_hash": "s", "event_id": None}).encode()
    g, passed, status = deliver([body[:10], body[10:]])
    assert passed == body and ("s", 4) in g._early and status is None
    huge = [b"x" * 1000] * (CANCEL_BODY_LIMIT // 1000 + 5)
    g, passed, status = deliver(huge)
    assert status == 413 and not passed and not g._early


def test_the_cap_counts_runs_on_their_way_into_the_queue():
    from types import SimpleNamespace as NS

    from components.deploy.clients import Guard

    g = Guard(max_runs_per_client=2, max_runs_per_address=3, queued_fns=frozenset({4, 5}))
    held = []   # Gradio holds a join's request while its run is queued (the guard knows runs by it)

    def req(session, host="10.0.0.9"):
        held.append(NS(session_hash=session, client=NS(host=host), request=NS(state=NS())))
        return held[-1]

    assert g.admit(req("a"), 4) is None and g.admit(req("a"), 5) is None   # a race and a lab run
    assert "You already have 2 runs queued or running" in g.admit(req("a"), 4)   # the same session
    assert g.admit(req("b"), 4) is None   # another session at the same address (issue 26: not refused)
    assert "SPECREJ_MAX_RUNS_PER_ADDRESS" in g.admit(req("c"), 4)   # the address's cap
    assert g.admit(req("d", host="10.0.0.8"), 5) is None


# ---------------------------------------------------------------- in the app

@pytest.fixture(scope="module")
def served_gated(ctx):
    """The app with one worker whose race waits at a gate (tests open it), and per-client cap 2."""
    import app
    from gradio_client import Client

    from components.deploy.clients import Guard

    gate = {"open": threading.Event(), "started": []}

    def gated(model_spec, reward_spec, cfg, **kw):
        from components.session.stream import race_events

        gate["started"].append(cfg.prompt)
        gate["open"].wait(HANG_GUARD_S)
        yield from race_events(model_spec, reward_spec, cfg, **kw)

    one = dataclasses.replace(ctx, concurrency=1, machine=ctx.machine.copy())
    demo = app.build_demo(one, events_fn=gated, guard=Guard(max_runs_per_client=2))
    url = launch_local(demo)
    try:
        yield demo, one, url, gate, Client(url, verbose=False, analytics_enabled=False)
    finally:
        gate["open"].set()
        demo.close()


def kwargs(ctx, **overrides):
    return request_values(ctx, dict(prompt=PROMPT, **TINY), **overrides)


def raw_call(url: str, name: str, data: dict):
    """POST /gradio_api/call/<name> with a JSON body built by hand (a lone surrogate survives as
    the escape \\udXXX), then read the event stream; returns (http status, last data payload)."""
    import httpx

    base = url.rstrip("/") + "/gradio_api"
    body = json.dumps({"data": list(data.values())})   # ensure_ascii: "\ud800" is sent as its escape
    r = httpx.post(f"{base}/call/{name}", content=body, headers={"content-type": "application/json"}, timeout=30)
    if r.status_code != 200:
        return r.status_code, r.text
    stream = httpx.get(f"{base}/call/{name}/{r.json()['event_id']}", timeout=HANG_GUARD_S).text
    payloads = [line[5:].strip() for line in stream.splitlines() if line.startswith("data:")]
    return 200, json.loads(payloads[-1])


@pytest.mark.parametrize("field", ["prompt", "preference"])
def test_a_lone_surrogate_posted_raw_gets_cant_run_and_the_app_stays_usable(served_gated, field):
    demo, ctx, url, gate, client = served_gated
    gate["open"].set()
    overrides = {field: "tips \ud800 please"}
    if field == "preference":
        overrides["reward"] = "preference"
    status, out = raw_call(url, "run", kwargs(ctx, **overrides))
    assert status == 200, out
    shown = text(out[0])
    assert shown.startswith("**Can't run") and "not valid text" in shown and field in shown, shown
    assert "\ud800" not in json.dumps(out, ensure_ascii=False)
    assert not ctx.active
    assert "Done" in text(client.predict(**kwargs(ctx), api_name="/run")[0])


def test_wrong_types_through_the_api_get_a_message_naming_the_field(served_gated):
    demo, ctx, url, gate, client = served_gated
    gate["open"].set()
    for field, value, needle in (("reward", [1, 2], "reward must be text"), ("n", "abc", "n must be a whole number"),
                                 ("model", {"x": 1}, "model must be text"), ("prompt", ["x"], "prompt must be text"),
                                 ("alpha", [0.5], "alpha must be a number")):
        shown = text(client.predict(**kwargs(ctx, **{field: value}), api_name="/run")[0])
        assert shown.startswith("**Can't run") and needle in shown, (field, shown)
    assert "Done" in text(client.predict(**kwargs(ctx), api_name="/run")[0])


def test_one_client_gets_at_most_its_cap_of_runs_queued_plus_running(served_gated):
    """A storm of fire-and-forget POSTs from one address: two get in, the rest are refused with a
    message; the cap frees as runs finish."""
    import httpx

    demo, ctx, url, gate, client = served_gated
    gate["open"].clear()
    gate["started"].clear()
    base = url.rstrip("/") + "/gradio_api"
    results: list = []

    def post(i):
        body = json.dumps({"data": list(kwargs(ctx, prompt=f"{PROMPT} #{i}").values())})
        results.append(httpx.post(f"{base}/call/run", content=body, headers={"content-type": "application/json"},
                                  timeout=30))

    threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_GUARD_S)
    admitted = [r for r in results if r.status_code == 200]
    refused = [r for r in results if r.status_code != 200]
    assert len(admitted) == 2 and len(refused) == 6, [r.status_code for r in results]
    assert all(r.status_code == 422 and "runs queued or running" in r.text and "SPECREJ_MAX_RUNS_PER_CLIENT" in r.text
               for r in refused)
    # a visitor with a session of its own at the same address is not (issue 26): its run is queued
    queued = client.submit(**kwargs(ctx, prompt="another visitor"), api_name="/run")
    assert wait_for(lambda: queued.status().code.name in ("IN_QUEUE", "PROCESSING") or queued.done())
    gate["open"].set()
    assert "Done" in text(queued.result(timeout=HANG_GUARD_S)[0])
    for r in admitted:   # read both runs to their end
        httpx.get(f"{base}/call/run/{r.json()['event_id']}", timeout=HANG_GUARD_S)
    assert wait_for(lambda: not ctx.active)
    assert "Done" in text(client.predict(**kwargs(ctx), api_name="/run")[0])   # the cap freed


def test_a_queued_run_cancelled_without_an_event_id_stops_within_a_step(served_gated, steps_by_prompt):
    """The run is queued behind another when its client cancels without an event id: Gradio
    removes nothing, so the run starts later; it must stop at its first event."""
    import httpx
    from gradio_client import Client

    demo, ctx, url, gate, client = served_gated
    gate["open"].clear()
    gate["started"].clear()
    first = client.submit(**kwargs(ctx, prompt="first"), api_name="/run")
    assert wait_for(lambda: gate["started"] == ["first"])
    other = Client(url, verbose=False, analytics_enabled=False)
    second = other.submit(**kwargs(ctx, prompt="second", n=8, max_new_tokens=60), api_name="/run")
    assert wait_for(lambda: second.status().code.name in ("IN_QUEUE", "STARTING") and second.status().rank is not None
                    or len(gate["started"]) > 1)
    fn_index = next(i for i, fn in demo.fns.items() if fn.api_name == "run")
    httpx.post(url.rstrip("/") + "/gradio_api/cancel", timeout=30,
               json={"fn_index": fn_index, "session_hash": other.session_hash, "event_id": None})
    gate["open"].set()
    assert "Done" in text(first.result(timeout=HANG_GUARD_S)[0])
    # it stops at its first event, or (the torch thread asks before every event) before its race starts
    assert wait_for(lambda: second.done() and not ctx.active)
    assert steps_by_prompt.get("second", 0) <= 2, steps_by_prompt   # one step per arm at most
    # the same session's next run is not touched by that cancel
    assert "Done" in text(other.predict(**kwargs(ctx, prompt="third"), api_name="/run")[0])
    assert steps_by_prompt["third"] > 2


def test_job_cancel_right_after_submit_stops_the_run_within_a_step(served_gated, steps_by_prompt, monkeypatch):
    """gradio_client's Job.cancel() at once, mostly before the job has an event id (STARTING)."""
    from gradio_client import Client

    demo, ctx, url, gate, client = served_gated
    gate["open"].set()
    guard = demo.specrej_guard
    at_cancel: dict = {}
    real_note = guard.note_cancel

    def note(body):
        at_cancel.setdefault("steps", steps_by_prompt.get(prompt, 0))   # steps taken before the cancel arrived
        return real_note(body)

    monkeypatch.setattr(guard, "note_cancel", note)
    prompt = "cancelled at once"
    fresh = Client(url, verbose=False, analytics_enabled=False)
    job = fresh.submit(**kwargs(ctx, prompt=prompt, n=8, max_new_tokens=60), api_name="/run")
    job.cancel()
    assert wait_for(lambda: not ctx.active and job.done() and "steps" in at_cancel)
    assert steps_by_prompt.get(prompt, 0) - at_cancel["steps"] <= 1, (steps_by_prompt, at_cancel)
    assert steps_by_prompt.get(prompt, 0) < 2 * 60   # far from the whole run
    assert "Done" in text(fresh.predict(**kwargs(ctx), api_name="/run")[0])


def test_the_api_is_run_and_stop_only(served_gated):
    import httpx

    demo, ctx, url, gate, client = served_gated
    gate["open"].set()
    info = client.view_api(return_format="dict", print_info=False)
    # the race's API is /run and /stop; the autospec lab's tab (issue 12) adds its own endpoint
    assert {"/run", "/stop"} <= set(info["named_endpoints"]) <= {"/run", "/stop", "/autospec_sample"}, info
    assert not info.get("unnamed_endpoints")
    base = url.rstrip("/") + "/gradio_api"
    private = [fn.api_name for fn in demo.fns.values() if fn.api_visibility != "public" and fn.api_name]
    assert private
    for name in private:
        r = httpx.post(f"{base}/call/{name}", json={"data": []}, timeout=30)
        assert r.status_code == 404 and "/run" in r.text and "/stop" in r.text, (name, r.status_code, r.text)
    assert httpx.post(f"{base}/call/stop", json={"data": []}, timeout=30).status_code == 200
    # exactly one handler runs a race: the Run button and Shift+Enter in the prompt share it
    assert sum(fn.api_name == "run" for fn in demo.fns.values()) == 1
    assert not any(str(fn.api_name).startswith("run_") for fn in demo.fns.values())


def test_a_64_of_ipv6_addresses_is_capped_like_one_address():
    """Issue 42 (1): seven runs from seven addresses of one /64 were all admitted; now they share one
    address's cap (5 of a queue of 10), an IPv4-mapped address is its IPv4 address, and another household is
    another address. SPECREJ_IPV6_PREFIX sets the network (issue 50 (3): a household's /56 by default;
    ``tests/test_guard_round6.py`` checks seven /64s of one /56)."""
    from types import SimpleNamespace as NS

    from components.deploy.clients import Guard, address_cap, address_group

    assert address_group("2001:db8::1") == address_group("2001:db8::ffff:1:2:3") == "2001:db8::/56"
    assert address_group("2001:db8::1", 64) == address_group("2001:db8::ffff:1:2:3", 64) == "2001:db8::/64"
    assert address_group("2001:db8:0:1::1", 64) != address_group("2001:db8::1", 64)
    assert address_group("2001:db8:0:100::1") != address_group("2001:db8::1")
    assert address_group("::ffff:203.0.113.5") == address_group("203.0.113.5") == "203.0.113.5"
    assert address_group("2001:db8:0:1::1", 48) == address_group("2001:db8::1", 48)
    assert address_group("testclient") == "testclient" and address_group(None) is None
    assert Guard.from_env({}).ipv6_prefix == 56 and Guard.from_env({"SPECREJ_IPV6_PREFIX": "64"}).ipv6_prefix == 64
    for bad in ("129", "8", "x"):
        with pytest.raises(ValueError, match="SPECREJ_IPV6_PREFIX"):
            Guard.from_env({"SPECREJ_IPV6_PREFIX": bad})

    g = Guard(max_runs_per_address=address_cap(10), queued_fns=frozenset({4}), trusted_proxy=True)
    held = []

    def req(session, forwarded):
        headers = NS(getlist=lambda name: [forwarded] if name == "x-forwarded-for" else [])
        held.append(NS(session_hash=session, client=NS(host="10.16.0.3"), headers=headers, request=NS(state=NS())))
        return held[-1]

    answers = [g.admit(req(f"s{i}", f"6.6.6.6, 2001:db8::{i}"), 4) for i in range(1, 8)]
    assert answers[:5] == [None] * 5 and all("SPECREJ_MAX_RUNS_PER_ADDRESS" in a for a in answers[5:])
    assert g.admit(req("elsewhere", "2001:db8:0:100::1"), 4) is None   # the next /56: another household
    mapped = [g.admit(req(f"m{i}", "::ffff:203.0.113.9" if i % 2 else "203.0.113.9"), 4)
              for i in range(7)]
    assert mapped.count(None) == 5


def test_a_five_arm_race_at_the_limits_is_refused_for_the_memory_all_its_arms_hold(ctx):
    """Issue 42 (3): every arm was checked against its own budget while the race holds every arm's cache at
    once: five arms at the largest budget held about 3.5 x the slots the docs promise a run holds at most. The
    deployment's budget is now for the whole race (``Limits.check_race``, before anything loads or is
    measured), on a CPU and a GPU alike; five arms sharing it pass."""
    from components.deploy.limits import LimitError
    from components.session.planner import prepare

    top = ctx.limits.max_budget
    five = dict(second=True, rivals=["deepconf", "stbon"])
    with pytest.raises(LimitError, match="SPECREJ_MAX_BUDGET") as e:
        prepare(ctx, request_values(ctx, dict(prompt=PROMPT, **dict(TINY, budget=top, first_decision=32)), **five))
    assert f"5 arms would hold {' + '.join([str(top)] * 5)} = {5 * top} KV slots" in str(e.value)
    assert f"lower the budget to {top // 5}" in str(e.value)
    with pytest.raises(LimitError, match="2 arms"):   # Best-of-N and Speculative Rejection at the largest budget
        prepare(ctx, request_values(ctx, dict(prompt=PROMPT, **dict(TINY, budget=top, first_decision=32))))
    _, prep = prepare(ctx, request_values(ctx, dict(prompt=PROMPT, **dict(TINY, budget=top // 5)), **five))
    assert len(prep.arms) == 5
