"""What plays in one browser session: its phase, the current play's id, and ONE table of what each of the
page's buttons does in each phase.

A *play* is anything that draws into the page's charts and status: a live race (Run, Enter, "Run it live"), a
replay of a recording, Paper scale (it measures, then may play its recording). Every play gets an id from its
session (``Session.begin``); a play whose id is no longer the session's current one stops at its next update and
draws nothing more (``Session.follow``), so two plays never draw into one chart and the status never flips back
to an earlier play. Stepping through the decisions is the end of a race (or replay) and keeps its id.

The table (``TABLE``: phase x button -> ``Rule``) is the one place the page's behaviour is decided: the runtime
(``app.py``'s handlers) asks it what a press does, presentation (``ui.Page``) reads it for each button's label and
whether it can be pressed, and ``docs/app.md`` carries it as written by ``python -m components.state.play``.
Imports only the state room; no Gradio.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, replace
from enum import Enum
from typing import Iterable, Iterator

from components.state.update import Kind, Update


class Phase(str, Enum):
    """Where a session is. ``WARMING``: a Run waits for the server's warm-up (models loading, step compiling)."""

    WARMING = "warming"
    IDLE = "idle"
    RACING = "racing"
    REPLAYING = "replaying"
    STEPPING = "stepping"
    DONE = "done"
    STOPPED = "stopped"

    def __str__(self) -> str:
        return self.value


PLAYING = frozenset({Phase.WARMING, Phase.RACING, Phase.REPLAYING})   # something draws into the page


class Button(str, Enum):
    """The race page's buttons (``ui.Controls``, ``ui.Arena``, ``ui.StepPanel``), by their element id."""

    RUN = "run"               # and Shift+Enter in the prompt (its submit)
    STOP = "stop"
    REPLAY = "replay"
    PAPER = "paper-scale"
    LIVE = "run-live"         # "Run it live": a recording's settings set on the page, then Run
    PREV = "step-prev"
    NEXT = "step-next"
    END = "step-end"
    CLASSROOM = "classroom"
    LINK = "link"

    def __str__(self) -> str:
        return self.value


LABELS = {Button.RUN: "▶ Run", Button.STOP: "■ Stop", Button.REPLAY: "▶ Replay paper-scale race",
          Button.PAPER: "Paper scale", Button.LIVE: "▶ Run it live", Button.PREV: "◀ Previous",
          Button.NEXT: "Next decision ▶", Button.END: "Run to the end »", Button.CLASSROOM: "Classroom preset",
          Button.LINK: "Link to this race"}
PLAY_BUTTONS = (Button.RUN, Button.REPLAY, Button.PAPER, Button.LIVE)   # each starts a play
STEP_BUTTONS = (Button.PREV, Button.NEXT, Button.END)


class Effect(str, Enum):
    START = "start"                  # starts its play (nothing plays now)
    RESTART = "stop, then start"     # stops the play in progress (it draws nothing more), then starts its own
    STOP = "stop"                    # stops the play in progress; the page says "Stopped"
    CLOSE_STEPS = "close the steps"  # ends stepping: the step panel closes and the race's result shows
    STEP = "step"                    # moves through the finished race's decisions (no model work)
    SETTINGS = "settings"            # changes the page's settings (or shows a link); what plays goes on
    IGNORED = "ignored"              # does nothing; ``words`` says why, on the page

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Rule:
    """What a button does in a phase: the effect, in words, and the label the button shows then (None: its
    usual label) and whether it can be pressed."""

    effect: Effect
    words: str
    label: str | None = None
    interactive: bool = True


_START = {Button.RUN: "starts the race live", Button.REPLAY: "plays the recorded paper-scale race of the prompt",
          Button.PAPER: "measures this machine and sets the paper's protocol, scaled to fit; plays its recording "
                        "where it does not fit live",
          Button.LIVE: "sets the recording's settings and starts them live, as Run"}
_NO_STEPS = "hidden: the step panel shows once a race (or replay) with 'Step through the decisions' ends"


