"""ST-BoN-style self-truncation (Wang et al., "Sampling-efficient test-time scaling: self-estimating the
Best-of-N sampling in early decoding", NeurIPS 2025, arXiv 2503.01422), on the same Backend, budget and
coupled randomness as Best-of-N and Speculative Rejection. No torch here.

What the paper's code does (read in Alsace08/ST-BoN, ``decoders.py``: ``STBoNEarlyStopCriteria``,
``CoECalculator``, ``STBoNDecoder``), and how this loop follows it:

1. **All N decode together** until the earliest step c at which every pair of answers differs (or one
   ends), then ``tau = max(1, int(buffer x c))`` more (``buffer`` is the paper's ``tau_coeff``, 1 by
   default): the truncation step c + tau.
2. **Consistency.** After t tokens each answer's hidden-state chain is every layer's hidden state averaged
   over the positions fed so far (the Chain-of-Embedding, ``Batch.coe`` reads its feature F: the mean over
   layers of step length over the whole chain's length minus step angle over its whole angle). Its
   inconsistency is S_i = the mean over the other answers j of (F_i - F_j)^2; the most consistent answer is
   the one with the least S. At each step t = c + 1 .. c + tau the most consistent answer gets a vote; the
   answer with the most votes is kept (the lower id on a tie, as the paper's ``min``), every other row is
   truncated (pruned: never scored, never a winner), and the kept one is written to its end. The chart's
   signal is the consistency -S (higher is better), every few tokens.
3. **The winner**: the kept answer (``pick="paper"``). With ``pick="reward"`` (the default, and what the page
   shows) the race's reward picks among the answers written to the end: the kept one and any that ended
   before the truncation.

Where this project's setting makes a choice (docs/library.md, "The rivals"):

- **Memory.** The paper holds all N rows to c + tau. Here N must fit the budget for a few tokens (as for every
  arm); if memory would overflow before c + tau, the truncation comes there (the Round says ``forced``), voting
  over the window's steps reached so far (or this step alone, before c + 1). One row then fits to the end.
- **Answers that end early.** In the paper's batch an ended answer keeps being fed padding; here it leaves
  the batch and its feature stays as it was at its end: it still counts among "the others" and can still be
  voted for (then every live row is truncated).
- **No room for the buffer**: when c + tau is past ``max_new_tokens`` every answer is written to its end, as
  Best-of-N: the vote then runs over the window's steps that came.
- **Coupled randomness**: candidate c is candidate c of Best-of-N while it is written, so the kept answer
  is one of Best-of-N's answers, and its winner falls on Best-of-N's curve.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from ..core.events import Event
from .deepconf import signal_every
from ..core.about import STBON as ABOUT  # noqa: F401  (what this method is, as data)
from ..core.settings import STBoNSettings as SETTINGS  # noqa: F401  (its own settings: buffer, pick)
from .run import _Run, _timed

SIGNAL = "consistency"


def inconsistency(features: Mapping[int, float]) -> dict[int, float]:
    """S_i = the mean over the others j of (F_i - F_j)^2, for every candidate id in ``features``; 0 for one.
    Computed as (n (F_i - m)^2 + sum_j (F_j - m)^2) / (n - 1), m the mean: the same sum, in O(n)."""
    n = len(features)
    if n <= 1:
        return {c: 0.0 for c in features}
    m = sum(features.values()) / n
    spread = sum((f - m) ** 2 for f in features.values())
    return {c: (n * (f - m) ** 2 + spread) / (n - 1) for c, f in features.items()}


def most_consistent(features: Mapping[int, float]) -> int:
    """The candidate with the least inconsistency; the lower id on a tie."""
    s = inconsistency(features)
    return min(s, key=lambda c: (s[c], c))


def vote(votes: list[int]) -> int:
    """The most voted candidate; the lower id on a tie (the paper's ``min`` of the tied)."""
    tally = Counter(votes)
    top = max(tally.values())
    return min(c for c, k in tally.items() if k == top)


def _features(run: _Run) -> dict[int, float]:
    """Every candidate's chain feature now: a live row's after its latest token, an ended one's at its end."""
    out = {r.id: r.coe[-1] for r in run.recs if r.status == "finished" and r.coe}
    rows = run.rows
    for i, cid in enumerate(rows.ids if rows is not None else ()):
        coe = rows.coe(i)
        if coe:
            out[cid] = coe[-1]
    return out


def _note(run: _Run, s: Mapping[int, float], t: int, ended: set[int]) -> None:
    """The chart's points: each live row's consistency -S at token t, an ended one's at its end."""
    live = set(run.rows.ids) if run.rows is not None else set()
    for cid, v in s.items():
        rec = run.recs[cid]
        at = t if cid in live else len(rec.tokens) if cid in ended else None
        if at is not None and (not rec.signal or rec.signal[-1][0] != at):
            rec.signal.append((at, -v))


def _stbon_body(run: _Run) -> Iterator[Event]:
    cfg = run.cfg
    own = ABOUT.settings_for(cfg)   # its own settings (STBoNSettings): cfg.settings, or the defaults
    run.prefill(reads=("hidden",))
    rows = run.start(list(range(cfg.n)))
    every = signal_every(cfg.max_new_tokens)
    diverged = truncate_at = kept = None
    votes: list[int] = []
    while len(rows):
        at = run.moment(0)
        if kept is None and rows.generated and not run.kv.fits(len(rows), at.per_row):
            kept = yield from _truncate(run, votes, diverged, forced=True)   # memory is full before c + tau
            if not len(rows):
                break
        done = run.step()
        t = run.steps                     # tokens every row has written: all N started together
        if kept is None:
            # 1. the earliest step at which every pair differs (or an answer ends), then the buffer
            if diverged is None and (done or len({tuple(x) for x in rows.tokens}) == len(rows)):
                diverged = t
                truncate_at = diverged + max(1, int(own.buffer * diverged))
            s = inconsistency(_features(run))
            if t % every == 0 or done:
                _note(run, s, t, {d.cand for d in done})
            # 2. a vote at each step of the window c + 1 .. c + tau, then the truncation
            if diverged is not None and t > diverged:
                votes.append(min(s, key=lambda c: (s[c], c)))
            if truncate_at is not None and t >= truncate_at and len(rows):
                kept = yield from _truncate(run, votes, diverged, forced=False)
        if len(rows) and (p := run.progress()) is not None:
            yield p
    decided = kept is not None
    if not decided:   # every answer ended before the truncation step: the vote over the steps that came
        kept = vote(votes) if votes else most_consistent(_features(run))
    # 3. the winner: the kept answer (the paper's), or the reward's best of those written to the end
    if own.pick == "paper":
        yield run.finished(rounds=int(decided), winner=kept, picked_by="paper")
    else:
        yield run.finished(rounds=int(decided))


def _truncate(run: _Run, votes: list[int], diverged: int | None, *, forced: bool):
    """Keep the most voted answer (this step's most consistent when no vote came yet), truncate every other
    live row; yields the Round, returns the kept id."""
    s = inconsistency(_features(run))
    if not votes:
        votes.append(min(s, key=lambda c: (s[c], c)))
    kept = vote(votes)
    rows = run.rows
    t = rows.generated
    _note(run, s, t, set())   # the chart's last point of every truncated row
    marks = ((("diverged", diverged),) if diverged is not None else ()) + (("truncated", t),)
    event = run.cut([c for c in rows.ids if c != kept], 0, signal=SIGNAL, marks=marks, forced=forced,
                    signals=sorted((c, -v) for c, v in s.items()))
    yield event
    return kept


def self_truncation(lm, reward, cfg, *, engine=None, admission=None) -> Iterator[Event]:
    """ST-BoN (the module docstring): all N decode to the earliest step every pair differs plus a buffer; the
    answer whose hidden-state chain is most consistent with the others' is kept, the rest truncated."""
    return _timed(lambda: _Run("stbon", lm, reward, cfg, engine, admission=admission), _stbon_body)
