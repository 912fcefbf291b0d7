"""A public field's kind, range and help, and the one check of a value a client sent for it.

Every public endpoint's fields are declared with these (the race's in ``request.py``; the lab's and the
replay's use the same checks), so each value is checked once, by type and range, before any work, and every
refusal is a ``FieldError`` (a ``ValueError``) that names the field, quotes at most ``EXCERPT_CHARS`` of
what was sent and is at most ``MAX_MESSAGE_CHARS`` long. Values are raw JSON (the handlers take
``preprocess=False``): text must be a string of valid Unicode, a number an int or a float (a number written
as text, as a number box may send it, is read), yes/no a JSON boolean, a choice one of its words.
Imports only ``specrej``; nothing here knows Gradio.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specrej.core.config import check_text

EXCERPT_CHARS = 40        # of a value a client sent, in a message
MAX_MESSAGE_CHARS = 200   # a refusal's whole message
MAX_NAME_CHARS = 200      # model, reward, decision ... names are short
MAX_WHOLE = 2**63 - 1     # the largest whole number any field takes (a seed)


class FieldError(ValueError):
    """A value a client sent that its field does not take; the message names the field, is short, and
    quotes at most an excerpt of the value."""

    def __init__(self, message: str):
        super().__init__(short(message))


def short(message: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` cut to ``limit`` characters (with an ellipsis when cut)."""
    return message if len(message) <= limit else message[:limit - 1] + "…"


def kind_of(value: Any) -> str:
    """What a JSON value is, in words ("a list", "true/false", "nothing" ...)."""
    return {list: "a list", tuple: "a list", dict: "an object", bool: "true/false", type(None): "nothing",
            int: "a whole number", float: "a number", str: "text"}.get(type(value), f"a {type(value).__name__}")


def excerpt(value: Any) -> str:
    """A short, printable excerpt of a value a client sent (for messages: never the whole of it). A whole
    number too long to print (Python refuses past 4300 digits) is described by its length."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * EXCERPT_CHARS:
        return f"a number of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    try:
        text = value if isinstance(value, str) else repr(value)
    except (ValueError, RecursionError):
        return kind_of(value)
    text = text[:EXCERPT_CHARS + 1].encode("utf-8", "backslashreplace").decode("utf-8")   # a lone surrogate
    return repr(text[:EXCERPT_CHARS] + ("…" if len(text) > EXCERPT_CHARS else ""))


def _bound(value: float) -> str:
    """A range's end in words: a whole number in full (9007199254740991, not 9.0072e+15)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _number_words(value: float) -> str:
    """A number for a message: as sent when short, else an excerpt."""
    if isinstance(value, float):
        return f"{value:g}"
    return excerpt(value).strip("'")


def check_text_field(label: str, value: Any, max_chars: int = MAX_NAME_CHARS) -> str:
    """``value`` as text of at most ``max_chars`` valid characters; FieldError naming ``label``."""
    if not isinstance(value, str):
        raise FieldError(f"{label} must be text, not {kind_of(value)}.")
    check_text(label, value)
    if len(value) > max_chars:
        raise FieldError(f"{label} is {len(value)} characters long; at most {max_chars} are allowed.")
    return value


