"""The staged GPU check (scripts/gpu_check.sh, issue 60 (5)) in its CPU dry run: every stage in its own process, in
order of value, with tiny versions of both configs; one JSON they all fill, whole after every stage; a stage that
fails keeps its traceback and leaves the next ones to run."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGES = ["smoke", "bisect sampling", "bisect forward", "bisect step", "ceilings", "sweep", "races", "anchors", "paper"]


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    env = {**os.environ, "DRY": "1", "OUT": str(out), "PYTHON": sys.executable}
    run = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh")], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return out, json.loads((out / "gpu_steps.json").read_text())


def test_every_stage_ran_in_order_in_its_own_process_with_its_own_log(dry):
    out, report = dry
    assert list(report["stages"]) == STAGES
    assert all(s["status"] == "ok" for s in report["stages"].values()), (report["stages"],
                                                                         (out / "summary.txt").read_text()[-3000:])
    assert report["tiny"] and not report["errors"], report["errors"]
    for log in ("smoke", "bisect-sampling", "bisect-forward", "bisect-step", "ceilings", "sweep", "races", "anchors",
                "paper"):
        assert (out / f"{log}.log").read_text().strip(), log
    summary = (out / "summary.txt").read_text()
    assert "done in" in summary and summary.index("smoke [") < summary.index("ceilings [") < summary.index("paper [")


def test_the_smoke_compares_the_step_across_a_prune_and_the_bisect_runs_each_piece(dry):
    _, report = dry
    smoke = report["smoke"]
    assert smoke["ok"] and set(smoke["rows"]) == {"1", "8"}
    assert all(r["equal"] and not r["differ"] and r["capture_failed"] is None for r in smoke["rows"].values())
    assert smoke["per_step"]["cpu_ops"] > 0   # on a GPU: "kernels", one step's launches under the profiler
    assert {p: b["how"] for p, b in report["bisect"].items()} == {p: "ran uncaptured (no CUDA)"
                                                                   for p in ("sampling", "forward", "step")}


def test_the_measurements_are_those_the_page_reads(dry):
    """Ceilings, the sweep of both configs (the 8B first) and three variants with their ratios, a coupled race per
    variant that pruned and never diverged, transformers' anchor warmed at both lengths, the paper-shaped race."""
    out, report = dry
    variants = ("eager", "compiled", "captured")
    assert report["ceilings"]["copy_GBps"] > 0 and report["ceilings"]["matmul_TFLOPs"] > 0
    assert list(report["steps"]) == ["llama-3-8b", "smollm2-135m"]
    for name in ("smollm2-135m", "llama-3-8b"):
        # measured (a difference of two timings: its sign is the machine's on a loaded CPU, never asserted here)
        anchor = report["anchors"][name]["1"]
        assert isinstance(anchor, float) and math.isfinite(anchor)
        for variant in variants:
            rows = report["steps"][name]["variants"][variant]
            assert [r["rows"] for r in rows] == [1, 8, 32]
            assert all(r["x_roofline"] > 0 for r in rows)
            assert (rows[0]["x_transformers"] > 0) if anchor > 0 else "x_transformers" not in rows[0]   # its ratio
    for kind in variants:
        race = report["race"][kind]
        assert race["pruned"] > 0 and race["compared"] == race["n"] and race["diverged"] == 0
    paper = report["paper_race"]
    assert paper["bon"]["steps"] > paper["sr"]["steps"] > 0 and paper["speedup_steps"] > 1
    assert paper["bon"]["step"] and paper["sr"]["step"]
    # the page reads this format: a dry run never prices anything, the same file from a GPU would
    from specrej.analysis import gpu_steps
    assert gpu_steps.read(out / "gpu_steps.json") == []
    as_gpu = out / "as_gpu.json"
    as_gpu.write_text(json.dumps({**report, "device": "cuda", "tiny": False}))
    read = {(s.config, s.variant): s for s in gpu_steps.read(as_gpu)}
    assert set(read) == {(n, v) for n in ("smollm2-135m", "llama-3-8b") for v in variants}
    for (name, variant), s in read.items():
        rows = report["steps"][name]["variants"][variant]
        assert s.cost.rows == (1, 8, 32) and s.params == report["steps"][name]["params"]
        assert s.cost.seconds == tuple(r["step_ms"] / 1000 for r in rows)


def test_a_failing_stage_keeps_its_traceback_and_the_report_whole(tmp_path):
    """A stage that raises: its status 'failed', the whole traceback in the report, the JSON still whole, exit 1."""
    out = tmp_path / "g.json"
    out.write_text(json.dumps({"stages": {"smoke": {"status": "ok"}}, "errors": [], "steps": {}}))
    code = ("import sys; sys.path.insert(0, 'scripts'); import gpu_check as g\n"
            "g.Check.ceilings = lambda self: (_ for _ in ()).throw(RuntimeError('no device here'))\n"
            f"raise SystemExit(g.main(['--stage', 'ceilings', '--device', 'cpu', '--tiny', '--out', {str(out)!r}]))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 1, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["stages"]["smoke"]["status"] == "ok"   # an earlier stage's part kept
    assert report["stages"]["ceilings"]["status"] == "failed"
    assert "RuntimeError: no device here" in report["tracebacks"]["stage ceilings"]
    assert "Traceback" in report["tracebacks"]["stage ceilings"] and "no device here" in run.stdout
