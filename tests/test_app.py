"""The web app, on tiny real models: pure chart/panel functions, then the app launched in-process
on 127.0.0.1 and driven through ``gradio_client`` (streaming, the JSON trace, Stop, bad input).

Settings are tiny (a 2-layer model, N <= 32, a few dozen tokens) so the whole file runs in well
under a minute on two shared CPU cores; every wait is bounded.
"""
from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import after_cancel, race_frames, HANG_GUARD_S, api_outputs, request_values, run_request, serve, text, tiny_app_context, wait_for
from components.frames import KEEP

pytest.importorskip("gradio")
pytest.importorskip("gradio_client")

# gradio's queue calls pandas APIs that pandas 3 deprecates: not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
TIMEOUT_S = HANG_GUARD_S
PROMPT = "Give me three tips for staying healthy."
# A tiny run that must make at least one Speculative Rejection decision: the tiny model's ~40-token
# prompt (stored once) and 8 rows overflow a 100-slot budget after a few tokens.
SMALL = dict(n=8, alpha=0.5, budget=100, decision="budget", interval=16, max_new_tokens=24,
             temperature=0.9, top_p=0.95, seed=3)


@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


def request(ctx, **overrides):
    return run_request(ctx, dict(prompt=PROMPT, **SMALL), **overrides)


# ---------------------------------------------------------------- pure functions, no server

def test_context_from_env_offers_the_configured_models(ctx, tiny_lm_dir, tiny_reward_dir):
    assert [spec for _, spec in ctx.models] == [tiny_lm_dir]
    assert ctx.default_reward == f"model:hf:{tiny_reward_dir}"
    assert {"confidence", "self-certainty"} <= {k for _, k in ctx.rewards}
    with pytest.raises(ValueError, match="not offered"):
        ctx.resolve("someone/else", ctx.default_reward, "")
    with pytest.raises(ValueError, match="not offered"):
        ctx.resolve(ctx.default_model, "hf:evil/model", "")


def test_without_the_embedded_wheels_the_app_falls_back_with_a_note(monkeypatch):
    from components.session import context

    monkeypatch.setattr(context, "_has_embedded_generator", lambda: False)
    monkeypatch.setattr(context, "_has_embedder", lambda: False)
    c = context.AppContext.from_env({"SYSTEM": "spaces"})
    assert c.default_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert c.default_reward == "preference" and "preference" in {k for _, k in c.rewards}
    assert any("SmolLM2" in n and "Hub" in n for n in c.notes)
    assert any("all-MiniLM-L6-v2" in n and "Hub" in n for n in c.notes)
    big = context.AppContext.from_env({"SPECREJ_MODEL": "HuggingFaceTB/SmolLM2-1.7B-Instruct",
                                       "SPECREJ_REWARD": "hf:Skywork/Skywork-Reward-V2-Qwen3-0.6B"})
    assert big.resolve(big.default_model, big.default_reward, "") == (
        "HuggingFaceTB/SmolLM2-1.7B-Instruct", "hf:Skywork/Skywork-Reward-V2-Qwen3-0.6B")


@pytest.fixture(scope="module")
def raced(ctx):
    """Every frame of one small race, streamed without a server."""

    return race_frames(ctx, request(ctx))


def test_frames_stream_a_whole_race_and_charts_are_valid_plotly(ctx, raced):
    from components import charts
    from components.frames import KEEP

    out = raced
    assert len(out) >= 3
    first, last = out[0], out[-1]
    assert "Starting" in first.status
    view = last.view
    assert view.done and view.state == "done"
    assert view.arms["sr"].rounds, "the tiny budget must force at least one decision"
    for spec in (charts.arm_chart(view, "sr"), charts.arm_chart(view, "bon"), charts.race_chart(view),
                 charts.race_chart(view, "flops")):
        charts.figure(spec)  # plotly validates every attribute
    # the page's slots: Speculative Rejection left, Best-of-N right, as before
    assert [arm for arm, _, _ in first.slots] == ["sr", "bon"] and len(first.arm_plots) == 2
    # fixed trace count and order between the first and the last frame
    for a, b in zip(first.arm_plots, last.arm_plots):
        assert [t["uid"] for t in a["data"]] == [t["uid"] for t in b["data"]]
    # the race chart shows how each arm spends its time while racing, then the verdict on Best-of-N's curve
    assert first.race_plot["data"][0]["uid"].startswith("work-") and last.race_plot["data"][0]["uid"] == "verdict-0"
    assert "Result" in last.race_label and "While racing" in first.race_label
    rows = last.table["data"]
    assert len(rows) == 8 and all(len(r) == len(last.table["headers"]) == 8 for r in rows)
    assert "to reach Speculative Rejection" in last.summary and "prune Best-of-N's winner" in last.summary
    assert last.status_kind == "done" and first.status_kind == "live"
    assert all(f.trace_path is KEEP for f in out[1:-1])
    assert not ctx.active


