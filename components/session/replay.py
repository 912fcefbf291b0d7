"""Recorded races, replayed through the same frame builders as a live run.

A recording (``specrej.record``, made by ``python -m specrej record``) holds a race's events;
``replay_frames`` feeds them to a fresh ``RunView`` at the recorded pace times ``speed`` and
yields the frames a live run would. The status line always says it is a recording (model,
reward, hardware, date, settings) and that Run runs it live. ``RECORDINGS`` holds the
paper-scale races of the example prompts; ``find`` looks one up by prompt.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Iterator

from specrej import Progress, RunConfig
from specrej.arms import parse_arms
from specrej.record import Recording, RecordingError, load, replay

from .context import ASSETS, model_label, reward_kind_label
from specrej.core.cost import StepCost

from ..frames import Frame, end_frame, error_frame, live_frame, start_frame
from ..deploy.guard import check_choice, check_text_field
from ..theme import fmt_s, md_escape
from .view import RunView

RECORDINGS = ASSETS / "recordings"
PACES = [("real pace", "1"), ("4×", "4"), ("16×", "16"), ("instant", "inf")]
PAPER_SCALE = dict(n=128, sr_start="auto", first_decision=16, max_new_tokens=256, budget=2048, alpha=0.5,
                   decision="budget", stop_when_matched=False, second=False, rule="paper")
PAPER_REWARD = "self-certainty"


def _norm(prompt: str) -> str:
    return " ".join(str(prompt).split()).casefold()


def index(folder: Path = RECORDINGS) -> dict[str, Path]:
    """{normalised prompt: recording file} of every readable recording in ``folder``."""
    out = {}
    for path in sorted(folder.glob("*.json.gz")):
        try:
            out[_norm(load(path).meta.get("prompt", ""))] = path
        except RecordingError:
            continue
    return out


def find(prompt: str, folder: Path = RECORDINGS) -> Path | None:
    return index(folder).get(_norm(prompt))


def view_for(rec: Recording) -> RunView:
    """A RunView laid out for the recorded arms and settings, labelled as a recording."""
    m, s = rec.meta, rec.meta.get("settings", {})
    n = s.get("n", 32)
    cfg = RunConfig(prompt=m.get("prompt") or "-", n=n, alpha=s.get("alpha", 0.5),
                    max_new_tokens=s.get("max_new_tokens", 128), budget=s.get("budget") or None,
                    first_decision=s.get("first_decision", 16), seed=s.get("seed", 0))
    specs = parse_arms([a["spec"] for a in m.get("arms", [])] or ("bon", "sr"))
    view = RunView(cfg, model_label=model_label(m.get("model", "?")),
                   reward_label=reward_kind_label(m.get("reward", "?")), specs=specs)
    view.note = recording_note(rec, view)
    view.recording = {"hardware": m.get("hardware", "?"), "date": m.get("date", "?"), "seconds": rec.duration_s,
                      "reward": view.reward_label, "model": view.model_label, "dtype": m.get("dtype")}
    cost = m.get("step_cost")
    if cost:
        try:
            view.step = StepCost(tuple(cost["rows"]), tuple(cost["seconds"]))
        except (KeyError, TypeError, ValueError):
            view.step = None   # an older recording: the verdict counts decoding steps
    return view


def badge_markdown(view: RunView, *, speed: float | None = None, replayed_s: float | None = None) -> str:
    """The badge a replay carries while it plays and after it ends: it is a recording, when and where it
    was recorded and how long it took then, its own replay clock, and the reward it was scored with."""
    r = view.recording or {}
    pace = "instantly" if speed is None or not math.isfinite(speed) else f"at {speed:g}× the recorded pace"
    clock = (f"recorded in {fmt_s(r.get('seconds', 0.0))}, replayed in {fmt_s(replayed_s)}" if replayed_s is not None
             else f"recorded in {fmt_s(r.get('seconds', 0.0))}, replaying {pace}")
    return (f"**● Recording**, not a live run · {md_escape(r.get('model', '?'))} on {md_escape(r.get('hardware', '?'))}, "
            f"{md_escape(r.get('date', '?'))} · {clock} · scored with the **{md_escape(r.get('reward', '?'))}** reward "
            "(the recording's own; your Settings' reward is not used) · **Run it live** runs these settings here, "
            "scaled down to fit.")


def recording_note(rec: Recording, view: RunView) -> str:
    """What the status line says beside a replay: model, reward, machine, date and the settings as run:
    each arm with its own settings, then the shared ones no arm replaces (a recording's ``n=32`` beside
    ``bon:n=128`` is not what ran)."""
    m = rec.meta
    settings = {k: v for k, v in m.get("settings", {}).items() if k != "arms"}
    overrides = [dict(a.overrides) for a in view.specs]

    def shown(k, v) -> bool:   # a shared setting some arm ran with, and not repeated in an arm's label
        mine = [o[k] for o in overrides if k in o]
        return len(mine) < len(overrides) and any(_show(x) != _show(v) for x in mine) or not mine

    shared = ", ".join(f"{k}={_show(v)}" for k, v in settings.items() if shown(k, v))
    arms = ", ".join(a.spec.label for a in view.display_order())
    return (f"Recorded race: {view.model_label}, reward {view.reward_label}, {m.get('hardware', '?')}, "
            f"{m.get('date', '?')}. {arms}; {shared}.")


def _show(v) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


REPLAY_START = "**Replaying** the recorded race…"


def check_replay(prompt, pace, max_prompt_chars: int = 2000) -> tuple[str, float]:
    """(prompt, speed) from a replay request as the page or the API sends it; ValueError naming the
    field otherwise. ``pace`` is one of ``PACES``' values (a number equal to one is accepted too)."""
    prompt = check_text_field("prompt", prompt, max_prompt_chars)
    if isinstance(pace, (int, float)) and not isinstance(pace, bool):
        pace = "inf" if pace == math.inf else f"{pace:g}"
    pace = check_choice("pace", pace, [v for _, v in PACES])
    return prompt, float(pace)


def replay_frames(prompt: str, pace: str = "inf", *, folder: Path = RECORDINGS, max_prompt_chars: int = 2000,
                  min_frame_interval: float = 0.25, sleep=time.sleep, step: bool = False) -> Iterator[Frame]:
    """Frames of the recorded race for ``prompt`` at ``pace`` (a factor, or 'inf': at once)."""
    try:
        prompt, speed = check_replay(prompt, pace, max_prompt_chars)
    except ValueError as e:
        yield error_frame(str(e))
        return
    path = find(prompt, folder)
    if path is None:
        yield error_frame("there is no recorded race for this prompt: recordings exist for the example prompts. "
                          "Press Run to run it live.")
        return
    try:
        rec = load(path)
        view = view_for(rec)
    except (ValueError, RecordingError) as e:
        yield error_frame(f"cannot replay {path.name}: {e}")
        return
    view.stepping = step is True
    first = start_frame(view)   # a live run's first frame, but nothing loads or prefills here
    first.status = REPLAY_START + f"\n\n*{md_escape(view.note)}*"
    first.badge = badge_markdown(view, speed=speed)
    yield first
    last = 0.0
    for event in replay(rec, speed=speed, sleep=sleep):
        view.apply(event)
        now = time.perf_counter()
        if isinstance(event, Progress) and (now - last < min_frame_interval or not math.isfinite(speed)):
            continue
        last = now
        if not view.done:
            yield live_frame(view)
    view.state = "done"
    end = end_frame(view)
    end.badge = badge_markdown(view, replayed_s=view.elapsed())
    yield end
