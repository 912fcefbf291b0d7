"""Links that reproduce a race, and the Classroom preset: settings <-> a URL's query string, and its QR code.

``race_query(view, ...)`` writes the race on screen (the settings it ran with, not the boxes as they are now)
as a short query string (settings at the page's defaults left out; a recorded paper-scale race as its prompt
and ``replay=1``, which opens its recording); ``qr_svg(url)`` draws its QR code (``segno``).
``query(values)`` writes settings and seed as a query string; ``settings(params, ...)``
reads one back into control values, keeping only known fields with valid values (a link is typed,
pasted and edited by people: anything else is dropped, never an error). A race runs as its settings say
(load never changes them), so whoever opens the link gets the same race. Nothing here knows Gradio.
"""
from __future__ import annotations

import math
from html import escape as html_escape  # noqa: F401  (app.py titles the code with its link)
from typing import Mapping
from urllib.parse import urlencode

from components.state.shared import CLASSROOM  # noqa: F401  (the preset a link can carry)

# Field -> kind. The prompt first; the rest as RunRequest names them (components/session/stream.py).
FIELDS = {
    "prompt": "text", "reward": "choice", "preference": "text", "n": "int", "alpha": "float",
    "max_new_tokens": "int", "temperature": "float", "top_p": "float", "seed": "int", "budget": "int",
    "decision": "choice", "interval": "int", "first_decision": "int", "sr_start": "choice", "rule": "choice",
    "stop_when_matched": "bool", "second": "bool", "second_alpha": "float", "second_decision": "choice",
    "fit": "bool", "step": "bool", "rivals": "list", "lecture": "bool",
}
MAX_TEXT = 2000
MAX_DIGITS = 19   # a whole number's digits a link may carry (the largest seed the page takes, 2**53 - 1, has 16)



def _show(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))   # a list of choices: rivals=deepconf,stbon
    return str(v)


def query(values: Mapping[str, object], defaults: Mapping[str, object] | None = None) -> str:
    """The query string of these settings (unknown fields and empty values left out; with ``defaults``, every
    setting equal to the page's default too, so the link stays short: the page opens with its defaults)."""
    def kept(k) -> bool:
        if k not in values or values[k] in (None, ""):
            return False
        return defaults is None or k == "prompt" or k not in defaults or _show(values[k]) != _show(defaults[k])

    return urlencode({k: _show(values[k]) for k in FIELDS if kept(k)}, safe=",")


REPLAY = "replay"   # a link's parameter: open the recorded (paper-scale) race of its prompt, as Replay plays it


def race_values(view) -> dict | None:
    """The settings of the race on screen (a ``RunView``), for its link: a live race's request as it ran; the
    page's own race in a recording, its recorded request and prompt; a paper-scale recording, its prompt and
    ``replay`` (the link opens the recording). None with no race on screen."""
    if view is None:
        return None
    recording = getattr(view, "recording", None)
    if recording is not None:
        request = recording.get("request")
        if recording.get("page_race") and isinstance(request, dict):
            return {**{k: v for k, v in request.items() if k in FIELDS}, "prompt": view.cfg.prompt}
        return {"prompt": view.cfg.prompt, REPLAY: True}
    request = getattr(view, "request", None)
    return {k: v for k, v in request.items() if k in FIELDS} if isinstance(request, dict) else None


def _stepped(view, values: dict | None) -> dict | None:
    """A race shown step by step keeps step mode in its link (a recording's request never carried it)."""
    if values is not None and getattr(view, "stepping", False) and REPLAY not in values:
        values["step"] = True
    return values


def race_query(view, boxes: Mapping[str, object], defaults: Mapping[str, object], lecture: bool = False,
               limits=None) -> str:
    """The short query string of the race on screen (``race_values``), else of the settings in the boxes (no race
    yet), each value one the page accepts (``accepted``, within this deployment's ``limits``); ``lecture=1`` when the
    page is in lecture mode."""
    values = _stepped(view, race_values(view))
    replay = bool(values and values.pop(REPLAY, False))
    values = accepted(boxes if values is None else values, limits)
    values["lecture"] = bool(lecture)
    q = query(values, defaults)
    return q + (f"&{REPLAY}=1" if replay else "")


def accepted(values: Mapping[str, object], limits=None) -> dict:
    """Only the values the page accepts (each race field checked by its ``RunRequest`` spec, within ``limits``, a
    ``components.deploy.limits.Limits``): a link never carries a value its page would refuse (a box's raw value out
    of range, text for a number)."""
    from components.state.fields import FieldError
    from components.state.request import SPECS

    out = {}
    for k, v in values.items():
        if k in SPECS:
            try:
                v = SPECS[k].check(k, v, limits)
            except (FieldError, TypeError, ValueError):
                continue
        out[k] = v
    return out


MAX_QR_CHARS = 2000   # a link longer than this gets no code (a QR code of 2,000 characters is too dense to scan)


def qr_svg(url: str) -> str:
    """The QR code of ``url`` as an inline SVG (``segno``, medium error correction), "" for an empty or
    overlong one. Dark modules on white, with the quiet zone, so a phone reads it off a projector."""
    import segno

    if not isinstance(url, str) or not url.strip() or len(url) > MAX_QR_CHARS:
        return ""
    # a viewBox, no fixed size: the page's CSS scales the whole code, quiet zone included, to its box (a fixed
    # 270 px drawing in a 260 px box was clipped, trimming the quiet zone a phone's reader needs)
    return segno.make(url.strip(), error="m").svg_inline(scale=6, dark="#000", light="#fff", border=4, omitsize=True)


def room_note(url: str) -> str:
    """Where a link points at this computer itself (a loopback address), what a room of phones needs instead: one
    plain sentence for under its QR code; "" for a link others can open."""
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url.strip()).hostname or "") if isinstance(url, str) else ""
    except ValueError:
        return ""
    if not host or not (host == "localhost" or host.startswith("127.") or host in ("::1", "0.0.0.0")):
        return ""
    return (f"This link points at {host}, this computer itself: phones in the room cannot open it. For the room, "
            "start the app with GRADIO_SERVER_NAME=0.0.0.0 and open it by this computer's network address, or use "
            "its Space or a share link.")


def _parse(kind: str, raw: str, choices=None):
    raw = raw.strip()
    if kind == "text":
        return raw[:MAX_TEXT] if raw else None
    if kind == "bool":
        return {"1": True, "true": True, "0": False, "false": False}.get(raw.lower())
    if kind == "choice":
        return raw if choices is None or raw in choices else None
    if kind == "list":   # known choices, each once, in the order given; unknown ones dropped
        return list(dict.fromkeys(w for w in (x.strip() for x in raw.split(",")) if w and (choices is None or w in choices)))
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
    legacy = [k for k in (choices or {}).get("rivals", ()) if _parse("bool", str(params.get(k, ""))) is True]
    if legacy and "rivals" not in params:   # a link from before ``rivals``: one flag per rival (deepconf=1)
        params = {**params, "rivals": ",".join(legacy)}
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
