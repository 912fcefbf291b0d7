"""Why this speed-up: the reasons behind one race's verdict, from the race's own numbers. No torch, no UI.

The verdict (``specrej.analysis.verdict``) is a ratio of two times at equal reward: Best-of-k's (k read off
Best-of-N's curve) over Speculative Rejection's. It factors exactly into what a lecturer can name::

    speed-up = (Best-of-k's decoding steps / Speculative Rejection's)          the steps it saved
             / (its mean seconds per step / Best-of-k's mean seconds per step)  the price of its wider steps

and the steps it saved are bounded by the room the budget leaves:

1. **The room.** In fixed passes Best-of-N writes its N answers in passes of the rows that fit at full length
   (``KVBudget.rows_per_pass``); Speculative Rejection writes all of its opening rows in one pass. (As vLLM
   pages it, the verdict's usual yardstick, more of Best-of-N's answers run at once while they are short, so
   its steps are fewer and the room smaller: ``bon_steps`` and ``full_steps`` are on the verdict's schedule,
   ``Why.schedule``; ``passes`` and ``bound`` stay fixed passes'.) Its
   decoding steps shrink by Best-of-N's number of passes when every answer runs to full length (passes x
   length steps against length). Best-of-32 at 48 tokens in 448 slots is 4 passes of 8 rows: ~4x. That is a
   bound for full-length answers only: a pass ends when its longest answer ends, so answers that end early
   can shrink the steps more or less than the passes (``Why.room``: the same count at the lengths written,
   which bounds the steps saved; ``Why.past_bound``: the steps shrank more than the passes).
2. **The price.** A step of Speculative Rejection's opening rows costs more than one of Best-of-N's
   rows wherever a step's cost grows with its rows (``StepCost``: measured on the machine that ran the
   race). On a CPU it does; on a GPU, decoding reads the weights once per step for every row, so it
   barely does.
3. **The signal.** How much of the room is used depends on Speculative Rejection's winner: the better
   it is, the more of its N answers Best-of-N needs to match it. That rests on the partial reward at
   the first decision: its Spearman rank correlation with the final reward of the same answers
   (coupled randomness: Best-of-N wrote every one of them to the end), and whether Best-of-N's own
   winner was cut, kept, or never drawn (outside the first batch).

When Speculative Rejection loses (speed-up below 1) or gains little (below ``LITTLE``), ``Why.causes``
names which of the three made it: ``"bound"`` (the room is small), ``"signal"`` (Best-of-N matched its
winner with a small share of its run), ``"price"`` (its wider steps ate the steps it saved).

The rivals (DeepConf, ST-BoN) factor the same way: their widest step is the opening (DeepConf: a pass of the
rows that fit at full length, as Best-of-N's; ST-BoN: all N), the signal is their own (``Why.signal``: group
confidence, consistency) ranked against the final rewards at their first decision with answers in progress.

``paper_setting`` applies the same room arithmetic to the paper's own setting, every number from a
cited constant below.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Sequence

from .compare import Fate, decision_rank, final_scores, live_at_decision, winner_fate
from ..core.budget import KVBudget
from ..core.cost import StepCost, passes
from ..core.events import Finished, Round
from .verdict import Verdict, place

LITTLE = 1.5        # a speed-up below this "gains little": the page does not sell it as the paper's effect
SMALL_ROOM = 2.0    # "bound": even all of Best-of-N's steps against Speculative Rejection's do not halve them
SHORT_USE = 0.75    # "signal": Best-of-N matched with under three quarters of its whole run's steps
PRICEY = 1.25       # "price": its steps cost at least a quarter more than Best-of-k's on average
SIGNAL_BANDS = ((0.7, "strong"), (0.4, "moderate"), (0.1, "weak"))   # the step panel's words for rho
CAUSES = ("bound", "signal", "price")


def signal_strength(rho: float | None) -> str | None:
    """'strong' (rho >= 0.7), 'moderate' (>= 0.4), 'weak' (>= 0.1), 'inverse' (<= -0.1), else 'no' agreement;
    None: undefined."""
    if rho is None:
        return None
    if rho <= -SIGNAL_BANDS[-1][0]:
        return "inverse"   # it ranked the answers the wrong way round: a reading, not an absence, of agreement
    return next((word for lo, word in SIGNAL_BANDS if rho >= lo), "no")


@dataclass(frozen=True)
class Why:
    """The reasons behind one verdict. Steps are decoding steps; ``price`` and ``opening_price`` are
    ratios of seconds per step (1 and None when the step was not measured: time counted in steps)."""

    n: int                        # Best-of-N's N
    length: int                   # the answers' full length (max new tokens)
    budget: int | None            # KV-cache slots both arms obeyed (None: unknown)
    shared: bool | None           # the prompt's slots held once for every row (None: unknown)
    rows_per_pass: int            # Best-of-N's rows at full length
    passes: int                   # Best-of-N's passes: ceil(n / rows_per_pass)
    opening_rows: int             # Speculative Rejection's first batch
    first_decision: int | None    # tokens written at its first decision (None: it never decided)
    bon_steps: float              # Best-of-k's expected decoding steps at equal reward (all N when beyond)
    full_steps: float             # Best-of-N's decoding steps for all N answers
    sr_steps: int                 # Speculative Rejection's decoding steps
    measured: bool                # steps priced at a measured StepCost (else one unit per step)
    opening_price: float | None   # one step of opening_rows rows over one of rows_per_pass rows
    price: float                  # its mean seconds per step over Best-of-k's
    rho: float | None             # Spearman of partial vs final reward at the first decision
    rho_live: int                 # answers that correlation is over
    fate: Fate                    # Best-of-N's winner in the Speculative Rejection arm
    bon_winner: int               # its candidate id
    k: float | None               # the verdict's k (None: beyond N)
    speedup: float                # the verdict's speed-up (a lower bound when k is None)
    outcome: str                  # "won" | "little" | "lost"
    causes: tuple[str, ...]       # what made it lose or gain little, in CAUSES' order; () when it won
    signal: str = ""              # what the first decision ranked by: "" the partial reward; a rival's own signal
                                  # ("group confidence": DeepConf, "consistency": ST-BoN)
    schedule: str = "passes"      # Best-of-k's schedule in the verdict (``Verdict.schedule``): "vllm" or "passes";
                                  # ``bon_steps`` and ``full_steps`` are on it, ``passes`` and ``bound`` fixed passes'

    @property
    def bound(self) -> int:
        """The most decoding steps can shrink at full length: Best-of-N's passes into one."""
        return self.passes

    @property
    def past_bound(self) -> bool:
        """The steps shrank more than ``bound`` (Best-of-N's passes): answers ended early, Speculative
        Rejection's one pass sooner than Best-of-N's passes did. The full-length bound does not hold then;
        ``room`` (at the lengths written) does."""
        return self.step_ratio > self.bound

    @property
    def room(self) -> float:
        """Best-of-N's steps for all N answers over Speculative Rejection's (the bound, at the lengths written)."""
        return self.full_steps / self.sr_steps if self.sr_steps else math.inf

    @property
    def step_ratio(self) -> float:
        """Best-of-k's steps at equal reward over Speculative Rejection's: how far the steps shrank."""
        return self.bon_steps / self.sr_steps if self.sr_steps else math.inf

    @property
    def use(self) -> float:
        """The share of the room used: Best-of-k's steps over Best-of-N's (1 when beyond N)."""
        return self.bon_steps / self.full_steps if self.full_steps else 1.0

    @property
    def opening_passes(self) -> float:
        """Speculative Rejection's opening rows in Best-of-N passes."""
        return self.opening_rows / self.rows_per_pass

    @property
    def strength(self) -> str | None:
        return signal_strength(self.rho)

    @property
    def beyond(self) -> bool:
        return self.k is None

    def to_dict(self) -> dict:
        out = asdict(self)
        out["fate"] = self.fate.to_dict()
        out.update(bound=self.bound, room=self.room, step_ratio=self.step_ratio, use=self.use,
                   opening_passes=self.opening_passes, strength=self.strength)
        return out


