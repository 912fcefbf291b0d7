"""Issue 65 (1): "made-up sessions from one address or household are capped". Sessions that did nothing are kept
per household at most ``SPECREJ_SESSIONS_PER_ADDRESS`` (``memory.HouseholdSessions``): a flood from one address
evicts its own made-up sessions, never another household's session that has only opened the page, nor a session
that ran something. Gradio's own table (its real ``StateHolder``) holds the sessions here; the served gate feeds
it in ``test_the_gate_caps_one_addresss_made_up_sessions``."""
from __future__ import annotations

from types import SimpleNamespace as NS


def _holder(capacity: int):
    from gradio.state_holder import StateHolder

    holder = StateHolder()
    holder.capacity = capacity
    return holder


def test_a_flood_from_one_household_evicts_only_its_own_idle_sessions():
    from components.deploy.memory import HouseholdSessions
    from components.state.view import RunView
    from specrej import RunConfig

    holder = _holder(10_000)
    blocks = NS(state_holder=holder)
    race = RunView(RunConfig(prompt="x", n=2, max_new_tokens=4), model_label="m", reward_label="r")
    per = HouseholdSessions(cap=5)

    def arrive(key, household, *values):
        per.seen(blocks, key, household)
        holder.session_data[key] = NS(state_data=dict(enumerate(values)), state_components=[])
        holder.update(key)

    arrive("newcomer", "198.51.100.7", None)            # another household: only opened the page
    arrive("racer", "203.0.113.9", race)                # the flooding household's own visitor who raced
    for i in range(300):
        arrive(f"made-up-{i}", "203.0.113.9", None)
    kept = set(holder.session_data)
    assert "newcomer" in kept and "racer" in kept
    flood = [k for k in kept if k.startswith("made-up-")]
    assert len(flood) <= 5 and "made-up-299" in flood, sorted(flood)
    assert per.dropped == 300 - len(flood)
    assert per.seen(blocks, "newcomer", "198.51.100.7") == 0 and "newcomer" in holder.session_data


def test_the_cap_comes_from_the_environment_and_zero_turns_it_off():
    from components.deploy import gate, memory

    assert gate.ApiGate(None, NS()).sessions.cap == memory.SESSIONS_PER_HOUSEHOLD == 100
    off = memory.HouseholdSessions(cap=0)
    holder = _holder(10)
    holder.session_data["a"] = NS(state_data={}, state_components=[])
    assert all(off.seen(NS(state_holder=holder), f"s{i}", "h") == 0 for i in range(50))


def test_the_gate_caps_one_addresss_made_up_sessions(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    """The served app: 250 made-up sessions from one address (each loading the page's state, ``run/register``)
    leave at most ``SPECREJ_SESSIONS_PER_ADDRESS`` (100) of them in Gradio's table; a session another address opened
    first is still there."""
    import httpx
    from conftest import launch_local, tiny_app_context

    import app

    ctx = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)
    demo = app.build_demo(ctx)
    demo.specrej_guard.trusted_proxy = True   # the test plays a proxy: the right-most X-Forwarded-For is the address
    url = launch_local(demo).rstrip("/")
    try:
        with httpx.Client(timeout=120) as client:
            def register(session, address):
                r = client.post(f"{url}/gradio_api/run/register", headers={"X-Forwarded-For": address},
                                json={"data": [None], "session_hash": session})
                assert r.status_code == 200, r.text

            register("elsewhere", "198.51.100.7")
            for i in range(250):
                register(f"flood{i:04d}", "203.0.113.9")
        held = set(demo.state_holder.session_data)
        assert "elsewhere" in held and "flood0249" in held
        assert sum(k.startswith("flood") for k in held) <= 100
    finally:
        demo.close()
