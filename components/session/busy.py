"""A Run the queue has no place for: the recording of that exact race at once, else how long the queue is.

When every place in the queue is taken (``SPECREJ_MAX_QUEUE``), a Run used to get Gradio's bare "Queue is full!
Please try again.", even when the app holds the labelled recording of that very race (an example prompt at its
recorded settings, ``recordings.PAGE_RACES``). The guard (``components/deploy``) asks ``has_recording`` when a race
joins a full queue; if it has one, the run is moved to ``recorded_race``, which plays that recording instantly
with a line saying why (``RunView.fallback``, reason ``queue_full``); otherwise the refusal is ``full_message``:
how many runs wait and when a place may free. Nothing here knows Gradio.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path

from components.deploy.limits import PolicyError
from components.session import recordings
from components.session.context import AppContext
from components.session.stream import prepare
from components.state.update import Kind, Update

log = logging.getLogger("specrej.app")


DTYPES = {"fp32": "float32", "bf16": "bfloat16"}   # SPECREJ_DTYPE -> the dtype a recording names


def recording(ctx: AppContext, values) -> Path | None:
    """The labelled recording of the race these values (a RunRequest's, raw) ask for; None when there is none or
    the values are not a race this deployment runs. Asks nothing of the torch thread (a full queue's runs hold
    it): the generator's dtype is the deployment's setting (as ``stream.recording_of`` reads it off the model)."""
    try:
        _, prep = prepare(ctx, values, fits=False)
    except (ValueError, TypeError, PolicyError, OSError):
        return None
    if ctx.page_races is None or ctx.dtype not in DTYPES:
        return None
    key = recordings.race_key(prep.model_spec, prep.reward_spec, prep.cfg, prep.arms,
                          prep.race_kw.get("stop_when_matched", False), DTYPES[ctx.dtype])
    return recordings.find_race(key, ctx.page_races)


def has_recording(ctx: AppContext, values) -> bool:
    return recording(ctx, values) is not None


def full_message(waiting: int, *, run_s: float, at_once: int) -> str:
    """Why a Run was not queued: how many runs wait, and when a place may free (each run takes at most
    ``run_s`` seconds, ``at_once`` of them at a time)."""
    next_s = run_s / max(at_once, 1)
    all_min = math.ceil(waiting * run_s / max(at_once, 1) / 60)
    return (f"The queue is full: {waiting} runs are waiting, each up to {run_s:.0f} s, {at_once} at a time. A place "
            f"frees in at most about {next_s:.0f} s, and the queue clears in about {all_min} min: try again then. "
            "Meanwhile an example prompt's Replay plays its recorded race at once.")


def recorded_race(ctx: AppContext, values, *, waiting: int, capped: str | None = None) -> Iterator[Update]:
    """The recording of the race ``values`` ask for, instantly, with the reason: the queue was full, or (``capped``:
    the cap's words) this visitor or its address is at its cap; an error update with those words when there is no
    recording (the guard moves a run here only when there is one)."""
    path = recording(ctx, values)
    if path is None:
        yield Update(Kind.ERROR, message=capped or full_message(waiting, run_s=ctx.limits.max_run_seconds,
                                                                at_once=ctx.concurrency))
        return
    why = {"reason": "capped", "why": capped} if capped else {"reason": "queue_full", "waiting": waiting}
    yield from recordings.play(path, math.inf, min_frame_interval=ctx.min_frame_interval, fallback=why)
