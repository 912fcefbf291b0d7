"""The sixth round of the public deployment's guards (issue 50), each finding of the hostile probe replayed: Gradio's
own input checks of the page's unqueued events answered 500 with a traceback (now a 400 naming the input, and the
log quiet), a junk session id on the heartbeat route wrote a 95-line traceback, a prompt of zero-width spaces or
control characters was raced, a number was quoted as text, a GET's 422 echoed its input, and seven /64s of one
household's /56 were seven addresses. Outcomes are HTTP statuses, messages, log lines and counts, never seconds."""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
from conftest import HANG_GUARD_S, launch_local, request_values, tiny_app_context

pytest.importorskip("gradio")
httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Give me three tips for staying healthy."
TINY = dict(n=4, alpha=0.5, budget=0, decision="budget", interval=16, max_new_tokens=6, temperature=0.9,
            top_p=0.95, seed=1)
MESSAGE_CHARS = 200


@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def served(ctx):
    """The app as deployed (the guard from the environment), one race at a time."""
    import app

    one = dataclasses.replace(ctx, concurrency=1, machine=ctx.machine.copy())
    demo = app.build_demo(one)
    url = launch_local(demo)
    try:
        yield demo, one, url
    finally:
        demo.close()


def logged_tracebacks(capfd, caplog) -> str:
    """What the server wrote since the last read (stdout, stderr and the log records), for the tests to search."""
    out, err = capfd.readouterr()
    return out + err + caplog.text


def fn_index(demo, name) -> int:
    return next(i for i, fn in demo.fns.items() if fn.api_name == name)


# ---------------------------------------------------------------- 4. Gradio's own input checks: a 400, never a 500

ISSUE_BODIES = [   # (api name, data): the probe's requests, each a 500 with about 35 lines of traceback before
    ("rerender_race", [None, "zz"]),
    ("load_example", [999999]),
    ("load_example", ["x"]),
    ("show_parameters", [["x"]]),
]


@pytest.mark.parametrize("route", ["run", "api"])
def test_the_probes_bodies_get_a_400_naming_the_input_and_the_log_stays_quiet(served, route, capfd, caplog):
    """Issue 50 (4): ``run/rerender_race {"data":[null,"zz"]}`` answered 500 "Value: 'zz' ... not in the list of
    choices" (a Python type's repr in it), ``run/load_example [999999]`` or ``["x"]`` 500 ``{"error":null}``,
    ``run/show_parameters [["x"]]`` 500; each logged a traceback. Now each is a short 400 naming the input and
    what it takes, no traceback is logged, and the same events still answer the values the page sends."""
    demo, ctx, url = served
    base = url.rstrip("/") + "/gradio_api"
    logged_tracebacks(capfd, caplog)
    with caplog.at_level(logging.WARNING):
        for name, data in ISSUE_BODIES:
            r = httpx.post(f"{base}/{route}/{name}", json={"data": data, "session_hash": "probe6"}, timeout=HANG_GUARD_S)
            assert r.status_code == 400, (name, data, r.status_code, r.text[:300])
            detail = r.json()["detail"]
            assert detail.startswith("This event's input 1") or detail.startswith("This event's input 2"), detail
            assert len(detail) <= MESSAGE_CHARS and "class" not in detail and "Traceback" not in r.text, detail
        words = {name + json.dumps(data): httpx.post(f"{base}/{route}/{name}", json={"data": data}, timeout=30)
                 .json()["detail"] for name, data in ISSUE_BODIES}
    assert "'time', 'flops', not 'zz'" in words['rerender_race[null, "zz"]']
    assert "examples (0 to" in words["load_example[999999]"] and "not 999999." in words["load_example[999999]"]
    assert "not 'x'." in words['load_example["x"]']
    assert "'curie-weiss'" in words['show_parameters[["x"]]'] and "not a list" in words['show_parameters[["x"]]']
    logged = logged_tracebacks(capfd, caplog)
    assert "Traceback" not in logged and "Exception in ASGI" not in logged and "not in the list" not in logged, \
        logged[-2000:]
    # the values the page sends still work, on the same routes
    for name, data in (("rerender_race", [None, "flops"]), ("load_example", [1]), ("show_parameters", ["potts"])):
        r = httpx.post(f"{base}/{route}/{name}", json={"data": data, "session_hash": "probe6"}, timeout=HANG_GUARD_S)
        assert r.status_code == 200 and "data" in r.json(), (name, r.status_code, r.text[:300])


