"""Links that reproduce a race, and the Classroom preset: settings <-> a URL's query string.

``query(values)`` writes the page's settings and seed as a query string; ``settings(params, ...)``
reads one back into control values, keeping only known fields with valid values (a link is typed,
pasted and edited by people: anything else is dropped, never an error). A race runs as its settings say
(load never changes them), so whoever opens the link gets the same race. Nothing here knows Gradio.
"""
from __future__ import annotations

import math
from typing import Mapping
from urllib.parse import urlencode

from components.state.shared import CLASSROOM  # noqa: F401  (the preset a link can carry)

# Field -> kind. The prompt first; the rest as RunRequest names them (components/session/stream.py).
FIELDS = {
    "prompt": "text", "reward": "choice", "preference": "text", "n": "int", "alpha": "float",
    "max_new_tokens": "int", "temperature": "float", "top_p": "float", "seed": "int", "budget": "int",
    "decision": "choice", "interval": "int", "first_decision": "int", "sr_start": "choice", "rule": "choice",
    "stop_when_matched": "bool", "second": "bool", "second_alpha": "float", "second_decision": "choice",
    "fit": "bool", "step": "bool", "deepconf": "bool", "stbon": "bool",
}
MAX_TEXT = 2000
MAX_DIGITS = 19   # a whole number's digits a link may carry: the largest seed, 2**63 - 1, has 19



def _show(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def query(values: Mapping[str, object]) -> str:
    """The query string of these settings (unknown fields and empty values left out)."""
    return urlencode({k: _show(values[k]) for k in FIELDS if k in values and values[k] not in (None, "")})


def _parse(kind: str, raw: str, choices=None):
    raw = raw.strip()
    if kind == "text":
        return raw[:MAX_TEXT] if raw else None
    if kind == "bool":
        return {"1": True, "true": True, "0": False, "false": False}.get(raw.lower())
    if kind == "choice":
        return raw if choices is None or raw in choices else None
    if kind == "int":   # read as an integer, never through float (a seed past 2**53 stays exact)
        if not raw.isascii() or not raw.isdigit() or len(raw) > MAX_DIGITS:
            return None
        return int(raw)
    try:
        v = float(raw)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def settings(params: Mapping[str, str], choices: Mapping[str, list] | None = None,
             ranges: Mapping[str, tuple[float, float]] | None = None) -> dict:
    """Control values from a link's query parameters: known fields, valid values, within ``ranges``
    (``choices``: the allowed values of each choice field)."""
    out = {}
    for k, kind in FIELDS.items():
        if k not in params:
            continue
        v = _parse(kind, str(params[k]), (choices or {}).get(k))
        if v is None:
            continue
        lo, hi = (ranges or {}).get(k, (-math.inf, math.inf))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not lo <= v <= hi:
            continue
        out[k] = v
    return out
