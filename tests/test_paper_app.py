"""The paper's protocol in the app: the Paper scale preset, SR starting with 'auto', 'stop Best-of-N
once it matches', and recorded races replayed through the same frame builders."""
from __future__ import annotations


import pytest
from conftest import race_frames, run_request, tiny_app_context

pytest.importorskip("gradio")
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")
PROMPT = "Give me three tips for staying healthy."


@pytest.fixture(scope="module")
def ctx(tiny_lm_dir, tiny_reward_dir, tmp_path_factory):
    return tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)


def _settings(**kw):
    base = dict(prompt=PROMPT, n=12, alpha=0.5, budget=700, decision="budget", max_new_tokens=16, seed=0,
                sr_start="auto", first_decision=4, stop_when_matched=True)
    base.update(kw)
    return base


def test_auto_start_and_stop_when_matched_through_the_request(ctx):

    out = race_frames(ctx, run_request(ctx, _settings()))
    view = out[-1].view
    assert view.state == "done", out[-1].status
    sr, bon = view.arms["sr"], view.arms["bon"]
    assert len(bon.candidates) == 12 and len(sr.candidates) > 12      # SR filled the budget at token 4
    assert sr.round_events[0].position >= 4
    m = bon.finished.match
    assert m is not None and m.target == sr.finished.winner.score
    assert ("Stopped once it matched" in out[-1].summary) or ("Never matched" in out[-1].summary)


def test_bad_start_choice_is_a_message(ctx):

    out = race_frames(ctx, run_request(ctx, _settings(sr_start="lots")))
    assert len(out) == 1 and "sr_start" in out[0].status


def test_replay_uses_the_same_frames_and_says_it_is_recorded(ctx, tmp_path):
    from components.frames import Frame
    from components.frames import drawn
    from components.session.recordings import find, replay_updates
    from specrej.cli import main

    rc = main(["record", "--out", str(tmp_path / "a.json.gz"), "--model", ctx.default_model,
               "--reward", ctx.default_reward.removeprefix("model:"), "--prompt", PROMPT,
               "--arms", "bon:n=12", "sr:n=auto,first_decision=4", "--max-new-tokens", "16", "--budget", "700",
               "--stop-when-matched", "--quiet"])
    assert rc == 0 and find("  give me THREE tips for staying healthy. ", tmp_path) == tmp_path / "a.json.gz"
    frames = list(drawn(replay_updates(PROMPT, "inf", folder=tmp_path)))
    assert all(isinstance(f, Frame) for f in frames)
    first, last = frames[0], frames[-1]
    assert first.status.startswith("**Replaying**") and "Starting" not in first.status
    assert "Recorded race:" in first.status and "Recording" in first.badge and "Run it live" in first.badge
    assert "Best-of-N \\(n=12\\)" in first.status and "n=32" not in first.status   # the settings as run
    assert last.view.state == "done" and last.results_visible and "### Result" in last.summary
    assert last.view.arms["bon"].finished.match is not None
    slept = []
    paced = list(drawn(replay_updates(PROMPT, "16", folder=tmp_path, min_frame_interval=0.0, sleep=slept.append)))
    assert len(paced) >= len(frames) and sum(slept) > 0
    missing = list(drawn(replay_updates("What is a cat?", "inf", folder=tmp_path)))
    assert len(missing) == 1 and "no recorded race" in missing[0].status


def test_paper_scale_preset_and_committed_recordings(ctx):
    """The preset sets the paper's settings; every committed recording replays and names its settings."""
    from components.frames import drawn
    from components.session.recordings import RECORDINGS, index, replay_updates
    from components.state.shared import PAPER_SCALE
    from specrej.record import load

    assert PAPER_SCALE["sr_start"] == "auto" and PAPER_SCALE["stop_when_matched"] is False
    total = sum(p.stat().st_size for p in RECORDINGS.glob("*"))
    assert total < 10 * 2**20
    for prompt, path in index().items():
        rec = load(path)
        assert {"model", "reward", "hardware", "date", "settings"} <= set(rec.meta)
        assert "n=auto" in rec.meta["settings"]["arms"]
        last = list(drawn(replay_updates(rec.meta["prompt"], "inf")))[-1]
        assert last.view.state == "done"


