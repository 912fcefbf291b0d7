"""Recorded races: the events of a run, stored compactly, replayed as the same library events.

A recording is gzip JSON: ``meta`` (model, reward, hardware, date, settings: what a label must
say) and the events in order, each with ``t``, the seconds since the race began. Candidates are
stored as changes against the same arm's previous event (text as kept-prefix + new suffix,
new history entries only), scores rounded to ``DIGITS`` decimals, so a paper-scale race of
hundreds of candidates takes tens of kilobytes.

``paced`` yields ``Progress`` / ``Round`` / ``Finished`` events equal to the recorded ones (up
to the rounding), at the recorded pace times ``speed`` (``math.inf``: at once), so a UI shows
a replay through the same code as a live run. It knows nothing of the UI.

    python -m specrej.record --out assets/recordings/x.json.gz --prompt "..." [RunConfig flags]
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import gzip
import json
import math
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .core.events import Candidate, Event, Finished, Ledger, Match, Progress, Round

VERSION = 1
DIGITS = 5
_STATUS = {"waiting": "w", "live": "l", "kept": "k", "pruned": "p", "finished": "f"}
_STATUS_BACK = {v: k for k, v in _STATUS.items()}
_KIND = {Progress: "p", Round: "r", Finished: "f"}
_LEDGER_FIELDS = {f.name for f in dataclasses.fields(Ledger)}


class RecordingError(ValueError):
    """A file that is not a recording this version can replay."""


@dataclass(frozen=True)
class Recording:
    meta: dict
    events: list[dict]   # encoded; ``paced`` decodes them

    @property
    def duration_s(self) -> float:
        return self.events[-1]["t"] if self.events else 0.0

    def label(self) -> str:
        """What a UI shows beside a replay."""
        m = self.meta
        settings = ", ".join(f"{k}={v}" for k, v in m.get("settings", {}).items())
        return (f"recorded: {m.get('model', '?')}, reward {m.get('reward', '?')}, {m.get('hardware', '?')}, "
                f"{m.get('date', '?')}, {settings}; press Run to run it live")

    def save(self, path: str | Path) -> int:
        """Write gzip JSON; returns its size in bytes."""
        data = json.dumps({"version": VERSION, "meta": self.meta, "events": self.events},
                          separators=(",", ":")).encode()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        return path.stat().st_size


def load(path: str | Path) -> Recording:
    try:
        raw = json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, EOFError, json.JSONDecodeError) as e:
        raise RecordingError(f"{path} is not a gzip JSON recording ({e}).") from e
    if not isinstance(raw, dict) or raw.get("version") != VERSION or not isinstance(raw.get("events"), list):
        raise RecordingError(f"{path} is not a version-{VERSION} recording.")
    return Recording(raw.get("meta", {}), raw["events"])


# ---------------------------------------------------------------------------------- encode
def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), DIGITS)


def _cand_delta(new: Candidate, old: Candidate | None) -> dict:
    d: dict = {}
    old_text = old.text if old else ""
    if new.text != old_text:
        keep = len(_common_prefix(old_text, new.text))
        d["x"] = [keep, new.text[keep:]]
    if old is None or new.tokens != old.tokens:
        d["n"] = new.tokens
    if old is None or new.status != old.status:
        d["s"] = _STATUS[new.status]
    if old is None or _r(new.score) != _r(old.score):
        d["v"] = _r(new.score)
    old_h = old.history if old else ()
    if new.history != old_h:
        if new.history[: len(old_h)] == old_h:
            d["h"] = [[t, _r(s)] for t, s in new.history[len(old_h):]]
        else:
            d["H"] = [[t, _r(s)] for t, s in new.history]
    if old is None or new.round_pruned != old.round_pruned:
        d["r"] = new.round_pruned
    if old is None or new.finish_reason != old.finish_reason:
        d["f"] = new.finish_reason
    return d


def _common_prefix(a: str, b: str) -> str:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return a[:i]


class Recorder:
    """Encodes events one by one (keeps each arm's last candidate states)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock, self.t0 = clock, clock()
        self.events: list[dict] = []
        self._last: dict[str, dict[int, Candidate]] = {}

    def add(self, ev: Event) -> None:
        last = self._last.setdefault(ev.arm, {})
        out: dict = {"t": round(self.clock() - self.t0, 3), "e": _KIND[type(ev)], "arm": ev.arm,
                     "l": {k: (_r(v) if isinstance(v, float) else v) for k, v in dataclasses.asdict(ev.ledger).items()}}
        deltas = []
        for c in ev.candidates:
            d = _cand_delta(c, last.get(c.id))
            if d:
                deltas.append([c.id, d])
            last[c.id] = c
        out["c"] = deltas
        ids = [c.id for c in ev.candidates]
        out["ids"] = ids if ids != sorted(last) else None
        if isinstance(ev, Progress):
            out.update(pos=ev.position, live=ev.n_live)
        elif isinstance(ev, Round):
            out.update(i=ev.index, pos=ev.position, th=_r(ev.threshold), k=ev.n_kept, p=ev.n_pruned, fo=ev.forced)
        else:
            if ev.winner != last.get(ev.winner.id):
                raise ValueError("Finished.winner differs from its candidate entry; cannot encode it by id.")
            out.update(w=ev.winner.id, rounds=ev.rounds)
            if ev.match is not None:
                m = ev.match
                out["m"] = {"c": m.challenger, "t": _r(m.target), "ok": m.matched, "n": m.finished,
                            "l": {k: (_r(v) if isinstance(v, float) else v)
                                  for k, v in dataclasses.asdict(m.ledger).items()}}
        self.events.append(out)

    def recording(self, meta: dict) -> Recording:
        return Recording(meta, list(self.events))


def record(events: Iterable[Event], meta: dict, clock: Callable[[], float] = time.perf_counter) -> Recording:
    """Drain ``events`` (e.g. a race) into a Recording."""
    rec = Recorder(clock)
    for ev in events:
        rec.add(ev)
    return rec.recording(meta)


# ---------------------------------------------------------------------------------- decode
def _apply(old: Candidate | None, cid: int, d: dict) -> Candidate:
    text = old.text if old else ""
    if "x" in d:
        keep, suffix = d["x"]
        text = text[:keep] + suffix
    history = old.history if old else ()
    if "h" in d:
        history = history + tuple((t, s) for t, s in d["h"])
    if "H" in d:
        history = tuple((t, s) for t, s in d["H"])
    get = lambda key, attr, default: d[key] if key in d else (getattr(old, attr) if old else default)  # noqa: E731
    return Candidate(cid, text, get("n", "tokens", 0),
                     _STATUS_BACK[d["s"]] if "s" in d else (old.status if old else "waiting"),
                     get("v", "score", None), history, get("r", "round_pruned", None), get("f", "finish_reason", None))


def _ledger(d: dict) -> Ledger:
    return Ledger(**{k: v for k, v in d.items() if k in _LEDGER_FIELDS})


def decode(rec: Recording) -> Iterator[tuple[float, Event]]:
    """(t, event) pairs, in order, rebuilt from the recording."""
    state: dict[str, dict[int, Candidate]] = {}
    try:
        for e in rec.events:
            last = state.setdefault(e["arm"], {})
            for cid, d in e["c"]:
                last[cid] = _apply(last.get(cid), cid, d)
            ids = e.get("ids")
            cands = tuple(last[i] for i in ids) if ids is not None else tuple(last[i] for i in sorted(last))
            led = _ledger(e["l"])
            if e["e"] == "p":
                ev: Event = Progress(e["arm"], e["pos"], e["live"], cands, led)
            elif e["e"] == "r":
                ev = Round(arm=e["arm"], index=e["i"], position=e["pos"], candidates=cands, threshold=e["th"], n_kept=e["k"],
                           n_pruned=e["p"], forced=e["fo"], ledger=led)
            else:
                m = e.get("m")
                match = Match(m["c"], m["t"], m["ok"], _ledger(m["l"]), m["n"]) if m else None
                ev = Finished(e["arm"], last[e["w"]], cands, e["rounds"], led, match)
            yield float(e["t"]), ev
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise RecordingError(f"the recording is damaged ({type(err).__name__}: {err}).") from err


def paced(rec: Recording, speed: float = 1.0, sleep: Callable[[float], None] = time.sleep,
           clock: Callable[[], float] = time.monotonic) -> Iterator[Event]:
    """The recorded events at the recorded pace x ``speed`` (``math.inf`` or 0 waits: at once)."""
    if not (speed > 0):
        raise ValueError(f"speed={speed!r} must be > 0 (math.inf replays at once).")
    start = clock()
    for t, ev in decode(rec):
        if math.isfinite(speed):
            wait = t / speed - (clock() - start)
            if wait > 0:
                sleep(wait)
        yield ev


def hardware() -> str:
    """A short description of this machine, for a recording's label."""
    import os

    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    name = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            info = fh.read()
        name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")),
                    name)
        flags = next((line for line in info.splitlines() if line.startswith("flags")), "")
        name += " (AMX)" if " amx_tile" in flags else " (AVX-512)" if " avx512f" in flags else ""
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores ({torch.get_num_threads()} threads)"


def make_meta(model: str, reward: str, settings: dict, **extra) -> dict:
    return {"model": model, "reward": reward, "hardware": hardware(),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d"), "settings": settings, **extra}
