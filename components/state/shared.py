"""Names the page and the runtime share: the assets folder, the preference reward's key, a reward
kind's label, and the recorded presets (Paper scale's settings, the replay paces). Imports only ``specrej``."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from specrej.analysis import gpu_steps as _gpu_steps
from specrej.engine.models import EMBEDDED
from specrej.rewards import REWARDS

ASSETS = Path(__file__).resolve().parents[2] / "assets"
PAGE_RACES = ASSETS / "recordings" / "page"   # the defaults and the Classroom preset on every example prompt
GPU_STEPS = ASSETS / "gpu"   # ``scripts/gpu_check.py``'s JSONs from a GPU machine: a finished race's second reading
PREFERENCE = "preference"
PACES = [("real pace", "1"), ("4×", "4"), ("16×", "16"), ("instant", "inf")]
PAPER_SCALE = dict(n=128, sr_start="auto", first_decision=16, max_new_tokens=256, budget=2048, alpha=0.5,
                   decision="budget", stop_when_matched=False, second=False, rule="paper")
PAPER_REWARD = "self-certainty"
# A race for a class: N equal to the rows Speculative Rejection opens with (16 on every example prompt, so its
# result always falls on Best-of-N's curve: every answer it could pick is one Best-of-N writes too), two
# decisions to step through (near tokens 19 and 38, well before the 48th), step mode on, and few of Best-of-N's
# steps: 336 slots hold 6 rows of 48 tokens, 3 passes (144 steps; a 224-slot budget held 3: 6 passes, 288).
CLASSROOM = dict(n=16, alpha=0.5, max_new_tokens=48, budget=336, first_decision=18, sr_start="auto",
                 decision="budget", rule="paper", seed=0, second=False, stop_when_matched=False, fit=True, step=True)


@functools.cache
def gpu_steps() -> tuple[_gpu_steps.GpuStep, ...]:
    """The GPU steps measured in ``GPU_STEPS`` (read once; none until a real GPU check is committed there)."""
    return tuple(_gpu_steps.load(GPU_STEPS))


def reward_kind_label(key: str) -> str:
    """A reward kind's label from the library's registry (the key itself if it has none)."""
    cls = REWARDS.get(key)
    return cls.label if cls is not None else key


def model_label(spec: str) -> str:
    """A generator's name as the page shows it (a local path by its folder's name)."""
    if spec == EMBEDDED:
        return "SmolLM2-135M-Instruct (embedded)"
    p = Path(spec)
    return p.name if p.is_absolute() or spec.startswith(".") else spec


@dataclass(frozen=True)
class PaperPlan:
    paper: dict                 # the paper's settings, capped by this deployment's limits
    paper_s: float              # its estimated live time here (an upper bound)
    limit_s: int
    settings: dict              # what the controls get: the paper's when it fits, else ``scaled``
    scaled_s: float | None      # the estimate of ``settings`` when they are scaled down
    replay_prompt: str | None   # a prompt with a recorded paper-scale race (when the paper does not fit)

    @property
    def fits(self) -> bool:
        return self.scaled_s is None
