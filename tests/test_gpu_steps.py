"""A race priced on a GPU's measured step (issue 31, item 5): ``specrej.analysis.gpu_steps`` reads the GPU check's JSON,
and the page prices a finished race (here a committed recording, replayed) on it as a second reading, only
where a real GPU measurement of the race's model exists."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from components import panels
from components.session import recordings
from components.state import shared
from components.state.summary import summary_dict
from specrej.analysis import gpu_steps
from specrej.core.cost import StepCost
from specrej.record import decode, load

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "assets/recordings/page/explain-why-the-sky-looks-blue-during-th-defaults.json.gz"
SMOLLM2 = 134_515_008   # the embedded SmolLM2-135M-Instruct's parameters (tied embeddings counted once)
ROWS = (1, 8, 32, 128, 512, 1024)


def check_json(variants: dict, *, params: int = SMOLLM2, date: str = "2026-12-03", device: str = "cuda",
               tiny: bool = False, name: str = "NVIDIA H200", config: str = "smollm2-135m") -> dict:
    """A JSON in scripts/gpu_check.py's format: ``variants`` maps a variant to ms per step as a function of rows."""
    return {"date": date, "device": device, "device_name": name, "torch": "2.11.0", "transformers": "5.17.0",
            "dtype": "bfloat16", "tiny": tiny, "errors": [],
            "steps": {config: {"params": params, "layers": 30,
                               "variants": {v: [{"rows": r, "step_ms": f(r)} for r in ROWS] for v, f in variants.items()}}}}


@pytest.fixture
def gpu_folder(tmp_path, monkeypatch):
    """The page's GPU folder pointed at an empty temporary one (the committed ``assets/gpu`` left alone)."""
    monkeypatch.setattr(shared, "GPU_STEPS", tmp_path)
    shared.gpu_steps.cache_clear()
    yield tmp_path
    shared.gpu_steps.cache_clear()


def write(folder: Path, name: str, data) -> None:
    (folder / name).write_text(json.dumps(data) if not isinstance(data, str) else data)
    shared.gpu_steps.cache_clear()


def replayed():
    """A finished view of a committed page race (the defaults), as the page replays it."""
    rec = load(RECORDED)
    view = recordings.view_for(rec)
    for _, ev in decode(rec):
        view.apply(ev)
    assert view.done and view.step is not None and view.verdicts()
    return view


def test_read_takes_real_gpu_measurements_and_skips_the_dry_runs(tmp_path):
    write(tmp_path, "a.json", check_json({"eager": lambda r: 10 + 0.01 * r, "cudagraphs": lambda r: 2 + 0.004 * r}))
    steps = {s.variant: s for s in gpu_steps.read(tmp_path / "a.json")}
    assert set(steps) == {"eager", "cudagraphs"}
    g = steps["cudagraphs"]
    assert g.cost.rows == ROWS and g.cost.seconds == tuple((2 + 0.004 * r) / 1000 for r in ROWS)
    assert (g.short, g.on, g.params, g.config, g.date) == ("H200", "on an H200", SMOLLM2, "smollm2-135m", "2026-12-03")
    assert "NVIDIA H200" in g.describe() and "CUDA graphs" in g.describe() and "2026-12-03" in g.describe()
    write(tmp_path, "cpu.json", check_json({"eager": lambda r: 5.0}, device="cpu"))
    write(tmp_path, "tiny.json", check_json({"eager": lambda r: 5.0}, tiny=True))
    assert gpu_steps.read(tmp_path / "cpu.json") == [] and gpu_steps.read(tmp_path / "tiny.json") == []
    assert gpu_steps.GpuStep("NVIDIA T4", "x", 1, "bf16", "eager", "d", "t", g.cost).on == "on a T4"


@pytest.mark.parametrize("bad, words", [
    ("{not json", "not a readable JSON"),
    ("[1, 2]", "no 'steps' table"),
    (json.dumps({"device": "cuda", "steps": {"m": {"layers": 2}}}), "has no 'params' and 'variants'"),
    (json.dumps({"device": "cuda", "steps": {"m": {"params": 5, "variants": {"eager": [{"rows": 1}]}}}}),
     "each row needs 'rows' and 'step_ms'"),
    (json.dumps({"device": "cuda", "steps": {"m": {"params": 5, "variants": {"eager": [{"rows": 1, "step_ms": -1}]}}}}),
     "step times positive"),
])
def test_a_broken_file_is_refused_by_name_and_skipped_by_the_loader(tmp_path, caplog, bad, words):
    write(tmp_path, "bad.json", bad)
    with pytest.raises(ValueError, match=words):
        gpu_steps.read(tmp_path / "bad.json")
    write(tmp_path, "good.json", check_json({"eager": lambda r: 3.0}))
    with caplog.at_level(logging.WARNING, logger="specrej.analysis.gpu_steps"):
        loaded = gpu_steps.load(tmp_path)
    assert [s.source for s in loaded] == ["good.json"] and "bad.json" in caplog.text
    assert gpu_steps.load(tmp_path / "absent") == []