def check_choice(label: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``; FieldError naming ``label`` and the choices."""
    if not isinstance(value, str):
        raise FieldError(f"{label} must be text, not {kind_of(value)}: one of: {', '.join(choices)}.")
    check_text_field(label, value)
    if value not in choices:
        raise FieldError(f"{label} {excerpt(value)} is not one of: {', '.join(choices)}.")
    return value


def check_subset(label: str, value: Any, choices: Sequence[str]) -> tuple[str, ...]:
    """``value`` as a tuple of distinct ``choices`` (a list; empty: none); FieldError naming ``label``."""
    if not isinstance(value, (list, tuple)):
        raise FieldError(f"{label} must be a list of any of: {', '.join(choices)}; not {kind_of(value)}.")
    if len(value) > len(choices):
        raise FieldError(f"{label} has {len(value)} items; there are {len(choices)} choices: {', '.join(choices)}.")
    out = tuple(check_choice(label, v, choices) for v in value)
    if len(set(out)) != len(out):
        raise FieldError(f"{label} names {excerpt(next(v for v in out if out.count(v) > 1))} twice.")
    return out


def check_flag(label: str, value: Any) -> bool:
    """``value`` if it is true or false (a JSON boolean: "yes", 1 or null are not); FieldError otherwise."""
    if not isinstance(value, bool):
        shown = excerpt(value) if isinstance(value, (str, int, float)) else kind_of(value)
        raise FieldError(f"{label} must be true or false, not {shown}.")
    return value


def check_number(label: str, value: Any, lo: float | None = None, hi: float | None = None, *,
                 whole: bool = False, text: bool = False) -> float | int:
    """``value`` as a number; with ``lo`` and ``hi``, a finite one in [lo, hi] (a whole number when ``whole``).
    A number written as text ("3") is refused, naming the field (the page's sliders and number boxes send JSON
    numbers; an API client that sends text has its types wrong), unless ``text``. FieldError naming ``label``
    otherwise."""
    kind = "a whole number" if whole else "a number"
    span = "" if lo is None or hi is None else f" from {_bound(lo)} to {_bound(hi)}" if hi < MAX_WHOLE \
        else f" of at least {_bound(lo)}"
    if isinstance(value, str) and not text:
        raise FieldError(f"{label} must be {kind}{span}, not the text {excerpt(value)}: send it as a number "
                         "(without quotes).")
    if isinstance(value, str):
        check_text_field(label, value, EXCERPT_CHARS)
        try:
            value = float(value) if not value.strip().lstrip("+-").isdigit() else int(value)
        except ValueError:
            raise FieldError(f"{label} must be {kind}{span}, not {excerpt(value)}.") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FieldError(f"{label} must be {kind}{span}, not {kind_of(value)}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise FieldError(f"{label} must be a finite number{span}, got {value:g}.")
    if whole and isinstance(value, int) and abs(value) > MAX_WHOLE:
        raise FieldError(f"{label} must be {kind}{span}, got {_number_words(value)}.")
    if span and (not lo <= value <= hi or (whole and value != int(value))):
        raise FieldError(f"{label} must be {kind}{span}, got {_number_words(value)}.")
    if whole and value != int(value):
        raise FieldError(f"{label} must be {kind}, got {_number_words(value)}.")
    return int(value) if whole or isinstance(value, int) else float(value)


@dataclass(frozen=True)
class Spec:
    """A field's kind and range, as a dataclass field's ``metadata["spec"]``: ``kind`` is "text", "whole",
    "number", "flag", "choice" or "subset" (a list of distinct choices, possibly empty); ``lo``/``hi`` the range
    of a number; ``limit`` the deployment limit (an attribute of ``components.deploy.limits.Limits``) that caps
    ``hi`` or a text's length; ``choices`` the words a choice takes (or a function that says them when asked:
    a registry that may grow after import); ``max_chars`` a text's length; ``empty`` whether a text may be blank;
    ``none`` whether null is taken (and means ``none_means``)."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    limit: str | None = None
    choices: tuple[str, ...] | Callable[[], tuple[str, ...]] = ()
    max_chars: int = MAX_NAME_CHARS
    empty: bool = True
    none: bool = False

    def options(self) -> tuple[str, ...]:
        """The words a choice (or a subset) takes now."""
        return tuple(self.choices()) if callable(self.choices) else self.choices

    def upper(self, limits: Any = None) -> float | int | None:
        """The largest value this deployment takes: ``hi``, or the deployment's limit where lower."""
        cap = getattr(limits, self.limit, None) if limits is not None and self.limit else None
        if self.kind == "text":
            return cap if cap is not None else self.max_chars
        if cap is None:
            return self.hi
        return cap if self.hi is None else min(self.hi, cap)

    def check(self, name: str, value: Any, limits: Any = None) -> Any:
        """The value, checked (a number as an int or a float); FieldError naming ``name`` otherwise.
        Past a deployment limit the message names the limit's environment variable."""
        if value is None and self.none:
            return None
        env = getattr(limits, "ENV", {}).get(self.limit, "") if self.limit else ""
        cap = self.upper(limits)
        if self.kind == "text":
            text = check_text_field(name, value, self.max_chars if env else cap)
            if not self.empty and not text.strip():
                raise FieldError(f"{name} is empty: type a message for the model to answer.")
            if env and (why := limits.over(self.limit, len(text), f"{name} is {len(text)} characters long")):
                raise FieldError(why)
            return text
        if self.kind == "flag":
            return check_flag(name, value)
        if self.kind == "choice":
            return check_choice(name, value, self.options())
        if self.kind == "subset":
            return check_subset(name, value, self.options())
        whole = self.kind == "whole"
        try:
            number = check_number(name, value, self.lo, self.hi if self.hi is not None else MAX_WHOLE, whole=whole)
        except FieldError:
            if cap is None or self.lo is None:
                raise
            number = check_number(name, value, self.lo, cap, whole=whole)   # the same refusal, in this range's words
        if env and (why := limits.over(self.limit, number, f"{name} is {_number_words(number)}")):
            raise FieldError(why)   # the deployment's own check (components.deploy.limits.Limits.over)
        return number

    def words(self, limits: Any = None) -> str:
        """The range in words, for the docs and the API's help: "a whole number from 1 to 32" ..."""
        env = getattr(limits, "ENV", {}).get(self.limit) if limits is not None and self.limit else None
        where = f" (`{env}`)" if env else ""
        if self.kind == "text":
            return f"text, at most {self.upper(limits)} characters{where}" + ("" if self.empty else ", not blank")
        if self.kind == "flag":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(f"`{c}`" for c in self.options())
        if self.kind == "subset":
            return "a list of any of " + ", ".join(f"`{c}`" for c in self.options()) + " (each at most once)"
        kind = "a whole number" if self.kind == "whole" else "a number"
        hi = self.upper(limits)
        top = "2**63 - 1" if hi is None or hi >= MAX_WHOLE else _bound(hi)
        return f"{kind} from {self.lo:g} to {top}{where}" + (" or null" if self.none else "")
