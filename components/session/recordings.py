"""Recorded races, replayed as updates a live run yields (presentation draws both the same way).

A recording (``specrej.record``, made by ``python -m specrej record``) holds a race's events;
``replay_updates`` feeds them to a fresh ``RunView`` at the recorded pace times ``speed`` and
yields the updates a live run would. The status line always says it is a recording (model,
reward, hardware, date, settings) and that Run runs it live. ``RECORDINGS`` holds the
paper-scale races of the example prompts; ``find`` looks one up by prompt.
"""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from specrej import Progress, RunConfig
from specrej.arms import parse_arms
from specrej.record import Recording, RecordingError, load, paced

from specrej.core.about import settings_fields
from specrej.core.cost import StepCost

from components.session import budget
from components.state.fields import check_choice, check_text_field
from components.state.shared import ASSETS, PACES, PAGE_RACES, model_label, reward_kind_label
from components.state.update import Kind, Update
from components.state.view import RunState, RunView

RECORDINGS = ASSETS / "recordings"


def _norm(prompt: str) -> str:
    return " ".join(str(prompt).split()).casefold()


def index(folder: Path = RECORDINGS) -> dict[str, Path]:
    """{normalised prompt: recording file} of every readable recording in ``folder`` (each file's header read once
    per version of the file, ``meta_of``: Paper scale and "Run it live" decompressed all six paper-scale recordings
    at every click, 0.3 s on a quiet 2-core EPYC and most of a click's 3-4 s with three processes spinning)."""
    out = {}
    for path in sorted(folder.glob("*.json.gz")):
        try:
            out[_norm(meta_of(path)[0].get("prompt", ""))] = path
        except (RecordingError, OSError):
            continue
    return out


def find(prompt: str, folder: Path = RECORDINGS) -> Path | None:
    return index(folder).get(_norm(prompt))


# ---------------------------------------------------------------- the page's own races, recorded

_IGNORED = ("progress_every",)     # how often a race reports, not what it races


