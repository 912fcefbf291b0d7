"""The run's JSON trace: settings, every Round and Finished event in full (``specrej.to_dict``),
Progress events without their candidates, and the summary the page shows."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .panels import summary_dict
from .view import RunView

FORMAT = "specrej-trace/1"
KEEP_S = 3600  # traces older than this are removed from the app's folder


def trace_dict(view: RunView) -> dict:
    return {"format": FORMAT, **summary_dict(view), "events": view.trace}


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
    path = folder / f"specrej-trace-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{id(view) % 10**6}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(trace_dict(view), ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)
    return str(path)
