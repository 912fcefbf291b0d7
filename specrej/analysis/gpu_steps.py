"""A decoding step measured on a GPU, to price a finished race a second time. No torch here.

``scripts/gpu_check.py`` writes one JSON on the GPU machine: per model config (``assets/configs/``), per
variant (``eager``, ``compiled``, ``cudagraphs``), the median ms of a decoding step at 1 to 1024 rows. This
module reads such files (``assets/gpu/*.json`` for the page) into ``GpuStep``: a ``core.cost.StepCost`` with
where and how it was measured. A race run here (or replayed) can then be priced on that step as well as on
this machine's: the same decoding steps, the same rows at each, the same passes and memory budget, each step
priced at the GPU's time for its rows (``specrej.analysis.verdict.from_race`` with ``GpuStep.cost.step``).

Only real measurements price anything: a file from the CPU dry run (``device`` is not ``cuda``, or
``tiny``) is skipped, and so is one whose model is not the race's (``GpuStep.matches``: the same parameter
count, the config the GPU measured with random weights). Where several match, the newest date wins, and of
its variants the fastest (what a deployment on that GPU would run): the reading names it.
"""
from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..core.cost import StepCost

log = logging.getLogger(__name__)

VARIANT_WORDS = {"eager": "eager PyTorch", "compiled": "torch.compile", "cudagraphs": "torch.compile with CUDA graphs"}
SAME_MODEL = 0.005   # parameter counts within 0.5% of each other: the same config


@dataclass(frozen=True)
class GpuStep:
    """A decoding step measured on a GPU for one model config and variant."""

    device_name: str       # e.g. "NVIDIA H200"
    config: str            # e.g. "smollm2-135m" (``assets/configs/``)
    params: int            # the measured model's parameters
    dtype: str             # e.g. "bfloat16"
    variant: str           # "eager" | "compiled" | "cudagraphs"
    date: str              # ISO date of the measurement
    torch: str             # the torch it ran with
    cost: StepCost         # seconds per step by rows, as measured
    source: str = ""       # the file it came from

    @property
    def short(self) -> str:
        """The device as a lecturer says it: "H200" for "NVIDIA H200"."""
        name = self.device_name.strip()
        for vendor in ("NVIDIA ", "AMD "):
            if name.upper().startswith(vendor):
                name = name[len(vendor):]
        return name.strip() or "GPU"

    @property
    def on(self) -> str:
        """"on an H200" / "on a T4" (the article as the letter is said)."""
        return f"on {'an' if self.short[:1].upper() in 'AEFHILMNORSX8' else 'a'} {self.short}"

    def describe(self) -> str:
        """Where and how the step was measured, in one phrase."""
        return (f"{self.device_name}, the {self.config} config with random weights, {self.dtype}, "
                f"{VARIANT_WORDS.get(self.variant, self.variant)}, torch {self.torch}, measured {self.date}")

    def matches(self, params: float) -> bool:
        """Whether a race of a generator with ``params`` parameters is this config's (within ``SAME_MODEL``)."""
        return params > 0 and abs(self.params - params) <= SAME_MODEL * params


def read(path: Path | str) -> list[GpuStep]:
    """Every (config, variant) with at least one measured row count in one ``gpu_check.py`` JSON, real GPU
    measurements only (``[]`` for the CPU dry run's). Raises ``ValueError`` naming what is wrong with a
    file that is not such a JSON."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path.name}: not a readable JSON ({type(e).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("steps"), dict):
        raise ValueError(f"{path.name}: no 'steps' table (is it scripts/gpu_check.py's output?)")
    if data.get("device") != "cuda" or data.get("tiny"):
        return []
    out = []
    for config, entry in data["steps"].items():
        try:
            params = int(entry["params"])
            variants = entry["variants"].items()
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ValueError(f"{path.name}: config {str(config)[:40]!r} has no 'params' and 'variants'") from None
        for variant, rows in variants:
            try:
                by_rows = {int(r["rows"]): float(r["step_ms"]) / 1000 for r in rows}
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"{path.name}: {config} {variant}: each row needs 'rows' and 'step_ms'") from None
            if not by_rows:
                continue
            if any(r < 1 or not (s > 0 and math.isfinite(s)) for r, s in by_rows.items()):
                raise ValueError(f"{path.name}: {config} {variant}: rows must be >= 1 and step times positive")
            cost = StepCost(tuple(sorted(by_rows)), tuple(by_rows[r] for r in sorted(by_rows)))
            out.append(GpuStep(str(data.get("device_name") or "GPU"), str(config), params,
                               str(data.get("dtype", "?")), str(variant), str(data.get("date", "?")),
                               str(data.get("torch", "?")), cost, path.name))
    return out


def load(folder: Path | str) -> list[GpuStep]:
    """Every real GPU step in ``folder``'s ``*.json`` files; a file that cannot be read is skipped with one
    log line saying why (the page stays up without its GPU reading)."""
    folder = Path(folder)
    out: list[GpuStep] = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out += read(path)
        except ValueError as e:
            log.warning("GPU step times skipped: %s", e)
    return out


def _total(step: GpuStep, rows: Iterable[int]) -> float:
    return sum(step.cost.step(r) for r in rows)


def pick(steps: Iterable[GpuStep], params: float) -> GpuStep | None:
    """The GPU step to price a race of a ``params``-parameter generator with: of the matching configs, the
    newest measurement; of its variants, the fastest over the row counts every one of them measured (the
    one measuring more rows where they tie). None when nothing matches."""
    matching = [s for s in steps if s.matches(params)]
    if not matching:
        return None
    newest = max((s.date, s.device_name) for s in matching)
    same = [s for s in matching if (s.date, s.device_name) == newest]
    common = set.intersection(*(set(s.cost.rows) for s in same)) or set(same[0].cost.rows)
    return min(same, key=lambda s: (_total(s, common), -len(s.cost.rows)))


def generator_params(ledger) -> float:
    """A finished arm's generator parameters from its ledger (FLOPs = 2 x params x tokens, ``core.cost.flops``);
    0 when it read no token."""
    tokens = ledger.prompt_tokens + ledger.generated_tokens
    return ledger.generator_flops / (2 * tokens) if tokens > 0 else 0.0
