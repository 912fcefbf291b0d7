"""Issue 61 (2, 4): the machine profile holds what the machine does when quiet, never the load of a moment; a
recording plays at its recorded pace; the torch worker's threads follow the free cores.

The profile's rule (``context.quiet_of``) and the threads' rule (``worker.FreeCores``) are pure and tested on
made-up samples and readings; the worker and the kept profile file on the real thing. No test times anything."""
from __future__ import annotations

import dataclasses

import pytest

from specrej.core.cost import StepCost

ROWS = (1, 8, 32, 128)
QUIET2 = StepCost(ROWS, (0.010, 0.012, 0.020, 0.050))     # two threads, nothing else running
QUIET1 = StepCost(ROWS, (0.014, 0.017, 0.030, 0.085))     # one thread, nothing else running


def sample(cost, threads, share, *, cpu=None, at=1.7e9, loadavg=0.1):
    from components.session.profile import Sample

    return Sample(cost, threads, share, at, loadavg, 0, cpu)


# ---------------------------------------------------------------- the quiet step: the best of repeated measurements

def test_a_sample_under_load_never_makes_the_quiet_step_slower_and_a_quieter_one_improves_it():
    from components.session.context import Machine

    m = Machine()
    assert m.add_sample("g", sample(QUIET2, 2, 0.97), 2) == QUIET2
    assert m.add_sample("g", sample(QUIET2.scaled(6.0), 2, 0.45, loadavg=7.0), 2) == QUIET2   # under load: kept aside
    assert m.add_sample("g", sample(QUIET2.scaled(1.4), 2, 0.99), 2) == QUIET2                # quiet but slower: no
    better = m.add_sample("g", sample(QUIET2.scaled(0.9), 2, 0.95), 2)                        # quiet and faster: yes
    assert better.seconds == pytest.approx(QUIET2.scaled(0.9).seconds)
    assert m.best["g"].share == 0.95 and len(m.samples["g"]) == 4
    m.measured_at = 1.7e9   # the probe's time (``startup.refresh``): the profile then says how quiet its best was
    profile = m.profile()
    assert profile.step("g") == better and "quiet step: 2 threads at" in profile.when("g") and "95%" in profile.when("g")


def test_a_server_started_under_load_keeps_one_threads_cpu_time_not_the_slow_step():
    """Issue 61: a server started at load 15.6 stored its slow step as "quiet" and stated 83-86 s for a race of
    about 19 s. Under load the worker measures at one thread, and that thread's CPU time is the step without the
    waits: that is kept, never the loaded wall time."""
    from components.session.context import Machine
    from components.session.profile import Sample

    clocks = {r: [(5 * q, q, 1.1 * q)] * 3 for r, q in zip(ROWS, QUIET1.seconds)}   # wall 5x the thread's CPU
    loaded_one = Sample.taken(QUIET1.scaled(5.0), clocks, 1, loadavg=15.6, others=3)
    assert not loaded_one.quiet and loaded_one.share == pytest.approx(0.2)
    assert loaded_one.cpu.seconds == pytest.approx(QUIET1.seconds)
    m = Machine()
    m.add_sample("g", sample(QUIET2.scaled(6.0), 2, 0.4, loadavg=15.6), 2)    # the probe's two threads, under load
    quiet = m.add_sample("g", loaded_one, 2)
    assert quiet.seconds == pytest.approx(QUIET1.seconds)       # one thread's quiet time: at most the quiet time
    assert m.best["g"].threads == 1 and "one thread's CPU time" in m.best["g"].words()
    # then the machine is quiet: a sample at two threads takes over (the quiet machine races with two)
    assert m.add_sample("g", sample(QUIET2, 2, 0.96), 2) == QUIET2 and m.best["g"].threads == 2


def test_only_loaded_samples_at_more_threads_keep_the_fastest_seen():
    """SPECREJ_THREADS=2 on a busy machine: nothing says what the quiet machine does; the fastest seen stands (as
    before), and the profile says it was measured under load."""
    from components.session.profile import quiet_of

    cost, best = quiet_of([sample(QUIET2.scaled(3.0), 2, 0.5), sample(QUIET2.scaled(2.0), 2, 0.6)], 2)
    assert cost.seconds == pytest.approx(QUIET2.scaled(2.0).seconds) and best.words().endswith("under load")


def test_the_rivals_reads_come_from_every_sample_and_the_samples_kept_are_bounded():
    from components.session.context import Machine

    reads = StepCost(ROWS, QUIET2.scaled(5.0).seconds, (("hidden", (1.1, 1.1, 1.2, 1.3)),))
    m = Machine()
    m.add_sample("g", sample(QUIET2, 2, 0.97), 2)
    quiet = m.add_sample("g", sample(reads, 2, 0.3), 2)           # under load: its times no, its ratios yes
    assert quiet.seconds == QUIET2.seconds and quiet.read_keys == ("hidden",)
    for k in range(Machine.KEEP + 5):
        m.add_sample("g", sample(QUIET2.scaled(2.0 + k), 2, 0.99), 2)
    assert len(m.samples["g"]) == Machine.KEEP and m.step_costs["g"].seconds == QUIET2.seconds