def outcome_of(speedup: float) -> str:
    """'lost' below 1, 'little' below LITTLE, else 'won'."""
    return "lost" if speedup < 1.0 else "little" if speedup < LITTLE else "won"


def causes_of(outcome: str, *, room: float, use: float, step_ratio: float, price: float,
              measured: bool) -> tuple[str, ...]:
    """Which reasons made Speculative Rejection lose or gain little (``()`` when it won):

    - ``"bound"``: the room is under SMALL_ROOM (its steps could not even halve);
    - ``"signal"``: Best-of-N matched its winner with under SHORT_USE of its whole run's steps;
    - ``"price"``: its steps cost more (a measured price above 1), either enough that the steps alone
      would have cleared the bar (1 for a loss, LITTLE for a small gain) or by at least PRICEY.

    When none of these holds, the one furthest from neutral (on a log scale) is named."""
    if outcome == "won":
        return ()
    bar = 1.0 if outcome == "lost" else LITTLE
    out = []
    if room < SMALL_ROOM:
        out.append("bound")
    if use < SHORT_USE:
        out.append("signal")
    if measured and price > 1.0 and (step_ratio >= bar or price >= PRICEY):
        out.append("price")
    if not out:
        deficit = {"bound": math.log(SMALL_ROOM / room) if room > 0 else math.inf,
                   "signal": -math.log(use) if use > 0 else math.inf,
                   "price": math.log(price) if measured and price > 0 else -math.inf}
        out.append(max(CAUSES, key=lambda c: deficit[c]))
    return tuple(c for c in CAUSES if c in out)


