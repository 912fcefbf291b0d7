"""Step mode with both rivals (issue 40): the decisions in token order, no empty chart, each rival's decision
ranked and told by its own signal (no alpha, no placeholder), the verdict's words in each method's own terms.
A real four-arm race on the tiny test model (no browser)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from specrej.core.settings import DeepConfSettings

from specrej import RunConfig, load_generator
from specrej.arms import parse_arms, race_arms
from specrej.core.events import Round

from components import charts, frames, panels
from components.charts import decision_pool
from components.state.view import RunView, ranked

ARMS = ["bon", "sr", "deepconf", "stbon"]


@pytest.fixture(scope="module")
def race(tiny_lm_dir, length_reward):
    lm = load_generator(tiny_lm_dir, dtype="fp32")
    # a budget that makes Speculative Rejection decide; a short window so DeepConf stops traces
    cfg = RunConfig(prompt="Name three colours of the sea.", n=8, max_new_tokens=16, budget=120, progress_every=0,
                    settings=DeepConfSettings(warmup=2, window=4))
    return cfg, list(race_arms(lm, length_reward, cfg, ARMS))


def view_of(cfg, events) -> RunView:
    view = RunView(cfg, specs=parse_arms(ARMS))
    for e in events:
        view.apply(e)
    view.stepping = True
    return view


def test_the_decisions_come_in_token_order_by_arm_on_a_tie(race):
    cfg, events = race
    view = view_of(cfg, events)
    cps = view.checkpoints
    arms = {cp.arm for cp in cps}
    assert {"deepconf", "stbon"} <= arms, arms   # both rivals decided
    positions = [cp.arms[cp.arm].round_events[cp.index].position for cp in cps]
    assert positions == sorted(positions) and [cp.position for cp in cps] == positions
    order = [s.id for s in view.specs]
    keys = [(cp.position, order.index(cp.arm), cp.index) for cp in cps]
    assert keys == sorted(keys)
    # the race's own order interleaves the arms by their compute: it was not token order here
    raced = [e.position for e in events if isinstance(e, Round) and e.arm != "bon"]
    assert len(raced) == len(cps)
    for k, cp in enumerate(cps):   # "decision k of n" follows the same order
        f = frames.step_frame(view, k)
        assert f"decision {k + 1} of {len(cps)}" in f.status
        assert f"at token {positions[k]}" in f.step["text"].splitlines()[0]


def test_no_step_chart_is_empty_and_a_rival_is_ranked_by_its_own_signal(race):
    cfg, events = race
    view = view_of(cfg, events)
    for k, cp in enumerate(view.checkpoints):
        arm = cp.arms[cp.arm]
        r = arm.round_events[cp.index]
        spec = charts.pool_chart(view, cp)
        bars = [t for t in spec["data"] if t["type"] == "bar"]
        assert sum(len(t["x"]) for t in bars) == len(ranked(r)) > 0, (k, cp.arm)
        about = arm.spec.kind.about
        if about.rival:
            cut = next(t for t in bars if t["name"] == about.cut_word)
            assert len(cut["x"]) == r.n_pruned, (cp.arm, r)   # ST-BoN: every truncated answer is on its chart
            assert about.signal in spec["layout"]["xaxis"]["title"]["text"]
            assert "partial reward" not in str(spec["layout"]["yaxis"]) + spec["layout"]["meta"]["title"]
            assert about.signal in frames.step_frame(view, k).step["label"]
        else:
            assert "partial reward" in spec["layout"]["xaxis"]["title"]["text"]


def test_a_rival_decision_that_read_no_signal_gets_no_step(race):
    """A decision with nothing to rank (a rival's Round without signals, e.g. a consensus stop) would draw an
    empty chart: the step-through leaves it out."""
    cfg, events = race
    view = RunView(cfg, specs=parse_arms(ARMS))
    empty = 0
    for e in events:
        if isinstance(e, Round) and e.arm == "deepconf" and e.index == 1:
            e = replace(e, signals=(), marks=(("consensus", e.position),))
            empty += 1
        view.apply(e)
    assert empty == 1
    assert all(ranked(cp.arms[cp.arm].round_events[cp.index]) for cp in view.checkpoints)
    assert not any(cp.arm == "deepconf" and cp.index == 1 for cp in view.checkpoints)


def test_each_rival_decision_is_told_in_its_own_words(race):
    cfg, events = race
    view = view_of(cfg, events)
    seen = set()
    for k, cp in enumerate(view.checkpoints):
        about = cp.arms[cp.arm].spec.kind.about
        text = panels.decision_markdown(view, k)
        assert "at token ?" not in text and " –" not in text and " -**" not in text, text
        if about.rival:
            seen.add(cp.arm)
            assert "alpha" not in text and "keeps the top" not in text, text
            assert "Memory forced more cuts" not in text, text
            assert "partial reward" not in text, text
            assert "no reward read" in text or "threshold" in text, text
    assert seen == {"deepconf", "stbon"}


def test_the_verdict_and_why_speak_each_methods_words(race):
    cfg, events = race
    view = view_of(cfg, events)
    view.stepping = False
    text = panels.summary_markdown(view) + panels.why_markdown(view)
    assert "at token ?" not in text and "partial reward of –" not in text, text
    assert "fewer steps were possible" not in text or "at most 0." not in text, text
    for line in text.splitlines():
        if "one step of" in line:   # a step priced against Best-of-N's: never a step of the same rows
            import re
            for a, b in re.findall(r"one step of (\d+) rows? costs [^,]* one of (\d+) rows?", line):
                assert a != b, line
    assert "How well did the first partial rewards predict" not in text.split("DeepConf")[-1].split("Speculative")[0]


def test_the_rivals_charts_export_in_their_own_words_and_fit(race):
    """An exported chart's title and axis (issue 40): a rival's signal chart is titled by its own signal and cut
    word, its y axis's small line fits the plot (the whole definition ran over the export's subtitle); the
    verdict chart names each method's point, and a note on a point near its left edge reads rightwards (it was
    cut off, over the axis title); no rival's settings speak of alpha or memory."""
    cfg, events = race
    view = view_of(cfg, events)
    view.stepping = False
    for a in view.arms.values():
        about = a.spec.kind.about
        if not about.rival:
            continue
        spec = charts.arm_chart(view, a.arm)
        title = spec["layout"]["meta"]["title"]
        assert about.signal in title and about.cut_word in title and "stops and truncation" not in title, title
        import re
        small = re.sub(r"<[^>]+>", "", spec["layout"]["yaxis"]["title"]["text"].partition("<br>")[2])
        assert small and len(small) < 40 and "higher =" in small, small
    settings = charts.settings_text(view)
    for part in settings.split(" · "):
        if part.startswith(("DeepConf", "ST-BoN")):
            assert "alpha" not in part and "memory is full" not in part, part
    race_spec = charts.race_chart(view)
    assert race_spec["layout"]["meta"]["title"].endswith("each method's point")
    lo, hi = race_spec["layout"]["xaxis"]["range"]
    for note in race_spec["layout"]["annotations"]:
        if note.get("showarrow"):
            left_half = (note["x"] - lo) / (hi - lo) < 0.5
            assert note["xanchor"] == ("left" if left_half else "right") and (note["ax"] > 0) == left_half, note