def test_a_budget_error_reads_the_same_from_the_library_the_cli_and_the_page(ctx, tiny_lm_dir, tiny_reward_dir, capsys):
    """Issue 51 (2): one failure kind, one wording, whichever door it comes through (the page escapes markdown)."""
    from specrej import BudgetError, RunConfig, best_of_n, load_generator, load_reward, run_to_completion
    from specrej.cli import main

    cfg = {k: v for k, v in SMALL.items() if k in RunConfig.__dataclass_fields__}
    with pytest.raises(BudgetError) as err:
        run_to_completion(best_of_n(load_generator(tiny_lm_dir), load_reward(f"hf:{tiny_reward_dir}"),
                                    RunConfig(prompt=PROMPT, **{**cfg, "budget": 50})))
    words = str(err.value)
    assert "budget of 50 KV slots" in words
    page = race_frames(ctx, request(ctx, budget=50))[-1].status
    assert page.replace("\\", "") == f"**Can't run:** {words}", page
    assert main(["--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}", "--prompt", PROMPT, "--n", "8",
                 "--budget", "50", "--max-new-tokens", str(SMALL["max_new_tokens"]), "--quiet"]) == 2
    assert f"error: {words}" in capsys.readouterr().err


def test_bad_input_gives_a_message_and_starts_nothing(ctx):

    for overrides, needle in [(dict(prompt="   "), "prompt is empty"), (dict(n=0), "n must be a whole number from 1 to"),
                              (dict(alpha=1.5), "alpha"), (dict(temperature=0), "temperature"),
                              (dict(reward="preference", preference=" "), "preference text is empty"),
                              (dict(reward="hf:someone/else"), "not offered")]:
        out = race_frames(ctx, request(ctx, **overrides))
        assert len(out) == 1 and "Can't run" in out[0].status and needle in out[0].status, (overrides, out)
    # a combination that cannot fit the budget is found when the race starts, before model work
    out = race_frames(ctx, request(ctx, budget=50))
    assert "Can't run" in out[-1].status and "budget" in out[-1].status
    assert not ctx.active


def test_the_deployment_limits_apply(ctx):
    import dataclasses

    from components.deploy.limits import Limits

    out = race_frames(ctx, request(ctx, n=ctx.limits.max_n + 1))
    assert len(out) == 1 and "SPECREJ_MAX_N" in out[0].status
    capped = dataclasses.replace(ctx, limits=Limits(max_run_seconds=0), machine=ctx.machine.copy())
    out = race_frames(capped, request(capped))
    assert "SPECREJ_MAX_RUN_SECONDS" in out[-1].status and not capped.active


def test_a_run_that_reaches_the_time_limit_keeps_its_partial_result(ctx, monkeypatch):
    """The limit is read off the run's clock; here the clock is the event count (no sleeps): the
    run passes 60 s at its 7th event, with both arms still writing."""
    import dataclasses
    import json
    from pathlib import Path

    from components.state.view import RunView
    from components.deploy.limits import Limits

    monkeypatch.setattr(RunView, "elapsed", lambda self: 10.0 * len(self.trace))
    capped = dataclasses.replace(ctx, limits=Limits(max_run_seconds=60), machine=ctx.machine.copy())
    out = race_frames(capped, request(capped, n=8, max_new_tokens=60, budget=0))
    last = out[-1]
    assert last.status.startswith("**Stopped at the time limit**") and "Can't run" not in last.status
    assert last.status_kind == "stopped" and last.view.state == "limit" and not capped.active
    assert not last.view.done                                        # stopped, not finished
    assert last.arm_plots is KEEP              # the charts keep what they showed
    assert "Partial result" in last.summary and "No speed-up is stated" in last.summary
    from components.theme import fmt_flops, md_escape

    for arm in last.view.arms.values():                              # each arm's spending is in the result
        assert md_escape(arm.spec.label) in last.summary and fmt_flops(arm.ledger.flops) in last.summary
    assert last.results_visible and last.table["data"]               # the candidates so far
    trace = json.loads(Path(last.trace_path).read_text())
    assert trace["state"] == "stopped at the time limit" and len(trace["events"]) == 7


