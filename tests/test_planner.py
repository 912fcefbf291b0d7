"""The planner (components/session/planner.py): what a Run does, decided at the click from the request, the
deployment and the machine profile measured at start-up; nothing measured, nothing asked of the torch thread.
On the tiny models; the machine's speed set by hand (no test times anything)."""
from __future__ import annotations

import dataclasses
import threading

import pytest
from conftest import profiled, race_frames, request_values, run_request, tiny_app_context, wait_for

from specrej.core.cost import StepCost

SETTINGS = dict(prompt="Name three rivers.", n=8, max_new_tokens=24, budget=160, first_decision=8)
QUIET = StepCost((1, 8, 32, 128), (0.001, 0.0012, 0.002, 0.005))


@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


@pytest.fixture()
def no_measuring(monkeypatch):
    """Every way to measure this machine, and the torch thread itself, refused: what a plan may not touch."""
    from components.session import startup
    from components.session.worker import TorchWorker
    from specrej.backends import steptime

    def refuse(*a, **kw):
        raise AssertionError("measured (or asked the torch thread) at a click")

    for mod, name in ((startup, "measure"), (startup, "_probe"), (steptime, "measure"), (TorchWorker, "call"),
                      (TorchWorker, "submit")):
        monkeypatch.setattr(mod, name, refuse)


def test_the_warm_up_measures_the_profile_a_click_reads(ctx):
    profile = ctx.machine.profile()
    assert profile.step(ctx.default_model) is not None and profile.load is not None
    assert profile.measured_at is not None and profile.when().startswith("measured at")


def test_a_plan_measures_nothing_and_asks_nothing_of_the_torch_thread(ctx, no_measuring):
    from components.session import planner

    p = planner.plan(ctx, planner.Press.RUN, request_values(ctx, SETTINGS))
    assert p.action == planner.LIVE and p.fit is not None and p.fit.estimate_s > 0
    assert p.fit.measured.startswith("measured at")
    assert len(p.admissions) == len(p.prep.arms) and all(a.fits and a.kv.prompt_len > 0 for a in p.admissions)
    bad = planner.plan(ctx, planner.Press.RUN, request_values(ctx, SETTINGS, n=0))
    assert bad.action == planner.REFUSE and "n" in bad.message
    small = planner.plan(ctx, planner.Press.RUN, request_values(ctx, {**SETTINGS, "budget": 20}))   # 8 rows cannot fit 20 slots
    assert small.action == planner.REFUSE and "budget" in small.message.lower()


def test_a_run_plays_through_the_executor_with_nothing_measured(ctx, monkeypatch):
    """The whole Run (plan, then the executor's live race) with every measurement refused: it races to Done,
    its verdict priced with the profile's step."""
    from components.session import startup
    from specrej.backends import steptime

    def refuse(*a, **kw):
        raise AssertionError("measured during a Run")

    monkeypatch.setattr(startup, "measure", refuse)
    monkeypatch.setattr(steptime, "measure", refuse)
    out = race_frames(ctx, run_request(ctx, SETTINGS))
    assert "Done" in out[-1].status and out[-1].view.step is not None


@pytest.fixture(scope="module")
def recorded(ctx, tmp_path_factory):
    from components.session import stream

    folder = tmp_path_factory.mktemp("page-races")
    stream.record(ctx, run_request(ctx, SETTINGS), folder / "rivers.json.gz")
    return dataclasses.replace(ctx, page_races=folder, machine=ctx.machine.copy())


def test_lecture_mode_decides_from_the_profile_and_states_its_quiet_time(recorded, monkeypatch):
    from components.session import planner

    profiled(monkeypatch, recorded.default_model, QUIET, 4.0)
    busy = planner.plan(recorded, planner.Press.RUN, request_values(recorded, SETTINGS, lecture=True))
    assert busy.action == planner.RECORDING and busy.fallback["reason"] == "lecture"
    # the recording at its own pace, stating its own time (issue 61); live, the quiet time (below)
    assert busy.fallback["stated_s"] == pytest.approx(planner.recorded_seconds(busy.recording)) and busy.speed == 1.0
    assert busy.fallback["profile"].startswith("measured at")
    profiled(monkeypatch, recorded.default_model, QUIET, 1.0)
    quiet = planner.plan(recorded, planner.Press.RUN, request_values(recorded, SETTINGS, lecture=True))
    assert quiet.action == planner.LIVE and quiet.recording is not None   # live, its recording kept for falling behind


def test_too_long_without_a_recording_is_refused_in_plain_words(ctx, monkeypatch):
    from components.session import planner

    profiled(monkeypatch, ctx.default_model, QUIET, 1e5)
    p = planner.plan(ctx, planner.Press.RUN, request_values(ctx, SETTINGS))
    assert p.action == planner.REFUSE and "past this deployment's time limit" in p.message
    assert "**" not in p.message   # shown escaped in "Can't run": raw markdown would print as asterisks


def test_a_warming_server_plans_to_wait(ctx):
    from components.session import planner

    gate = threading.Event()
    warming = dataclasses.replace(ctx)
    warming.loaded.warm_thread = threading.Thread(target=gate.wait, daemon=True)
    warming.loaded.warm_thread.start()
    try:
        assert planner.plan(warming, planner.Press.RUN, request_values(ctx, SETTINGS)).action == planner.WARM
    finally:
        gate.set()
        warming.loaded.warm_thread.join()
    assert planner.plan(ctx, planner.Press.RUN, request_values(ctx, SETTINGS)).action == planner.LIVE


