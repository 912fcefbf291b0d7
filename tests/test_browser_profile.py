"""Issue 61 (2), in a real Chromium: a server whose every start-up measurement was taken under load states, on the
lecture page, the time the race takes when the machine is quiet, not the loaded time.

The server runs the app on the tiny test models with a profile made of two samples: the step timed at load 15.6
(6x its quiet time), and the same measurement's one-thread CPU time (the quiet step). The page's stated time is
read from its status line and compared with what the planner states for the same values on a server whose profile
was measured quiet. The profile's refresh (a measurement while idle) is held off, so the profile is the one set.
No test times anything."""
from __future__ import annotations

import dataclasses
import os
import re

import pytest
from conftest import CHROMIUM, launch_local, tiny_app_context

from specrej.core.cost import StepCost

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"),
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*"),
]
ROWS = (1, 8, 32, 128)
QUIET = StepCost(ROWS, (0.0004, 0.0005, 0.0008, 0.002))   # seconds a step, two threads, nothing else running
LOADED = 6.0


def profiled(ctx, loaded: bool):
    """``ctx`` with a profile measured under load (``loaded``) or quiet."""
    from components.session.context import Machine
    from components.session.profile import Sample

    machine = Machine(threads=2, last_load=1.0, measured_at=1.7e9)
    model = ctx.default_model
    if loaded:
        clocks = {r: [(LOADED * q, q, q)] for r, q in zip(ROWS, QUIET.seconds)}
        machine.add_sample(model, Sample(QUIET.scaled(LOADED), 2, 0.4, 1.7e9, 15.6, 0, None), 2)
        machine.add_sample(model, Sample.taken(QUIET.scaled(LOADED), clocks, 1, loadavg=15.6), 2)
    else:
        machine.add_sample(model, Sample(QUIET, 2, 0.98, 1.7e9, 0.1, 0, None), 2)
    return dataclasses.replace(ctx, machine=machine, page_races=None)


def test_a_server_profiled_under_load_states_the_quiet_time_on_the_lecture_page(
        browser, tiny_lm_dir, tiny_reward_dir, tmp_path_factory, monkeypatch):
    import app
    from components.session import planner, startup
    from components.theme import fmt_s

    monkeypatch.setattr(startup, "refresh", lambda ctx, model, lm: None)   # the profile stays the one set here
    base = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory, SPECREJ_PROFILE_FILE="off")
    busy, calm = profiled(base, loaded=True), profiled(base, loaded=False)
    plans = []
    real_plan = planner.plan

    def plan(ctx, press, values, **kw):   # the plans the page's presses got, and the values they were made of
        p = real_plan(ctx, press, values, **kw)
        plans.append((press, dict(values) if isinstance(values, dict) else values, p))
        return p

    monkeypatch.setattr(planner, "plan", plan)
    demo = app.build_demo(busy)
    url = launch_local(demo)
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    page.set_default_timeout(120_000)
    try:
        page.goto(url + "?lecture=1")
        page.wait_for_selector("#run")
        page.wait_for_function("document.querySelector('#lecture input').checked")
        page.fill("#prompt textarea", "Name three rivers.")
        page.click("#run")
        page.wait_for_function("/Done in/.test(document.querySelector('#status [data-testid=markdown]').innerText)")
        said = page.inner_text("#status [data-testid=markdown]")
    finally:
        page.close()
        demo.close()
    press, values, p = next((x for x in plans if x[0] is planner.Press.RUN), (None, None, None))
    assert p is not None and p.action == planner.LIVE, plans
    quiet = real_plan(calm, planner.Press.RUN, values)
    loaded = StepCost(ROWS, tuple(LOADED * s for s in QUIET.seconds))
    assert quiet.fit.estimate_s == pytest.approx(p.fit.estimate_s)   # the busy start-up's plan states the quiet time
    assert p.fit.cost.seconds == pytest.approx(QUIET.seconds) and p.fit.cost.seconds != pytest.approx(loaded.seconds)
    stated = re.search(r"expected about ([0-9.]+ m?s)\)", said)
    assert stated, said
    assert stated.group(1) == fmt_s(quiet.fit.estimate_s), (said, quiet.fit.estimate_s)
