"""DeepConf-style confidence stops (Fu et al., "Deep Think with Confidence", 2025, arXiv 2508.15260), online mode,
on the same Backend, budget and coupled randomness as Best-of-N and Speculative Rejection. No torch here.

What the paper's online mode does (read in facebookresearch/deepconf, ``wrapper.py`` ``_deepthink_online``,
``processors.py`` ``ConfPerReqLogitsProcessor``, ``utils.py``), and how this loop follows it:

- **Token confidence**: minus the mean of the k highest log-probabilities of the distribution a token is
  sampled from (k = 20), from the model's own logits (``Batch.confidences``: untempered, as the paper's logits
  processor reads them). **Group confidence**: the mean token confidence over a sliding window of the last
  ``window`` tokens. A trace's **lowest group confidence**: the least over its windows (the mean of all its
  tokens when it is shorter than one window).
- **Phases** (numbered in the loop): 1. ``warmup`` traces are written to the end; 2. the threshold is the
  ``100 - conf_percentile``-th percentile of their lowest group confidences (linear interpolation, numpy's
  default): ``conf_percentile`` 90 is DeepConf-high, 10 DeepConf-low; 3. every later trace is stopped the step
  its group confidence falls below the threshold, once it has a full window (the paper's processor checks
  only then); the candidates go on until N traces have started. A stopped trace is pruned: never scored,
  never a winner (the paper drops it from the vote).
- **The winner**: the paper votes, weighting each answer by its lowest group confidence, over the traces
  the filter kept. On open-ended answers every
  answer is its own vote, so the vote names the trace with the highest lowest group confidence:
  ``pick="paper"``. With ``pick="reward"`` (the default, and what the page shows) the race's reward names it
  among the traces the filter kept, as Best-of-N picks among its answers.

Where this project's setting makes a choice (docs/library.md, "The rivals"):

- **Memory.** The paper leaves admission to vLLM (continuous batching, preemption). Here a trace may be
  written to the end, so at most ``KVBudget.rows_per_pass`` rows (the rows that fit at full length) decode
  at once, warm-up and later traces alike; memory never forces a stop. On a backend that ``refills`` (vLLM,
  the replay) the slot a stopped or finished trace frees goes at once to the next waiting candidate; the
  transformers engine cannot add rows to a running batch (its rows share one length), so there the waiting
  candidates start a new pass when the running one empties: stops save steps there only when a whole pass
  stops early.
- **The stop step.** The paper's processor forces an end-of-sequence token in place of the token that took
  the group below the threshold; here that token is written and the row leaves right after it (the trace is
  dropped either way: one token of difference in a discarded trace).
- **Adaptive sampling** (the paper's stop once the vote reaches consensus, ``consensus`` 0.95 there) is a
  setting, off by default: the paper compares extracted answers; here two answers agree when their texts
  match (case and spacing aside), which open-ended answers rarely do, so with it off the traces go on to N.
  When the share is reached the live rows are cut (the Round's mark ``consensus``) and no waiting trace
  starts.
- **Coupled randomness**: candidate c is candidate c of Best-of-N while it is written, so DeepConf's winner
  is one of Best-of-N's answers and falls on its curve.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from ..core.events import Event, Round
from ..core.about import DEEPCONF as ABOUT  # noqa: F401  (what this method is, as data)
from ..core.settings import DeepConfSettings as SETTINGS  # noqa: F401  (its own settings: warmup, window ...)
from .run import _Run, _timed

SIGNAL = "group confidence"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values`` by linear interpolation between the sorted values
    (numpy's default, which the paper's code calls)."""
    xs = sorted(values)
    if not xs:
        raise ValueError("a percentile of no values")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def group_confidence(conf: Sequence[float], window: int) -> float:
    """The mean token confidence of the last ``window`` tokens (of all of them while fewer)."""
    tail = conf[-window:]
    return sum(tail) / len(tail) if tail else 0.0


def lowest_group_confidence(conf: Sequence[float], window: int) -> float:
    """The least mean over every window of ``window`` consecutive tokens; the mean of all of them when the
    trace is shorter than a window (the paper's ``compute_least_grouped`` then ``min``)."""
    if len(conf) < window:
        return sum(conf) / len(conf) if conf else 0.0
    run = sum(conf[:window])
    low = run
    for i in range(window, len(conf)):
        run += conf[i] - conf[i - window]
        low = min(low, run)
    return low / window