def explain(*, baseline: Finished, baseline_rounds: Sequence[Round], challenger: Finished,
            rounds: Sequence[Round], verdict: Verdict, step: StepCost | None, max_new_tokens: int,
            budget: KVBudget | None = None) -> Why:
    """The reasons behind ``verdict``: Best-of-N's finished event and its Round events (one per pass),
    Speculative Rejection's finished event and its Round events (its decisions), the StepCost that
    priced the verdict (None: it counted decoding steps), the answers' full length and the budget
    (for its slots and sharing; Best-of-N's rows per pass come from its widest pass, as the verdict's)."""
    if verdict.speedup is None:   # a degenerate curve (N = 1, every score equal): nothing to explain
        return None
    n = len(baseline.candidates)
    if baseline_rounds:
        rows = max(r.n_kept for r in baseline_rounds)
    elif budget is not None:
        rows = budget.rows_per_pass(n, max_new_tokens)
    else:
        raise ValueError("explain needs Best-of-N's passes (its Round events) or the budget")
    rows = max(1, min(rows, n))
    # steps at equal reward: the verdict's own curve, read in steps instead of seconds
    in_steps = [replace(p, seconds=p.steps) for p in verdict.curve]
    scores = [c.score for c in baseline.candidates if c.score is not None]
    k, bon_steps, _ = place(in_steps, verdict.reward, max(scores) - min(scores) if scores else 0.0)
    full_steps = verdict.curve[-1].steps
    sr_steps = verdict.steps
    measured = step is not None
    if measured and sr_steps and bon_steps and verdict.bon_seconds > 0:
        price = (verdict.seconds / sr_steps) / (verdict.bon_seconds / bon_steps)
    else:
        price = 1.0
    # its widest step: Speculative Rejection's opening batch; a rival's widest pass (DeepConf decodes in passes
    # of the rows that fit at full length, ST-BoN opens with all N)
    profile = getattr(challenger, "rows_per_step", ())
    opening = max(profile) if profile else len(challenger.candidates)
    own = (step.reading(verdict.reads) or step) if measured else None   # a rival's step with its reads, where measured
    opening_price = own.step(opening) / step.step(rows) if measured else None
    first = next((r for r in rounds if live_at_decision(r)), None)
    rank = decision_rank(first, final_scores(baseline)) if first is not None else None
    fate = winner_fate(baseline.winner.id, challenger, rounds)
    speedup = verdict.speedup
    outcome = outcome_of(speedup)
    room = full_steps / sr_steps if sr_steps else math.inf
    use = bon_steps / full_steps if full_steps else 1.0
    step_ratio = bon_steps / sr_steps if sr_steps else math.inf
    return Why(n=n, length=max_new_tokens, budget=budget.total if budget is not None else None,
               shared=budget.shared if budget is not None else None, rows_per_pass=rows,
               passes=len(passes(n, rows)), opening_rows=opening,
               first_decision=first.position if first is not None else None, bon_steps=bon_steps,
               full_steps=full_steps, sr_steps=sr_steps, measured=measured, opening_price=opening_price,
               price=price, rho=rank.spearman if rank is not None else None,
               rho_live=rank.n_live if rank is not None else 0, fate=fate, bon_winner=baseline.winner.id,
               k=verdict.k if verdict.k is not None else 1.0 if verdict.kind == "below" else float(verdict.n),
               speedup=speedup, outcome=outcome,
               causes=causes_of(outcome, room=room, use=use, step_ratio=step_ratio, price=price, measured=measured),
               signal=first.signal if first is not None else "", schedule=verdict.schedule)


