"""Time to equal reward: the paper's comparison, for one coupled race. No torch here.

The paper's claim is accelerator *time* to equal reward, read on Best-of-N's reward-versus-N curve.
For one race with a Best-of-N arm and a Speculative Rejection arm:

1. **Best-of-N's curve.** For every k <= N, the expected best reward of k of its answers drawn at
   random (order statistics over the N coupled answers, ``curve.expected_max``), priced at what
   Best-of-k costs under the same memory budget: passes of ``rows_per_pass`` rows, and every
   decoding step priced at this machine's measured time for the rows decoding at that step
   (``core.cost.StepCost``; a row leaves the batch the step its answer ends). The expectation is
   over which k answers are drawn: the rows decoding at step t of a pass of m random answers are
   hypergeometric, so the expected time is exact.
2. **Speculative Rejection's point**: its winner's reward at its own decoding steps, priced by the
   same rule (all its rows start together; a row leaves when it is pruned or its answer ends).
3. **The verdict**: where that point falls on the curve. The k at which Best-of-N's curve reaches
   Speculative Rejection's reward (linear between neighbouring k), the time Best-of-k takes, and
   the ratio of the two times; a lower bound when even Best-of-N's N do not reach it.

FLOPs are the second line: Speculative Rejection buys fewer sequential steps with more rows per
step, so it can spend more FLOPs and still take less time wherever a step's cost grows slower
than its rows. The improvement score (the paper's: 100 = Best-of-N's winner, 0 = its worst answer
below it by the whole spread) says how far below Best-of-N's N the point sits, on a scale that
means the same for every reward.

Time here is decoding time modelled from measured step times (the reward model's scoring is in the
FLOPs and in the measured wall time, not in this line).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from .compare import reached
from .core.cost import passes
from .curve import expected_max
from .metrics import improvement_score

StepTime = Callable[[int], float]   # seconds of one decoding step at this many rows


def decode_cost(lengths: Sequence[int], step: StepTime) -> tuple[int, float]:
    """(steps, seconds) of rows that start together and decode until each has ``lengths[i]`` tokens:
    at step t the rows still decoding are those with at least t tokens."""
    lengths = sorted((max(0, int(x)) for x in lengths), reverse=True)
    seconds, rows = 0.0, len(lengths)
    for t in range(1, (lengths[0] if lengths else 0) + 1):
        while rows and lengths[rows - 1] < t:
            rows -= 1
        seconds += step(rows)
    return (lengths[0] if lengths else 0), seconds


def _hypergeom(n: int, good: int, m: int) -> list[float]:
    """P(R = r) for r = 0..m: r of ``good`` marked items among m drawn without replacement from n."""
    total = math.comb(n, m)
    return [math.comb(good, r) * math.comb(n - good, m - r) / total if r <= good and m - r <= n - good else 0.0
            for r in range(m + 1)]


def expected_pass_cost(lengths: Sequence[int], m: int, step: StepTime) -> tuple[float, float]:
    """(E steps, E seconds) of a pass of ``m`` answers drawn at random from ``lengths``, by
    ``decode_cost``'s rule: R_t, the rows decoding at step t, is hypergeometric."""
    n = len(lengths)
    if not 1 <= m <= n:
        raise ValueError(f"a pass of {m} rows from {n} answers")
    if m == n:
        steps, seconds = decode_cost(lengths, step)
        return float(steps), seconds
    steps = seconds = 0.0
    for t in range(1, max(lengths) + 1):
        good = sum(x >= t for x in lengths)
        p = _hypergeom(n, good, m)
        steps += 1.0 - p[0]
        seconds += sum(pr * step(r) for r, pr in enumerate(p) if r and pr)
    return steps, seconds


@dataclass(frozen=True)
class Point:
    """Best-of-k, in expectation over which k of the N answers are drawn."""

    k: int
    best: float       # expected best reward
    steps: float      # expected decoding steps
    seconds: float    # expected decoding time on this machine
    flops: float      # expected FLOPs (generator + reward)


def bon_curve(scores: Sequence[float], lengths: Sequence[int], rows_per_pass: int, step: StepTime, *,
              flops_per_token: float = 0.0, prompt_flops: float = 0.0, reward_flops: float = 0.0) -> list[Point]:
    """Best-of-k for k = 1..N from one Best-of-N run's coupled answers (final ``scores`` and ``lengths``).
    ``flops_per_token``: the generator's FLOPs per generated token; ``prompt_flops``: its prefill, once
    per run; ``reward_flops``: the whole run's reward FLOPs (each answer scored once: k/N of it)."""
    n = len(scores)
    if n == 0 or len(lengths) != n:
        raise ValueError("bon_curve needs one length per score, at least one answer")
    if rows_per_pass < 1:
        raise ValueError("rows_per_pass must be at least 1")
    mean_len = sum(lengths) / n
    memo: dict[int, tuple[float, float]] = {}
    out = []
    for k in range(1, n + 1):
        steps = seconds = 0.0
        for m in map(len, passes(k, rows_per_pass)):
            if m not in memo:
                memo[m] = expected_pass_cost(lengths, m, step)
            steps, seconds = steps + memo[m][0], seconds + memo[m][1]
        flops = prompt_flops + flops_per_token * k * mean_len + reward_flops * k / n
        out.append(Point(k, expected_max(scores, k), steps, seconds, flops))
    return out


