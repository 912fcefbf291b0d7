"""Give memory back to the system after a run, and after sessions go.

A run allocates and frees many large tensors (KV caches, logits, the lab's sample batches); glibc's
allocator keeps much of the freed memory in its arenas, so an idle server stayed at two or three
times the memory it needed. ``release()`` collects garbage and asks glibc to return free pages
(``malloc_trim(0)``); elsewhere (musl, macOS, Windows) it only collects. Call it when a run ends.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import platform
import threading
import weakref
from collections import OrderedDict

_trim = None
if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
    try:
        _trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        _trim = None

TRIMS = {"count": 0}   # how many times memory was returned (the tests read it)


def freeze_startup() -> int:
    """Once the served app has warmed (models loaded, step compiled, modules imported): every object alive now
    moves to the collector's permanent generation (``gc.freeze``), so no later collection walks them. A full
    collection of the warmed app walked about 780,000 objects: 0.35 s quiet on a 2-core EPYC, over a second
    with other processes spinning, and the GIL held throughout: ``release()`` after each play, and Python's own
    full collections, froze every click for that long (traced: a Paper scale pressed during a race waited 1.45 s
    for the stopped race's ``release()``). After it the same collection walks only what came later (under a
    millisecond there). Only what is alive at start-up is frozen; a play's objects are collected as before.
    Returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def release() -> bool:
    """Collect garbage and return the allocator's free memory to the system; True if trimmed."""
    gc.collect()
    if _trim is None:
        return False
    _trim(0)
    TRIMS["count"] += 1
    return True


_SOON = threading.Lock()   # held while a ``release_soon`` is on its way: a second one then adds nothing


def release_soon() -> threading.Thread | None:
    """``release()`` on a daemon thread of its own, so the handler that asks for it ends now and its queue slot
    frees for the next play (a play's end after a Stop: the next play's handler starts when this one has ended).
    At most one on its way at a time (one that is coming covers this call too); returns its thread, or None."""
    if not _SOON.acquire(blocking=False):
        return None

    def run() -> None:
        try:
            release()
        finally:
            _SOON.release()

    t = threading.Thread(target=run, name="specrej-release", daemon=True)
    t.start()
    return t


def rss_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc``), else None."""
    try:
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class SessionSweeper:
    """A daemon thread that, every ``every_s`` seconds, forgets the sessions of ``blocks`` idle for ``idle_s``
    (``gradio_private.drop_idle_sessions``) and returns the memory (``release``). It holds the app weakly and
    ends with it (or ``stop()``)."""

    def __init__(self, blocks, idle_s: float, every_s: float | None = None):
        self.idle_s, self.every_s = idle_s, every_s or max(1.0, min(60.0, idle_s / 4))
        self.dropped, self._blocks, self._stop = 0, weakref.ref(blocks), threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specrej-session-sweeper", daemon=True)
        self._thread.start()

    def sweep(self) -> int:
        """Forget the idle sessions now; how many went."""
        from components.deploy import gradio_private

        blocks = self._blocks()
        gone = gradio_private.drop_idle_sessions(blocks, self.idle_s) if blocks is not None else 0
        if gone:
            self.dropped += gone
            release()
        return gone

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s) and self._blocks() is not None:
            try:
                self.sweep()
            except Exception:   # a Gradio that moved its state: say so, keep serving
                logging.getLogger("specrej.app").warning("could not forget idle sessions", exc_info=True)

    def stop(self) -> None:
        self._stop.set()


def did_something(session_state) -> bool:
    """A session that ran or replayed anything (its page holds a race view): kept before idle ones when Gradio's
    table of sessions is full (``gradio_private.keep_active_sessions``)."""
    from components.deploy import gradio_private
    from components.state.view import RunView

    return any(isinstance(v, RunView) for v in gradio_private.state_values(session_state))


SESSIONS_PER_HOUSEHOLD = 100   # SPECREJ_SESSIONS_PER_ADDRESS: sessions that did nothing kept per household


class HouseholdSessions:
    """At most ``cap`` sessions that did nothing (``did_something`` false) per household (``clients.address_group``):
    the gate calls ``seen`` for every request naming a session, and a household's new session past ``cap`` makes its
    least recently seen session that did nothing go from Gradio's table (``gradio_private.drop_session_unless``). A
    flood of made-up sessions from one address then evicts only its own, never a session another household just
    opened; sessions that ran or replayed are never dropped here. The table remembers at most ``tracked`` sessions
    (the least recently seen forgotten, its state left to Gradio's own capacity)."""

    def __init__(self, cap: int = SESSIONS_PER_HOUSEHOLD, tracked: int = 20_000):
        self.cap, self.tracked, self.dropped = cap, tracked, 0
        self._order: OrderedDict = OrderedDict()   # session -> household, least recently seen first
        self._homes: dict = {}                     # household -> OrderedDict of its sessions, least recent first
        self._lock = threading.Lock()

    def seen(self, blocks, session: str, household: str | None) -> int:
        """Note a request of ``session`` from ``household``; returns how many of that household's sessions went."""
        if self.cap <= 0 or household is None or blocks is None:
            return 0
        with self._lock:
            if session in self._order:
                old = self._order[session]
                self._order.move_to_end(session)
                self._homes.get(old, {}).pop(session, None)
            self._order[session] = household
            home = self._homes.setdefault(household, OrderedDict())
            home[session] = None
            while len(self._order) > self.tracked:   # forget the least recently seen (only here)
                gone, where = self._order.popitem(last=False)
                self._homes.get(where, {}).pop(gone, None)
                if not self._homes.get(where, True):
                    del self._homes[where]
            over = len(home) - self.cap
            candidates = list(home)[:max(0, over)] if over > 0 else []   # the least recently seen first
            for c in candidates:   # each leaves the count: dropped, or worth keeping (it did something), or absent
                home.pop(c, None)
                self._order.pop(c, None)
        return self._drop(blocks, candidates)

    def _drop(self, blocks, candidates) -> int:
        from components.deploy import gradio_private

        went = sum(gradio_private.drop_session_unless(blocks, c, did_something) for c in candidates)
        self.dropped += went
        return went
