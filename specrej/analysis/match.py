""""Stop Best-of-N once it matches": a referee for ``methods.race``.

Once the challenger (Speculative Rejection) has finished, the baseline (Best-of-N) stops as
soon as its best finished reward reaches the challenger's winning reward. Its ``Finished``
then carries a ``Match``: the baseline's ledger when it first matched (so the compute Best-of-N
needed to do as well), or, if it never matched, everything it spent (a lower bound).

Matching is seen at the baseline's events (every ``progress_every`` decoding steps and at each
pass's end), so the ledger may include up to ``progress_every`` steps past the exact moment.
If the baseline ends before the challenger does, its ``Finished`` is sent again, with the
``Match``, when the challenger finishes (a view keeps the last ``Finished`` of each arm).
"""
from __future__ import annotations

from dataclasses import replace

from .compare import best_finished
from ..core.events import Event, Finished, Ledger, Match


def _best_finished(candidates) -> tuple[float | None, int]:
    best = best_finished(candidates)
    return (None if best is None else best.score), sum(c.status == "finished" for c in candidates)


class StopWhenMatched:
    def __init__(self, baseline: str = "bon", challenger: str = "sr"):
        self.baseline, self.challenger = baseline, challenger
        self.target: float | None = None
        self._rises: list[tuple[float, Ledger, int]] = []   # (best so far, ledger, finished) when best rose
        self._last: Event | None = None                      # the baseline's last event
        self._rounds = 0
        self._done = False                                   # the baseline has ended (or was ended)
        self.match: Match | None = None

    def __call__(self, ev: Event) -> list[Event]:
        if ev.arm == self.baseline:
            return self._baseline(ev)
        if ev.arm == self.challenger and isinstance(ev, Finished) and ev.winner.score is not None:
            self.target = ev.winner.score
            if self._done:                   # the baseline already ended: say now what it took
                return [ev, replace(self._last, match=self._match(self._last.ledger))]
            if self._first_match() is not None:
                return [ev, self._stop()]
        return [ev]

    def _baseline(self, ev: Event) -> list[Event]:
        self._last = ev
        if not isinstance(ev, Finished) and type(ev).__name__ == "Round":
            self._rounds += 1
        best, n = _best_finished(ev.candidates)
        if best is not None and (not self._rises or best > self._rises[-1][0]):
            self._rises.append((best, ev.ledger, n))
        if isinstance(ev, Finished):
            self._done = True
            return [replace(ev, match=self._match(ev.ledger))] if self.target is not None else [ev]
        if self.target is not None and self._first_match() is not None:
            return [ev, self._stop()]
        return [ev]

    def _first_match(self) -> tuple[float, Ledger, int] | None:
        return next((r for r in self._rises if r[0] >= self.target), None)

    def _match(self, spent: Ledger) -> Match:
        hit = self._first_match()
        finished = _best_finished(self._last.candidates)[1]
        self.match = (Match(self.challenger, self.target, True, hit[1], hit[2]) if hit else
                      Match(self.challenger, self.target, False, spent, finished))
        return self.match

    def _stop(self) -> Finished:
        """End the baseline now: its best finished candidate wins; the ledger is what it spent."""
        last = self._last
        winner = best_finished(last.candidates)
        self._done = True
        return Finished(self.baseline, winner, last.candidates, self._rounds, last.ledger,
                        match=self._match(last.ledger))