def test_the_profile_is_refreshed_only_while_idle(ctx, monkeypatch):
    from components.session import startup

    machine = ctx.machine.copy()
    machine.measured_at = 0.0   # long ago
    c = dataclasses.replace(ctx, machine=machine)
    refreshed = []
    monkeypatch.setattr(startup, "refresh", lambda ctx, model, lm: refreshed.append(model) or 1.0)
    c.machine.started("a race")   # a run in flight: never refreshed
    keeper = startup.keep_fresh(c, every_s=0.05, idle_s=0.05)
    try:
        assert not wait_for(lambda: refreshed, timeout=0.5)
        c.machine.ended("a race")
        assert wait_for(lambda: refreshed, timeout=10)
    finally:
        keeper.stop.set()
        keeper.join(5)


def test_the_page_states_the_budget_rule_in_one_place():
    """The budget a run will get and its slot arithmetic are asked of ``components/session/budget.py`` alone: no
    other module of the page computes them by hand (they were computed at about 20 sites, and drifted)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    rule = root / "components" / "session" / "budget.py"
    by_hand = re.compile(r"KVBudget\(|planned_budget")
    found = [f"{p.relative_to(root)}:{i}" for p in [root / "app.py", *sorted((root / "components").rglob("*.py"))]
             if p != rule for i, line in enumerate(p.read_text().splitlines(), 1) if by_hand.search(line)]
    assert found == [], found
    assert by_hand.search(rule.read_text())


def test_each_arm_of_a_live_race_is_admitted_once_by_the_planner(ctx, monkeypatch):
    """The planner admits every arm (n='auto' resolved, the rows checked); the race's arms run on those admissions
    and never admit again (they did, a second time in ``_Run``, and could disagree with the plan)."""
    from specrej.core import budget
    from specrej.methods import run

    planned, raced = [], []
    real = budget.admit
    monkeypatch.setattr("components.session.planner.admit", lambda *a, **kw: planned.append(1) or real(*a, **kw))
    monkeypatch.setattr(run, "admit", lambda *a, **kw: raced.append(1) or real(*a, **kw))
    out = race_frames(ctx, run_request(ctx, SETTINGS))
    assert out[-1].view.done, out[-1].status
    assert len(planned) == len(out[-1].view.specs) and raced == []


def test_an_arm_given_an_admission_of_another_race_admits_afresh(tiny_lm, length_reward):
    """An admission made for another config or prompt is not taken on trust: the arm admits its own."""
    from specrej import RunConfig, best_of_n
    from specrej.core.budget import admit, sharing
    from specrej.methods import run

    cfg = RunConfig(prompt="Name three rivers.", n=4, max_new_tokens=8, budget=400)
    other = admit(dataclasses.replace(cfg, n=8), budget=400, prompt_len=len(tiny_lm.render(cfg.prompt)),
                  shared=sharing(tiny_lm, tiny_lm.backend))
    calls = []
    real = run.admit
    try:
        run.admit = lambda *a, **kw: calls.append(1) or real(*a, **kw)
        events = list(best_of_n(tiny_lm, length_reward, cfg, admission=other))
    finally:
        run.admit = real
    assert calls == [1] and len(events[-1].candidates) == 4


def test_what_budget_a_run_gets_is_answered_in_one_place(tiny_lm, monkeypatch):
    """Issue 61 (1): "what budget does this run get" was answered in the planner, in the methods and in
    ``planned_budget``; ``core.budget.granted_budget`` answers it now, and nothing else asks a backend for its default."""
    import re
    from pathlib import Path

    from specrej.core import budget

    assert budget.granted_budget(300, lm=tiny_lm) == 300                               # its own
    assert budget.granted_budget(None, lm=tiny_lm) == tiny_lm.backend.default_budget(tiny_lm)   # its model's engine
    monkeypatch.setenv(budget.CPU_BUDGET_ENV, "777")
    assert budget.granted_budget(None) == 777 and budget.granted_budget(None, on_gpu=True) is None   # before it loads
    root = Path(__file__).resolve().parents[1]
    asks = re.compile(r"\.default_budget\(")
    found = [f"{p.relative_to(root)}:{i}" for base in ("specrej", "components", "scripts")
             for p in sorted((root / base).rglob("*.py")) for i, line in enumerate(p.read_text().splitlines(), 1)
             if asks.search(line) and "def default_budget" not in line]
    assert [f.split(":")[0] for f in found] == ["specrej/core/budget.py"], found


def test_a_recording_is_raced_on_one_admission_per_arm(ctx, monkeypatch, tmp_path):
    """``stream.record`` admitted every arm, then the race admitted each again: now the race runs on the planner's."""
    from specrej.core import budget
    from specrej.methods import run

    from components.session import stream

    planned, raced = [], []
    real = budget.admit
    monkeypatch.setattr("components.session.planner.admit", lambda *a, **kw: planned.append(1) or real(*a, **kw))
    monkeypatch.setattr(run, "admit", lambda *a, **kw: raced.append(1) or real(*a, **kw))
    stream.record(ctx, run_request(ctx, SETTINGS), tmp_path / "rivers.json.gz")
    assert len(planned) == 2 and raced == []
