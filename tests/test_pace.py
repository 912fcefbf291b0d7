"""The same race whatever the load: the estimate prices it at this machine's step times now
(components/session/pace.py, core/cost.py) and never changes it; links carry its settings (components/links.py)."""
from __future__ import annotations

import dataclasses

import pytest

from specrej import RunConfig
from specrej.core.budget import KVBudget
from specrej.core.cost import StepCost, race_seconds


def test_the_estimate_prices_every_step_of_the_race_at_the_step_times_now():
    cost = StepCost((1, 8, 32, 128), (0.03, 0.035, 0.05, 0.12))
    cfg = RunConfig(prompt="x", n=32, budget=448, first_decision=14, max_new_tokens=48)
    t1 = race_seconds(KVBudget(448, 40, True), cfg, cost, sr_auto=True)
    t2 = race_seconds(KVBudget(448, 40, True), dataclasses.replace(cfg, max_new_tokens=24), cost, sr_auto=True)
    assert t2 < t1                                           # fewer steps, less time
    assert race_seconds(KVBudget(448, 40, True), cfg, cost.scaled(3.0), sr_auto=True) == pytest.approx(3 * t1)
    assert cost.scaled(3.0).step(8) == pytest.approx(3 * cost.step(8))
    assert cost.merged(cost.scaled(0.5)).seconds == cost.scaled(0.5).seconds


def test_a_busy_machine_changes_the_expected_time_never_the_race(tiny_app, monkeypatch):
    from components.session import pace
    from components.session.context import MachineProfile

    ctx = tiny_app
    quiet = StepCost((1, 8, 32, 128), (0.01, 0.012, 0.02, 0.05))
    cfg = RunConfig(prompt="Name three rivers.", n=8, budget=400, first_decision=8, max_new_tokens=40)
    kw = dict(prompt_len=12, shared=True, limit_s=120.0, sr_auto=True)
    calm = pace.fit(MachineProfile({ctx.default_model: quiet}, 1.0, 2, 1.8), ctx.default_model, cfg, **kw)
    busy = pace.fit(MachineProfile({ctx.default_model: quiet}, 3.0, 1, 1.8), ctx.default_model, cfg, **kw)
    assert calm.cfg == cfg and busy.cfg == cfg and busy.cost.step(8) == pytest.approx(3 * quiet.step(8))
    assert busy.estimate_s == pytest.approx(3 * calm.estimate_s) and busy.threads == 1
    # another race at this prompt, at the same step times: fewer tokens, less time
    assert 0 < busy.estimate(dataclasses.replace(cfg, max_new_tokens=20), sr_auto=True) < busy.estimate_s
    # before the first measurement of this generator nothing is estimated
    assert pace.fit(MachineProfile({}, None, None, 1.8), ctx.default_model, cfg, **kw) is None
    # a race that ran: what it took over its bound moves the next estimate (a third of the way)
    before = ctx.machine.overhead
    pace.learn(ctx, calm, 2 * calm.estimate_s / ctx.machine.overhead)
    assert ctx.machine.overhead == pytest.approx(before + (2 - before) / 3)


@pytest.fixture()
def tiny_app(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    from conftest import tiny_app_context

    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


def test_links_round_trip_and_drop_what_they_do_not_know():
    from components import links

    values = dict(prompt="Name three rivers.", n=16, alpha=0.5, seed=7, fit=True, step=False, decision="budget",
                  rivals=["deepconf"])
    q = links.query(values)
    assert "seed=7" in q and "fit=1" in q and "prompt=Name+three+rivers." in q
    parsed = dict(p.split("=", 1) for p in q.split("&"))
    from urllib.parse import unquote_plus

    assert "rivals=deepconf" in q
    back = links.settings({k: unquote_plus(v) for k, v in parsed.items()},
                          {"decision": ["budget", "interval"], "rivals": ["deepconf", "stbon"]}, {"n": (1, 32)})
    assert back == values
    # a link from before ``rivals`` (one flag per rival) ticks the same; unknown rivals and repeats are dropped
    rivals = {"rivals": ["deepconf", "stbon"]}
    assert links.settings({"deepconf": "1", "stbon": "0"}, rivals)["rivals"] == ["deepconf"]
    assert links.settings({"rivals": "stbon,evil,stbon, deepconf"}, rivals)["rivals"] == ["stbon", "deepconf"]
    junk = links.settings({"n": "999", "alpha": "nan", "seed": "-3", "decision": "sometimes", "model": "evil",
                           "fit": "maybe", "budget": "1e3", "interval": "16.0"}, {"decision": ["budget"]}, {"n": (1, 32)})
    assert junk == {}   # a whole number is written as one (issue 42: never read through float)


def test_a_large_seed_round_trips_through_a_link_and_one_out_of_range_is_dropped():
    """Issue 42 (4): seeds were read through float(): 9007199254740993 reopened as ...992 (another race) and
    2**63 - 1 was dropped. Now every seed of the library's range comes back exact; past it, dropped."""
    from components import links

    seeds = (0, 2**53 + 1, 9007199254740993, 2**63 - 1)
    for seed in seeds:
        back = links.settings({"seed": links.query({"seed": seed}).split("=", 1)[1]}, None, {"seed": (0, 2**63 - 1)})
        assert back == {"seed": seed} and type(back["seed"]) is int
    for junk in (str(2**63), "9" * 30, "-1", "+5", "٣", "1_000", " "):
        assert links.settings({"seed": junk}, None, {"seed": (0, 2**63 - 1)}) == {}


def test_specrej_threads_pins_the_threads_whatever_the_load(tiny_app, monkeypatch):
    """SPECREJ_THREADS (a paired timing, scripts/app_cost.py, pins both sides): the probe's one-thread fallback
    on a busy machine is off; without it a slow probe at two threads tries one. The warm-up measures the quiet
    step with the rivals' extra reads (the verdict prices their steps with them) and probes the machine: the
    profile a click reads, with when it was measured."""
    import dataclasses

    from components.session import startup
    from components.session.context import AppContext, Machine
    from specrej.backends.steptime import RIVAL_READS

    model = tiny_app.default_model
    both = startup.quiet_step(tiny_app, model)
    assert both.read_keys == RIVAL_READS   # measured in the warm-up, with the plain step
    assert startup.quiet_step(tiny_app, model, reads=RIVAL_READS) is both   # measured once
    profile = tiny_app.machine.profile()
    assert profile.step(model) is both and profile.load is not None and profile.threads
    assert profile.measured_at is not None and "measured at" in profile.when()
    assert AppContext.from_env({"SPECREJ_THREADS": "2"}).threads == 2 and AppContext.from_env({}).threads is None
    quiet = StepCost((1, 8, 32, 128), (0.01, 0.012, 0.02, 0.05))
    probed = []

    def slow_probe(lm, threads):   # 3x the quiet step: past startup.SLOW
        probed.append(threads)
        return [3 * quiet.step(r) for r in startup.PROBE_ROWS]

    monkeypatch.setattr(startup, "_probe", slow_probe)
    for threads, want, tried in ((2, 2, [2]), (None, 2, [2, 1])):
        ctx = dataclasses.replace(tiny_app, threads=threads, machine=Machine(threads=2,
                                                                             step_costs={tiny_app.default_model: quiet}))
        probed.clear()
        _, load, got = startup.measure(ctx, ctx.default_model, None)
        assert (got, probed) == (want, tried) and load == pytest.approx(3.0)
