"""Issue 65 (4): the queue's waiting places shared per household. Three addresses filled the 10 places (2 per
client, 5 per address) and every other non-example Run got "The queue is full". Now a household's share of the
places shrinks as households arrive (``household_share``), and while one holds more than its share a household
holding none still finds a place (``Guard.borrows``), never past twice the queue (Gradio's own limit).

The guard alone here, its queue played by a counter (one run running, every other waiting); the served app in
``test_a_fourth_address_joins_a_queue_three_addresses_tried_to_fill``. Outcomes are counted in runs, never in
seconds."""
from __future__ import annotations

import random
from types import SimpleNamespace as NS

import pytest

QUEUE = 10


def test_a_households_share_shrinks_as_households_arrive():
    from components.deploy.clients import address_cap, household_share

    cap = address_cap(QUEUE)
    assert [household_share(QUEUE, h, cap) for h in range(1, 12)] == [5, 4, 3, 2, 2, 2, 2, 2, 1, 1, 1]
    assert 3 * household_share(QUEUE, 3, cap) < QUEUE   # three households leave a place for a fourth
    assert household_share(2, 1, address_cap(2)) == 1 and household_share(40, 1, 20) == 20
    assert household_share(QUEUE, 2, cap=3) == 3   # SPECREJ_MAX_RUNS_PER_ADDRESS set lower wins


class Queue:
    """A guard over a counted queue: ``running`` runs at a time, the rest wait (as Gradio's queue holds them)."""

    def __init__(self, running: int = 1):
        from components.deploy.clients import Guard, address_cap

        self.guard = Guard(max_runs_per_address=address_cap(QUEUE), queued_fns=frozenset({4}), trusted_proxy=True)
        self.guard.max_queue = QUEUE
        self.guard.waiting = lambda: max(0, len(self.guard._runs) - running)
        self.held: list = []   # the guard knows a run by its request's id: keep them alive

    def join(self, address: str, session: str) -> str | None:
        headers = NS(getlist=lambda name: [address] if name == "x-forwarded-for" else [])
        self.held.append(NS(session_hash=session, client=NS(host="10.16.0.3"), headers=headers,
                            request=NS(state=NS())))
        return self.guard.admit(self.held[-1], 4)

    def per_household(self) -> dict:
        with self.guard._lock:
            return self.guard.held()


def fill(q: Queue, addresses, tries: int = 8, interleaved: bool = False) -> list:
    """Each address joins ``tries`` runs, each from a session of its own (the per-client cap plays no part)."""
    order = [(a, k) for k in range(tries) for a in addresses] if interleaved else \
        [(a, k) for a in addresses for k in range(tries)]
    return [q.join(a, f"{a}-{k}") for a, k in order]


@pytest.mark.parametrize("interleaved", [False, True])
def test_three_addresses_cannot_fill_the_queue_and_a_fourths_run_is_admitted(interleaved):
    q = Queue()
    answers = fill(q, ["203.0.113.1", "203.0.113.2", "2001:db8:0:1::1"], interleaved=interleaved)
    refused = [a for a in answers if a]
    assert refused and all("runs from your network address are queued or running" in a for a in refused), refused
    assert not any("queue is full" in a for a in refused), refused
    assert q.join("198.51.100.7", "fourth") is None   # a fourth address: admitted
    assert q.join("2001:db8:0:2::9", "same-56-as-the-third") is not None   # the third household, not a fourth
    held = q.per_household()
    assert max(held.values()) <= 5 and held["198.51.100.7"] == 1, held
    if interleaved:   # arriving together, three households take three places each: the queue is not full
        assert sorted(held.values()) == [1, 3, 3, 3] and q.guard.waiting() < QUEUE


def test_a_newcomer_finds_a_place_in_a_full_queue_while_a_household_holds_more_than_its_share():
    """Households that came early hold 5 and 4 places (their shares then); the queue fills; every newcomer
    household still gets a place, and refusals say which share, not that the queue is full, until the queue is
    twice its size (Gradio's own limit) or nobody holds more than its share."""
    q = Queue()
    fill(q, ["203.0.113.1", "203.0.113.2", "203.0.113.3"])
    assert q.guard.waiting() >= QUEUE   # full, as the three addresses left it
    newcomers = [q.join(f"198.51.100.{i}", f"new-{i}") for i in range(1, 30)]
    admitted = newcomers.count(None)
    assert admitted >= 6 and newcomers[:6] == [None] * 6, newcomers
    assert q.guard.waiting() <= 2 * QUEUE
    late = [a for a in newcomers if a]
    assert late and all("The queue is full" in a for a in late)