def test_a_queue_join_of_an_unqueued_event_with_a_bad_value_gets_the_same_400(served, capfd, caplog):
    """Issue 50 (4): the page's unqueued events also join through ``queue/join`` by ``fn_index``; a value Gradio's
    check refuses is answered there too, before the join (Gradio would print its traceback in the queue)."""
    demo, ctx, url = served
    base = url.rstrip("/") + "/gradio_api"
    logged_tracebacks(capfd, caplog)
    for name, data in ISSUE_BODIES:
        r = httpx.post(f"{base}/queue/join", json={"data": data, "fn_index": fn_index(demo, name),
                                                   "session_hash": "join6", "event_data": None, "trigger_id": None},
                       timeout=HANG_GUARD_S)
        assert r.status_code == 400 and r.json()["detail"].startswith("This event's input"), (name, r.text[:300])
    assert "Traceback" not in logged_tracebacks(capfd, caplog)


JUNK = ["zz", 999999, -1, 2.5, ["x"], {"a": 1}, 1e308, True, "", None]


def test_every_unqueued_event_answers_junk_in_every_input_with_a_4xx_and_at_most_a_line(served, capfd, caplog):
    """Issue 50 (4): every one of the page's unqueued events, each of its inputs given each junk value (the others
    null) on ``run/``: never a 5xx, never a traceback, and at most one line written to the log per request."""
    demo, ctx, url = served
    base = url.rstrip("/") + "/gradio_api"
    guard = demo.specrej_guard
    logged_tracebacks(capfd, caplog)
    sent, answers = 0, set()
    with caplog.at_level(logging.WARNING):
        for i in sorted(guard.direct_fns):
            event = guard.events[i]
            for k in range(event.inputs):
                for junk in JUNK:
                    data = [None] * event.inputs
                    data[k] = junk
                    r = httpx.post(f"{base}/run/{event.api_name}", timeout=HANG_GUARD_S,
                                   json={"data": data, "fn_index": i, "session_hash": "every6"})
                    sent += 1
                    answers.add(r.status_code)
                    assert r.status_code < 500, (event.name, k, junk, r.status_code, r.text[:300])
                    assert "Traceback" not in r.text and "<class" not in r.text, (event.name, k, junk, r.text[:300])
    assert sent > 100 and 400 in answers and 200 in answers
    logged = logged_tracebacks(capfd, caplog)
    assert "Traceback" not in logged and "Exception in ASGI" not in logged, logged[-2000:]
    lines = [line for line in logged.splitlines() if line.strip() and "Loading weights" not in line]
    assert len(lines) <= sent, lines[:20]


def test_a_handlers_error_on_a_direct_route_is_a_400_keeping_gradios_error_field():
    """Issue 50 (4): a direct call whose handler fails (the guard's wrapper has logged one line and raised a plain
    ``gr.Error``) got Gradio's 500; the gate now answers 400 with the same ``error`` (the page's client shows it),
    also as ``detail``; a 500 that is not Gradio's error payload passes as it is, and queued routes are untouched."""
    from components.deploy.gate import MALFORMED, _plain_errors

    def answer(status, body, **kw):
        sent = []

        async def send(message):
            sent.append(message)

        async def go():
            plain = _plain_errors(send, **kw)
            await plain({"type": "http.response.start", "status": status, "headers": []})
            await plain({"type": "http.response.body", "body": body})

        asyncio.run(go())
        out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return sent[0]["status"], out

    quiet = json.dumps({"error": "This event's input is not what the page sends.", "title": "Error"}).encode()
    status, body = answer(500, quiet, plain_500=True)
    assert status == 400 and json.loads(body) == {"error": "This event's input is not what the page sends.",
                                                  "detail": "This event's input is not what the page sends.",
                                                  "title": "Error"}
    status, body = answer(500, b'{"error": null}', plain_500=True)
    assert status == 400 and json.loads(body)["detail"] == MALFORMED
    status, body = answer(500, b'{"error": "' + b"x" * 5000 + b'"}', plain_500=True)
    assert status == 400 and len(json.loads(body)["detail"]) <= MESSAGE_CHARS
    assert answer(500, b"Internal Server Error", plain_500=True) == (500, b"Internal Server Error")
    assert answer(500, b'{"error": null}') == (500, b'{"error": null}')   # not a direct route: as it was


