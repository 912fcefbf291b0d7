"""The seventh round of the public deployment's guards (issue 65): types exact at the API (a number sent as text is
refused, naming the field) and links that carry only values the page accepts."""
from __future__ import annotations

import pytest

PROMPT = "Give me three tips for staying healthy."
TINY = dict(n=4, alpha=0.5, budget=0, decision="budget", interval=16, max_new_tokens=6, temperature=0.9,
            top_p=0.95, seed=1)


@pytest.fixture(scope="module")
def limits():
    from components.deploy.limits import Limits

    return Limits(max_n=8)


@pytest.mark.parametrize("field,text", [("n", "3"), ("alpha", "0.5"), ("seed", "7"), ("max_new_tokens", " 6")])
def test_a_number_sent_as_text_is_refused_naming_the_field(limits, field, text):
    from components.state.fields import FieldError
    from components.state.request import RunRequest

    with pytest.raises(FieldError) as e:
        RunRequest.parse(dict(prompt=PROMPT, **{**TINY, field: text}), limits)
    said = str(e.value)
    assert said.startswith(f"{field} must be ") and "not the text" in said and "send it as a number" in said, said
    good = RunRequest.parse(dict(prompt=PROMPT, **TINY), limits)
    assert good.n == 4


def test_a_link_carries_only_values_the_page_accepts(limits):
    from components import links

    boxes = {"prompt": "Name two seas.", "n": 10**9, "alpha": "0.5", "temperature": -3.0, "top_p": 0.9, "seed": 7,
             "step": True}
    q = links.race_query(None, boxes, {"n": 32, "top_p": 0.95, "seed": 0}, limits=limits)
    assert "n=" not in q and "alpha=" not in q and "temperature=" not in q, q
    assert "top_p=0.9" in q and "seed=7" in q and "step=1" in q and "prompt=Name+two+seas." in q, q
    assert "n=8" in links.race_query(None, {**boxes, "n": 8}, {"n": 32}, limits=limits)


def test_a_flood_of_made_up_sessions_evicts_its_own_kind_before_a_visitors_race():
    """Gradio's table of sessions (its real ``StateHolder``, capacity 3 here) evicts the least recently used session
    past its capacity: a flood of fresh session ids pushed out a visitor's finished race. With the app's table
    (``gradio_private.keep_active_sessions``), a session holding a race view goes only after every idle one; when
    every session did something, the least recently used goes, as before."""
    from types import SimpleNamespace as NS

    from gradio.state_holder import StateHolder

    from components.deploy import gradio_private, memory
    from components.state.view import RunView
    from specrej import RunConfig

    holder = StateHolder()
    holder.capacity = 3
    assert gradio_private.keep_active_sessions(NS(state_holder=holder), memory.did_something)
    race = RunView(RunConfig(prompt="x", n=2, max_new_tokens=4), model_label="m", reward_label="r")

    def arrive(key, *values):
        holder.session_data[key] = NS(state_data=dict(enumerate(values)))
        holder.update(key)

    arrive("visitor", race, object())
    for i in range(2000):   # made-up sessions: each registered, then never seen again
        arrive(f"made-up-{i}", None, object())
    assert "visitor" in holder.session_data and len(holder.session_data) == 3
    arrive("second-visitor", race)
    arrive("third-visitor", race)
    arrive("fourth-visitor", race)   # every session in the table did something: the least recently used goes
    assert list(holder.session_data) == ["second-visitor", "third-visitor", "fourth-visitor"]
    assert gradio_private.keep_active_sessions(NS(state_holder=holder), memory.did_something)   # once: kept as is
    assert list(holder.session_data) == ["second-visitor", "third-visitor", "fourth-visitor"]


def test_the_served_app_keeps_active_sessions_and_guards_its_connections(tiny_lm_dir, tiny_reward_dir,
                                                                         tmp_path_factory):
    """app.launch wires both: after the first request Gradio's sessions table evicts idle sessions first, and the
    server's connections speak ``GuardedH11`` (a silent connection is closed once its head is late)."""
    import socket
    from urllib.parse import urlsplit

    import httpx
    from conftest import launch_local, tiny_app_context

    import app
    from components.deploy import gradio_private

    ctx = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)
    demo = app.build_demo(ctx)
    url = launch_local(demo)
    try:
        assert httpx.get(url + "config", timeout=60).status_code == 200
        assert isinstance(demo.state_holder.session_data, gradio_private._ActiveFirst)
        protocol = demo.server.config.http
        assert protocol.__name__ == "GuardedH11" and protocol.head_s == 10.0
        host = urlsplit(url)
        with socket.create_connection((host.hostname, host.port)) as s:
            s.sendall(b"GET /config HTTP/1.1\r\nHost: x\r\n\r\n")
            s.settimeout(60)
            assert s.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        demo.close()