def test_the_quiet_step_is_kept_across_starts(tmp_path):
    """A server started under load states the quiet times an earlier quiet start measured: the samples are kept
    in the profile file under this machine's and this generator's key, and read back by the next start."""
    from components.session import startup
    from components.session.context import AppContext, Machine
    from components.session.profile import keep_profile, kept_profile, profile_key

    path = tmp_path / "profile.json"
    ctx = AppContext.from_env({"SPECREJ_PROFILE_FILE": str(path)})
    assert ctx.profile_path == path and AppContext.from_env({"SPECREJ_PROFILE_FILE": "off"}).profile_path is None
    key = profile_key(ctx, ctx.default_model)
    assert ctx.default_model in key and "cores" in key and "torch" in key
    keep_profile(path, key, [sample(QUIET2, 2, 0.97), sample(QUIET2.scaled(6.0), 2, 0.3)], ready_s=41.0)
    keep_profile(path, key, ready_s=38.5)                       # the ready time alone: the samples stay
    kept, ready = kept_profile(path, key)
    assert [s.share for s in kept] == [0.97, 0.3] and ready == 38.5
    assert kept_profile(path, key + "another")[0] == [] and kept_profile(tmp_path / "none.json", key) == ([], None)
    fresh = dataclasses.replace(ctx, machine=Machine(threads=2))
    assert startup.restore(fresh, fresh.default_model) == 2
    assert fresh.machine.step_costs[fresh.default_model] == QUIET2 and fresh.loaded.ready_s == 38.5
    path.write_text("{not json")                                 # a broken file is no file, and is rewritten
    assert kept_profile(path, key) == ([], None)
    keep_profile(path, key, [sample(QUIET1, 1, 0.9)])
    assert kept_profile(path, key)[0][0].cost == QUIET1


def test_a_probe_quiet_at_the_quiet_count_measures_the_quiet_step_again(monkeypatch):
    """The idle refresh of a server started under load (its quiet step one thread's): once a probe at the quiet
    thread count is quiet, the step is measured there again; a probe under load measures nothing."""
    from components.session import startup
    from components.session.context import AppContext, Machine

    ctx = dataclasses.replace(AppContext.from_env({"SPECREJ_PROFILE_FILE": "off"}), machine=Machine(threads=2))
    ctx.machine.add_sample(ctx.default_model, sample(QUIET1, 1, 0.2, cpu=QUIET1), 2)
    sampled = []

    def probe(share, factor):
        def fake(lm, threads):
            out = startup.Probed([factor * QUIET2.step(r) for r in startup.PROBE_ROWS])
            out.share = share
            return out
        return fake

    def take(ctx_, model, lm=None, reads=(), threads=None):
        sampled.append(threads)
        return ctx_.machine.add_sample(model, sample(QUIET2, threads, 0.97), 2)

    monkeypatch.setattr(startup, "sample", take)
    monkeypatch.setattr(startup, "_probe", probe(0.4, 6.0))        # under load: the one-thread quiet step stands
    startup.measure(ctx, ctx.default_model, object())
    assert sampled == [] and ctx.machine.quiet_threads(ctx.default_model) == 1
    monkeypatch.setattr(startup, "_probe", probe(0.97, 1.0))       # quiet at two threads: measured again there
    cost, load, _ = startup.measure(ctx, ctx.default_model, object())
    assert sampled == [2] and ctx.machine.quiet_threads(ctx.default_model) == 2 and load == pytest.approx(1.0)


# ---------------------------------------------------------------- lecture mode: a recording at its recorded pace

def test_a_lecture_recording_plays_at_its_recorded_pace_and_states_its_recorded_time():
    """Issue 61: "Replay done in 86.7 s (the recorded race took 19.0 s)". A recording plays at its own pace and
    the page states the recorded time; a live race states its quiet time."""
    from components.session.pace import LIVE_SHARE, lecture_plan

    p = lecture_plan(80.0, 4.0, 120.0, 19.0)                     # 4x slower now: the recording, at its pace
    assert p.mode == "recording" and p.speed == 1.0 and p.stated_s == 19.0
    live = lecture_plan(21.0, 1.05, 120.0, 19.0)                 # quiet enough: live, stating its time
    assert live.mode == "live" and live.stated_s == 21.0
    long = lecture_plan(400.0, 4.0, 120.0, 300.0)                # a recording longer than the limit allows
    assert long.stated_s == pytest.approx(LIVE_SHARE * 120.0) and long.speed == pytest.approx(300.0 / 96.0)


