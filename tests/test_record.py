"""Recorded races: compact, and replayed as the same events at the recorded pace."""
from __future__ import annotations

import gzip
import math

import pytest

from specrej import RunConfig, best_of_n, speculative_rejection
from specrej.core.events import Finished, Progress, Round
from specrej.methods import race
from specrej.record import Recording, RecordingError, decode, load, make_meta, paced, record

PROMPT = "Give me three tips for staying healthy."


@pytest.fixture(scope="module")
def live_and_recorded(tiny_lm, length_reward):
    cfg = RunConfig(prompt=PROMPT, n=12, alpha=0.5, max_new_tokens=24, budget=12 * 49, seed=3, progress_every=2)
    live = list(race({"sr": speculative_rejection(tiny_lm, length_reward, cfg),
                      "bon": best_of_n(tiny_lm, length_reward, cfg)}))
    ticks = iter(range(10_000))
    rec = record(iter(live), make_meta("tiny", "variety", {"n": 12, "alpha": 0.5}), clock=lambda: next(ticks) * 0.5)
    return live, rec


def _same(a, b):
    assert type(a) is type(b) and a.arm == b.arm
    for x, y in zip(a.candidates, b.candidates, strict=True):
        assert (x.id, x.text, x.tokens, x.status, x.round_pruned, x.finish_reason) == \
               (y.id, y.text, y.tokens, y.status, y.round_pruned, y.finish_reason)
        assert (x.score is None) == (y.score is None)
        if x.score is not None:
            assert y.score == pytest.approx(x.score, abs=1e-5)
        assert [t for t, _ in x.history] == [t for t, _ in y.history]
    assert b.ledger.generated_tokens == a.ledger.generated_tokens
    assert b.ledger.flops == pytest.approx(a.ledger.flops, rel=1e-5)
    if isinstance(a, Round):
        assert (a.index, a.position, a.n_kept, a.n_pruned, a.forced) == (b.index, b.position, b.n_kept, b.n_pruned, b.forced)
    if isinstance(a, Progress):
        assert (a.position, a.n_live) == (b.position, b.n_live)
    if isinstance(a, Finished):
        assert a.winner.id == b.winner.id and a.rounds == b.rounds


def test_replay_gives_back_the_same_events(live_and_recorded, tmp_path):
    live, rec = live_and_recorded
    size = rec.save(tmp_path / "r.json.gz")
    back = list(paced(load(tmp_path / "r.json.gz"), speed=math.inf))
    assert len(back) == len(live)
    for a, b in zip(live, back):
        _same(a, b)
    assert {type(e) for e in back} == {Progress, Round, Finished}
    raw = sum(len(repr(e)) for e in live)
    assert size < raw / 10          # deltas + gzip: far smaller than the events themselves


def test_replay_keeps_the_pace_scaled_by_speed(live_and_recorded):
    _, rec = live_and_recorded
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    events = list(paced(rec, speed=4.0, sleep=sleep, clock=lambda: now[0]))
    assert now[0] == pytest.approx(rec.duration_s / 4.0)
    assert len(events) == len(rec.events) and all(s > 0 for s in slept)
    with pytest.raises(ValueError):
        next(paced(rec, speed=0))


def test_label_names_model_reward_hardware_date_and_settings(live_and_recorded):
    _, rec = live_and_recorded
    label = rec.label()
    for part in ("recorded:", "tiny", "variety", rec.meta["hardware"], rec.meta["date"], "n=12", "alpha=0.5",
                 "press Run to run it live"):
        assert part in label


def test_damaged_or_foreign_files_say_so(tmp_path):
    (tmp_path / "a.gz").write_bytes(b"not gzip")
    with pytest.raises(RecordingError, match="not a gzip JSON recording"):
        load(tmp_path / "a.gz")
    (tmp_path / "b.gz").write_bytes(gzip.compress(b'{"version": 99, "events": []}'))
    with pytest.raises(RecordingError, match="version"):
        load(tmp_path / "b.gz")
    with pytest.raises(RecordingError, match="damaged"):
        list(decode(Recording({}, [{"t": 0, "e": "p", "arm": "sr", "c": [[0, {"s": "?"}]], "l": {}}])))


def test_cli_records_a_paper_scale_race_that_replays(tiny_lm_dir, tiny_reward_dir, tmp_path, capsys):
    """`python -m specrej record`: SR opens with n=auto, Best-of-N at its own N, stopped once it matches."""
    from specrej.cli import main

    out = tmp_path / "rec.json.gz"
    rc = main(["record", "--out", str(out), "--model", tiny_lm_dir, "--reward", f"hf:{tiny_reward_dir}",
               "--prompt", PROMPT, "--arms", "bon:n=12", "sr:n=auto,first_decision=4", "--max-new-tokens", "10",
               "--budget", "600", "--stop-when-matched", "--quiet"])
    cap = capsys.readouterr()
    printed = cap.out
    assert rc == 0, cap.err[-2000:]
    assert "recording written to" in printed and ("stopped once it matched" in printed or "never matched" in printed)
    rec = load(out)
    assert rec.meta["settings"]["arms"] == "bon:n=12 sr:n=auto,first_decision=4"
    assert rec.meta["prompt"] == PROMPT and "recorded:" in rec.label()
    events = list(paced(rec, speed=math.inf))
    fins = {e.arm: e for e in events if isinstance(e, Finished)}
    assert set(fins) == {"bon", "sr"} and fins["bon"].match is not None
    assert len(fins["sr"].candidates) > 12 // 2     # n=auto: the rows that fill 600 slots at 4 tokens


def test_cli_n_auto_flag(capsys):
    from specrej.cli import build_parser

    assert build_parser().parse_args(["--n", "auto"]).n == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--n", "lots"])