def test_stbons_chart_tells_its_truncated_answers_from_those_already_written(race):
    cfg, events = race
    view = view_of(cfg, events)
    cp = next(cp for cp in view.checkpoints if cp.arm == "stbon")
    r = cp.arms["stbon"].round_events[cp.index]
    spec = charts.pool_chart(view, cp)
    n = {t["name"]: len(t["x"]) for t in spec["data"] if t["type"] == "bar"}
    assert n["kept"] == r.n_kept == 1 and n["truncated"] == r.n_pruned, n
    assert n.get("already written to the end", 0) == sum(c.status == "finished" for c in decision_pool(r)), n


def test_deepconfs_threshold_is_told_as_the_percentile_it_is(race):
    """DeepConf's threshold is the (100 - conf_percentile)th percentile of the warm-up traces' lowest group
    confidences (DeepConf-high at 90: it keeps about 90%), not 'their lowest'."""
    cfg, events = race
    view = view_of(cfg, events)
    k = next(k for k, cp in enumerate(view.checkpoints) if cp.arm == "deepconf"
             and cp.arms["deepconf"].round_events[cp.index].marks[-1][0] == "threshold set")
    text = panels.decision_markdown(view, k)
    keep = cfg.settings.conf_percentile
    assert f"the {100 - keep:g}th percentile of those (it keeps about {keep:g}% of traces)" in text, text
    assert "their lowest group confidence sets" not in text and "alpha" not in text, text


def test_the_result_table_counts_each_rivals_rounds_by_what_they_did(race):
    """DeepConf's threshold and filter are no stops: the table counts its stops apart and names the rest."""
    cfg, events = race
    view = view_of(cfg, events)
    view.stepping = False
    dc = view.arms["deepconf"]
    stops = sum(r.marks[-1][0] == "stopped" for r in dc.round_events)
    words = panels.rounds_words(dc)
    assert words.startswith(f"{stops} stop") and "threshold set" in words and "filtered" in words, words
    assert panels.rounds_words(view.arms["stbon"]) == "1 truncation"
    assert panels.rounds_words(view.arms["sr"]).endswith(("decision", "decisions"))
    assert f"| {words} |" in panels.summary_markdown(view)


def test_a_step_charts_axes_stand_clear_and_tick_whole_ranks(race):
    """The y title clears its tick labels however wide ('-0.005'), and the rank axis ticks whole ranks."""
    cfg, events = race
    view = view_of(cfg, events)
    for cp in view.checkpoints:
        spec = charts.pool_chart(view, cp)
        x, y = spec["layout"]["xaxis"], spec["layout"]["yaxis"]
        assert y["automargin"] is True
        assert x["tickmode"] == "linear" and x["tick0"] == 1 and float(x["dtick"]).is_integer(), x


def test_deepconfs_chart_draws_its_threshold_and_names_each_mark_apart(race):
    """DeepConf's threshold is a level later traces are held to: drawn from its first full window to the end (it
    was drawn from the warm-up's last token, a line of no length when the warm-up ran to the end); two mark names
    at one token stack instead of being drawn over each other, and read inside the plot."""
    cfg, events = race
    view = view_of(cfg, events)
    view.stepping = False
    spec = charts.arm_chart(view, "deepconf")
    thr = next(t for t in spec["layout"] and spec["data"] if t.get("name") == "threshold")
    xs = [x for x in thr["x"] if x is not None]
    assert xs and min(xs) <= cfg.settings.window and max(xs) == cfg.max_new_tokens, thr
    names = [a for a in spec["layout"]["annotations"] if a.get("text") in ("threshold set", "filtered")]
    assert len(names) == 2 and len({(a["x"], a["y"]) for a in names}) == 2, names
    for a in names:
        assert a["xanchor"] == ("right" if a["x"] > 0.75 * cfg.max_new_tokens else "left"), a
