"""A method in three parts, from one file (issue 48, 6): a toy fourth method, registered here with its function,
its ``About`` and its settings and nothing else edited, is raced by the CLI, benchmarked as a rival by the bench,
offered on the page ("Also race"), carried by a link, and told in its own words (its name, what it cuts by, its
rounds, its adaptation) in the CLI's report, the page's result and the step-through.

The toy, "Probe-style": every answer writes ``probe`` tokens, then the ``keep`` answers with the most distinct
tokens so far go on to the end and the rest are cut (its own signal; no reward while writing); the reward picks
its winner among the answers written to the end. A real method on the library's own loop (``_Run``), on the same
engine, budget and coupled randomness as the others: not a good method, a small one."""
from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from conftest import request_values, run_request, text, tiny_app_context

from specrej.core.about import OPENING, About
from specrej.core.checks import check_int, described

PROMPT = "Give me three tips for staying healthy."
KEY = "probe"
SIGNAL = "distinct tokens"


@dataclass(frozen=True)
class ProbeSettings:
    probe: int = described(4, "Probe: tokens every answer writes before the cut.")
    keep: int = described(2, "Probe: the answers with the most distinct tokens that go on to the end.")

    def __post_init__(self) -> None:
        check_int(self, "probe", lo=1, hint="probe is a positive number of tokens")
        check_int(self, "keep", lo=1, hint="keep is a positive number of answers")


ABOUT = About(OPENING, "cut", "cut", decides_by="distinct tokens", signal=SIGNAL,
              signal_axis="distinct tokens: how many different tokens the answer has written; higher = more varied",
              citation="a test's toy", paper="none: tests/test_fourth_method.py",
              blurb="keeps the answers with the most distinct tokens after a few tokens",
              adaptations=("a toy written for a test: it cuts once, by a signal no paper proposes",),
              settings=ProbeSettings)


def probe_method(lm, reward, cfg, *, engine=None, admission=None):
    from specrej.methods.run import _Run, _timed

    def body(run):
        own = ABOUT.settings_for(run.cfg)
        run.prefill()
        rows = run.start(list(range(run.cfg.n)))
        cut = False
        while len(rows):
            run.step()
            if not cut and len(rows) and rows.generated >= own.probe:
                distinct = {c: len(set(rows.tokens[i])) for i, c in enumerate(rows.ids)}
                for c, v in distinct.items():
                    run.recs[c].signal.append((rows.generated, float(v)))
                order = sorted(distinct, key=lambda c: (-distinct[c], c))
                yield run.cut(order[own.keep:], 0, signal=SIGNAL, signals=sorted(distinct.items()),
                              marks=(("cut", rows.generated),))
                cut = True
            if len(rows) and (p := run.progress()) is not None:
                yield p
        yield run.finished(rounds=int(cut))

    return _timed(lambda: _Run(KEY, lm, reward, cfg, engine, admission=admission), body)


@pytest.fixture
def fourth(monkeypatch):
    """The toy registered as any method is (its function in METHODS, its ArmKind with its About), and taken out
    after the test."""
    from specrej import arms, methods
    from specrej.core import about

    kind = arms.ArmKind(KEY, ABOUT.label("Probe-style"), ("n", "probe", "keep", "max_new_tokens"), "Probe-style",
                        prunes=True, about=ABOUT)
    monkeypatch.setitem(methods.METHODS, KEY, probe_method)   # each entry taken out again after the test
    monkeypatch.setitem(arms.REGISTRY, KEY, kind)
    monkeypatch.setitem(about.ABOUTS, KEY, ABOUT)
    arms.register(kind)   # as a user registers one
    return KEY


def test_the_cli_races_it_and_tells_its_rounds_in_its_own_words(fourth, tiny_lm_dir, tiny_reward_dir, tmp_path,
                                                                 capsys):
    from specrej.cli import build_parser, main

    assert "Probe-style" in " ".join(build_parser().format_help().split())
    out = tmp_path / "trace.json"
    rc = main(["--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}", "--prompt", PROMPT, "--n", "6",
               "--max-new-tokens", "10", "--budget", "300", "--arms", "bon", "sr:alpha=0.5", "probe:keep=3",
               "--json", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert "== Probe-style (a test's toy) (keep=3) [probe] (cut)" in printed, printed   # its round, in its word
    assert "== Probe-style (a test's toy) (keep=3) against Best-of-N" in printed
    data = json.loads(out.read_text())
    rounds = [e for e in data["events"] if e["event"] == "round" and e["arm"] == "probe"]
    assert len(rounds) == 1 and rounds[0]["n_kept"] == 3 and rounds[0]["n_pruned"] == 3
    finished = {e["arm"] for e in data["events"] if e["event"] == "finished"}
    assert finished == {"bon", "sr", "probe"}


def test_the_bench_races_it_as_a_rival(fourth, tiny_lm_dir, tiny_reward_dir, tmp_path, capsys):
    from specrej.bench.run import main

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"id": "a", "kind": "advice", "prompt": PROMPT}) + "\n")
    main(["--model", tiny_lm_dir, "--reward", tiny_reward_dir, "--prompts", str(prompts), "--n-ref", "8",
          "--points", "0.5@4", "--max-new-tokens", "12", "--budget", "100", "--out", str(tmp_path),
          "--rivals", "probe:keep=3", "--rivals-live", "probe:keep=3", "--no-engine"])
    saved = json.loads((tmp_path / "bench.json").read_text())
    rows = [r for r in saved["summary"] if r["method"] == KEY]
    assert len(rows) == 1 and rows[0]["speedup_steps"] is not None
    with pytest.raises(SystemExit, match="not a rival"):
        main(["--model", tiny_lm_dir, "--prompts", str(prompts), "--rivals", "sr", "--out", str(tmp_path)])