def race_key(model_spec: str, reward_spec: str, cfg: RunConfig, arms, stop_when_matched: bool = False,
             dtype: str = "") -> dict:
    """What makes two races the same experiment: the generator and its dtype (float32 and bfloat16 write
    different answers), the reward, every setting (the prompt normalised; the budget as it resolves here) and
    the arms. Never the machine, its load or its threads (the same answers either way in both dtypes). The
    config is flat (``RunConfig.flat``): the rivals' settings under their own names, defaults filled, as the
    recordings hold them."""
    settings = {k: v for k, v in cfg.flat().items() if k not in _IGNORED}   # flat: the rivals' settings by name
    settings["prompt"] = _norm(cfg.prompt)
    settings["budget"] = budget.planned(cfg.budget)
    return {"model": model_spec, "dtype": dtype, "reward": reward_spec, "config": settings,
            "arms": [a.spec for a in arms], "stop_when_matched": bool(stop_when_matched)}


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def same_race(recorded, key: dict) -> bool:
    """Is the recorded race ``key``'s? A setting added after the recording was made (the rivals' ``warmup``,
    ``window`` ..., now their settings classes' fields) is absent from it; the race ran with what is now that
    setting's default, so a key holding the default there is the same race (any other value is not)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("config"), dict):
        return False
    defaults = {**{f.name: f.default for f in dataclasses.fields(RunConfig) if f.name != "settings"},
                **settings_fields()}
    config = {k: v for k, v in key.get("config", {}).items()
              if k in recorded["config"] or k not in defaults or not _same(v, defaults[k])}
    return _same(recorded, {**key, "config": config})


_META: dict = {}   # path -> ((mtime_ns, size), the recording's meta, its duration): read once per file version


def meta_of(path: Path) -> tuple[dict, float]:
    """(meta, recorded seconds) of a recording, read once per version of its file (a click never decompresses
    every recording: about 0.1-0.7 s for the page's 12 on a 2-core Xeon)."""
    st = path.stat()
    version = (st.st_mtime_ns, st.st_size)
    hit = _META.get(path)
    if hit is None or hit[0] != version:
        rec = load(path)
        hit = _META[path] = (version, rec.meta, rec.duration_s)
    return hit[1], hit[2]


def find_race(key: dict, folder: Path = PAGE_RACES) -> Path | None:
    """The recording of the race ``key`` (``race_key``), if one was made."""
    for path in sorted(folder.glob("*.json.gz")):
        try:
            if same_race(meta_of(path)[0].get("race"), key):
                return path
        except (RecordingError, OSError):
            continue
    return None


def view_for(rec: Recording) -> RunView:
    """A RunView laid out for the recorded arms and settings, labelled as a recording."""
    m, s = rec.meta, rec.meta.get("settings", {})
    race = m.get("race")
    if isinstance(race, dict):   # a page race: every setting as it ran
        cfg = RunConfig.from_flat(race["config"], prompt=m.get("prompt") or "-")   # the rivals' settings by name
    else:
        cfg = RunConfig(prompt=m.get("prompt") or "-", n=s.get("n", 32), alpha=s.get("alpha", 0.5),
                        max_new_tokens=s.get("max_new_tokens", 128), budget=s.get("budget") or None,
                        first_decision=s.get("first_decision", 16), seed=s.get("seed", 0))
    specs = parse_arms([a["spec"] for a in m.get("arms", [])] or ("bon", "sr"))
    view = RunView(cfg, model_label=model_label(m.get("model", "?")),
                   reward_label=reward_kind_label(m.get("reward", "?")), specs=specs)
    view.note = recording_note(rec, view)
    view.recording = {"hardware": m.get("hardware", "?"), "date": m.get("date", "?"), "seconds": rec.duration_s,
                      "reward": view.reward_label, "model": view.model_label, "dtype": m.get("dtype"),
                      "page_race": isinstance(race, dict), "request": m.get("request")}   # a race of the page's own (else a paper-scale one)
    cost = m.get("step_cost")
    if cost:
        try:
            view.step = StepCost.from_record(cost)   # with the rivals' reads where it measured them
        except (KeyError, TypeError, ValueError):
            view.step = None   # an older recording: the verdict counts decoding steps
    return view


def recording_note(rec: Recording, view: RunView) -> str:
    """What the status line says beside a replay: model, reward, machine, date and the settings as run:
    each arm with its own settings, then the shared ones no arm replaces (a recording's ``n=32`` beside
    ``bon:n=128`` is not what ran)."""
    m = rec.meta
    settings = {k: v for k, v in m.get("settings", {}).items() if k != "arms"}

    def shown(k, v) -> bool:   # a shared setting some arm ran with as it is (not replaced in its own label)
        users = [a for a in view.specs if k in a.kind.options]
        return not users or any(k not in dict(a.overrides) for a in users)

    shared = ", ".join(f"{k}={_show(v)}" for k, v in settings.items() if shown(k, v))
    arms = ", ".join(a.spec.label for a in view.display_order())
    return (f"Recorded race: {view.model_label}, reward {view.reward_label}, {m.get('hardware', '?')}, "
            f"{m.get('date', '?')}. {arms}; {shared}.")


def _show(v) -> str:
    """A recorded setting as the status line says it (an automatic budget, recorded as None: "auto")."""
    if v is None:
        return "auto"
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


def check_replay(prompt, pace, max_prompt_chars: int = 2000) -> tuple[str, float]:
    """(prompt, speed) from a replay request as the page or the API sends it; ValueError naming the
    field otherwise. ``pace`` is one of ``PACES``' values (a number equal to one is accepted too)."""
    prompt = check_text_field("prompt", prompt, max_prompt_chars)
    if isinstance(pace, (int, float)) and not isinstance(pace, bool):
        pace = "inf" if pace == math.inf else f"{pace:g}"
    pace = check_choice("pace", pace, [v for _, v in PACES])
    return prompt, float(pace)


def stoppable_sleep(stop_requested) -> Callable[[float], None]:
    """A replay's pause between two recorded events that ends the moment the play is stopped (``stop_requested``:
    a flag that says when it is set, ``on_set``; else asked every 0.1 s): a paced recording can wait tens of
    seconds between events, and a handler asleep there kept its event pending, so the next Replay pressed waited
    for it (Gradio runs a button's next press after its pending one)."""
    woken = threading.Event()
    on_set = getattr(stop_requested, "on_set", None)
    if on_set is not None:
        on_set(woken.set)

    def sleep(seconds: float) -> None:
        end = time.monotonic() + max(0.0, seconds)
        while not woken.is_set() and not stop_requested():
            left = end - time.monotonic()
            if left <= 0:
                return
            woken.wait(min(left, 0.1 if on_set is None else left))

    return sleep


NO_RECORDING = ("there is no recorded race for this prompt: recordings exist for the example prompts. Press Run to "
                "run it live.")


def replay_of(prompt, pace, max_prompt_chars: int = 2000, folder: Path = RECORDINGS) -> tuple[Path, float]:
    """(the recording, the speed) a Replay of ``prompt`` at ``pace`` plays (``check_replay``); ValueError with the
    words otherwise (a bad field, or no recording of this prompt)."""
    prompt, speed = check_replay(prompt, pace, max_prompt_chars)
    path = find(prompt, folder)
    if path is None:
        raise ValueError(NO_RECORDING)
    return path, speed


def replay_updates(prompt: str, pace: str = "inf", *, folder: Path = RECORDINGS, max_prompt_chars: int = 2000,
                   min_frame_interval: float = 0.25, sleep=time.sleep, step: bool = False,
                   lecture: bool = False) -> Iterator[Update]:
    """Updates of the recorded race for ``prompt`` at ``pace`` (a factor, or 'inf': at once): a Replay outside the
    page (the page's plays through ``planner.plan`` and ``stream.execute``)."""
    try:
        path, speed = replay_of(prompt, pace, max_prompt_chars, folder)
    except ValueError as e:
        yield Update(Kind.ERROR, message=str(e))
        return
    yield from play(path, speed, min_frame_interval=min_frame_interval, sleep=sleep, step=step, lecture=lecture)


def play(path: Path, speed: float, *, min_frame_interval: float = 0.25, sleep=time.sleep, step: bool = False,
         fallback: dict | None = None, lecture: bool = False) -> Iterator[Update]:
    """Updates of the recording at ``path``, at ``speed`` times its pace (``math.inf``: at once). ``fallback``:
    why a Run plays it instead of racing live (``RunView.fallback``); ``lecture``: drawn for a room."""
    try:
        rec = load(path)
        view = view_for(rec)
    except (ValueError, RecordingError) as e:
        yield Update(Kind.ERROR, message=f"cannot replay {path.name}: {e}")
        return
    view.stepping, view.fallback, view.lecture = step is True, fallback, lecture is True
    yield Update(Kind.START, view, replay={"speed": speed})   # a live run's start, but nothing loads or prefills
    last = 0.0
    for event in paced(rec, speed=speed, sleep=sleep):
        view.apply(event)
        now = time.perf_counter()
        if isinstance(event, Progress) and (now - last < min_frame_interval or not math.isfinite(speed)):
            continue
        last = now
        if not view.done:
            yield Update(Kind.LIVE, view)
    view.state = RunState.DONE
    yield Update(Kind.END, view, replay={"replayed_s": view.elapsed()})