def from_race(challenger: Finished, rounds: Sequence[Round], baseline: Finished, baseline_rounds: Sequence[Round],
              verdict: Verdict | None, step: StepCost | None, max_new_tokens: int) -> Why | None:
    """``explain`` for a finished race, the budget read from Best-of-N's ledger (its slots, its prompt
    tokens, whether the prompt was stored once); None without a verdict or with nothing to compare (a
    degenerate curve: N = 1 or every Best-of-N score equal)."""
    if verdict is None or verdict.speedup is None:
        return None
    led = baseline.ledger
    budget = KVBudget(led.budget, led.prompt_tokens, led.kv_sharing == "shared") if led.budget > 0 else None
    return explain(baseline=baseline, baseline_rounds=baseline_rounds, challenger=challenger, rounds=rounds,
                   verdict=verdict, step=step, max_new_tokens=max_new_tokens, budget=budget)


# ---------------------------------------------------------------------------------- the paper's setting
# Every number below is the paper's or its reference code's (github.com/Zanette-Labs/SpeculativeRejection,
# read at commit b51917f, 2024-10-28), never a result of this module. The arithmetic's inputs are all in the
# reference code; the paper is cited for what it reports and shows:
#
# - PAPER_NS: Best-of-N's N, 120 to 3840: postprocess/plot_compare.py (COMPARE_FOLDER_PATHS Bo120 ... Bo3840),
#   the N of the paper's efficiency figure and win-rate tables (Bo120 ... Bo3840).
# - PAPER_BON_BATCH = 120: Best-of-N's rows per GPU. README.md runs Best-of-120 on one GPU and Best-of-960
#   on 8, both with --batch_size 120; plot_compare.get_num_gpus gives Best-of-N N // 120 GPUs (1 to 32), and
#   plot_compare's "Relative GPU Compute" is the time ratio times the GPU ratio (lines 332-333): N // 120
#   passes of 120 rows side by side count as those passes one after another on one GPU.
# - PAPER_MAX_GEN_TOKENS = 2048: the longest answer. main.py --max_gen_tokens (default 2048, which README.md
#   does not override; its --max_tokens 8000 caps prompt + answer): both methods write up to 2048 tokens.
# - PAPER_FIRST_BATCH_TIMES = 2, PAPER_FIRST_BATCH_CAP = 1000: Speculative Rejection's first batch on one
#   GPU. speculative_rejection.py: min(int(2 x get_memory_constrained_batch_size(prompt length)), 1000).
# - PAPER_BATCH_FIT = (61626.403, 2.076): utils/sbon_utils.py, get_memory_constrained_batch_size =
#   int(a / (prompt length + b)), fitted for Meta-Llama-3-8B.
# - PAPER_FIRST_DECISION_MIN = 8, PAPER_SHRINK = 0.9: speculative_rejection.py then shrinks the first batch
#   by 0.9 until its first decision (the tokens that fit in free GPU memory, engine LLM.get_gen_len) comes at
#   8 tokens or later. Free memory is the machine's, not a constant: the first batch is *at most* the cap.
# - PAPER_FIGURE_DECISION = 256: the paper's Figure 3 plots partial rewards at 256 tokens against final ones.
# - PAPER_REPORTED = (16, 32): the paper's abstract, "between 16 to 32 times more computationally efficient".
# - The paper's Figure 1 (right): Best-of-N underuses the GPU's memory and compute early in generation; a
#   GPU decoding step reads the weights once for every row, so its cost barely grows with the rows (stated,
#   not measured here: ``StepCost`` is the machine that ran the race).
PAPER_NS = (120, 240, 480, 960, 1920, 3840)
PAPER_BON_BATCH = 120
PAPER_MAX_GEN_TOKENS = 2048
PAPER_FIRST_BATCH_TIMES = 2
PAPER_FIRST_BATCH_CAP = 1000
PAPER_BATCH_FIT = (61626.403, 2.076)
PAPER_FIRST_DECISION_MIN = 8
PAPER_SHRINK = 0.9
PAPER_FIGURE_DECISION = 256
PAPER_REPORTED = (16, 32)