def _rules(phase: Phase) -> dict[Button, Rule]:
    playing = phase in PLAYING
    what = "replay" if phase is Phase.REPLAYING else "race"
    out: dict[Button, Rule] = {}
    for b in PLAY_BUTTONS:
        if playing:
            out[b] = Rule(Effect.RESTART, f"stops the {what} in progress, then {_START[b]}",
                          label=f"{LABELS[b]} (stops this {what})")
        elif phase is Phase.STEPPING:
            out[b] = Rule(Effect.START, f"closes the step panel, then {_START[b]}")
        else:
            out[b] = Rule(Effect.START, _START[b])
    if playing:
        out[Button.STOP] = Rule(Effect.STOP, f"stops the {what} within one decoding step and frees its memory")
    elif phase is Phase.STEPPING:
        out[Button.STOP] = Rule(Effect.CLOSE_STEPS, "ends stepping: the step panel closes and the result shows")
    else:
        out[Button.STOP] = Rule(Effect.IGNORED, "says \"Nothing to stop\": nothing of this session plays")
    for b in STEP_BUTTONS:
        if phase is Phase.STEPPING:
            out[b] = Rule(Effect.STEP, {Button.PREV: "shows the decision before (disabled at the first: "
                                                     "\"at decision 1\")",
                                        Button.NEXT: "shows the next decision (disabled at the last: "
                                                     "\"last decision\")",
                                        Button.END: "shows the race's result; the step panel closes"}[b])
        else:
            out[b] = Rule(Effect.IGNORED, _NO_STEPS, interactive=False)
    out[Button.CLASSROOM] = Rule(Effect.SETTINGS, "sets the Classroom preset on the controls"
                                 + ("; what plays goes on as it started" if playing else ""))
    out[Button.LINK] = Rule(Effect.SETTINGS, "shows a link to the settings" + ("; what plays goes on" if playing else ""))
    return out


TABLE: dict[tuple[Phase, Button], Rule] = {(p, b): r for p in Phase for b, r in _rules(p).items()}


def rule(phase: Phase, button: Button) -> Rule:
    return TABLE[phase, button]


def step_rule(button: Button, k: int, count: int) -> Rule:
    """A step button at decision ``k`` (0-based) of ``count``: Previous is disabled at the first decision and
    Next at the last, each saying so on its label."""
    if button is Button.PREV and k <= 0:
        return Rule(Effect.IGNORED, "at decision 1", label="◀ At decision 1", interactive=False)
    if button is Button.NEXT and k >= count - 1:
        return Rule(Effect.IGNORED, "the last decision", label="Last decision", interactive=False)
    return TABLE[Phase.STEPPING, button]


# ---------------------------------------------------------------- one session

def phase_after(update: Update, resting: Phase) -> Phase:
    """The session's phase once ``update`` is drawn; ``resting``: the phase before the play began (an error
    before anything started leaves the page as it was)."""
    if update.kind is Kind.ERROR or update.rests:
        return resting
    if update.kind is Kind.WARMING:
        return Phase.WARMING
    if update.kind in (Kind.START, Kind.LIVE):
        return Phase.REPLAYING if update.replay is not None or update.view.recording is not None else Phase.RACING
    if update.kind is Kind.END:
        return Phase.STEPPING if update.view.stepping and update.view.checkpoints else Phase.DONE
    return Phase.STOPPED   # LIMIT, FAILURE: the race did not finish