def test_an_unexpected_error_is_shown_not_raised(ctx):

    def broken(*_, **__):
        yield from ()
        raise RuntimeError("boom")

    out = race_frames(ctx, request(ctx), events_fn=broken)
    assert "went wrong" in out[-1].status and "boom" in out[-1].status


def test_a_play_handler_left_suspended_ends_its_race_when_stopped(ctx):
    """The CI flake of test_guard_surface (a cancelled run held in ``machine.active`` for minutes): a cancel that
    arrives during a handler's first step cancels Gradio's task before Gradio holds the generator, so nothing
    ever resumes or closes it. Here the handler is left suspended (a reference held, the collector off) and its
    stop flag set, as the guard's cancel sets it: the race's run must leave the machine all the same."""
    import gc

    import gradio as gr

    import app
    from components import ui
    from components.deploy.clients import StopFlag
    from components.session.stream import updates
    from components.state.play import Phase, Session

    with gr.Blocks():
        page = ui.build_page(ctx)
    session, stop = Session(), StopFlag()
    play = session.begin(Phase.RACING)
    values = list(request_values(ctx, dict(prompt=PROMPT, **SMALL)).values())
    handler = app.playing(page, session, play, stop, updates(ctx, values, stop_requested=stop))
    gc.disable()
    try:
        while not ctx.machine.busy():
            next(handler)
        stop.set()   # and the handler is never resumed
        assert wait_for(lambda: ctx.machine.busy() == 0 and not ctx.active), (ctx.machine.busy(), ctx.active)
        assert wait_for(lambda: not session._alive)   # a newer play of this session draws without waiting
    finally:
        gc.enable()
    assert list(handler) == []


def test_a_newer_play_draws_while_the_stale_one_is_inside_a_decoding_step(ctx):
    """Paper scale (or Replay) pressed while the race is inside a decoding step: the race's last frame is with
    Gradio already and it yields nothing more, so the new play settles at once, not once the step ends (under
    load a step took more than a second, and the page showed the stopped race's "Racing" meanwhile)."""
    import itertools
    import threading

    import gradio as gr

    import app
    from components import ui
    from components.session.stream import updates as race
    from components.state.play import Phase, Session

    with gr.Blocks():
        page = ui.build_page(ctx)
    values = list(request_values(ctx, dict(prompt=PROMPT, **SMALL)).values())
    first, second = list(itertools.islice(race(ctx, values, stop_requested=lambda: False), 2))
    in_step, step_ends = threading.Event(), threading.Event()

    def updates():
        yield first
        in_step.set()
        step_ends.wait(HANG_GUARD_S)   # a decoding step, held
        yield second

    session = Session()
    old = session.begin(Phase.RACING)

    def stop_requested() -> bool:
        return not session.current(old)

    stop_requested.on_set = lambda wake: session.on_stale(old, wake)
    handler = app.playing(page, session, old, stop_requested, updates())
    assert next(handler)                     # the first frame drawn
    later: list = []
    asking = threading.Thread(target=lambda: later.extend(handler), daemon=True)
    asking.start()                           # Gradio asks for the next frame: the handler is inside the step
    assert in_step.wait(HANG_GUARD_S)
    new = session.begin(Phase.REPLAYING)     # a newer play begins
    session.settle(new, timeout=HANG_GUARD_S)
    assert old not in session._alive and not step_ends.is_set() and asking.is_alive()   # settled, the step still on
    step_ends.set()
    asking.join(HANG_GUARD_S)
    assert not asking.is_alive()
    assert all(v == gr.skip() for frame in later for v in frame.values())   # the stale play drew nothing more


