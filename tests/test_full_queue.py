"""Issue 42 (5): a full queue still shows the race. When every place in the queue is taken, a Run of a race the
app holds the labelled recording of gets that recording at once (it waits for no race), with a line saying why;
any other Run is refused with how many runs wait and when a place may free, instead of Gradio's bare "Queue is
full! Please try again." On the tiny models, the race held at a gate the test opens; counted in runs, never in
seconds."""
from __future__ import annotations

import dataclasses
import threading

import pytest
from conftest import HANG_GUARD_S, launch_local, request_values, run_request, text, tiny_app_context, wait_for

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")
httpx = pytest.importorskip("httpx")

SETTINGS = dict(prompt="Name three rivers.", n=8, max_new_tokens=24, budget=160, first_decision=8)


@pytest.fixture(scope="module")
def recorded(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    """A context whose page-race folder holds the recording of SETTINGS' race, with a queue of two places."""
    from components.session import stream

    ctx = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)
    folder = tmp_path_factory.mktemp("page-races")
    stream.record(ctx, run_request(ctx, SETTINGS), folder / "rivers.json.gz")
    return dataclasses.replace(ctx, page_races=folder, machine=ctx.machine.copy(), concurrency=1, max_queue=2)


def test_the_full_queues_words_and_the_recorded_race_alone(recorded):
    """The full queue's fallback is a plan like every press's (``planner.plan``, ``Press.FULL_QUEUE``), played by
    the one executor."""
    from components.frames import drawn
    from components.session import planner, stream
    from components.session.planner import Press

    def full(values):
        return planner.plan(recorded, Press.FULL_QUEUE, values, waiting=2)

    words = planner.full_message(10, run_s=120, at_once=1)
    assert "10 runs are waiting" in words and "about 120 s" in words and "about 20 min" in words
    values = request_values(recorded, SETTINGS)
    assert full(values).action == planner.RECORDING
    assert full(request_values(recorded, SETTINGS, seed=7)).action == planner.REFUSE
    assert full({"n": "junk"}).action == planner.REFUSE   # values the race refuses: no recording, no error
    frames = list(drawn(stream.execute(recorded, full(values))))
    last = frames[-1]
    assert last.view.fallback == {"reason": "queue_full", "waiting": 2} and last.view.done
    assert "The queue is full" in last.status and "recording of the same race" in last.status
    none = list(drawn(stream.execute(recorded, full(request_values(recorded, SETTINGS, seed=7)))))
    assert len(none) == 1 and none[0].status_kind == "error" and "2 runs are waiting" in none[0].status


def test_a_full_queue_plays_the_recording_of_an_example_race_and_says_how_long_it_is_otherwise(recorded):
    import app
    from gradio_client import Client

    from components.deploy.clients import Guard

    gate = {"open": threading.Event(), "started": []}

    def gated(model_spec, reward_spec, cfg, **kw):
        from components.session.stream import race_events

        gate["started"].append(cfg.prompt)
        gate["open"].wait(HANG_GUARD_S)
        yield from race_events(model_spec, reward_spec, cfg, **kw)

    demo = app.build_demo(recorded, events_fn=gated, guard=Guard(max_runs_per_client=2, trusted_proxy=True))
    guard = demo.specrej_guard
    url = launch_local(demo)
    clients = [Client(url, verbose=False, analytics_enabled=False, headers={"X-Forwarded-For": f"203.0.113.{i}"})
               for i in range(1, 5)]
    jobs = []
    try:
        jobs.append(clients[0].submit(**request_values(recorded, SETTINGS, prompt="one"), api_name="/run"))
        assert wait_for(lambda: gate["started"] == ["one"])   # running, held at the gate
        jobs += [c.submit(**request_values(recorded, SETTINGS, prompt=p), api_name="/run")
                 for c, p in ((clients[1], "two"), (clients[2], "three"))]
        assert wait_for(lambda: guard.waiting() == 2) and guard.is_full()
        # the race the app holds the recording of: played at once, while the queue stays full and the gate shut
        out = clients[3].predict(**request_values(recorded, SETTINGS), api_name="/run")
        shown = text(out[0])
        assert "The queue is full" in shown and "recording of the same race" in shown, shown
        assert gate["started"] == ["one"] and guard.waiting() == 2
        # another race (another seed): refused, saying how long the queue is and when to try again
        r = httpx.post(url.rstrip("/") + "/gradio_api/call/run", timeout=30, headers={"X-Forwarded-For": "203.0.113.9"},
                       json={"data": list(request_values(recorded, SETTINGS, seed=7).values())})
        assert r.status_code == 422 and "The queue is full: 2 runs are waiting" in r.text and "try again" in r.text
        assert "Queue is full! Please try again" not in r.text
    finally:
        gate["open"].set()
        for job in jobs:
            job.result(timeout=HANG_GUARD_S)
        for c in clients:
            c.close()
        demo.close()


def test_a_run_a_cap_refuses_plays_the_recording_of_its_race_and_says_which_cap(recorded):
    """Issue 50 (6): with a queue of 2 (so one run per address) four Runs from one address saw neither "Queue is
    full" nor the recording of the race they asked for. Now a Run the address's cap refuses plays the recording of
    that race at once, saying why; a race with no recording is refused with the cap's words; the recording's replay
    is counted by no cap."""
    import app
    from gradio_client import Client
    from components.deploy.clients import Guard

    gate = {"open": threading.Event(), "started": []}

    def gated(model_spec, reward_spec, cfg, **kw):
        from components.session.stream import race_events

        gate["started"].append(cfg.prompt)
        gate["open"].wait(HANG_GUARD_S)
        yield from race_events(model_spec, reward_spec, cfg, **kw)

    demo = app.build_demo(recorded, events_fn=gated, guard=Guard(max_runs_per_client=2, trusted_proxy=True))
    guard = demo.specrej_guard
    assert guard.max_runs_per_address == 1   # half the queue of 2
    url = launch_local(demo)
    home = [Client(url, verbose=False, analytics_enabled=False, headers={"X-Forwarded-For": "203.0.113.20"})
            for _ in range(2)]
    jobs = []
    try:
        jobs.append(home[0].submit(**request_values(recorded, SETTINGS, prompt="one"), api_name="/run"))
        assert wait_for(lambda: gate["started"] == ["one"])   # the address's one run, held at the gate
        for c in home:   # the same session, and another session at the same address
            shown = text(c.predict(**request_values(recorded, SETTINGS), api_name="/run")[0])
            assert "runs from your network address are queued or running" in shown, shown
            assert "recording of the same race" in shown and "The queue is full" not in shown, shown
        assert gate["started"] == ["one"] and not guard._capped   # nothing raced; each move was used once
        with pytest.raises(Exception, match="runs from your network address are queued or running"):
            home[1].predict(**request_values(recorded, SETTINGS, seed=7), api_name="/run")   # no recording
    finally:
        gate["open"].set()
        for job in jobs:
            job.result(timeout=HANG_GUARD_S)
        for c in home:
            c.close()
        demo.close()
