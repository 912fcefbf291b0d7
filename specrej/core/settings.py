"""The rivals' own settings, one frozen dataclass per method (issue 40): what an arm spec such as
``deepconf:warmup=8,pick=paper`` or ``stbon:buffer=0.5`` sets besides ``RunConfig``'s shared fields.

``DeepConfSettings`` and ``STBoNSettings`` are validated in ``__post_init__`` with messages that say what to change.
A method's ``About`` (``specrej.core.about``) names its class (``About.settings``; None for Best-of-N and
Speculative Rejection, whose settings are RunConfig's own) and ``About.settings_for(cfg)`` reads a run's:
``RunConfig.settings`` when it is one of the method's, else the class's defaults. Each method module re-exports
its own class as ``SETTINGS``. Part of the torch-free core: no I/O, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from .checks import PICKS, described as _f, check_int as _int, is_number as _is_num


@dataclass(frozen=True)
class DeepConfSettings:
    """DeepConf-style confidence stops (``specrej.methods.deepconf``)."""

    warmup: int = _f(4, "DeepConf: traces written to the end first; their lowest group confidence sets the stop "
                     "threshold (the paper's online mode: 16 of 256 traces).")
    conf_percentile: float = _f(90.0, "DeepConf: the percentage of warm-up traces whose lowest group confidence "
                                "clears the threshold: 90 is DeepConf-high (threshold at the 10th percentile), 10 "
                                "DeepConf-low.")
    window: int = _f(8, "DeepConf: tokens in the sliding window whose mean token confidence is the group confidence "
                     "(the paper: 2048 of answers thousands of tokens long).")
    conf_topk: int = _f(20, "DeepConf: a token's confidence is minus the mean log-probability of the model's k most "
                        "likely tokens at that step (the paper: 20).")
    consensus: float = _f(0.0, "DeepConf: the paper's adaptive sampling: stop starting traces once the answers "
                          "written so far agree, the top answer's share of the confidence-weighted vote reaching "
                          "this (the paper: 0.95); answers agree when their texts match (case and spacing "
                          "aside). 0 = off (open-ended answers rarely agree: the traces go on to N).")
    pick: str = _f("reward", "DeepConf, ST-BoN: who names the winner among the answers they finish: 'reward' (the "
                   "race's reward, as Best-of-N picks) or 'paper' (the paper's own rule: DeepConf the highest "
                   "lowest-group-confidence, ST-BoN the most consistent answer).")

    def __post_init__(self) -> None:
        _int(self, "warmup", lo=1, hint="warmup is a positive number of DeepConf warm-up traces")
        if not _is_num(self.conf_percentile) or not 0.0 < self.conf_percentile <= 100.0:
            raise ValueError(f"conf_percentile={self.conf_percentile!r} must be in (0, 100]: the share of warm-up "
                             "traces whose confidence clears DeepConf's threshold (90 or 10 in the paper).")
        _int(self, "window", lo=1, hint="window is a positive number of tokens (DeepConf's group)")
        _int(self, "conf_topk", lo=1, hint="conf_topk is a positive number of tokens (DeepConf's token confidence)")
        if not _is_num(self.consensus) or not 0.0 <= self.consensus <= 1.0:
            raise ValueError(f"consensus={self.consensus!r} must be in [0, 1]: the vote share at which DeepConf "
                             "stops (0.95 in the paper), or 0 for off.")
        _pick(self.pick)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in fields(cls)}


@dataclass(frozen=True)
class STBoNSettings:
    """ST-BoN-style early truncation (``specrej.methods.stbon``)."""

    buffer: float = _f(1.0, "ST-BoN: after the earliest step c at which every pair of answers differs, decode "
                       "max(1, int(buffer x c)) more tokens before truncating (the paper's tau = c).")
    pick: str = _f("reward", "DeepConf, ST-BoN: who names the winner among the answers they finish: 'reward' (the "
                   "race's reward, as Best-of-N picks) or 'paper' (the paper's own rule: DeepConf the highest "
                   "lowest-group-confidence, ST-BoN the most consistent answer).")

    def __post_init__(self) -> None:
        if not _is_num(self.buffer) or self.buffer < 0:
            raise ValueError(f"buffer={self.buffer!r} must be a number >= 0: ST-BoN's buffer as a multiple of the "
                             "divergence step (1 in the paper).")
        _pick(self.pick)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in fields(cls)}


def _pick(pick) -> None:
    if pick not in PICKS:
        raise ValueError(f"pick={pick!r} is unknown; choose one of {', '.join(PICKS)}.")