def test_the_input_checks_word_each_component_kind():
    """Issue 50 (4, 7): ``inputs.refuse_input`` against Gradio's components: a choice (by value, not label; true
    is not a choice), several choices, an example index, a checkbox, a number's range, text; a State is never
    checked (Gradio reads the session's value), null passes where Gradio passes it on; numbers named as numbers."""
    import gradio as gr

    from components.deploy.inputs import refuse_input, value_words

    with gr.Blocks():
        drop = gr.Dropdown(choices=[("Time", "time"), ("FLOPs", "flops")], value="time")
        several = gr.Dropdown(choices=["a", "b"], multiselect=True)
        custom = gr.Dropdown(choices=["a"], allow_custom_value=True)
        radio = gr.Radio(choices=["x", "y"])
        data = gr.Dataset(components=[gr.Textbox(visible=False)], samples=[["one"], ["two"]])
        box, num, text, state = gr.Checkbox(), gr.Slider(0, 10), gr.Textbox(), gr.State()
    assert refuse_input(drop, "time") is None and refuse_input(drop, None) is None
    assert "not 'Time'" in refuse_input(drop, "Time") and "not true" in refuse_input(radio, True)
    assert refuse_input(several, ["a", "b"]) is None and "not 'c'" in refuse_input(several, ["a", "c"])
    assert "takes a list" in refuse_input(several, "a") and refuse_input(custom, "anything") is None
    assert refuse_input(data, 1) is None
    for bad, said in ((2, "not 2"), (-1, "not -1"), ("0", "not '0'"), (True, "not true"), (None, "not null"),
                      (0.0, "not 0")):
        assert said in refuse_input(data, bad), (bad, refuse_input(data, bad))
    assert refuse_input(box, False) is None and "not 1" in refuse_input(box, 1)
    assert refuse_input(num, 3.5) is None and "from 0 to 10, not 11" in refuse_input(num, 11)
    assert "finite" in refuse_input(num, float("inf")) and "not 'x'" in refuse_input(num, "x")
    assert refuse_input(text, "hi") is None and "not a list" in refuse_input(text, ["x"])
    assert refuse_input(state, {"anything": 1}) is None
    assert [value_words(v) for v in (1, -2, 0.5, True, None, "1", 10**40)] == \
        ["1", "-2", "0.5", "true", "null", "'1'", "a number of 41 digits"]
    assert value_words(10**5000).startswith("a number of about")   # never printed (Python refuses past 4300 digits)


# ---------------------------------------------------------------- 5. session ids on every route that takes one

@pytest.mark.parametrize("junk", ["%00abc", "%0d%0a", "a%20b", "x" * 65, "%C3%A9t%C3%A9", "..%5C.."])
def test_a_junk_session_id_on_the_heartbeat_gets_a_400_and_no_traceback(served, junk, capfd, caplog):
    """Issue 50 (5): ``GET /gradio_api/heartbeat/%00abc`` (and ``%0d%0a``) streamed a 200 and then logged a 95-line
    ``httpx.InvalidURL`` traceback when the stream ended; the gate checked session ids on the queue's routes only."""
    from components.deploy.gate import BAD_ID

    demo, ctx, url = served
    logged_tracebacks(capfd, caplog)
    with httpx.stream("GET", url.rstrip("/") + "/gradio_api/heartbeat/" + junk, timeout=HANG_GUARD_S) as r:
        assert r.status_code == 400, (junk, r.status_code)   # was a 200 and an endless keep-alive stream
        assert json.loads(r.read()) == {"detail": BAD_ID.format(what="session_hash")}
    logged = logged_tracebacks(capfd, caplog)
    assert "Traceback" not in logged and "InvalidURL" not in logged, logged[-2000:]