class Session:
    """One browser session's play: its phase and the current play's id (a counter). Kept in a ``gr.State`` (one
    object per session: Gradio deep-copies the page's, and ``__deepcopy__`` gives a fresh one); every handler of
    the session reads and changes it under its lock."""

    SETTLE_S = 5.0   # a new play waits at most this long for the handlers of older ones to end (``settle``)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._alive: set[int] = set()   # plays whose handler still runs (``begin`` to ``leave``)
        self.phase = Phase.IDLE
        self.play = 0                 # the current play's id: a play with another id draws nothing more
        self.resting = Phase.IDLE     # the phase the page rests in when nothing plays (idle, done, stepping, stopped)
        self._wakers: dict[int, list] = {}   # play id -> what to call the moment it goes stale (``on_stale``)
        self._pressed = 0.0   # when a play button was last pressed and its play has not begun (time.monotonic())

    def __deepcopy__(self, memo) -> "Session":
        return Session()

    def __repr__(self) -> str:
        return f"Session(phase={self.phase.value}, play={self.play})"

    def rule(self, button: Button) -> Rule:
        return TABLE[self.phase, button]

    def on_stale(self, play: int, fn) -> None:
        """Call ``fn()`` the moment play ``play`` goes stale (another play begins, Stop): a handler waiting for its
        play's next event (a decoding step under load) wakes at once and frees its place for the new play. At once
        if it is stale already."""
        with self._lock:
            if self.play == play:
                self._wakers.setdefault(play, []).append(fn)
                return
        fn()

    def _stale(self) -> list:   # under the lock: the wakers of every play older than the current one, taken
        old = [p for p in self._wakers if p < self.play]
        return [fn for p in old for fn in self._wakers.pop(p)]

    @staticmethod
    def _wake(fns: list) -> None:
        for fn in fns:
            try:
                fn()
            except Exception:   # a waker never stops the press
                pass

    def press(self, button: Button) -> Rule:
        """A button pressed (the page's instant step, before anything queued): its rule in this phase, applied.
        A play button (Run ...) stops what plays at once, so the race in progress frees the machine for the new
        one; Stop stops it, or ends stepping."""
        import time

        with self._lock:
            r = TABLE[self.phase, button]
            if (button is Button.STOP and r.effect is Effect.IGNORED and self._pressed > 0
                    and time.monotonic() - self._pressed < self.PRESS_S):
                # a play pressed for and not begun yet (queued: the page cancels its event with this Stop) is
                # stopped as a playing one is; it said "Nothing to stop" while its "Replaying…" was on the page
                r, self._pressed = TABLE[Phase.WARMING, Button.STOP], 0.0
            if r.effect in (Effect.RESTART, Effect.STOP):
                self.play += 1
                self.phase = self.resting = Phase.STOPPED
            elif r.effect is Effect.CLOSE_STEPS:
                self.phase = self.resting = Phase.DONE
            elif r.effect is Effect.START and self.phase is Phase.STEPPING:
                self.phase = self.resting = Phase.DONE   # the panel closes as the new play starts
            if button is Button.END and r.effect is Effect.STEP:
                self.phase = self.resting = Phase.DONE
            woken = self._stale()
        self._wake(woken)
        return r

    def pressing(self) -> None:
        """A play button's first step (``lecture.lock_step``): a play is on its way; until it begins (or
        ``PRESS_S`` passes) the page is not idle, so an older play's end lifts no lock (``busy``)."""
        import time

        with self._lock:
            self._pressed = time.monotonic()

    PRESS_S = 15.0

    def busy(self) -> bool:
        """Something plays, or a play pressed for has not begun yet: an older play's end must not unlock the page."""
        import time

        with self._lock:
            return self.phase in PLAYING or (self._pressed > 0 and time.monotonic() - self._pressed < self.PRESS_S)

    def begin(self, phase: Phase = Phase.RACING) -> int:
        """A play starts (its handler's first line): a new id, which makes every other play of this session stale."""
        with self._lock:
            self._pressed = 0.0
            self.play += 1
            if self.phase not in PLAYING:
                self.resting = self.phase if self.phase is not Phase.STEPPING else Phase.DONE
            self.phase = phase
            self._alive.add(self.play)
            play, woken = self.play, self._stale()
        self._wake(woken)
        return play

    def leave(self, play: int) -> None:
        """Play ``play``'s handler has ended (its last frame is with Gradio): a newer play may draw (``settle``)."""
        with self._lock:
            self._alive.discard(play)
            self._settled.notify_all()

    def settle(self, play: int, timeout: float | None = None) -> None:
        """Wait (at most ``SETTLE_S``) until the handlers of every play older than ``play`` have ended, so that a
        stale play's last frame, yielded just before a click and still being sent, reaches the page before the new
        play's first: all of a session's frames travel on one stream, in the order they were yielded."""
        with self._settled:
            self._settled.wait_for(lambda: not any(p < play for p in self._alive),
                                   self.SETTLE_S if timeout is None else timeout)

    def current(self, play: int) -> bool:
        return self.play == play

    def end(self, play: int, phase: Phase | None = None) -> bool:
        """Play ``play`` is over without an update that says how (``phase``: where it leaves the page; default the
        phase before it began). False, changing nothing, when it is stale."""
        with self._lock:
            self._wakers.pop(play, None)
            if self.play != play:
                return False
            self.phase = self.resting = phase or self.resting
            return True

    def follow(self, play: int, updates: Iterable[Update]) -> Iterator[Update]:
        """``updates`` of play ``play``, each stamped with its id and the phase it leaves the session in, until
        the play is stale: then it stops (closing ``updates``, so the race's work stops too) and yields nothing
        more."""
        try:
            first = True
            for update in updates:
                if first:
                    self.settle(play)
                    first = False
                with self._lock:
                    if self.play != play:
                        return
                    phase = phase_after(update, self.resting)
                    self.phase = phase
                    if phase not in PLAYING:
                        self.resting = phase
                yield replace(update, play=play, phase=phase)
        finally:
            with self._lock:
                self._wakers.pop(play, None)
            close = getattr(updates, "close", None)
            if close is not None:
                close()


