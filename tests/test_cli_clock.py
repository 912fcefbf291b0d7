"""Issue 64 (3, 5): the CLI says when its clock was disturbed, and with equal tokens it names the decoding steps
before it blames the clock (a 2.79x gap with equal tokens was Best-of-N's two passes, not this machine's clock)."""
from __future__ import annotations

import dataclasses
import json


def test_equal_tokens_in_more_steps_are_named_by_their_steps_not_the_clock():
    from specrej.cli import wall_why
    from specrej.core.events import Ledger

    sr = Ledger(generated_tokens=640, generator_flops=1e12, steps=40, wall_s=1.0)
    bon = dataclasses.replace(sr, steps=80, wall_s=2.79)
    words = wall_why(sr, bon, "Best-of-N")
    assert "decoding steps 40 vs 80" in words and "Best-of-N ran them in more steps of fewer rows" in words
    assert "clock" not in words
    assert "this machine's clock" in wall_why(sr, dataclasses.replace(sr, wall_s=2.0), "Best-of-N")
    assert "busy, so this clock is not reliable" in wall_why(sr, sr, "Best-of-N", busy="busy")


def test_the_cli_json_holds_digests_and_load_and_a_busy_machine_is_named(tiny_lm_dir, length_reward, tmp_path,
                                                                       monkeypatch, capsys):
    import specrej.origin as origin
    from specrej.cli import main

    monkeypatch.setattr(origin, "cores", lambda: 2)
    monkeypatch.setattr(origin, "_loadavg", lambda: [5.5, 4.0, 3.0])
    trace = tmp_path / "t.json"
    argv = ["--model", tiny_lm_dir, "--reward", "sentiment", "--n", "4", "--max-new-tokens", "6", "--budget", "200",
            "--json", str(trace), "--repeat", "2", "--prompt", "Explain how a rainbow forms."]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "busy during 2 of 2 races (load up to 5.5 on 2 cores)" in err
    assert "== note: the machine was busy during this race" in out and "note (races 1, 2)" in out
    prov = json.loads(trace.read_text())["provenance"]
    assert len(prov["weights"]["generator"]["sha256"]) == 64 and prov["weights"]["reward"]["name"] == "sentiment"
    assert prov["load"]["busy"] is True and prov["load"]["load_start"] == [5.5, 4.0, 3.0]


def test_a_race_that_held_its_cores_less_than_half_its_time_is_flagged_as_waiting(monkeypatch):
    """Issue 64 (3): the CPU time beside the wall time says a race waited even where the load average (a minute's
    mean) missed it: a race that kept its threads' cores busy under half its wall time is flagged, in words."""
    import torch

    from specrej import origin

    monkeypatch.setattr(origin, "_loadavg", lambda: (0.1, 0.1, 0.1))   # a quiet minute on average
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ticks = {"wall": 0.0, "cpu": 0.0}
    monkeypatch.setattr(origin.time, "perf_counter", lambda: ticks["wall"])
    monkeypatch.setattr(origin.time, "process_time", lambda: ticks["cpu"])
    monkeypatch.setattr(origin, "cores", lambda: 2)
    clock = origin.Clock()
    ticks.update(wall=10.0, cpu=19.0)   # both threads busy 95% of the time: not waiting
    quiet = clock.stop()
    assert quiet["cpu_share"] == 0.95 and not quiet["waited"] and not quiet["busy"]
    ticks.update(wall=10.0, cpu=4.0)    # 20%: other work held the cores
    slow = clock.stop()
    assert slow["cpu_share"] == 0.2 and slow["waited"] and slow["busy"]
    words = origin.busy_words([quiet, slow])
    assert "1 of 2 races" in words and "held its cores only 20% of its wall time" in words
    assert origin.cpu_share(0.01, 0.1, 2) is None   # too short to tell