def test_the_page_offers_it_races_it_and_tells_it_in_its_words(fourth, tiny_lm_dir, tiny_reward_dir,
                                                               tmp_path_factory):
    import gradio as gr

    from components import links, panels, ui
    from components.state.request import RunRequest, max_arms
    from conftest import race_frames

    ctx = tiny_app_context(tiny_lm_dir, tiny_reward_dir, tmp_path_factory)
    with gr.Blocks():
        page = ui.build_page(ctx)
    box = page.controls.rivals
    assert ("Probe-style (a test's toy)", KEY) in [tuple(c) for c in box.choices]
    assert "most distinct tokens" in box.info and len(page.arena.slots) == max_arms() == 6
    # a link ticks it, and a link from before ``rivals`` (one flag per rival) too
    assert ui.link_updates(ctx, page, {"rivals": "probe,deepconf"})[box] == [KEY, "deepconf"]
    assert ui.link_updates(ctx, page, {"probe": "1"})[box] == [KEY]
    assert "rivals=probe" in links.query({"rivals": [KEY]})
    # the request takes it (and names the field to use for the old one-flag-per-rival form)
    values = request_values(ctx, dict(prompt=PROMPT, n=8, alpha=0.5, budget=100, decision="budget",
                                      max_new_tokens=16, seed=3), rivals=[KEY])
    req = RunRequest.parse(values, ctx.limits)
    assert [a.method for a in req.arms()] == ["bon", "sr", KEY]
    with pytest.raises(ValueError, match=r"rivals=\['probe'\]"):
        RunRequest.parse({"prompt": PROMPT, KEY: True})
    # raced on the page: its chart slot, its words in the result and the why box
    frames = race_frames(ctx, run_request(ctx, dict(prompt=PROMPT, n=8, alpha=0.5, budget=100, decision="budget",
                                                    max_new_tokens=16, seed=3), rivals=(KEY,)))
    end = frames[-1]
    view = end.view
    assert KEY in view.arms and view.arms[KEY].spec.label.startswith("Probe-style")
    said = text(end.summary)
    assert "Probe-style" in said and "cut" in said, said
    # stepped through: its decision told in its About's words (its signal, what it cuts), not another rival's
    stepped = race_frames(ctx, run_request(ctx, dict(prompt=PROMPT, n=8, alpha=0.5, budget=100, decision="budget",
                                                     max_new_tokens=16, seed=3), rivals=(KEY,), step=True))[-1].view
    k = next(i for i, cp in enumerate(stepped.checkpoints) if cp.arm == KEY)
    told = panels.decision_markdown(stepped, k)
    assert f"cut at token {ProbeSettings().probe}" in told and "read its own distinct tokens of 8 answers" in told
    assert "answers are cut here (no reward read); 2 go on" in told, told
    assert "threshold" not in told.split("**What happened:**")[1].split("\n")[0]   # it sets none


@pytest.mark.parametrize("value, said", [
    ("deepconf", "rivals must be a list of any of: deepconf, stbon; not text."),
    (["deepconf", "evil"], "rivals 'evil' is not one of: deepconf, stbon."),
    (["stbon", "stbon"], "rivals names 'stbon' twice."),
    ([True], "rivals must be text, not true/false: one of: deepconf, stbon."),
    (["deepconf", "stbon", "deepconf"], "rivals has 3 items; there are 2 choices: deepconf, stbon."),
])
def test_the_rivals_field_says_what_it_takes(value, said):
    from components.state.fields import FieldError
    from components.state.request import SPECS

    assert SPECS["rivals"].check("rivals", ["stbon", "deepconf"]) == ("stbon", "deepconf")
    assert SPECS["rivals"].check("rivals", []) == ()
    with pytest.raises(FieldError) as e:
        SPECS["rivals"].check("rivals", value)
    assert str(e.value) == said