def test_switching_the_compute_axis_rerenders_from_the_session_view(raced):
    import app

    view = raced[-1].view
    plot = app.rerender_race(view, "flops")   # the chart and its label (a verdict on FLOPs is not "against time")
    fig = json.loads(plot.value["plot"])
    assert "FLOPs" in fig["layout"]["xaxis"]["title"]["text"] and view.x_axis == "flops" and "FLOPs" in plot.label
    plot = app.rerender_race(view, "time")
    fig = json.loads(plot.value["plot"])
    assert "time" in fig["layout"]["xaxis"]["title"]["text"] and view.x_axis == "time" and "time" in plot.label
    assert app.rerender_race(None, "flops") is not None  # nothing to redraw: a skip, not an error


def test_while_stepping_the_axis_switch_keeps_the_verdict_hidden(ctx):
    """Step mode hides the result until "Run to the end": switching the x axis at a decision redraws nothing
    (the axis is kept for the result); once the result is shown it redraws the verdict."""
    import gradio as gr

    import app

    view = race_frames(ctx, request(ctx, step=True))[-1].view
    assert view.stepping and view.checkpoints and view.step_shown == 0
    skipped = app.rerender_race(view, "flops")
    assert not isinstance(skipped, gr.Plot) and view.x_axis == "flops"
    view.step_shown = None   # "Run to the end" (wire_steps) shows the result
    assert "FLOPs" in app.rerender_race(view, "flops").label


def test_app_imports_without_loading_models_and_gpu_is_a_noop_here():
    import app
    from components.session import gpu

    assert "demo" not in vars(app) or gpu.ZERO_GPU  # app.demo is built on first access
    if not gpu.HAS_SPACES:
        f = lambda: 1  # noqa: E731
        assert gpu.GPU(f) is f and gpu.GPU(duration=30)(f) is f


# ---------------------------------------------------------------- the app through gradio_client

@pytest.fixture(scope="module")
def served(ctx):
    yield from serve(ctx)


def api_kwargs(ctx, **overrides):
    """The /run endpoint's keyword arguments."""
    return request_values(ctx, dict(prompt=PROMPT, **SMALL), **overrides)


def n_points(plot) -> int:
    """Data points (not the "now" cursors) in a gr.Plot value as gradio_client returns it."""
    if isinstance(plot, dict) and plot.get("__type__") == "update":  # a new label with the chart
        plot = plot.get("value")
    if not plot:
        return 0
    fig = json.loads(plot["plot"]) if isinstance(plot, dict) and "plot" in plot else plot
    return sum(sum(y is not None for y in t.get("y", [])) for t in fig["data"] if t.get("hoverinfo") != "skip")



def as_seen(updates):
    """What the page shows after each update: a skipped output keeps its value from before."""
    out, now = [], None
    for u in updates:
        now = [v if not (isinstance(v, dict) and v.get("__type__") == "update" and "value" not in v) or now is None
               else now[i] for i, v in enumerate(u)]
        out.append(now)
    return out


def collect(job):
    """Every update of a job, in order, once it is done."""
    job.result(timeout=10 * TIMEOUT_S)   # a hang guard, not a speed limit
    return list(job.outputs())


