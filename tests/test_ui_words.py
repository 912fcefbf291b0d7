"""What the page says, checked without a model: the reward's name and scale on every reward axis and in
the result, a replay's first status and its settings as run, table headers that fit, the Paper scale
feedback, "Waiting" only when a run really waits, and the lab's default sample."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("gradio")
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")


@pytest.fixture(scope="module")
def replayed():
    """Every frame of a committed recording's replay (self-certainty, bon:n=128, sr:n=auto)."""
    from components.frames import drawn
    from components.session.recordings import index, replay_updates
    from specrej.record import load

    path = next(iter(index().values()))
    return load(path), list(drawn(replay_updates(load(path).meta["prompt"], "inf")))


def _y_titles(spec: dict) -> str:
    return spec["layout"]["yaxis"]["title"]["text"]


def test_every_reward_axis_and_the_result_name_the_reward_and_its_scale(replayed):
    from specrej.rewards import REWARDS, scale_of

    _, frames = replayed
    last = frames[-1]
    scale = REWARDS["self-certainty"].scale
    assert scale_of(last.view.reward_label) is scale
    # the arm charts, and the verdict chart when Best-of-N wrote all its answers (else the work chart's rows)
    for spec in last.arm_plots:
        assert scale.name in _y_titles(spec) and scale.unit in _y_titles(spec), _y_titles(spec)
    if last.view.verdicts():   # the verdict chart's short title (the long one was cut at 1280x720): its unit; the
        assert scale.unit in _y_titles(last.race_plot)   # result panel beside it names the reward
    assert "**Reward:** Self-certainty" in last.summary and "higher means more" in last.summary
    assert f"reward of the winner ({scale.name})" in last.summary


def test_a_live_runs_reward_label_finds_its_registry_scale():
    from components import charts, panels
    from components.state.view import RunView
    from specrej import RunConfig
    from specrej.rewards import REWARDS, UNKNOWN_SCALE, scale_of

    pref = REWARDS["preference"].scale
    view = RunView(RunConfig(prompt="-"), reward_label="preference: short and kind")
    assert pref.name in _y_titles(charts.arm_chart(view, "sr")) and pref.unit in _y_titles(charts.arm_chart(view, "bon"))
    assert "short and kind" in panels.reward_words(view) and "cosine similarity" in panels.reward_words(view)
    for kind, cls in REWARDS.items():   # a spec and a UI label of every kind find the same words
        assert scale_of(kind) is cls.scale and scale_of(cls.label) is cls.scale
    assert scale_of("Reward model: /models/rm") is REWARDS["hf"].scale and scale_of("variety") is UNKNOWN_SCALE


def test_a_replay_starts_as_a_replay_and_shows_the_settings_it_ran(replayed):
    rec, frames = replayed
    first = frames[0].status
    assert "Starting" not in first and "prefilling" not in first and first.startswith("**Replaying**")
    # the recording's base n is replaced by both arms' own n: only what ran is shown
    base = rec.meta["settings"]["n"]
    assert base not in (128, "auto") and not re.search(rf"(?<!\w)n={base}\b", first), first
    assert "Best-of-N \\(n=128\\)" in first and "n=auto" in first and "max_new_tokens=256" in first
    assert "SmolLM2" in first and "Self-certainty" in first


def test_table_headers_name_an_arm_shortly_unless_two_arms_share_a_kind(replayed):
    from components import panels
    from components.state.view import RunView
    from specrej import RunConfig

    _, frames = replayed
    headers = frames[-1].table["headers"]
    assert "round pruned (SR)" in headers and "BoN rank" in headers
    assert not any("first_decision" in h or "n=auto" in h for h in headers), headers
    two = RunView(RunConfig(prompt="-", n=2), specs=("bon", "sr", "sr:alpha=0.8"))
    headers = panels.candidate_table(two)[0]
    # the two settings told apart by what differs, the plain one at the base config's alpha
    assert "round pruned (SR α=0.5)" in headers and "round pruned (SR α=0.8)" in headers and "BoN rank" in headers


def test_verdict_labels_never_stack_on_each_other():
    """Two Speculative Rejection settings that end at the same reward get their verdict labels at
    different heights, each beside the point where Best-of-N's curve reaches it."""
    from components import charts
    from components.state.view import RunView
    from specrej import Candidate, Finished, Ledger, Round, RunConfig

    view = RunView(RunConfig(prompt="-", n=2), specs=("bon", "sr", "sr:alpha=0.8"))
    bon = (Candidate(id=0, text="a", tokens=4, status="finished", score=0.5, finish_reason="eos"),
           Candidate(id=1, text="b", tokens=4, status="finished", score=0.2, finish_reason="eos"))
    view.apply(Round(arm="bon", index=0, position=4, candidates=bon, threshold=None, n_kept=2, n_pruned=0,
                     forced=False, ledger=Ledger(steps=4)))
    view.apply(Finished(arm="bon", candidates=bon, ledger=Ledger(generator_flops=1e9, generated_tokens=8, steps=4),
                        winner=bon[0], rounds=1))
    for arm in ("sr", "sr2"):
        c = Candidate(id=0, text="a", tokens=4, status="finished", score=0.5, history=((4, 0.5),), finish_reason="eos")
        view.apply(Finished(arm=arm, candidates=(c,), ledger=Ledger(generator_flops=1e9, generated_tokens=4, steps=4),
                            winner=c, rounds=0))
    spec = charts.race_chart(view)
    notes = spec["layout"]["annotations"]
    assert spec["data"][0]["uid"] == "verdict-0" and len(notes) == 2 and notes[0]["ay"] != notes[1]["ay"]


