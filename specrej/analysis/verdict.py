"""Time to equal reward: the paper's comparison, for one coupled race. No torch here.

The paper's claim is accelerator *time* to equal reward, read on Best-of-N's reward-versus-N curve.
For one race with a Best-of-N arm and a Speculative Rejection arm:

1. **Best-of-N's curve.** For every k <= N, the expected best reward of k of its answers drawn at
   random (order statistics over the N coupled answers, ``curve.expected_max``), priced at what
   Best-of-k costs under the same memory budget, every decoding step priced at this machine's measured
   time for the rows decoding at that step (``core.cost.StepCost``), on one of two schedules
   (``Verdict.schedule``):

   - ``"vllm"`` (what ``from_race`` prices against wherever the race's budget is known, as the bench's
     tables are): Best-of-k as vLLM v1 schedules it (``paging``: KV blocks of 16 slots taken as answers
     write, a waiting answer admitted while its blocks fit, the latest admitted preempted and recomputed
     when a running one needs a block and none is free), its steps and their rows averaged over orders of
     the answers (``paging.vllm_priced``); a recomputed answer's prefill is priced as one more row;
   - ``"passes"`` (fixed passes: each answer reserves its full length at admission; the older yardstick,
     and the fallback where the budget is unknown or an answer does not fit it in whole blocks): passes of
     ``rows_per_pass`` rows, a row leaving the batch the step its answer ends; the rows decoding at step t
     of a pass of m random answers are hypergeometric, so the expected time is exact.
2. **Speculative Rejection's point**: its winner's reward at its own decoding steps, priced by the
   same rule (all its rows start together; a row leaves when it is pruned or its answer ends).
   **Scoring** is priced too where the step is this machine's (``from_race(scoring=True)``: the page's
   verdict): each arm's reward seconds as its ledger timed them, call by call (``Ledger.reward_s``); Best-of-k
   pays k/N of Best-of-N's. Free for self-certainty and the instruction checkers, small for the embedded
   preference reward, the largest cost with a 7B reward model. A rival's **own extra reads** are priced too:
   DeepConf's steps read the top-k log-probabilities, ST-BoN's every layer's hidden states
   (``Ledger.reads``), and where this machine's step was measured with that read (``StepCost.reads``: the
   two steps timed in turn), each of its steps is priced at that measured step (``Verdict.read_factor``:
   what it added); where it was not (a GPU step, an older recording), the verdict says its reads are not
   priced (``Verdict.reads_words``). Best-of-N and Speculative Rejection read nothing extra.
3. **The verdict**: where that point falls on the curve (``Verdict.kind``), one of four:
   ``reached``: the k at which Best-of-N's curve reaches Speculative Rejection's reward (linear
   between neighbouring k), the time Best-of-k takes, and the ratio of the two times;
   ``beyond``: even Best-of-N's N do not reach it, so the ratio against all N is a lower bound;
   ``below``: the reward is below Best-of-1's expected reward (the mean of the N scores): a single
   answer drawn at random already beats it on average, so Best-of-N needs less than one answer and
   the ratio against Best-of-1 is an upper bound; ``degenerate``: N = 1 or every score equal, so the
   curve is flat, there is no time to equal reward to read and no improvement score (it divides by
   the spread). "Reaches" is ``compare.reached`` relative to Best-of-N's spread (max minus min
   score): within ``compare.REACH_TOL`` of it, float noise.

FLOPs are the second line: Speculative Rejection buys fewer sequential steps with more rows per
step, so it can spend more FLOPs and still take less time wherever a step's cost grows slower
than its rows. The improvement score (the paper's: 100 = Best-of-N's winner, 0 = its worst answer
below it by the whole spread) says how far below Best-of-N's N the point sits, on a scale that
means the same for every reward.

Time here is decoding time modelled from measured step times (Best-of-k's on the schedule named) (a rival's with its extra reads, where they
were measured), plus the reward's scoring where ``from_race(scoring=True)``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

from .compare import fmt_times, reached
from ..core.budget import KVBudget
from ..core.cost import StepCost, best_of_k, decode_cost, flops as count_flops, read_words
from .curve import expected_max
from .metrics import improvement_score
from .paging import BLOCK_SIZE, fits, vllm_priced

StepTime = Callable[[int], float]   # seconds of one decoding step at this many rows

REACHED, BEYOND, BELOW, DEGENERATE = "reached", "beyond", "below", "degenerate"
SAME_TIME = 0.05   # times within 5% of each other read "about the same time" (``Verdict.time_words``)
VLLM, PASSES = "vllm", "passes"   # Best-of-k's schedule (``Verdict.schedule``): vLLM v1's paging; fixed passes
SCHEDULE_WORDS = {
    VLLM: "as vLLM v1 schedules it (KV blocks of 16 slots taken as answers write, preemption by recompute)",
    PASSES: "in fixed passes (each answer reserves its full length at admission: the rows that fit at full length)",
}


def _finite(what: str, values: Sequence[float]) -> None:
    bad = [i for i, x in enumerate(values) if not math.isfinite(x)]
    if bad:
        raise ValueError(f"{what} must be finite numbers: #{bad[0]} is {values[bad[0]]}")


def _lengths(what: str, values: Sequence[int]) -> None:
    if not values:
        raise ValueError(f"{what}: no answers")
    bad = [x for x in values if not (math.isfinite(x) and x >= 0)]
    if bad:
        raise ValueError(f"{what} must be token counts of 0 or more: got {bad[0]}")
    if max(values) == 0:
        raise ValueError(f"{what} are all 0 tokens: no decoding step to price")


@dataclass(frozen=True)
class Point:
    """Best-of-k, in expectation over which k of the N answers are drawn."""

    k: int
    best: float       # expected best reward
    steps: float      # expected decoding steps
    seconds: float    # expected decoding time on this machine
    flops: float      # expected FLOPs (generator + reward)


def bon_curve(scores: Sequence[float], lengths: Sequence[int], rows_per_pass: int, step: StepTime, *,
              flops_per_token: float = 0.0, prompt_flops: float = 0.0, reward_flops: float = 0.0,
              scoring_s: float = 0.0, budget: KVBudget | None = None, block_size: int = BLOCK_SIZE) -> list[Point]:
    """Best-of-k for k = 1..N from one Best-of-N run's coupled answers (final ``scores`` and ``lengths``).
    ``flops_per_token``: the generator's FLOPs per generated token; ``prompt_flops``: its prefill, once
    per run; ``reward_flops``: the whole run's reward FLOPs and ``scoring_s`` its reward's seconds (each
    answer scored once: k/N of each). ``budget``: Best-of-k's steps and time as vLLM v1 schedules it in
    blocks of ``block_size`` (``paging.vllm_priced``; the answers must fit it, ``paging.fits``); None: in
    fixed passes of ``rows_per_pass`` rows. FLOPs are the same on both (a recomputed prefill is not counted)."""
    return _bon_curve(scores, lengths, rows_per_pass, step, flops_per_token=flops_per_token,
                      prompt_flops=prompt_flops, reward_flops=reward_flops, scoring_s=scoring_s, budget=budget,
                      block_size=block_size)[0]


def _bon_curve(scores, lengths, rows_per_pass, step, *, flops_per_token, prompt_flops, reward_flops, scoring_s,
               budget, block_size) -> tuple[list[Point], int]:
    """``bon_curve`` and its widest step (rows)."""
    n = len(scores)
    if n == 0 or len(lengths) != n:
        raise ValueError("bon_curve needs one length per score, at least one answer")
    _finite("Best-of-N's scores", scores)
    _lengths("Best-of-N's lengths", lengths)
    if rows_per_pass < 1:
        raise ValueError("rows_per_pass must be at least 1")
    # FLOPs through cost.flops, for a generator of flops_per_token / 2 parameters whose prefill is prompt_flops
    params = flops_per_token / 2.0
    prompt_tokens = prompt_flops / flops_per_token if flops_per_token else 0.0
    mean_len = sum(lengths) / n
    out = []
    if budget is not None:   # 1) vLLM v1's schedule: steps and their rows over orders of the answers
        steps, seconds, widest = vllm_priced([int(x) for x in lengths], budget, block_size, step)
        for k in range(1, n + 1):
            gen = count_flops(params, prompt_tokens + k * mean_len) if flops_per_token else prompt_flops
            out.append(Point(k, expected_max(scores, k), steps[k - 1], seconds[k - 1] + scoring_s * k / n,
                             gen + reward_flops * k / n))
        return out, widest
    # 2) fixed passes: the one Best-of-k point (core.cost.best_of_k), mapped over k
    memo: dict[int, tuple[float, float]] = {}
    for k in range(1, n + 1):
        p = best_of_k(k, lengths, rows_per_pass, step, params=params, prompt_tokens=prompt_tokens,
                      reward_flops=reward_flops, scoring_s=scoring_s, memo=memo)
        flops = p.flops if flops_per_token else prompt_flops + p.flops
        out.append(Point(k, expected_max(scores, k), p.steps, p.seconds, flops))
    return out, min(rows_per_pass, n)


@dataclass(frozen=True)
class Verdict:
    """Where Speculative Rejection's result falls on Best-of-N's curve (``kind``: see the module)."""

    reward: float                 # Speculative Rejection's winner
    steps: int                    # its decoding steps
    seconds: float                # its decoding time, modelled like the curve's
    flops: float
    n: int                        # Best-of-N's N
    curve: tuple[Point, ...]
    kind: str                     # "reached", "beyond" (N fall short), "below" (under Best-of-1), "degenerate"
    k: float | None               # the k at which the curve reaches ``reward`` (None unless "reached")
    bon_seconds: float            # Best-of-k's time at that k; all N's when beyond; Best-of-1's when below
    bon_flops: float              # likewise; when degenerate, all N's (what Best-of-N spent)
    improvement: float | None     # the paper's score against Best-of-N's N (100 = its winner); None: degenerate
    widest: int                   # the most rows any priced step decodes (its first step or Best-of-N's pass)
    reads: str = ""               # what the challenger's steps read beyond the logits (``Ledger.reads``; "": nothing)
    read_factor: float | None = None   # its priced decoding time with those reads over without (None: not priced)
    schedule: str = PASSES        # Best-of-k's schedule: VLLM (vLLM v1's paging) or PASSES (fixed passes)
    passes_seconds: float | None = None   # on VLLM: Best-of-k's time at the same k in fixed passes (None on PASSES)

    @property
    def passes_faster(self) -> bool:
        """On vLLM's schedule, would fixed passes have given Best-of-k more than ``SAME_TIME`` less time at the same
        k (a small budget in blocks of 16 holds fewer answers than reserving whole lengths does)? The page says so."""
        return (self.passes_seconds is not None and self.bon_seconds > 0
                and self.passes_seconds < self.bon_seconds / (1 + SAME_TIME))

    @property
    def schedule_words(self) -> str:
        """How Best-of-k was scheduled, in words (``SCHEDULE_WORDS``)."""
        return SCHEDULE_WORDS[self.schedule]

    def reads_words(self, where: str = "on this machine") -> str:
        """One sentence on the challenger's extra reads in its time: "Its steps include the top-20
        log-probabilities it reads (measured on this machine: 1.04x the plain steps' time)."; or that they are not
        priced where no step with them was measured; "" for a method that reads nothing extra."""
        if not self.reads:
            return ""
        what = read_words(self.reads)
        if self.read_factor is None:
            return (f"Its steps also read {what}, not priced here (no step reading them was measured {where}), "
                    "which flatters it.")
        return f"Its steps include {what} it reads (measured {where}: {self.read_factor:.2f}x the plain steps' time)."

    @property
    def beyond(self) -> bool:
        """Even Best-of-N's N answers do not reach the reward: the speed-up is a lower bound."""
        return self.kind == BEYOND

    @property
    def bound(self) -> str | None:
        """What kind of bound ``speedup`` is: ``"lower"`` beyond N (more answers than N would be needed),
        ``"upper"`` below Best-of-1 (one answer already beats the reward: Best-of-N needs less than
        Best-of-1's time), None when it is exact or (degenerate) undefined."""
        return {BEYOND: "lower", BELOW: "upper"}.get(self.kind)

    @property
    def speedup(self) -> float | None:
        """Best-of-N's time to equal reward over Speculative Rejection's (> 1: Speculative Rejection is
        faster; a bound, see ``bound``); None when the curve is degenerate: nothing to compare."""
        if self.kind == DEGENERATE:
            return None
        return self.bon_seconds / self.seconds if self.seconds > 0 else math.inf

    @property
    def flops_ratio(self) -> float:
        """Speculative Rejection's FLOPs over Best-of-k's at equal reward (> 1: it spent more)."""
        return self.flops / self.bon_flops if self.bon_flops > 0 else math.inf

    def time_words(self, than: str = "") -> str:
        """Speculative Rejection's time against Best-of-N's at equal reward, "2.3x less time" or "1.35x
        more time" (+ " than ``than``"), or "about the same time" (+ " as ``than``") when the two are
        within ``SAME_TIME`` (5%) of each other: both are modelled from step times measured once on a
        shared machine, and a few percent is not a difference that model can tell (a choice, not a
        measured error bar). Never "1x", never a factor below 1."""
        return self._ratio_words(self.speedup, than)

    def passes_time_words(self, than: str = "") -> str:
        """``time_words`` against Best-of-k in fixed passes at the same k (``passes_seconds``); "" without it."""
        if self.passes_seconds is None or self.kind == DEGENERATE:
            return ""
        return self._ratio_words(self.passes_seconds / self.seconds if self.seconds > 0 else math.inf, than)

    @staticmethod
    def _ratio_words(x: float | None, than: str) -> str:
        if x is None:
            return "nothing to compare"
        r = x if x >= 1 else 1 / x
        if r < 1 + SAME_TIME:
            return "about the same time" + (f" as {than}" if than else "")
        return f"{fmt_times(r)}x {'less' if x > 1 else 'more'} time" + (f" than {than}" if than else "")

    def headline(self, label: str, base: str, t_sr: str, t_bon: str, *, score=lambda x: f"{x:.3f}",
                 flops=None, bold=lambda s: s) -> str:
        """The verdict's first sentence, as the page and the CLI print it: where ``label``'s reward falls on
        ``base``'s curve, in time (``t_sr``, ``t_bon``: the two times as the caller writes them). ``score``,
        ``flops``: how numbers are written; ``bold``: how the claim is marked (the page's markdown, or nothing)."""
        from .compare import fmt_flops

        flops = flops or fmt_flops
        mine, theirs = f"{label}'s", f"{base}'s"
        if self.kind == DEGENERATE:   # N = 1 or every score equal: no curve, no score
            x = score(self.curve[0].best)
            what = (f"{base} wrote a single answer ({x}), so its curve is one point" if self.n == 1 else
                    f"all {self.n} of {theirs} answers score {x}, so its curve is flat")
            return (f"{bold('Nothing to compare: ' + what)}: there is no time to equal reward to read, and no "
                    f"improvement score (it divides by the spread of {theirs} scores, here 0). {mine} winner "
                    f"scored {score(self.reward)} in {t_sr} and {flops(self.flops)}; {base} spent {t_bon} and "
                    f"{flops(self.bon_flops)}.")
        if self.kind == BELOW:
            claim = (f"{mine} reward ({score(self.reward)}) is below what a single {base} answer scores on average "
                     f"({score(self.curve[0].best)}): one answer drawn at random already beats it")
            return (f"{bold(claim)}, so {base} needs less than one answer to match it. {label} took {t_sr}, "
                    f"{self.time_words('that one answer')} ({t_bon}).")
        if self.beyond and self.speedup >= 1 + SAME_TIME:
            claim = f"{theirs} {self.n} answers never reach {mine} reward: {label} took at least {self.time_words()}"
            return f"{bold(claim)} ({t_sr}, against {t_bon} for all {self.n})."
        if self.beyond:
            claim = f"{label} reached a reward none of {theirs} {self.n} answers reach"
            return f"{bold(claim)}, and took {self.time_words(f'all {self.n} of them')} ({t_sr} against {t_bon})."
        if self.kind == REACHED and self.k >= self.n - 1e-9:
            claim = f"{base} needs all {self.n} answers ({t_bon}) to reach {mine} reward: {label} took {self.time_words()}"
            return f"{bold(claim)} ({t_sr})."
        k = show_k(self.k)
        answers = "answer" if k == "1" else "answers"
        claim = f"{base} needs about {k} {answers} ({t_bon}) to reach {mine} reward: {label} took {self.time_words()}"
        return f"{bold(claim)} ({t_sr})."

    def to_dict(self) -> dict:
        out = asdict(self)
        out["curve"] = [asdict(p) for p in self.curve]
        out.update(beyond=self.beyond, bound=self.bound, speedup=self.speedup, flops_ratio=self.flops_ratio)
        return out


def place(curve: Sequence[Point], target: float, spread: float) -> tuple[float | None, float, float]:
    """(k, seconds, flops) where ``curve`` first reaches ``target`` (``compare.reached`` within the
    tolerance of ``spread``, Best-of-N's max minus min score), linear between neighbouring k, and
    exactly that k when the target is within the tolerance of its expected best (float noise is a
    tie); (None, the last point's seconds and flops) when it never does. A target at or below the
    first point gives k = 1 (``verdict`` calls a target below Best-of-1's reward "below" first)."""
    if not curve:
        raise ValueError("an empty curve")
    first = curve[0]
    if reached(first.best, target, spread):
        return float(first.k), first.seconds, first.flops
    for lo, hi in zip(curve, curve[1:]):
        if reached(hi.best, target, spread):
            tie = reached(target, hi.best, spread) or hi.best <= lo.best
            f = 1.0 if tie else min(1.0, max(0.0, (target - lo.best) / (hi.best - lo.best)))
            return (lo.k + f * (hi.k - lo.k), lo.seconds + f * (hi.seconds - lo.seconds),
                    lo.flops + f * (hi.flops - lo.flops))
    last = curve[-1]
    return None, last.seconds, last.flops


def verdict(*, bon_scores: Sequence[float], bon_lengths: Sequence[int], rows_per_pass: int, sr_reward: float,
            sr_lengths: Sequence[int], sr_flops: float, step: StepTime, flops_per_token: float = 0.0,
            prompt_flops: float = 0.0, bon_reward_flops: float = 0.0,
            sr_profile: Sequence[int] | None = None, sr_scoring_s: float = 0.0,
            bon_scoring_s: float = 0.0, sr_step: StepTime | None = None, reads: str = "",
            budget: KVBudget | None = None, block_size: int = BLOCK_SIZE) -> Verdict:
    """Speculative Rejection's result (its winner's reward, every candidate's length as written, its
    FLOPs) placed on Best-of-N's curve (its N final scores and lengths, its rows per pass). Refuses
    (``ValueError``) a score or reward that is NaN or infinite, no answers, and lengths that are
    negative or all 0 (nothing decoded: no time to compare).

    ``sr_profile``: the challenger's rows at each of its decoding steps (``Finished.rows_per_step``), priced
    step by step: the rule for any arm (a rival that runs passes or refills slots, ``methods.deepconf``).
    Without it the challenger is priced as one pass of its candidates from their lengths (``decode_cost``),
    which is the same number for Speculative Rejection (all its rows start together; a row leaves when it is
    pruned or its answer ends) and what an older trace allows.

    ``sr_scoring_s``, ``bon_scoring_s``: the reward's seconds as each arm's ledger timed them, call by call
    (``Ledger.reward_s``: Speculative Rejection's partial scores at every decision and its finals, Best-of-N's
    N finals, k/N of which Best-of-k pays). Added to the decoding time; 0 (the default): decoding only, the
    right reading when ``step`` counts steps or prices another machine's.

    ``sr_step``: the challenger's own step price where it differs from ``step`` (a rival's step with its extra
    reads, ``StepCost.reading``); ``reads`` names those reads (``Ledger.reads``): with ``sr_step`` the
    verdict keeps what they added (``read_factor``), without it says they are not priced.

    ``budget``: Best-of-k priced as vLLM v1 schedules it under that budget, in blocks of ``block_size``
    (``schedule`` "vllm"; refused where the longest answer does not fit it alone, ``paging.fits``); None: in
    fixed passes of ``rows_per_pass`` (``schedule`` "passes")."""
    _finite("Speculative Rejection's reward", [sr_reward])
    _lengths("Speculative Rejection's lengths", sr_lengths)
    if budget is not None and not fits(bon_lengths, budget, block_size):
        raise ValueError(f"an answer of {max(bon_lengths)} tokens does not fit {budget.total} slots in blocks of "
                         f"{block_size}: price Best-of-k in fixed passes (budget=None)")
    curve, bon_widest = _bon_curve(bon_scores, bon_lengths, rows_per_pass, step, flops_per_token=flops_per_token,
                                   prompt_flops=prompt_flops, reward_flops=bon_reward_flops,
                                   scoring_s=bon_scoring_s, budget=budget, block_size=block_size)
    steps, seconds = _decode(sr_profile, sr_lengths, sr_step or step)
    factor = None
    if reads and sr_step is not None:
        plain = _decode(sr_profile, sr_lengths, step)[1]
        factor = seconds / plain if plain > 0 else 1.0
    seconds += sr_scoring_s
    top, low = max(bon_scores), min(bon_scores)
    spread = top - low
    one, last = curve[0], curve[-1]
    k = None
    if spread == 0:                                   # N = 1, or every score equal: a flat curve
        kind, bon_seconds, bon_flops = DEGENERATE, last.seconds, last.flops
    elif not reached(sr_reward, one.best, spread):    # one answer at random beats it on average
        kind, bon_seconds, bon_flops = BELOW, one.seconds, one.flops
    else:
        k, bon_seconds, bon_flops = place(curve, sr_reward, spread)
        kind = REACHED if k is not None else BEYOND
    widest = max(bon_widest, max(sr_profile) if sr_profile else sum(x > 0 for x in sr_lengths))
    passes_seconds = None
    if budget is not None:   # the same k in fixed passes, for the page to name where it is faster
        fixed, _ = _bon_curve(bon_scores, bon_lengths, rows_per_pass, step, flops_per_token=flops_per_token,
                              prompt_flops=prompt_flops, reward_flops=bon_reward_flops, scoring_s=bon_scoring_s,
                              budget=None, block_size=block_size)
        passes_seconds = (fixed[0].seconds if kind == BELOW else fixed[-1].seconds if kind in (DEGENERATE, BEYOND)
                          else place(fixed, sr_reward, spread)[1])
    return Verdict(reward=sr_reward, steps=steps, seconds=seconds, flops=sr_flops, n=len(bon_scores),
                   curve=tuple(curve), kind=kind, k=k, bon_seconds=bon_seconds, bon_flops=bon_flops,
                   improvement=None if kind == DEGENERATE else improvement_score([sr_reward], [top], [top], [low]),
                   widest=widest, reads=reads, read_factor=factor,
                   schedule=VLLM if budget is not None else PASSES, passes_seconds=passes_seconds)


def _decode(profile: Sequence[int] | None, lengths: Sequence[int], step: StepTime) -> tuple[int, float]:
    """(steps, seconds) of the challenger: its rows at each step priced step by step, or (no profile) one pass
    of its candidates from their lengths (``decode_cost``)."""
    if profile:
        return len(profile), sum(step(rows) for rows in profile)
    return decode_cost(lengths, step)


def _cost_of(step) -> StepCost | None:
    """The ``StepCost`` behind ``step``: itself, or the one whose ``StepCost.step`` it is (a bound method);
    None for any other price (one unit per step, a GPU's table)."""
    if isinstance(step, StepCost):
        return step
    owner = getattr(step, "__self__", None)
    return owner if isinstance(owner, StepCost) and getattr(step, "__func__", None) is StepCost.step else None


def show_k(k: float) -> str:
    """Best-of-k's k as the page says it: whole where it is (to a tenth), else with one decimal (2.47 -> "2.5";
    the time beside it is the time at that k), and never below 1."""
    k = max(1.0, float(k))
    return f"{k:.0f}" if abs(k - round(k)) < 0.05 else f"{k:.1f}"


def from_race(challenger, baseline, baseline_rounds: Sequence, step: "StepTime | StepCost", *,
              scoring: bool = False, schedule: str = VLLM) -> Verdict | None:
    """The verdict of a finished race from its events: ``challenger`` and ``baseline`` are ``Finished``
    events (Speculative Rejection's, Best-of-N's), ``baseline_rounds`` Best-of-N's ``Round`` events (one
    per pass: their widest is its rows per pass). None when Best-of-N did not write all of its answers
    (stopped once it matched, or cut short): its curve would not be the curve of N answers. ``scoring``:
    add each arm's measured reward seconds (``Ledger.reward_s``) to its time: only where ``step`` is this
    machine's measured step, in seconds.

    ``step``: a price per step, or a ``StepCost`` (or its bound ``StepCost.step``): then a challenger whose steps
    read more than the logits (``Ledger.reads``: DeepConf's top-k, ST-BoN's hidden states) is priced at the
    step measured with those reads (``StepCost.reading``), where it was measured.

    ``schedule``: Best-of-k's schedule. VLLM (the default): as vLLM v1 pages it under the race's budget, read from
    Best-of-N's ledger (its slots, its prompt tokens as prefilled: on the vLLM backend they include the prompt tails it
    recomputed, a longer prompt than the real one, so fewer answers fit and Best-of-k reads slower; whether the prompt
    was stored once); in fixed
    passes where the ledger has no budget (an older trace) or the longest answer does not fit it in whole blocks
    (``Verdict.schedule`` says which priced it). PASSES: fixed passes of Best-of-N's widest pass."""
    if schedule not in SCHEDULE_WORDS:
        raise ValueError(f"schedule must be one of {sorted(SCHEDULE_WORDS)}, not {schedule!r}")
    cost = _cost_of(step)
    step = cost.step if isinstance(step, StepCost) else step
    reads = getattr(challenger.ledger, "reads", "")
    own = cost.reading(reads) if cost is not None and reads else None
    answers = [c for c in baseline.candidates if c.finish_reason is not None and c.score is not None]
    if not answers or len(answers) != len(baseline.candidates) or not baseline_rounds:
        return None
    led = baseline.ledger
    lengths = [c.tokens for c in answers]
    budget = (KVBudget(led.budget, led.prompt_tokens, led.kv_sharing == "shared")
              if schedule == VLLM and led.budget > 0 else None)
    if budget is not None and not (max(lengths) > 0 and fits(lengths, budget)):
        budget = None
    per_token = led.generator_flops / max(1, led.prompt_tokens + led.generated_tokens)
    return verdict(bon_scores=[c.score for c in answers], bon_lengths=lengths,
                   rows_per_pass=max(r.n_kept for r in baseline_rounds), sr_reward=challenger.winner.score,
                   sr_lengths=[c.tokens for c in challenger.candidates], sr_flops=challenger.ledger.flops,
                   step=step, flops_per_token=per_token, prompt_flops=per_token * led.prompt_tokens,
                   bon_reward_flops=led.reward_flops, sr_profile=challenger.rows_per_step or None,
                   sr_scoring_s=challenger.ledger.reward_s if scoring else 0.0,
                   bon_scoring_s=led.reward_s if scoring else 0.0, sr_step=own.step if own is not None else None,
                   reads=reads, budget=budget)