def test_a_profile_measured_under_load_states_the_quiet_time_for_a_lecture_race(tiny_lm_dir, tiny_reward_dir,
                                                                                 tmp_path_factory, monkeypatch):
    """The planner of a server whose start-up measurements were all under load states the quiet time (one
    thread's CPU time), not the loaded one: its stated time for a live lecture race is the quiet estimate."""
    from conftest import request_values, tiny_app_context

    from components.session import planner
    from components.session.context import Machine

    ctx = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory, SPECREJ_PROFILE_FILE="off")
    model = ctx.default_model
    quiet, loaded = StepCost(ROWS, (0.001, 0.0012, 0.002, 0.005)), 6.0
    clocks = {r: [(loaded * q, q, q)] for r, q in zip(ROWS, quiet.seconds)}
    from components.session.profile import Sample

    machine = Machine(threads=2, last_load=1.0, measured_at=1.7e9)
    machine.add_sample(model, sample(quiet.scaled(loaded), 2, 0.4), 2)
    machine.add_sample(model, Sample.taken(quiet.scaled(loaded), clocks, 1, loadavg=15.6), 2)
    busy = dataclasses.replace(ctx, machine=machine, page_races=None)
    settings = dict(prompt="Name three rivers.", n=8, max_new_tokens=24, budget=160, first_decision=8)
    p = planner.plan(busy, planner.Press.RUN, request_values(busy, settings, lecture=True))
    assert p.action == planner.LIVE and p.fit.cost.seconds == pytest.approx(quiet.seconds)
    assert "one thread's CPU time" in p.fit.measured
    calm = dataclasses.replace(busy, machine=Machine(threads=2, last_load=1.0, measured_at=1.7e9))
    calm.machine.add_sample(model, sample(quiet, 2, 0.98), 2)
    assert planner.plan(calm, planner.Press.RUN, request_values(calm, settings, lecture=True)).fit.estimate_s == \
        pytest.approx(p.fit.estimate_s)   # the same stated time as a server started quiet


# ---------------------------------------------------------------- the torch worker's threads follow the free cores

def test_free_cores_gives_all_threads_or_one_and_brings_the_second_back_only_after_quiet_readings():
    from components.session.worker import FreeCores

    readings, now = [0, 1, 0, 0, 0, 0, None], [0.0]

    def tick():
        now[0] += 1.0
        return now[0]

    policy = FreeCores(2, cores=2, every_s=0.5, memory=4, read=lambda: readings.pop(0), clock=tick)
    got = [policy() for _ in range(7)]
    assert got == [2, 1, 1, 1, 1, 2, 2]   # one other running: one thread, until four quiet readings; unknown: 2
    four = FreeCores(4, cores=4, read=lambda: 1, clock=tick)
    assert four() == 1                     # all or one: a count between would compile inside a race
    held = FreeCores(2, cores=2, every_s=10.0, read=lambda: 5, clock=lambda: 0.0)
    assert held() == 1 and held() == 1     # read at most every ``every_s``


def test_the_worker_sets_the_policys_threads_before_each_job():
    import torch

    from components.session.worker import TorchWorker

    w = TorchWorker("test-follow")
    counts = iter([1, 2, 1])
    w.follow(lambda: next(counts))
    seen = [w.call(torch.get_num_threads) for _ in range(3)]
    assert seen == [1, 2, 1] and w.threads_set == 1
    w.follow(lambda: 1 / 0)                 # a failing policy never fails a job
    assert w.call(lambda: "ran") == "ran"
    w.follow(None)
    w.call(torch.set_num_threads, 2)
    assert w.call(torch.get_num_threads) == 2


def test_others_running_reads_proc_and_leaves_this_process_out():
    from components.session import worker

    others = worker.others_running()
    assert others is None or others >= 0
    assert worker.usable_cores() >= 1


def test_follow_free_cores_is_off_where_the_threads_are_pinned():
    from components.session.context import AppContext
    from components.session.startup import follow_free_cores
    from components.session.worker import FreeCores, torch_worker

    w = torch_worker()
    before = w._threads
    try:
        follow_free_cores(AppContext.from_env({"SPECREJ_THREADS": "2", "SPECREJ_PROFILE_FILE": "off"}))
        assert w._threads is None
        follow_free_cores(AppContext.from_env({"SPECREJ_FOLLOW_CORES": "0", "SPECREJ_PROFILE_FILE": "off"}))
        assert w._threads is None
        follow_free_cores(AppContext.from_env({"SPECREJ_PROFILE_FILE": "off"}))
        assert isinstance(w._threads, FreeCores)
    finally:
        w.follow(before)