@dataclass(frozen=True)
class Verdict:
    """Where Speculative Rejection's result falls on Best-of-N's curve."""

    reward: float                 # Speculative Rejection's winner
    steps: int                    # its decoding steps
    seconds: float                # its decoding time, modelled like the curve's
    flops: float
    n: int                        # Best-of-N's N
    curve: tuple[Point, ...]
    k: float | None               # the k at which the curve reaches ``reward`` (None: beyond N)
    bon_seconds: float            # Best-of-k's time at that k; Best-of-N's whole time when beyond N
    bon_flops: float
    improvement: float            # the paper's improvement score against Best-of-N's N (100 = its winner)

    @property
    def beyond(self) -> bool:
        """Even Best-of-N's N answers do not reach the reward: the speed-up is a lower bound."""
        return self.k is None

    @property
    def speedup(self) -> float:
        """Best-of-N's time to equal reward over Speculative Rejection's (> 1: Speculative Rejection is
        faster; a lower bound when ``beyond``)."""
        return self.bon_seconds / self.seconds if self.seconds > 0 else math.inf

    @property
    def flops_ratio(self) -> float:
        """Speculative Rejection's FLOPs over Best-of-k's at equal reward (> 1: it spent more)."""
        return self.flops / self.bon_flops if self.bon_flops > 0 else math.inf

    def to_dict(self) -> dict:
        out = asdict(self)
        out["curve"] = [asdict(p) for p in self.curve]
        out.update(beyond=self.beyond, speedup=self.speedup, flops_ratio=self.flops_ratio)
        return out


def place(curve: Sequence[Point], target: float) -> tuple[float | None, float, float]:
    """(k, seconds, flops) where ``curve`` first reaches ``target``, linear between neighbouring k;
    (None, the last point's seconds and flops) when it never does."""
    if not curve:
        raise ValueError("an empty curve")
    first = curve[0]
    if reached(first.best, target):
        return float(first.k), first.seconds, first.flops
    for lo, hi in zip(curve, curve[1:]):
        if reached(hi.best, target):
            f = 0.0 if hi.best <= lo.best else min(1.0, max(0.0, (target - lo.best) / (hi.best - lo.best)))
            return (lo.k + f * (hi.k - lo.k), lo.seconds + f * (hi.seconds - lo.seconds),
                    lo.flops + f * (hi.flops - lo.flops))
    last = curve[-1]
    return None, last.seconds, last.flops


def verdict(*, bon_scores: Sequence[float], bon_lengths: Sequence[int], rows_per_pass: int, sr_reward: float,
            sr_lengths: Sequence[int], sr_flops: float, step: StepTime, flops_per_token: float = 0.0,
            prompt_flops: float = 0.0, bon_reward_flops: float = 0.0) -> Verdict:
    """Speculative Rejection's result (its winner's reward, every candidate's length as written, its
    FLOPs) placed on Best-of-N's curve (its N final scores and lengths, its rows per pass)."""
    curve = bon_curve(bon_scores, bon_lengths, rows_per_pass, step, flops_per_token=flops_per_token,
                      prompt_flops=prompt_flops, reward_flops=bon_reward_flops)
    steps, seconds = decode_cost(sr_lengths, step)
    k, bon_seconds, bon_flops = place(curve, sr_reward)
    top, low = max(bon_scores), min(bon_scores)
    return Verdict(reward=sr_reward, steps=steps, seconds=seconds, flops=sr_flops, n=len(bon_scores),
                   curve=tuple(curve), k=k, bon_seconds=bon_seconds, bon_flops=bon_flops,
                   improvement=improvement_score([sr_reward], [top], [top], [low]))


def from_race(challenger, baseline, baseline_rounds: Sequence, step: StepTime) -> Verdict | None:
    """The verdict of a finished race from its events: ``challenger`` and ``baseline`` are ``Finished``
    events (Speculative Rejection's, Best-of-N's), ``baseline_rounds`` Best-of-N's ``Round`` events (one
    per pass: their widest is its rows per pass). None when Best-of-N did not write all of its answers
    (stopped once it matched, or cut short): its curve would not be the curve of N answers."""
    answers = [c for c in baseline.candidates if c.finish_reason is not None and c.score is not None]
    if not answers or len(answers) != len(baseline.candidates) or not baseline_rounds:
        return None
    led = baseline.ledger
    per_token = led.generator_flops / max(1, led.prompt_tokens + led.generated_tokens)
    return verdict(bon_scores=[c.score for c in answers], bon_lengths=[c.tokens for c in answers],
                   rows_per_pass=max(r.n_kept for r in baseline_rounds), sr_reward=challenger.winner.score,
                   sr_lengths=[c.tokens for c in challenger.candidates], sr_flops=challenger.ledger.flops,
                   step=step, flops_per_token=per_token, prompt_flops=per_token * led.prompt_tokens,
                   bon_reward_flops=led.reward_flops)