def signal_every(max_new_tokens: int) -> int:
    """Tokens between the points of a candidate's signal line (about 64 points at most per line)."""
    return max(1, max_new_tokens // 64)


def _note_signal(run: _Run, window: int, every: int, ended: Sequence[int] = ()) -> None:
    """Each live row's group confidence every ``every`` tokens, and each ended one's at its end (the chart)."""
    rows = run.rows
    for i, cid in enumerate(rows.ids if rows is not None else ()):
        conf = rows.confidences(i)
        if conf and len(conf) % every == 0:
            run.recs[cid].signal.append((len(conf), group_confidence(conf, window)))
    for cid in ended:
        rec = run.recs[cid]
        if rec.conf and (not rec.signal or rec.signal[-1][0] != len(rec.conf)):
            rec.signal.append((len(rec.conf), group_confidence(rec.conf, window)))


def _passes(run: _Run, ids: list[int], width: int, on_step, halt=None) -> Iterator[Event]:
    """Decode candidates ``ids``, at most ``width`` rows at once: on a backend that ``refills`` a freed slot
    goes at once to the next waiting candidate; elsewhere the next pass starts when the running one empties.
    ``on_step(done)`` runs after every step and may return a Round (a stop) to yield. ``halt(done)``, after a
    step where traces ended, may return a Round that ends the passes (the consensus stop): no waiting
    candidate starts after it."""
    waiting = list(ids)
    refills = bool(run.engine_factory.refills)
    while waiting or (run.rows is not None and len(run.rows)):
        if run.rows is None or not len(run.rows):
            run.start(waiting[:width])
            del waiting[:width]
        done = run.step()
        if (event := on_step(done)) is not None:
            yield event
        if done and halt is not None and (event := halt(done)) is not None:
            yield event
            return
        rows = run.rows
        if refills and waiting and rows is not None and len(rows) and len(rows) < width:
            free = width - len(rows)
            run.add(waiting[:free])
            del waiting[:free]
        if (p := run.progress()) is not None:
            yield p


def _deepconf_body(run: _Run) -> Iterator[Event]:
    cfg = run.cfg
    own = ABOUT.settings_for(cfg)   # its own settings (DeepConfSettings): cfg.settings, or the defaults
    if own.warmup >= cfg.n:
        raise ValueError(f"deepconf: warmup={own.warmup} leaves none of N={cfg.n} traces to stop: give it more "
                         f"candidates (deepconf:n={own.warmup * 4}) or fewer warm-up traces (deepconf:warmup=...).")
    run.prefill(reads=(f"top-{own.conf_topk}",))
    width = run.kv.rows_per_pass(cfg.n, cfg.max_new_tokens)   # rows that fit at full length: no stop is forced
    every, window = signal_every(cfg.max_new_tokens), own.window
    warm = list(range(own.warmup))

    # 1. the warm-up traces, written to the end
    def note(done):
        _note_signal(run, window, every, [d.cand for d in done])

    yield from _passes(run, warm, width, note)
    # 2. the threshold: a percentile of the warm-up traces' lowest group confidences
    lowest = {c: lowest_group_confidence(run.recs[c].conf, window) for c in warm}
    bar = percentile(list(lowest.values()), 100.0 - own.conf_percentile)
    yield _threshold_round(run, 0, lowest, bar)
    index = 1

    # 3. the later traces, each stopped the step its group confidence falls below the threshold
    def stop(done):
        nonlocal index
        note(done)
        rows = run.rows
        if rows is None or not len(rows):
            return None
        now = {cid: group_confidence(rows.confidences(i), window) for i, cid in enumerate(rows.ids)
               if len(rows.confidences(i)) >= window}
        stopped = [cid for cid, g in now.items() if g < bar]
        if not stopped:
            return None
        at = max(len(rows.tokens[i]) for i, cid in enumerate(rows.ids) if cid in now and now[cid] < bar)
        event = run.cut(stopped, index, signal=SIGNAL, signals=sorted(now.items()), signal_threshold=bar,
                        marks=(("stopped", at),))   # the token the stop came at (the rows' own, not a stale copy)
        index += 1
        return event

    def agreed(done):
        nonlocal index
        share = consensus_share(run, bar, window)
        if not own.consensus or share < own.consensus:
            return None
        rows = run.rows
        live = list(rows.ids) if rows is not None and len(rows) else []
        at = max([len(t) for t in rows.tokens] if live else [len(run.recs[d.cand].tokens) for d in done])
        if live:
            event = run.cut(live, index, signal=SIGNAL, signal_threshold=bar, marks=(("consensus", at),))
        else:
            event = _filter_round(run, index, {}, bar, window, mark="consensus", at=at)
        index += 1
        return event

    yield from _passes(run, list(range(own.warmup, cfg.n)), width, stop, agreed if own.consensus else None)
    # 4. the paper's filter, after the run: every finished trace whose lowest group confidence is below the
    # threshold is dropped (its last window and a trace shorter than a window included), warm-up ones too
    final = {r.id: lowest_group_confidence(r.conf, window) for r in run.recs if r.status == "finished"}
    low = {c: v for c, v in final.items() if v < bar}
    if low:
        yield _filter_round(run, index, final, bar, window, dropped=low)
        index += 1
    if own.pick == "paper":
        yield run.finished(rounds=index, winner=_paper_pick(run, window), picked_by="paper")
    else:
        yield run.finished(rounds=index)


def _answer(text: str) -> str:
    """An answer as the consensus vote compares it: its text, case and spacing aside."""
    return " ".join(text.split()).casefold()


def consensus_share(run: _Run, bar: float, window: int) -> float:
    """The paper's adaptive-sampling test: among the finished traces at or above the threshold, the top
    answer's share of the vote, each weighted by its lowest group confidence (0 with no such trace)."""
    weight: dict[str, float] = {}
    for r in run.recs:
        if r.status == "finished":
            w = lowest_group_confidence(r.conf, window)
            if w >= bar:
                weight[_answer(r.text)] = weight.get(_answer(r.text), 0.0) + w
    total = sum(weight.values())
    return max(weight.values()) / total if total > 0 else 0.0


def _filter_round(run: _Run, index: int, lowest: dict[int, float], bar: float, window: int, *,
                  dropped: dict[int, float] | None = None, mark: str = "filtered", at: int | None = None) -> Round:
    """The Round of the after-run filter (``dropped``: the finished traces below the threshold, pruned by
    it) or of a consensus stop with no live row; the finished traces' lowest group confidences its signals."""
    for c in dropped or ():
        run.recs[c].status, run.recs[c].round_pruned = "pruned", index
    position = at if at is not None else max(len(run.recs[c].tokens) for c in lowest)
    n_kept = sum(r.status == "finished" for r in run.recs)
    return Round(arm=run.arm, index=index, position=position, candidates=run.candidates(), threshold=None,
                 n_kept=n_kept, n_pruned=len(dropped or ()), forced=False, ledger=run.ledger(), signal=SIGNAL,
                 signal_threshold=bar, signals=tuple(sorted(lowest.items())), marks=((mark, position),))


def _threshold_round(run: _Run, index: int, lowest: dict[int, float], bar: float):
    """The Round that sets the threshold: the warm-up traces' lowest group confidences and the bar."""
    position = max(len(run.recs[c].tokens) for c in lowest)
    return Round(arm=run.arm, index=index, position=position, candidates=run.candidates(), threshold=None,
                 n_kept=sum(v >= bar for v in lowest.values()), n_pruned=0, forced=False, ledger=run.ledger(),
                 signal=SIGNAL, signal_threshold=bar, signals=tuple(sorted(lowest.items())),
                 marks=(("threshold set", position),))


def _paper_pick(run: _Run, window: int) -> int:
    """The paper's confidence-weighted vote on open-ended answers: among the traces the filter kept (finished,
    none below the threshold: every finished one is a voter), the highest lowest group confidence; the lower
    id on a tie."""
    weight = {r.id: lowest_group_confidence(r.conf, window) for r in run.recs if r.status == "finished"}
    return max(weight, key=lambda c: (weight[c], -c))


def deepconf(lm, reward, cfg, *, engine=None, admission=None) -> Iterator[Event]:
    """DeepConf online (the module docstring): ``warmup`` traces to the end set a threshold on the group
    confidence; every later trace stops the step its group confidence falls below it."""
    return _timed(lambda: _Run("deepconf", lm, reward, cfg, engine, admission=admission), _deepconf_body)