def test_no_household_is_refused_a_place_it_is_owed_in_any_order_of_arrival():
    """Random arrivals from a dozen households: whenever a household holding nothing is refused, the queue is at
    twice its size or no other household holds more than its share; no household ever holds more than the
    per-address cap; the queue never passes twice its size."""
    from components.deploy.clients import household_share

    rng = random.Random(65)
    for trial in range(40):
        q = Queue(running=rng.choice([1, 2]))
        homes = [f"192.0.2.{i}" for i in range(rng.randint(2, 12))]
        for k in range(60):
            home = rng.choice(homes)
            held = q.per_household()
            answer = q.join(home, f"{trial}-{k}")
            if answer is not None and held.get(home, 0) == 0:
                share = household_share(QUEUE, len(held) + 1, 5)
                over = any(n > share for n in held.values())
                assert not over or q.guard.waiting() >= 2 * QUEUE, (trial, k, held, answer)
            assert max(q.per_household().values()) <= 5
            assert q.guard.waiting() <= 2 * QUEUE


def test_a_waiting_run_is_told_its_place_and_a_wait_it_can_trust():
    """Issue 65 (4): the status says the place a Run will take and when it starts: at most what runs of the run
    limit each would take (always true), and about what runs of the mean length here would (once one finished);
    nothing when a slot is free."""
    from components.deploy.clients import start_within, wait_words

    assert start_within([30.0], 0, 1, 120) == 90 and start_within([30.0], 2, 1, 120) == 330
    assert start_within([100.0, 10.0], 1, 2, 120) == 110   # two at a time: the second slot frees after 110 s
    assert start_within([], 3, 1, 120) == 360 and start_within([500.0], 0, 1, 120) == 0
    assert wait_words([5.0], 0, 2, limit_s=120, mean_s=None) is None   # a slot is free: it starts at once
    said = wait_words([30.0], 2, 1, limit_s=120, mean_s=None)
    assert "number 3 in the queue" in said and "2 runs waiting ahead of yours" in said and "within 330 s" in said
    assert "average" not in said   # no run finished here yet: no made-up figure
    said = wait_words([30.0], 2, 1, limit_s=120, mean_s=40)
    assert "within 330 s" in said and "40 s runs here have taken on average, in about 90 s" in said, said
    assert "about 0 s" in wait_words([90.0], 0, 1, limit_s=120, mean_s=40)   # a run past the mean: soon, not less


def test_a_fourth_address_joins_a_queue_three_addresses_tried_to_fill(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    """The served app (queue of 10, one race at a time, held at a gate): three addresses each join eight runs from
    eight sessions; a fourth address's Run is admitted, and a Run pressed now is told its place and wait."""
    import dataclasses
    import threading

    import httpx
    from conftest import HANG_GUARD_S, launch_local, request_values, tiny_app_context, wait_for

    import app
    from components.deploy.clients import Guard

    ctx = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)
    opened = threading.Event()

    def gated(model_spec, reward_spec, cfg, **kw):
        from components.session.stream import race_events

        opened.wait(HANG_GUARD_S)
        yield from race_events(model_spec, reward_spec, cfg, **kw)

    one = dataclasses.replace(ctx, concurrency=1, machine=ctx.machine.copy())
    demo = app.build_demo(one, events_fn=gated, guard=Guard(max_runs_per_client=2, trusted_proxy=True))
    guard, url = demo.specrej_guard, launch_local(demo).rstrip("/")
    run_fn = next(i for i, fn in demo.fns.items() if fn.api_name == "run")
    data = list(request_values(one, dict(prompt="Name two seas.", n=2, max_new_tokens=4)).values())
    joined = []

    def join(session, address):
        r = httpx.post(f"{url}/gradio_api/queue/join", headers={"X-Forwarded-For": address}, timeout=HANG_GUARD_S,
                       json={"data": data, "fn_index": run_fn, "session_hash": session, "event_data": None,
                             "trigger_id": None})
        if r.status_code == 200:
            joined.append((session, r.json()["event_id"]))
        return r

    try:
        assert one.max_queue == QUEUE
        assert join("holder", "192.0.2.99").status_code == 200
        assert wait_for(lambda: gradio_private_running(demo) == 1)   # held at the gate: the rest wait
        got = {a: [join(f"home{k}-{i}", a).status_code for i in range(8)]
               for k, a in enumerate(("203.0.113.1", "203.0.113.2", "2001:db8:0:1::1"))}
        # with the holder's household: shares 4, 3, 2 (10 places / 3, 4, 5 households, rounded up): 9 wait
        assert [codes.count(200) for codes in got.values()] == [4, 3, 2], got
        fourth = join("fourth", "198.51.100.7")
        assert fourth.status_code == 200, fourth.text
        said = guard.place("race", one.limits.max_run_seconds)
        waiting = guard.waiting()
        assert waiting >= QUEUE and said and f"number {waiting + 1} in the queue" in said, said
    finally:
        for session, event in joined:
            httpx.post(f"{url}/gradio_api/cancel", timeout=HANG_GUARD_S,
                       json={"fn_index": run_fn, "session_hash": session, "event_id": event})
        opened.set()
        wait_for(lambda: not guard._gradio_runs())
        demo.close()


def gradio_private_running(demo) -> int:
    from components.deploy import gradio_private

    return gradio_private.group_load(demo, "race")[0]
