"""``Update``: what the runtime tells the page, one moment of a run at a time.

The runtime (``components/session``) yields updates; presentation (``components/frames.draw``) turns
each into a ``Frame`` of charts and words. Neither imports the other: both read this and the run's
view. Imports only the run's view.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from components.state.view import RunView


class Kind(str, Enum):
    """error (bad input, ``message`` says what to change; nothing started) | warming (the server is still loading
    its models: the Run waits; ``message`` says so) | start (a
    run, or its retry, starts on ``view``) | live (``view`` moved on) | end (every arm finished) | limit (stopped
    at the time limit) | failure (``view.message`` says what failed)."""

    ERROR = "error"
    WARMING = "warming"
    START = "start"
    LIVE = "live"
    END = "end"
    LIMIT = "limit"
    FAILURE = "failure"


KINDS = tuple(k.value for k in Kind)


@dataclass(frozen=True)
class Update:
    """``kind``: a ``Kind`` (its value accepted). ``replay``: set when ``view`` replays a recording ({"speed":
    factor} at its start, {"replayed_s": s} at its end). ``play`` and ``phase``: the session's play this update
    belongs to and the phase it leaves the session in (``state/play.Session.follow`` stamps them; 0 and None
    outside a session). ``rests``: the play ends with this update and the page rests as it was (a press answered
    at once while the server warms up)."""

    kind: Kind
    view: RunView | None = None
    message: str = ""
    replay: dict | None = None
    play: int = 0
    phase: Any = None
    rests: bool = False

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", Kind(self.kind))
        except ValueError:
            raise ValueError(f"kind={self.kind!r}: use one of {', '.join(KINDS)}.") from None
