"""scripts/results_tables.py prints docs/results.md's tables from the committed benches: every speed-up with its
interval over prompts and the plateau's sensitivity, ST-BoN's forced prompts named; its pooled-seeds reading of
the graded bench with seed 0 alone is the committed speed-up."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# loaded from its file: scripts/ on sys.path would shadow modules of the same names elsewhere
_spec = importlib.util.spec_from_file_location("results_tables", ROOT / "scripts" / "results_tables.py")
rt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rt)


def _agg(name: str) -> dict:
    return json.loads((ROOT / "assets" / "bench" / f"{name}.json").read_text(encoding="utf-8"))["protocol"]


def test_every_speed_up_carries_its_interval_and_sensitivity_and_the_forced_prompts_are_named():
    graded = rt.bench_table(_agg("graded"))
    sr = next(line for line in graded.splitlines() if line.startswith("| SR paper α=0.5"))
    assert "2.23x {1.88, 2.55} (1.78 / 1.34)" in sr and "1.49x {1.33, 1.61}" in sr
    stbon = next(line for line in graded.splitlines() if line.startswith("| stbon (N=32)"))
    assert stbon.endswith("**on 11 of 24**: if-16, if-17, if-22, if-25, if-27, if-29, if-31, if-32, if-33, if-35, if-37 |")
    for line in graded.splitlines()[2:]:   # every speed-up given: a value, {an interval} and (0.1 / 1 point less)
        for cell in line.split(" | ")[3:7]:
            for part in cell.split(") / "):
                if part.strip() not in ("-", "- / -", ""):
                    assert "x {" in part and "(" in part, (line[:40], part)


def test_the_pooled_reading_of_seed_0_alone_is_the_committed_speed_up():
    bench = json.loads((ROOT / "assets" / "bench" / "graded.json").read_text(encoding="utf-8"))
    row = rt.pooled([bench])[0]
    committed = next(s for s in bench["summary"] if s["method"] == "sr" and s["alpha"] == 0.5)
    assert f"{committed['speedup_steps_vllm']:.2f}x" in row and "(1.78 / 1.34)" in row
    w = rt.nested_weights(3, 2, draws=50)
    assert w.shape == (50, 6) and (w.sum(axis=1) == 6).all()
    # a prompt's seeds are drawn only with it: the two seeds of a prompt never drawn are both 0
    for d in range(50):
        for p in range(3):
            assert (w[d, p] == 0 and w[d, 3 + p] == 0) or w[d, p] + w[d, 3 + p] >= 2


def test_the_quick_bench_at_three_seeds_matches_its_points_by_name():
    """Quick's seeds 1 and 2 hold no T = 8 point (it only runs live): the table matches the points by rule, alpha and
    first decision, leaves T = 8 out, and reads seed 0's committed speed-ups as they are."""
    runs = {0: _agg("quick"), 1: _agg("quick_seed1"), 2: _agg("quick_seed2")}
    rows = rt.seeds_table(runs).splitlines()[2:]
    assert len(rows) == 12 and not any("T=8 " in r for r in rows)
    paper = next(r for r in rows if r.startswith("| paper α=0.5, T=16 |"))
    committed = next(p for p in runs[0]["sr"] if (p["rule"], p["alpha"], p["first_decision"]) == ("paper", 0.5, 16))
    assert f"{committed['speedup_steps_vllm']['value']:.2f}x" in paper.split(" | ")[1]
    assert len(paper.split(" | ")) == 5