def test_run_streams_growing_charts_and_the_trace_agrees(served, ctx):
    _, client, _ = served
    job = client.submit(**api_kwargs(ctx), api_name="/run")
    updates = collect(job)
    assert job.status().success, job.status()
    assert len(updates) >= 3
    last = api_outputs(updates[-1])
    summary, table, trace, summary_json = last["summary"], last["table"], last["trace"], last["summary_json"]
    points = [n_points(u[1]) + n_points(u[3]) for u in as_seen(updates)]
    assert points[-1] > points[0] and max(points) == points[-1], points
    # a live frame carries only what changed: once one arm has finished, its chart is left as it is
    skipped = [u[1] for u in updates[1:-1] if isinstance(u[1], dict) and u[1].get("__type__") == "update"
               and "value" not in u[1]] + [u[3] for u in updates[1:-1] if isinstance(u[3], dict)
                                            and u[3].get("__type__") == "update" and "value" not in u[3]]
    assert skipped, updates
    assert "Done" in text(last["status"]) and "to reach Speculative Rejection" in summary
    for leader, name in ((last["leader0"], "Speculative Rejection"), (last["leader1"], "Best-of-N")):
        assert "winner" in leader["label"] and name in leader["label"] and leader["value"], leader  # a Textbox update

    with open(trace, encoding="utf-8") as fh:
        data = json.load(fh)
    finished = {e["arm"]: e for e in data["events"] if e["event"] == "finished"}
    assert set(finished) == {"sr", "bon"}
    for arm in ("sr", "bon"):
        shown = summary_json["arms"][arm]
        assert shown["winner"]["id"] == finished[arm]["winner"]["id"]
        assert shown["winner"]["score"] == pytest.approx(finished[arm]["winner"]["score"])
        assert shown["winner"]["text"] == finished[arm]["winner"]["text"]
        assert shown["ledger"] == pytest.approx(finished[arm]["ledger"])
        assert data["arms"][arm]["ledger"] == pytest.approx(finished[arm]["ledger"])
    # the winners shown in the summary table are the trace's
    assert f"#{finished['sr']['winner']['id']}" in summary and f"#{finished['bon']['winner']['id']}" in summary
    # the candidates table: one row per candidate, and the BoN winner's final score is the best
    if table.get("__type__") == "update":   # new headers with the rows
        assert table["headers"][5] == "final score had it continued (BoN)"
        table = table["value"]
    rows = table["data"]
    assert len(rows) == SMALL["n"]
    bon_scores = {r[0]: r[5] for r in rows}
    assert bon_scores[finished["bon"]["winner"]["id"]] == pytest.approx(max(bon_scores.values()), abs=1e-4)
    comparison = summary_json["comparison"]["sr"]     # Speculative Rejection against the baseline
    assert summary_json["baseline"] == "bon"
    assert comparison["flops"]["value"] == pytest.approx(finished["bon"]["ledger"]["flops"] /
                                                         finished["sr"]["ledger"]["flops"])
    bon_winner = finished["bon"]["winner"]["id"]
    sr_twin = next((c for c in finished["sr"]["candidates"] if c["id"] == bon_winner), None)
    # None: Speculative Rejection opened with fewer rows than Best-of-N's winner's id (never drawn)
    assert comparison["kept_baseline_winner"] == (None if sr_twin is None else sr_twin["status"] != "pruned")
    # the verdict's curve ends at Best-of-N's best answer, and the summary states it in time
    verdict = summary_json["verdict"]["sr"]
    assert verdict["curve"][-1]["best"] == pytest.approx(max(bon_scores.values()), abs=1e-4)
    assert verdict["n"] == SMALL["n"] and "less time" in summary or "more time" in summary


def test_stop_cancels_within_a_step_and_a_second_run_works(served, ctx, monkeypatch):
    from specrej import methods

    steps = {"all": 0, "after_stop": None}
    real_step = methods._Run.step

    def counting_step(self):
        steps["all"] += 1
        if steps["after_stop"] is not None:
            steps["after_stop"] += 1
        return real_step(self)

    monkeypatch.setattr(methods._Run, "step", counting_step)
    _, client, _ = served
    # long enough to be stopped mid-way on any machine: 32 candidates, 200 tokens, no early decisions
    job = client.submit(**api_kwargs(ctx, n=32, budget=0, max_new_tokens=200), api_name="/run")
    assert wait_for(lambda: len(job.outputs()) >= 3), "the run never streamed"
    assert ctx.active, "the run should be in flight"
    # What the Stop button does: the page posts /cancel for the running event (job.cancel() does
    # the same) and calls the /stop listener, which says so in the status line.
    job.cancel()   # returns when Gradio has cancelled the event and closed its generator
    steps["after_stop"] = 0
    after_cancel(client)
    said = text(client.predict(api_name="/stop"))   # the cancel may have ended the run already
    assert "Stopped" in said or "Nothing to stop" in said, said
    assert wait_for(lambda: not ctx.active and job.done()), "the race was not closed (memory not freed)"
    assert steps["after_stop"] <= 1, steps            # within a step of Stop
    assert steps["all"] < 2 * 200, steps              # far from a whole run (both arms take >= 200 steps)
    # a second run right after works
    updates = collect(client.submit(**api_kwargs(ctx), api_name="/run"))
    assert "Done" in text(updates[-1][0])



