"""One validated dataclass per run.

Every field has a default and a ``help`` that the CLI and the app read. ``__post_init__``
checks ranges and cross-field rules with messages that say what to change; it does no I/O.
Checks that need the model (the prompt's token count against the memory budget) live in
``specrej.core.budget`` (this module is part of the torch-free core).

RunConfig holds the settings every method shares, and Best-of-N's and Speculative Rejection's. A rival's own
settings (DeepConf's ``warmup``, ``window`` ..., ST-BoN's ``buffer``, both ``pick``) are its own frozen dataclass
(``specrej.core.settings``), carried in the one field ``settings`` (None: the method's defaults) and read through
the method's ``About.settings_for(cfg)``. ``flat()`` / ``from_flat()`` give and read every setting by its name in
one dict, the shape recordings and run metadata have always had.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Mapping

from .about import settings_fields, settings_from_flat
from .checks import described as _f, check_int as _int, is_number as _is_num
from .rules import RULES

DECISIONS = ("budget", "interval")
AUTO = "auto"
_EXAMPLE = {"alpha": 0.5, "temperature": 0.8, "top_p": 0.95}   # a valid value each, for a wrong type's message
CPU_BUDGET_ENV = "SPECREJ_CPU_BUDGET"
DEFAULT_CPU_BUDGET = 448   # KV slots a run gets on a CPU: 8 full-length rows of 48 tokens, or ~50 rows at token 8


@dataclass
class RunConfig:
    """One race's settings, shared by every arm (an arm spec overrides its own: ``specrej.arms``): the prompt, the
    candidates N, Speculative Rejection's rejection rate and decision points, sampling, the seed and the memory
    budget. Every field says what it takes (``dataclasses.fields(RunConfig)[i].metadata["help"]``, the CLI's
    ``--help``); a value out of range raises ``ValueError`` naming the field."""

    prompt: str = _f("", "The user's message; it goes through the model's chat template.")
    n: int | str = _f(16, "Number of candidates (N). Speculative Rejection also takes 'auto': as many as fill "
                      "the memory budget at first_decision generated tokens (the paper's first batch).")
    alpha: float = _f(0.5, "Rejection rate: each decision keeps round((1 - alpha) * n) candidates.")
    max_new_tokens: int = _f(48, "Most tokens a candidate may generate.")
    temperature: float = _f(0.8, "Sampling temperature (> 0).")
    top_p: float = _f(0.95, "Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p.")
    top_k: int = _f(50, "Sample among the k most likely tokens (0 = all).")
    seed: int = _f(0, "Seed; candidate i draws the same random numbers in both methods.")
    budget: int | None = _f(
        None,
        "Memory budget in KV-cache token slots (rows x length). None: from free memory on a GPU, "
        f"{CPU_BUDGET_ENV} (default {DEFAULT_CPU_BUDGET}) on a CPU.",
    )
    decision: str = _f("budget", "When Speculative Rejection decides: 'budget' (memory full, the paper's "
                       "decision token) or 'interval' (every `interval` tokens, and when memory is full).")
    interval: int = _f(16, "Tokens between decisions when decision='interval'.")
    first_decision: int = _f(8, "With n='auto': the generated tokens at which the first batch fills the budget "
                             "(so Speculative Rejection's first decision comes there).")
    rule: str = _f("paper", "Which candidates a decision keeps: 'paper' (highest partial reward, the paper's "
                   "rule) or a rule fitted on coupled runs, e.g. 'calibrated' (see specrej.core.rules).")
    keep_finished: bool = _f(False, "Finished candidates always stay in contention instead of competing "
                             "for kept slots (the reference code makes them compete).")
    settings: object | None = _f(None, "The arm's own method settings (a frozen dataclass named by its About: "
                                 "specrej.core.settings.DeepConfSettings, STBoNSettings); None: that method's "
                                 "defaults. Arm specs set it (deepconf:warmup=8, stbon:buffer=0.5).")
    stop: tuple[str, ...] = _f((), "Stop strings that end a candidate.")
    progress_every: int = _f(8, "Emit a Progress event every this many decoding steps (0 = never).")

    def __post_init__(self) -> None:
        self.stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        if not isinstance(self.prompt, str) or not self.prompt.strip():
            raise ValueError("prompt is empty: type a message for the model to answer.")
        check_text("prompt", self.prompt)
        if isinstance(self.n, str) and self.n.strip().lower() == AUTO:
            self.n = AUTO
        else:
            _int(self, "n", lo=1, hint="n is the number of candidates (at least 1), or 'auto'")
        for name in ("alpha", "temperature", "top_p"):   # the type first: "outside [0, 1)" for a str misleads
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name}={value!r} is a {type(value).__name__}, not a number: give a float "
                                 f"(e.g. {name}={_EXAMPLE[name]}).")
        if not _is_num(self.alpha) or not 0.0 <= self.alpha < 1.0:
            raise ValueError(f"alpha={self.alpha!r} is outside [0, 1): it is the fraction rejected per decision.")
        _int(self, "max_new_tokens", lo=1, hint="max_new_tokens must be a positive number of tokens")
        if not _is_num(self.temperature) or self.temperature <= 0:
            raise ValueError(f"temperature={self.temperature!r} must be > 0 (use a small value such as 0.1 "
                             "for nearly greedy sampling).")
        if not _is_num(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p!r} must be in (0, 1].")
        _int(self, "top_k", lo=0, hint="top_k is 0 (off) or a positive count")
        _int(self, "seed", lo=0, hint="seed must be a non-negative integer")
        if self.budget is not None:
            _int(self, "budget", lo=1, hint="budget is a positive number of KV-cache token slots, or None for auto")
        if not isinstance(self.rule, str) or self.rule.strip() not in RULES:
            raise ValueError(f"rule={self.rule!r} is unknown; choose one of {', '.join(RULES)}.")
        self.rule = self.rule.strip()
        if self.decision not in DECISIONS:
            raise ValueError(f"decision={self.decision!r} is unknown; choose one of {', '.join(DECISIONS)}.")
        _int(self, "interval", lo=1, hint="interval is a positive number of tokens")
        _int(self, "first_decision", lo=1, hint="first_decision is a positive number of generated tokens")
        _int(self, "progress_every", lo=0, hint="progress_every is 0 (off) or a positive step count")
        if self.settings is not None and (not is_dataclass(self.settings) or isinstance(self.settings, type)):
            raise ValueError(f"settings={self.settings!r} is not a method's settings: give a settings object such "
                             "as DeepConfSettings(warmup=8), or None for the method's defaults.")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop strings must be non-empty strings.")
        for s in self.stop:
            check_text("a stop string", s)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {f.name: f.metadata["help"] for f in fields(cls)}

    def flat(self) -> dict:
        """Every setting by name, as before the rivals' settings were their own classes (issue 40): RunConfig's
        fields, less ``settings``, plus every registered method's settings under their own names (``warmup``,
        ``window``, ``buffer``, ``pick`` ...), this config's ``settings`` over the defaults. JSON-ready; the race
        key, run metadata and ``from_flat`` read this shape."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "settings"}
        flat = settings_fields()
        if self.settings is not None:
            flat.update(asdict(self.settings))
        return {**out, **flat}

    @classmethod
    def from_flat(cls, flat: Mapping, **kw) -> "RunConfig":
        """A RunConfig from ``flat``'s shape (``flat()``, or a recording's config): RunConfig's fields as they are,
        the methods' settings back into the one method's settings object whose fields hold every setting away
        from its default (None when all are defaults; a ``settings`` dict, as ``dataclasses.asdict`` writes it, counts
        as settings by name); unknown keys are ignored; ``kw`` over ``flat``."""
        mine = {f.name for f in fields(cls)} - {"settings"}
        given = {**flat, **kw}
        own = given.get("settings")
        if isinstance(own, Mapping):
            given = {**given, **own}
        args = {k: v for k, v in given.items() if k in mine}
        return cls(**args, settings=own if own is not None and not isinstance(own, Mapping)
                   else settings_from_flat(given))


def check_text(name: str, value: str) -> None:
    """Raise ValueError when ``value`` is not valid Unicode text: a lone UTF-16 surrogate (such
    as ``\\ud800`` sent through the API) cannot be encoded, tokenised or written to a trace. The
    message gives the position, never the text itself (which could not be shown either)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{name} contains a character that is not valid text (U+{ord(value[e.start]):04X}, "
                         f"a lone UTF-16 surrogate, at position {e.start}): remove it and try again.") from None


def env_int(name: str, default: int, *, env: Mapping[str, str] | None = None, lo: int = 1,
            error: type[ValueError] = ValueError) -> int:
    """The integer environment variable ``name`` (``default`` when unset or blank); a value that is
    not an integer >= ``lo`` raises ``error`` naming the variable, never silently clamps."""
    env = os.environ if env is None else env
    raw = env.get(name)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = None
    if value is None or value < lo:
        raise error(f"{name}={raw!r} must be an integer >= {lo}.")
    return value