class Sessions:
    """Each browser session's ``Session`` by Gradio's session hash, held weakly: the page's ``gr.State`` owns it
    (Gradio drops it with the session), and a handler whose inputs cannot carry it (the API's /run and /stop take
    only their own fields) finds it here. A session that never registered (an API client) gets a fresh one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_hash: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def register(self, key, session: Session) -> Session:
        if isinstance(key, str) and isinstance(session, Session):
            with self._lock:
                self._by_hash[key] = session
        return session

    def get(self, key) -> Session:
        with self._lock:
            found = self._by_hash.get(key) if isinstance(key, str) else None
            if found is None:
                found = Session()
                if isinstance(key, str):
                    self._by_hash[key] = found   # alive while its handler holds it
            return found


# ---------------------------------------------------------------- the table, as docs/app.md carries it

DOCS_BEGIN, DOCS_END = "<!-- play-table:begin -->", "<!-- play-table:end -->"


def table_markdown() -> str:
    """The states x buttons table as markdown: a row per button, a column per phase, each cell the effect and
    what the page says (a label shown on the button then, or that it is disabled)."""
    rows = ["| button | " + " | ".join(p.value for p in Phase) + " |", "|" + "---|" * (len(Phase) + 1)]
    for b in Button:
        cells = []
        for p in Phase:
            r = TABLE[p, b]
            shown = f" (button: \u201c{r.label}\u201d)" if r.label else "" if r.interactive else " (disabled)"
            cells.append(f"**{r.effect}**: {r.words}{shown}".replace("|", "\\|"))
        rows.append(f"| {LABELS[b]} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def docs_block() -> str:
    return f"{DOCS_BEGIN}\n{table_markdown()}\n{DOCS_END}"


def write_docs(path) -> bool:
    """Replace the table between the markers in ``path`` (docs/app.md) with the code's; True if it changed."""
    from pathlib import Path

    path = Path(path)
    text = path.read_text(encoding="utf-8")
    start, end = text.index(DOCS_BEGIN), text.index(DOCS_END) + len(DOCS_END)
    new = text[:start] + docs_block() + text[end:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":   # python -m components.state.play: writes the table into docs/app.md
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "app.md"
    print(f"{doc}: {'updated' if write_docs(doc) else 'already up to date'}")