def test_a_good_heartbeat_still_streams(served, capfd, caplog):
    """The page's own heartbeat (a session hash of letters and digits) still gets its keep-alive stream, and
    closing it logs nothing."""
    demo, ctx, url = served
    logged_tracebacks(capfd, caplog)
    with httpx.stream("GET", url.rstrip("/") + "/gradio_api/heartbeat/abc123def45", timeout=HANG_GUARD_S) as r:
        assert r.status_code == 200
        assert next(r.iter_lines()).startswith("data: ALIVE")
    assert "Traceback" not in logged_tracebacks(capfd, caplog)


@pytest.mark.parametrize("route, body", [
    ("run/stop", {"data": [], "session_hash": "a\u0000b"}),
    ("api/stop", {"data": [], "session_hash": "x" * 65}),
    ("call/stop", {"data": [], "session_hash": "a b"}),
    ("run/rerender_race", {"data": [None, "time"], "session_hash": ["x"]}),
    ("cancel", {"fn_index": 0, "session_hash": "s", "event_id": "\r\n"}),
    ("reset", {"event_id": "e" * 100}),
])
def test_a_junk_session_hash_or_event_id_in_any_body_gets_a_400(served, route, body, capfd, caplog):
    """Issue 50 (5): a direct call's, ``call/``'s, a cancel's or a reset's session hash or event id that is not 1 to
    64 letters, digits, '-' or '_' is refused by the gate (it was checked on ``queue/join`` and ``cancel`` only)."""
    from components.deploy.gate import BAD_ID

    demo, ctx, url = served
    logged_tracebacks(capfd, caplog)
    r = httpx.post(url.rstrip("/") + "/gradio_api/" + route, json=body, timeout=HANG_GUARD_S)
    what = "event id" if "event_id" in body else "session_hash"
    assert r.status_code == 400 and r.json() == {"detail": BAD_ID.format(what=what)}, (route, r.text[:200])
    assert "Traceback" not in logged_tracebacks(capfd, caplog)
    ok = httpx.post(url.rstrip("/") + "/gradio_api/run/stop", json={"data": [], "session_hash": "fine_1-2"}, timeout=30)
    assert ok.status_code == 200


# ---------------------------------------------------------------- 7. the small items

@pytest.mark.parametrize("prompt", ["\u200b", "\u200b\u200b\u200b", " \u200c\u200d\ufeff ", "\u3164\u2800", "\u0301"])
def test_a_prompt_of_invisible_characters_is_blank(ctx, prompt):
    """Issue 50 (7): a prompt of zero-width spaces only passed the blank check and was raced."""
    from components.state.fields import FieldError
    from components.state.request import RunRequest

    with pytest.raises(FieldError, match="prompt has no visible text"):
        RunRequest.parse(request_values(ctx, dict(prompt=prompt, **TINY)))


@pytest.mark.parametrize("prompt, code, at", [("a\x00b\x07\x1b[31m", "0000", 2), ("hi\x1b[31mred", "001B", 3),
                                              ("bell\x07", "0007", 5), ("a\rb", "000D", 2), ("x\x7f", "007F", 2),
                                              ("c1\x85", "0085", 3)])
def test_control_characters_are_refused_naming_the_first(ctx, prompt, code, at):
    """Issue 50 (7): ``"a\\x00b\\x07\\x1b[31m"`` was raced; now any control character but newline and tab is refused,
    named by its code point and place (an escape sequence never reaches the model or the page)."""
    from components.state.fields import FieldError
    from components.state.request import RunRequest

    with pytest.raises(FieldError) as e:
        RunRequest.parse(request_values(ctx, dict(prompt=prompt, **TINY)))
    assert f"prompt holds a control character (U+{code}) at character {at}" in str(e.value)
    assert "newlines and tabs" in str(e.value) and len(str(e.value)) <= MESSAGE_CHARS
    with pytest.raises(FieldError, match=r"preference holds a control character \(U\+0000\)"):
        RunRequest.parse(request_values(ctx, dict(prompt=PROMPT, **TINY), preference="x\x00"))


