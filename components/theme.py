"""Colours and number formats shared by charts and panels.

The arms' own colours live in their registry entries (``specrej.arms``). Colours are Okabe-Ito
(distinguishable with the common colour-vision deficiencies); meaning is never carried by colour
alone: pruned candidates are also grey *and* end in an x, finished ones carry a circle, leaders a
star, the threshold is dashed.
"""
from __future__ import annotations

import html
import re

from specrej.analysis.compare import fmt_flops  # noqa: F401  (one formatter for the CLI and the app)

WINNER = "#009E73"       # bluish green: the leader / winner star
PRUNED = "#A0A0A0"       # grey lines of rejected candidates
PRUNED_MARK = "#6B6B6B"  # the x where a candidate was rejected
THRESHOLD = "#222222"    # dashed: the lowest kept score of a round
GRID = "#E6E6E6"
TEXT = "#1F2328"
FONT = "'Specrej Sans', 'Source Sans Pro', system-ui, -apple-system, 'Segoe UI', sans-serif"  # assets/style.css


def fmt_s(seconds: float) -> str:
    """Seconds as the page says them: "420 ms" below a second (a GPU-priced race), "12.3 s", "215 s"."""
    if seconds < 0.995:
        return f"{1000 * seconds:.3g} ms"
    return f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"


def fmt_score(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def snippet(text: str, limit: int = 90, *, tail: bool = False) -> str:
    """One line of at most ``limit`` characters (the end of the text when ``tail``)."""
    one = " ".join(text.split())
    if len(one) <= limit:
        return one
    return "…" + one[-(limit - 1):] if tail else one[: limit - 1] + "…"


def hover_text(text: str, limit: int = 90) -> str:
    """A snippet safe inside a plotly hover label (which reads a little HTML)."""
    return html.escape(snippet(text, limit), quote=False)


_MD_SPECIAL = re.compile(r"([\\`*\[\]()!#|~{}+]|(?<!\w)_|_(?!\w)|^[-=>]|(?<=\n)[-=>])")


def md_escape(text: str) -> str:
    """Text shown as itself inside Markdown: HTML escaped (``<script>`` stays text), Markdown
    punctuation backslash-escaped (no links, images or emphasis), control characters dropped."""
    text = "".join(ch for ch in str(text) if ch in "\n\t" or ch.isprintable() or ord(ch) > 0x9f)
    text = html.escape(text, quote=False)
    return _MD_SPECIAL.sub(r"\\\1", text)


def duration(seconds: float) -> str:
    """'45 s', '2 min 10 s', '1 h 5 min'."""
    s = max(1, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")