def paper_first_batch(prompt_tokens: int) -> int:
    """The reference code's first batch for a prompt of ``prompt_tokens`` tokens before the free-memory
    shrink (which only lowers it): min(int(2 x int(a / (prompt + b))), 1000)."""
    a, b = PAPER_BATCH_FIT
    return min(int(int(a / (prompt_tokens + b)) * PAPER_FIRST_BATCH_TIMES), PAPER_FIRST_BATCH_CAP)


def paper_cap_prompt() -> int:
    """The longest prompt (tokens) for which the first batch is the cap, 1000 rows."""
    t = 0
    while paper_first_batch(t + 1) >= PAPER_FIRST_BATCH_CAP:
        t += 1
    return t


@dataclass(frozen=True)
class PaperPoint:
    n: int          # Best-of-N's N
    gpus: int       # the GPUs the paper runs it on (side by side)
    passes: int     # its passes of PAPER_BON_BATCH rows on one GPU
    bound: int      # the most decoding steps can shrink: passes into Speculative Rejection's one


@dataclass(frozen=True)
class PaperSetting:
    """The same room arithmetic on the paper's setting (``Why.bound`` there)."""

    bon_batch: int
    length: int
    first_batch: int           # Speculative Rejection's first batch, at most
    cap_prompt: int            # the longest prompt for which that is the cap
    first_decision_min: int
    points: tuple[PaperPoint, ...]
    reported: tuple[int, int]

    @property
    def opening_passes(self) -> float:
        """Speculative Rejection's first batch in Best-of-N passes."""
        return self.first_batch / self.bon_batch

    @property
    def bounds(self) -> tuple[int, int]:
        """The smallest and largest bound over the paper's N."""
        return min(p.bound for p in self.points), max(p.bound for p in self.points)

    @property
    def largest(self) -> PaperPoint:
        return max(self.points, key=lambda p: p.n)


def paper_setting() -> PaperSetting:
    """The paper's Best-of-N (passes of 120 rows on one GPU, answers up to 2048 tokens) against
    Speculative Rejection's one pass of at most 1000 rows, by the arithmetic of ``Why.bound``."""
    points = tuple(PaperPoint(n, n // PAPER_BON_BATCH, len(passes(n, PAPER_BON_BATCH)),
                              len(passes(n, PAPER_BON_BATCH))) for n in PAPER_NS)
    return PaperSetting(bon_batch=PAPER_BON_BATCH, length=PAPER_MAX_GEN_TOKENS,
                        first_batch=paper_first_batch(0), cap_prompt=paper_cap_prompt(),
                        first_decision_min=PAPER_FIRST_DECISION_MIN, points=points, reported=PAPER_REPORTED)
