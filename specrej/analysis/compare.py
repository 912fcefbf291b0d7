"""The comparison of a challenger arm against a baseline arm, by one rule for every caller.

The CLI's summary, the app's panels and the bench's per-prompt records all call ``compare``:

- reward of each winner; tokens, FLOPs and wall-time ratios (``Ratio``), worded the right way
  round: "1.3x less compute" when the challenger spent less, "1.02x more compute" when it
  spent more, "the same compute" when they round to equal;
- whether the challenger kept the baseline's winner (coupled randomness: candidate i is the same
  text in every arm while it survives, so the baseline's winner is a candidate the challenger
  either kept or pruned);
- the compute at which the baseline's best finished reward first reached the challenger's reward
  (read off the baseline's curve: the best finished reward at each event it yielded);
- at each decision, the Spearman correlation of the partial rewards of the candidates that were
  decoding then against the same candidates' final rewards in the baseline.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

from ..core.events import Candidate, Event, Finished, Round, candidate_rows
from .metrics import spearman


# ---------------------------------------------------------------------------------- wording
def fmt_flops(x: float) -> str:
    """1.23e11 -> '123 GFLOP'."""
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(x) >= scale:
            v = x / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{x:.0f} FLOP"


def fmt_times(r: float) -> str:
    """A factor >= 1 with three significant digits: '1.3', '1.02', '12.5', '140'."""
    return f"{r:.3g}" if r < 100 else f"{r:.0f}"


@dataclass(frozen=True)
class Ratio:
    """What the challenger spent against what the baseline spent."""

    challenger: float
    baseline: float

    @property
    def value(self) -> float | None:
        """baseline / challenger: above 1 the challenger spent less (None when undefined)."""
        if self.challenger <= 0 or self.baseline <= 0:
            return None
        return self.baseline / self.challenger

    def words(self, noun: str = "") -> str:
        """'1.3x less compute', '1.02x more compute', 'the same compute' (or 'n/a')."""
        r = self.value
        tail = f" {noun}" if noun else ""
        if r is None:
            return f"n/a{tail}"
        x = fmt_times(r if r >= 1 else 1 / r)
        if x == "1":
            return f"the same{tail}"
        return f"{x}x {'less' if r > 1 else 'more'}{tail}"

    def to_dict(self) -> dict:
        return {"challenger": self.challenger, "baseline": self.baseline, "value": self.value,
                "words": self.words()}


# ---------------------------------------------------------------------------------- decisions
def live_at_decision(r: Round) -> list[Candidate]:
    """Candidates that were decoding when decision ``r`` was taken (their score is partial)."""
    return [c for c in r.candidates if c.finish_reason is None
            and (c.status == "kept" or (c.status == "pruned" and c.round_pruned == r.index))]


def final_scores(fin: Finished) -> dict[int, float]:
    """The final reward of every candidate this arm wrote to the end."""
    return {c.id: c.score for c in fin.candidates if c.finish_reason is not None and c.score is not None}


@dataclass(frozen=True)
class DecisionRank:
    index: int
    position: int          # tokens generated when the decision was taken
    n_live: int            # candidates decoding then that the baseline finished
    n_kept: int
    forced: bool
    spearman: float | None  # partial vs final reward over those candidates (None: undefined)
    signal: str = ""        # what was ranked: the method's own signal (``Round.signal``); "": the partial reward


def decision_rank(r: Round, final: Mapping[int, float]) -> DecisionRank:
    """Spearman of the partial rewards at decision ``r`` against the same candidates' final rewards; for a
    decision on the method's own signal (``Round.signals``: DeepConf's group confidence, ST-BoN's consistency)
    that signal's ranking instead: how well what it read predicts the final reward."""
    signal = dict(r.signals) if r.signal else None
    if signal is not None:
        live = [c for c in live_at_decision(r) if c.id in final and c.id in signal]
        rho = spearman([signal[c.id] for c in live], [final[c.id] for c in live]) if len(live) > 1 else None
        return DecisionRank(r.index, r.position, len(live), r.n_kept, r.forced, rho, r.signal)
    live = [c for c in live_at_decision(r) if c.id in final and c.score is not None]
    rho = spearman([c.score for c in live], [final[c.id] for c in live]) if len(live) > 1 else None
    return DecisionRank(r.index, r.position, len(live), r.n_kept, r.forced, rho)


