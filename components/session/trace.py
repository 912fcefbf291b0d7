"""The run's JSON trace: settings, every Round and Finished event in full (``specrej.to_dict``),
Progress events without their candidates, and the summary the page shows."""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from components.state.summary import summary_dict
from components.state.view import RunState, RunView

FORMAT = "specrej-trace/1"
KEEP_S = 3600  # traces older than this are removed from the app's folder


STATES = {RunState.DONE: "finished", RunState.ERROR: "failed", RunState.STOPPED: "stopped",
          RunState.LIMIT: "stopped at the time limit", RunState.RUNNING: "running"}


def trace_dict(view: RunView) -> dict:
    """``state`` is finished, failed, stopped or stopped at the time limit; ``message`` says why."""
    out = {"format": FORMAT, **summary_dict(view), "events": view.trace}
    out["state"] = STATES[RunState(view.state)]
    out["message"] = view.message
    out["note"] = view.note
    out["run_id"] = view.run_id
    return out


def trace_name(view: RunView) -> str:
    """From server-side data only (a timestamp and the run's random id), never the prompt."""
    return f"specrej-trace-{time.strftime('%Y%m%d-%H%M%S')}-{view.run_id}.json"


def write_atomic(path: Path, text: str) -> None:
    """A temp file in the same folder, flushed, then renamed over ``path``: readers never see
    a partial trace."""
    fd, tmp = tempfile.mkstemp(prefix=".specrej-", suffix=".tmp", dir=path.parent)
    try:
        # backslashreplace: a lone surrogate that got this far is written as the JSON escape
        # ``\udXXX`` (valid JSON, read back as the same string) instead of raising UnicodeEncodeError
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_traces(view: RunView, folder: str | Path, archive: str | Path | None = None) -> str:
    """The download copy under ``folder`` (pruned after an hour) and, if the operator set one,
    a kept copy under ``archive``; returns the download copy's path."""
    path = write_trace(view, folder)
    if archive:
        dest = Path(archive)
        dest.mkdir(parents=True, exist_ok=True)
        write_atomic(dest / Path(path).name, Path(path).read_text(encoding="utf-8"))
    return path


def write_trace(view: RunView, folder: str | Path) -> str:
    """Write the trace as JSON under ``folder`` (pruning old ones) and return its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()
    for old in folder.glob("specrej-trace-*.json"):
        try:
            if now - old.stat().st_mtime > KEEP_S:
                old.unlink()
        except OSError:
            pass
    path = folder / trace_name(view)
    write_atomic(path, json.dumps(trace_dict(view), ensure_ascii=False))
    return str(path)