def test_the_page_shows_the_paper_scale_words_only_after_the_click():
    """Building the click's outputs must not build its updates: they would sit at the page's foot."""
    import app
    from components.session.context import AppContext

    demo = app.build_demo(AppContext.from_env({}))
    shown = [str(getattr(b, "value", "")) for b in demo.blocks.values() if type(b).__name__ == "Markdown"]
    assert not any("Paper scale set" in t for t in shown)


def test_paper_scale_plan_fits_or_scales_down_and_names_a_recording(ctx):
    """Whether the paper's setting fits the run limit comes from this machine's measured decoding
    step; when it does not, the largest scaled-down setting that fits is set and a recording plays."""
    import dataclasses

    from components.session import paper
    from components.session.context import Machine
    from components.session.recordings import find
    from specrej.core.cost import StepCost

    from components.session import startup

    measured = startup.quiet_step(ctx, ctx.default_model)     # measured for real on the tiny model
    from specrej.backends.steptime import CALIBRATION_ROWS

    assert measured.rows == CALIBRATION_ROWS and all(s > 0 for s in measured.seconds)

    fast = dataclasses.replace(ctx, machine=Machine(step_costs={ctx.default_model: StepCost((1, 128), (1e-4, 2e-4))}))
    plan = paper.plan(fast, PROMPT)
    assert plan.fits and plan.settings == plan.paper == paper.capped(fast, {}) and plan.replay_prompt is None

    slow = dataclasses.replace(ctx, machine=Machine(step_costs={ctx.default_model: StepCost((1, 128), (0.05, 0.5))}))
    plan = paper.plan(slow, "A prompt without a recording")
    assert not plan.fits and plan.paper_s > paper.FIT_SHARE * plan.limit_s
    assert plan.scaled_s <= paper.FIT_SHARE * plan.limit_s
    ladder = [paper.capped(slow, s) for s in paper.SCALED_DOWN]
    chosen = ladder.index(plan.settings)
    # every larger step of the ladder is too long on the recordings' machine (never this machine's load)
    ref = paper.reference_step()
    assert ref is not None and ref.rows == (1, 8, 32, 128)
    assert all(paper.live_seconds(slow, s, 10, True, ref, paper.REFERENCE_OVERHEAD) > paper.FIT_SHARE * plan.limit_s
               for s in ladder[:chosen])
    busier = dataclasses.replace(slow, machine=Machine(overhead=3.0, step_costs={ctx.default_model: StepCost((1, 128), (0.2, 2.0))}))
    assert paper.plan(busier, "A prompt without a recording").settings == plan.settings   # the same scaled race
    assert plan.settings["sr_start"] == "auto" and plan.settings["stop_when_matched"] is False
    assert plan.replay_prompt in ctx.examples and find(plan.replay_prompt) is not None
    assert paper.plan(slow, PROMPT).replay_prompt == PROMPT   # its own recording when it has one


def test_the_recordings_index_reads_each_file_once_per_version(tmp_path, monkeypatch):
    """Issue 47: Paper scale and "Run it live" looked up their recording by decompressing every paper-scale
    recording at each click (0.3 s quiet, most of a 3-4 s click with three processes spinning). The index reads a
    file's header once per version of the file: a click reads it from memory, a re-recorded file is read again."""
    import os
    import shutil

    from components.session import recordings

    for path in sorted(recordings.RECORDINGS.glob("*.json.gz"))[:2]:
        shutil.copy(path, tmp_path / path.name)
    loads = []
    real = recordings.load
    monkeypatch.setattr(recordings, "load", lambda p: loads.append(p) or real(p))
    first = recordings.index(tmp_path)
    assert len(first) == 2 and len(loads) == 2
    assert recordings.index(tmp_path) == first and len(loads) == 2          # from memory
    changed = sorted(tmp_path.glob("*.json.gz"))[0]
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))           # a new version of one file
    assert recordings.index(tmp_path) == first and len(loads) == 3 and loads[-1] == changed