@dataclass(frozen=True)
class Fate:
    """What became of one candidate (Best-of-N's winner) in a Speculative Rejection run.

    ``never_drawn``: its id is outside the run's first batch, so no rule could have kept it;
    ``pruned`` at ``decision`` (1-based) when the rows had ``position`` tokens; ``kept`` to the end."""

    fate: str                      # "never_drawn" | "pruned" | "kept"
    decision: int | None = None    # the decision that pruned it (1 = the first)
    position: int | None = None    # tokens generated at that decision

    def words(self) -> str:
        if self.fate == "never_drawn":
            return "never drawn (outside the first batch)"
        if self.fate == "pruned":
            return f"pruned at decision {self.decision} ({self.position} tokens)"
        return "kept to the end"

    def to_dict(self) -> dict:
        return {"fate": self.fate, "decision": self.decision, "position": self.position}


def winner_fate(winner: int, fin: Finished, rounds: Sequence[Round]) -> Fate:
    """The fate of candidate ``winner`` (Best-of-N's winner) in the run that ended with ``fin``
    (its Round events ``rounds``, by index)."""
    twin = next((c for c in fin.candidates if c.id == winner), None)
    if twin is None:
        return Fate("never_drawn")
    if twin.status == "pruned":
        at = next((r for r in rounds if r.index == twin.round_pruned), None)
        return Fate("pruned", twin.round_pruned + 1, at.position if at is not None else None)
    return Fate("kept")


# ---------------------------------------------------------------------------------- curves
def best_finished(candidates: Iterable[Candidate]) -> Candidate | None:
    """The best-scored finished candidate still in contention (lowest id on a tie)."""
    done = [c for c in candidates if c.status == "finished" and c.score is not None]
    return max(done, key=lambda c: (c.score, -c.id)) if done else None


def curve_point(event: Event) -> tuple[float, float | None]:
    """(FLOPs spent, best finished reward) after an event: one point of an arm's curve."""
    best = best_finished(event.candidates)
    return event.ledger.flops, None if best is None else best.score


REACH_TOL = 1e-4   # of the reward's spread: 0.01 improvement-score points, ten times finer than printed


def reached(score: float, target: float, spread: float | None = None) -> bool:
    """``score`` reached ``target``, up to float noise: the same text scored in a different batch
    (another padding) can differ in the last digits, and a recording keeps 5 decimals.

    With ``spread`` (the verdict: Best-of-N's max minus min score), within ``REACH_TOL`` x spread: a
    tolerance on the reward's own scale, the same for a reward in [0, 1] as for self-certainty in the
    hundreds. On the improvement score (100 x the gap over the spread) it is 0.01 points, below the
    0.1 the page prints. A zero spread (N = 1, or every score equal) leaves no scale: exact
    comparison (the verdict calls such a curve degenerate and does not read it). Without ``spread``
    (a race that stops once it matches, before it knows its spread): within 1e-6 x max(1, |target|)."""
    if spread is None:
        return score >= target - 1e-6 * max(1.0, abs(target))
    return score >= target - REACH_TOL * spread


def first_match(curve: Sequence[tuple[float, float | None]], target: float) -> float | None:
    """The compute at the first point whose best reward reached ``target`` (None: never)."""
    for flops, best in curve:
        if best is not None and reached(best, target):
            return flops
    return None


# ---------------------------------------------------------------------------------- the comparison
@dataclass(frozen=True)
class Comparison:
    challenger: str                 # arm ids
    baseline: str
    reward: float                   # the winners' rewards
    baseline_reward: float
    tokens: Ratio                   # generated tokens
    flops: Ratio
    wall: Ratio
    same_winner: bool
    baseline_winner: int            # its candidate id
    kept_baseline_winner: bool | None   # None: the challenger has no candidate of that id
    baseline_winner_round_pruned: int | None
    baseline_winner_partial: tuple[int, float] | None  # (tokens, partial reward) when it was pruned
    baseline_matched_flops: float | None   # when the baseline's best first reached `reward`
    curve_given: bool               # False: no baseline curve, so the line above is unknown
    decisions: tuple[DecisionRank, ...]

    @property
    def reward_gap(self) -> float:
        return self.reward - self.baseline_reward

    @property
    def first_decision(self) -> DecisionRank | None:
        return self.decisions[0] if self.decisions else None

    def to_dict(self) -> dict:
        out = asdict(self)
        for k in ("tokens", "flops", "wall"):
            out[k] = getattr(self, k).to_dict()
        out["reward_gap"] = self.reward_gap
        return out


