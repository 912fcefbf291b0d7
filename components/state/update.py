"""``Update``: what the runtime tells the page, one moment of a run at a time.

The runtime (``components/session``) yields updates; presentation (``components/frames.draw``) turns
each into a ``Frame`` of charts and words. Neither imports the other: both read this and the run's
view. Imports only the run's view.
"""
from __future__ import annotations

from dataclasses import dataclass

from components.state.view import RunView

KINDS = ("error", "measuring", "start", "live", "end", "limit", "failure")


@dataclass(frozen=True)
class Update:
    """``kind``: error (bad input, ``message`` says what to change; nothing started) | measuring (this machine's
    step is being measured; ``message``, when set, says what the Run waits for first) | start (a run, or its retry, starts on ``view``) | live (``view`` moved on) | end
    (every arm finished) | limit (stopped at the time limit) | failure (``view.message`` says what failed).
    ``replay``: set when ``view`` replays a recording ({"speed": factor} at its start, {"replayed_s": s} at
    its end)."""

    kind: str
    view: RunView | None = None
    message: str = ""
    replay: dict | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r}: use one of {', '.join(KINDS)}.")