def test_pick_matches_the_model_then_the_newest_then_the_fastest_variant(tmp_path):
    write(tmp_path, "old.json", check_json({"eager": lambda r: 1.0}, date="2026-11-01"))
    write(tmp_path, "new.json", check_json({"eager": lambda r: 9 + r, "compiled": lambda r: 4 + r,
                                            "cudagraphs": lambda r: 2 + 0.5 * r}))
    write(tmp_path, "8b.json", check_json({"eager": lambda r: 20.0}, params=8_030_261_248, config="llama-3-8b"))
    steps = gpu_steps.load(tmp_path)
    got = gpu_steps.pick(steps, SMOLLM2)
    assert (got.date, got.variant) == ("2026-12-03", "cudagraphs")
    assert gpu_steps.pick(steps, 8_030_261_248).config == "llama-3-8b"
    assert gpu_steps.pick(steps, 360_000_000) is None and gpu_steps.pick(steps, 0) is None
    assert gpu_steps.pick(steps, SMOLLM2 * 1.004).config == "smollm2-135m"   # the same config, counted otherwise


def test_nothing_gpu_priced_is_shown_without_a_real_measurement_of_this_model(gpu_folder):
    view = replayed()
    md = panels.summary_markdown(view)
    assert "measured:" not in md and summary_dict(view)["gpu_verdict"] is None
    write(gpu_folder, "dry.json", check_json({"eager": lambda r: 2.0}, device="cpu", tiny=True))
    write(gpu_folder, "8b.json", check_json({"eager": lambda r: 20.0}, params=8_030_261_248, config="llama-3-8b"))
    assert "measured:" not in panels.summary_markdown(view) and summary_dict(view)["gpu_verdict"] is None


def test_a_flat_gpu_step_prices_the_race_as_its_decoding_steps(gpu_folder):
    """A step that costs the same at every row count: the GPU-priced speed-up is the ratio of decoding steps
    (Best-of-k's expected steps over Speculative Rejection's), and each side's time is steps x that price."""
    view = replayed()
    write(gpu_folder, "flat.json", check_json({"cudagraphs": lambda r: 3.0}))
    gpu, on_gpu = view.gpu_verdicts(shared.gpu_steps())
    by_steps = view.verdicts(StepCost((1,), (1.0,)))
    assert set(on_gpu) == set(by_steps) == {"sr"}
    g, s = on_gpu["sr"], by_steps["sr"]
    assert g.seconds == pytest.approx(0.003 * s.steps) and g.bon_seconds == pytest.approx(0.003 * s.bon_seconds)
    assert g.speedup == pytest.approx(s.speedup) and (g.kind, g.k) == (s.kind, s.k)
    line = panels.summary_markdown(view)
    assert f"On an H200, measured: Speculative Rejection \\(n=auto\\) took {g.time_words()}" in line
    assert "the NVIDIA H200, the smollm2-135m config with random weights" in line
    d = summary_dict(view)["gpu_verdict"]
    assert d["device"] == "NVIDIA H200" and d["verdict"]["sr"]["speedup"] == pytest.approx(s.speedup)


def test_a_gpu_step_that_grows_with_rows_prices_every_step_at_its_rows(gpu_folder):
    """Linear in rows within the measured sizes: Speculative Rejection's time is the sum over its steps of
    a + b x rows (worked by hand from its rows per step), and the verdict's kind and k are the race's own."""
    view = replayed()
    write(gpu_folder, "lin.json", check_json({"cudagraphs": lambda r: 2.0 + 0.25 * r}))
    gpu, on_gpu = view.gpu_verdicts(shared.gpu_steps())
    lengths = [c.tokens for c in view.arms["sr"].finished.candidates]   # this recording predates rows_per_step:
    profile = [sum(n >= t for n in lengths) for t in range(1, max(lengths) + 1)]   # a row leaves as it ends
    assert gpu.variant == "cudagraphs" and profile[0] > profile[-1]
    assert on_gpu["sr"].seconds == pytest.approx(sum(0.002 + 0.00025 * r for r in profile))
    cpu = view.verdicts()["sr"]
    assert (on_gpu["sr"].kind, on_gpu["sr"].k, on_gpu["sr"].reward) == (cpu.kind, cpu.k, cpu.reward)
    assert on_gpu["sr"].speedup != pytest.approx(cpu.speedup)   # another machine's step: another reading
    md = panels.summary_markdown(view)
    assert md.count("measured:") == 1 and md.index("On an H200, measured") < md.index("Improvement score")


def test_the_gpu_checks_smollm2_config_is_the_model_the_page_races():
    """The GPU check builds SmolLM2-135M from ``assets/configs/smollm2-135m.json`` with random weights; its
    parameter count (what its JSON records) is the embedded generator's, read off a committed race's ledger, so
    a real H200 JSON prices the page's races (and the 8B config's never does)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    counts = {}
    for name in ("smollm2-135m", "llama-3-8b"):
        spec = {k: v for k, v in json.loads((ROOT / f"assets/configs/{name}.json").read_text()).items()
                if not k.startswith("_")}
        with torch.device("meta"):   # shapes only: nothing allocated
            model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**spec))
        counts[name] = sum(p.numel() for p in model.parameters())
    view = replayed()
    raced = gpu_steps.generator_params(view.arms[view.baseline].finished.ledger)
    assert counts["smollm2-135m"] == SMOLLM2 and raced == pytest.approx(SMOLLM2)
    steps = [gpu_steps.GpuStep("NVIDIA H200", n, c, "bfloat16", "cudagraphs", "2026-12-03", "2.11.0",
                               StepCost((1,), (0.002,))) for n, c in counts.items()]
    assert gpu_steps.pick(steps, raced).config == "smollm2-135m"
