"""The core's field checks, shared by ``RunConfig`` (``config.py``) and the rivals' settings (``settings.py``): a
dataclass field that carries its help text, whole numbers and finite numbers checked with messages that name the
field. Imports nothing of the core, so the config, the settings and the methods' descriptors (``about.py``) import
it and not each other in a circle."""
from __future__ import annotations

import math
from dataclasses import field

PICKS = ("reward", "paper")   # who names a rival arm's winner (its settings' pick): the race's reward or the paper's rule


def described(default, help, **kw):
    """A dataclass field with its help text (the CLI's ``--help``, ``RunConfig.help()``)."""
    return field(default=default, metadata={"help": help, **kw})


def is_number(x) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_int(cfg, name: str, lo: int, hint: str) -> None:
    """``cfg.name`` as a whole number >= ``lo`` (a float such as 8.0 becomes 8, frozen dataclasses too); else a
    ValueError naming the field and ``hint``."""
    v = getattr(cfg, name)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
        object.__setattr__(cfg, name, v)   # frozen settings too
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise ValueError(f"{name}={shown} is not allowed: {hint}.")