def test_bad_input_through_the_api_returns_the_message(served, ctx):
    _, client, _ = served
    out = client.predict(**api_kwargs(ctx, prompt=""), api_name="/run")
    assert "prompt is empty" in text(out[0])
    out = client.predict(**api_kwargs(ctx, budget=50), api_name="/run")
    assert "Can't run" in text(out[0]) and "budget" in text(out[0])
    # the raw values reach the app's own checks (preprocess=False), whose messages name the field
    for overrides, needle in ((dict(n=0), "n must be a whole number from 1 to"), (dict(n=10**6), "SPECREJ_MAX_N"), (dict(model="gpt2"), "not offered"),
                              (dict(reward=[1, 2]), "reward must be text")):
        status = text(client.predict(**api_kwargs(ctx, **overrides), api_name="/run")[0])
        assert status.startswith("**Can't run") and needle in status, (overrides, status)
    # still usable
    out = client.predict(**api_kwargs(ctx), api_name="/run")
    assert "Done" in text(out[0])


# ---------------------------------------------------------------- any arms

@pytest.fixture
def third_method(monkeypatch):
    """A tiny third method (Best-of-1), registered in METHODS and the registry: nothing else."""
    from specrej import best_of_n, methods
    from specrej.arms import REGISTRY, ArmKind

    monkeypatch.setitem(methods.METHODS, "first", lambda lm, reward, cfg: best_of_n(lm, reward,
                                                                                    dataclasses.replace(cfg, n=1)))
    monkeypatch.setitem(REGISTRY, "first", ArmKind("first", "First answer", ()))


def test_a_registered_third_method_appears_in_the_app(ctx, third_method):
    from components.session.context import AppContext

    assert AppContext.from_env({"SPECREJ_ARMS": "bon sr first"}).arms == ("bon", "sr", "first")
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        AppContext.from_env({"SPECREJ_ARMS": "bon nope"})
    three = dataclasses.replace(ctx, arms=("bon", "sr", "first"), machine=ctx.machine.copy())
    out = race_frames(three, request(three))
    first, last = out[0], out[-1]
    assert last.view.state == "done", last.status
    assert [arm for arm, _, _ in first.slots] == ["sr", "bon", "first"]
    assert "First answer" in first.slots[2][1] and len(last.arm_plots) == 3
    assert "First answer" in last.arm_leaders[2][0] and "winner" in last.arm_leaders[2][0]
    # while racing it has its own line in the work chart; the verdict places pruning arms on Best-of-N's curve
    assert any("First answer" in t["name"] for t in out[-2].race_plot["data"])
    assert "final score had it continued (First answer)" in last.table["headers"]
    assert "First answer" in last.status and "First answer" in last.summary
    assert set(last.summary_json["comparison"]) == {"sr", "first"}
    data = json.loads(open(last.trace_path, encoding="utf-8").read())
    assert {e["arm"] for e in data["events"] if e["event"] == "finished"} == {"bon", "sr", "first"}
    # and a second Speculative Rejection setting and both rivals would make six: refused with a message
    out = race_frames(three, request(three, second=True, rivals=("deepconf", "stbon")))
    assert len(out) == 1 and "at most 5" in out[0].status


def test_a_second_setting_races_three_arms(ctx):

    out = race_frames(ctx, request(ctx, second=True, second_alpha=0.8, second_decision="interval"))
    last = out[-1]
    assert last.view.state == "done", last.status
    labels = [label for _, label, _ in out[0].slots]
    # both Speculative Rejection arms open with the paper's first batch by default (n=auto)
    assert labels[0].startswith("Speculative Rejection (alpha=0.5, decision=budget, n=auto)")
    assert labels[1].startswith("Speculative Rejection (alpha=0.8, decision=interval, n=auto)")
    assert labels[2].startswith("Best-of-N")
    assert last.view.arms["sr2"].round_events and set(last.summary_json["comparison"]) == {"sr", "sr2"}
    # one verdict per Speculative Rejection setting, each a point on Best-of-N's one curve
    assert last.summary.count("to reach Speculative Rejection") == 2
    assert [t["name"] for t in last.race_plot["data"] if t["mode"] == "markers"] == [
        last.view.arms["sr"].spec.label, last.view.arms["sr2"].spec.label]