def test_paper_scale_opens_the_settings_and_says_what_it_set():
    import gradio as gr

    from components import ui
    from components.session.context import AppContext
    from components.session.paper import capped
    from components.state.shared import PaperPlan

    ctx = AppContext.from_env({})
    with gr.Blocks():
        page = ui.build_page(ctx)
    c = page.controls
    paper = capped(ctx, {})
    fits = PaperPlan(paper, 42.0, 120, paper, None, None)
    out = ui.paper_scale_updates(ctx, page, fits, "Why is the sky blue?")
    assert out[c.sr_start] == "auto" and out[c.stop_when_matched] is False and out[c.max_new_tokens] == 256
    assert out[c.settings].open is True and c.prompt not in out
    words = out[page.arena.status].value
    assert words.startswith("**Paper scale set**") and f"N = {min(128, ctx.limits.max_n)}" in words
    assert "token 16" in words and "about 42 s" in words and out[c.paper_note] == words

    scaled = capped(ctx, dict(n=32, max_new_tokens=96, budget=512, first_decision=16))
    assert capped(ctx, dict(n=32, budget=2048, first_decision=16))["budget"] == 512   # N >= budget / T
    too_long = PaperPlan(paper, 162.0, 120, scaled, 59.0, "Give me three tips for staying healthy.")
    out = ui.paper_scale_updates(ctx, page, too_long, "Why is the sky blue?")
    assert out[c.max_new_tokens] == 96 and out[c.budget] == 512 and out[c.first_decision] == 16
    assert out[c.prompt] == "Give me three tips for staying healthy."    # the recording about to play
    words = out[c.paper_note]
    assert "would take about 2 min 42 s here" in words and "limit of 120 s" in words
    assert "Playing the recorded paper-scale race" in words and "scaled down to fit (about 59 s)" in words


def test_waiting_only_when_every_slot_is_taken():
    from components import ui
    from components.session.context import AppContext

    ctx = AppContext.from_env({}, concurrency=1)
    assert "Waiting" not in ui.waiting_status(ctx).value and "Starting" in ui.waiting_status(ctx).value
    ctx.active.add("someone else's run")
    assert ui.waiting_status(ctx).value.startswith("**Waiting for a free slot:** 1 run in progress")


def test_the_labs_default_sample_shows_a_rejection_and_a_correction():
    from components import autospec_tab as tab

    frames = list(tab.sample_handler("curie-weiss", 64, 0.5, 3, 1.0, 2, "block", tab.DEFAULT_SEED, 0))
    grids = [f[2] for f in frames if isinstance(f[2], str)]
    assert any("as-cell as-discarded" in g for g in grids) and any("as-cell as-corrected" in g for g in grids)
    assert frames[-1][0].startswith("Done")


def test_the_labs_scaling_figure_has_one_legend_per_panel():
    from components import autospec_tab as tab

    fig, _ = tab.recorded_scaling()
    panels = sorted({t.xaxis or "x" for t in fig.data})
    assert len(panels) == 3 and {t.legend or "legend" for t in fig.data} == {"legend", "legend2", "legend3"}
    starts = [fig.layout[name].x for name in ("legend", "legend2", "legend3")]
    assert starts == sorted(starts) and len(set(starts)) == 3


def test_run_it_live_sets_the_recorded_protocol_and_says_what_was_scaled():
    import gradio as gr

    from components import ui
    from components.session.context import AppContext
    from components.session.paper import SCALED_DOWN, capped
    from components.state.shared import PaperPlan
    from components.state.shared import PAPER_REWARD

    ctx = AppContext.from_env({})
    with gr.Blocks():
        page = ui.build_page(ctx)
    c = page.controls
    scaled = capped(ctx, SCALED_DOWN[1])
    out = ui.live_updates(ctx, page, PaperPlan(capped(ctx, {}), 300.0, 120, scaled, 50.0, None))
    assert out[c.n] == scaled["n"] and out[c.max_new_tokens] == scaled["max_new_tokens"]
    # every component it sets is an output of its event (a missing one turned the page into red "Error"s)
    assert set(out) <= set(ui.paper_outputs(page)) and c.fit not in out
    same = ui.same_race_updates(ctx, page, "Name three rivers.", {"n": 12, "fit": False, "seed": 3, "sr_start": "auto"})
    assert set(same) <= set(ui.paper_outputs(page)) and same[c.n] == 12 and same[c.seed] == 3
    assert out[c.sr_start] == "auto" and out[c.stop_when_matched] is False
    if any(k == PAPER_REWARD for _, k in ctx.rewards):
        assert out[c.reward] == PAPER_REWARD
    words = out[page.arena.status].value
    assert "scaled down to fit" in words and f"new tokens 256 → {scaled['max_new_tokens']}" in words, words