def compare(challenger: Finished, baseline: Finished, *, rounds: Sequence[Round] = (),
            baseline_curve: Sequence[tuple[float, float | None]] | None = None) -> Comparison:
    """The challenger against the baseline. ``rounds``: the challenger's Round events (for the
    Spearman at each decision); ``baseline_curve``: (FLOPs, best finished reward) points of the
    baseline (``curve_point`` of each of its events), for the compute at which it matched."""
    cl, bl = challenger.ledger, baseline.ledger
    bw = baseline.winner
    twin = next((c for c in challenger.candidates if c.id == bw.id), None)
    pruned = twin is not None and twin.status == "pruned"
    partial = (twin.history[-1][0], twin.history[-1][1]) if pruned and twin.history else None
    final = final_scores(baseline)
    decisions = tuple(decision_rank(r, final) for r in rounds if live_at_decision(r))  # decisions, not passes
    return Comparison(
        challenger=challenger.arm, baseline=baseline.arm,
        reward=challenger.winner.score, baseline_reward=bw.score,
        tokens=Ratio(cl.generated_tokens, bl.generated_tokens), flops=Ratio(cl.flops, bl.flops),
        wall=Ratio(cl.wall_s, bl.wall_s),
        same_winner=challenger.winner.id == bw.id, baseline_winner=bw.id,
        kept_baseline_winner=None if twin is None else not pruned,
        baseline_winner_round_pruned=twin.round_pruned if pruned else None,
        baseline_winner_partial=partial,
        baseline_matched_flops=first_match(baseline_curve or (), challenger.winner.score),
        curve_given=bool(baseline_curve), decisions=decisions)


class Tally:
    """Collects a race's events per arm (Finished, Rounds, the curve) for ``compare_all``."""

    def __init__(self) -> None:
        self.finished: dict[str, Finished] = {}
        self.rounds: dict[str, list[Round]] = {}
        self.curves: dict[str, list[tuple[float, float | None]]] = {}

    def add(self, event: Event) -> None:
        self.curves.setdefault(event.arm, []).append(curve_point(event))
        if isinstance(event, Round):
            self.rounds.setdefault(event.arm, []).append(event)
        elif isinstance(event, Finished):
            self.finished[event.arm] = event

    def compare_all(self, baseline: str) -> dict[str, Comparison]:
        """Every other finished arm against ``baseline`` (an arm id)."""
        return compare_all(self.finished, self.rounds, self.curves, baseline=baseline)

    def to_rows(self) -> list[dict]:
        """The race as a flat table: one dict per candidate per finished arm, the arms in the order they
        finished (``core.events.candidate_rows``: arm, id, winner, status, score, tokens, finish_reason,
        round_pruned, text). ``pandas.DataFrame(tally.to_rows())`` where pandas is installed; plain dicts
        otherwise (``csv.DictWriter(f, ROW_KEYS)`` writes them)."""
        return [row for f in self.finished.values() for row in candidate_rows(f)]


def compare_all(finished: Mapping[str, Finished], rounds: Mapping[str, Sequence[Round]] | None = None,
                curves: Mapping[str, Sequence[tuple[float, float | None]]] | None = None, *,
                baseline: str | None = None) -> dict[str, Comparison]:
    """Every other finished arm against the baseline (default: the first in ``finished``), by arm id."""
    if not finished:
        return {}
    baseline = baseline or next(iter(finished))
    if baseline not in finished:
        return {}
    base = finished[baseline]
    rounds, curves = rounds or {}, curves or {}
    return {arm: compare(f, base, rounds=rounds.get(arm, ()), baseline_curve=curves.get(baseline))
            for arm, f in finished.items() if arm != baseline}