def test_newlines_tabs_and_any_visible_script_are_taken(ctx):
    from components.state.request import RunRequest

    for prompt in ("line one\nline two", "a\tb", "windows\r\nline", "日本語で答えて", "👍🏽 ok", "x\u200by",
                   "مرحبا\u200f"):
        assert RunRequest.parse(request_values(ctx, dict(prompt=prompt, **TINY))).prompt == prompt
    assert RunRequest.parse(request_values(ctx, dict(prompt=PROMPT, **TINY), preference="")).preference == ""


@pytest.mark.parametrize("value, said", [(1, "not 1."), (0, "not 0."), (1.5, "not 1.5."), ("1", "not '1'."),
                                         (None, "not nothing.")])
def test_a_number_sent_for_yes_or_no_is_quoted_as_a_number(ctx, value, said):
    """Issue 50 (7): ``second: 1`` was refused as "not '1'" (a number quoted as text)."""
    from components.state.fields import FieldError
    from components.state.request import RunRequest

    with pytest.raises(FieldError) as e:
        RunRequest.parse(request_values(ctx, dict(prompt=PROMPT, **TINY), second=value))
    assert str(e.value) == f"second must be true or false, {said}"


def test_the_served_race_refuses_them_with_cant_run(served):
    """Through the API: the page's message for each, and the app still runs a race after them."""
    demo, ctx, url = served
    base = url.rstrip("/") + "/gradio_api"

    def call(**overrides):
        data = list(request_values(ctx, dict(prompt=PROMPT, **TINY), **overrides).values())
        r = httpx.post(f"{base}/call/run", json={"data": data}, timeout=30)
        assert r.status_code == 200, r.text[:300]
        stream = httpx.get(f"{base}/call/run/{r.json()['event_id']}", timeout=HANG_GUARD_S).text
        return [line[5:].strip() for line in stream.splitlines() if line.startswith("data:")][-1]

    assert "prompt has no visible text" in call(prompt="\u200b\u200b")
    refused = call(prompt="hi\x1b[31m")   # Markdown-escaped on the page: "\\(U\\+001B\\)"
    assert "prompt holds a control character" in refused and "001B" in refused and "\x1b" not in json.loads(refused)[0]["value"]
    assert "second must be true or false, not 1." in call(second=1)
    assert "Can't run" not in call()   # the app stays usable: the same race with a prompt runs


def test_a_gets_422_is_one_line_without_the_value(served):
    """Issue 50 (7): ``GET /pwa_icon/abc`` echoed its input in FastAPI's raw 422 (POSTs' were rewritten already)."""
    demo, ctx, url = served
    r = httpx.get(url.rstrip("/") + "/pwa_icon/" + "abc" * 30, timeout=30)
    assert r.status_code == 422 and set(r.json()) == {"detail"} and isinstance(r.json()["detail"], str), r.text[:300]
    assert "abcabc" not in r.text and "path.size" in r.json()["detail"] and len(r.json()["detail"]) <= MESSAGE_CHARS
    assert httpx.get(url.rstrip("/") + "/pwa_icon/192", timeout=30).status_code not in (400, 422, 500)   # a size passes


def test_a_numbered_fn_index_is_named_as_a_number(served):
    demo, ctx, url = served
    r = httpx.post(url.rstrip("/") + "/gradio_api/queue/join", json={"data": [], "fn_index": 99999,
                                                                     "session_hash": "n6"}, timeout=30)
    assert r.status_code == 404 and r.json()["detail"] == "No event with fn_index 99999 in this app."


# ---------------------------------------------------------------- 3. per household

def _request(session, forwarded):
    headers = NS(getlist=lambda name: [forwarded] if name == "x-forwarded-for" else [])
    return NS(session_hash=session, client=NS(host="10.16.0.3"), headers=headers, request=NS(state=NS()))


def test_seven_64s_of_one_56_share_one_households_cap_and_48_is_a_setting():
    """Issue 50 (3): seven runs from seven /64s of one /56 were all admitted (an IPv6 address counted as its /64);
    homes get a /56 or a /48. Now a household's /56 is one address by default (5 of a queue of 10), another /56
    is another household, and ``SPECREJ_IPV6_PREFIX=48`` groups by /48."""
    from components.deploy.clients import DEFAULT_IPV6_PREFIX, Guard, address_cap, address_group

    assert DEFAULT_IPV6_PREFIX == 56 and Guard.from_env({}).ipv6_prefix == 56
    assert Guard.from_env({"SPECREJ_IPV6_PREFIX": "48"}).ipv6_prefix == 48
    assert address_group("2001:db8:0:1::1") == address_group("2001:db8:0:ff::9") == "2001:db8::/56"
    assert address_group("2001:db8:0:100::1") != address_group("2001:db8::1")
    assert address_group("2001:db8:0:100::1", 48) == address_group("2001:db8:0:ff00::1", 48) == "2001:db8::/48"

    g = Guard(max_runs_per_address=address_cap(10), queued_fns=frozenset({4}), trusted_proxy=True)
    held = [_request(f"s{i}", f"2001:db8:0:{i:x}::1") for i in range(1, 8)]   # seven /64s of 2001:db8::/56
    answers = [g.admit(r, 4) for r in held]
    assert answers[:5] == [None] * 5 and all("SPECREJ_MAX_RUNS_PER_ADDRESS" in a for a in answers[5:]), answers
    held.append(_request("next-home", "2001:db8:0:100::1"))
    assert g.admit(held[-1], 4) is None   # the next /56: another household

    wide = Guard(max_runs_per_address=address_cap(10), queued_fns=frozenset({4}), trusted_proxy=True,
                 ipv6_prefix=48)
    kept = [_request(f"w{i}", f"2001:db8:0:{i * 0x100:x}::1") for i in range(1, 8)]   # seven /56s of one /48
    spread = [wide.admit(r, 4) for r in kept]   # (kept alive: the guard knows a run by its request's id)
    assert spread.count(None) == 5


def test_deploying_says_the_codes_per_address_cap_and_household_prefix():
    """Issue 50 (3): docs/deploying.md's step 4 said the per-address cap is 10 runs; its table and the code said 5.
    Both now say the code's number (half the default queue) and the household's /56."""
    from components.deploy.clients import DEFAULT_IPV6_PREFIX, address_cap
    from components.session.context import AppContext

    queue = next(f.default for f in dataclasses.fields(AppContext) if f.name == "max_queue")
    cap = address_cap(queue)
    docs = (ROOT / "docs" / "deploying.md").read_text(encoding="utf-8")
    step4 = docs.split("4. Visitors' addresses", 1)[1].split("\n## ", 1)[0]
    assert f"{cap} runs with the default queue of {queue}" in step4 and "10 runs)" not in step4
    assert f"/{DEFAULT_IPV6_PREFIX}" in step4 and "SPECREJ_IPV6_PREFIX=48" in step4
    row = next(line for line in docs.splitlines() if line.startswith("| Runs per address"))
    assert f"// 2: {cap})" in row and f"/{DEFAULT_IPV6_PREFIX}" in row and "counts as its /64" not in row
    said = {int(n) for n in re.findall(r"SPECREJ_MAX_RUNS_PER_ADDRESS`[^.|]*?(\d+) runs", docs)}
    assert said <= {cap}, said


def test_the_page_takes_only_seeds_a_browser_keeps_exactly_and_says_the_range():
    """Issue 50 (6): a seed past 2**53 came back from a link as another (the page's number box is a float): the
    page's range ends at 2**53 - 1, a larger seed is refused naming the range in full, and a link carrying one is
    dropped rather than raced as another seed; one at the top of the range comes back exact."""
    from components import links
    from components.state.request import MAX_SEED, SPECS, RunRequest

    assert MAX_SEED == 2**53 - 1 == SPECS["seed"].hi
    with pytest.raises(ValueError, match=r"from 0 to 9007199254740991, got 9007199254740993"):
        RunRequest(prompt="Name three rivers.", seed=9007199254740993)
    assert RunRequest(prompt="Name three rivers.", seed=MAX_SEED).seed == MAX_SEED
    ranges = {"seed": (0, MAX_SEED)}
    assert links.settings({"seed": "9007199254740993"}, None, ranges) == {}
    assert links.settings({"seed": str(MAX_SEED)}, None, ranges) == {"seed": MAX_SEED}
