"""Arms: which methods race, and with which settings.

An arm spec is ``method[:key=value,...]``: ``bon``, ``sr:alpha=0.5``,
``sr:alpha=0.9,decision=interval,interval=16``, ``deepconf:warmup=8``, ``stbon:buffer=0.5``. The keys are the
settings the method accepts (its registry entry's ``options``): ``RunConfig`` fields, and fields of the method's
own settings class (``About.settings``, ``specrej.core.settings``: DeepConf's ``warmup``, ``window`` ...,
ST-BoN's ``buffer``, both ``pick``). An arm's config is the base with its RunConfig overrides, its ``settings``
the method's settings in the base (``About.settings_for``) with its settings overrides; both validated, errors
naming the arm. Parse errors name the bad key or value.

``REGISTRY`` says what a method is to a user: display name, short name and the settings an arm
spec may give it, and its ``About`` (``specrej.core.about``: how it schedules rows, what it cuts by
and in what words, its signal, its citation and adaptations), which the page, the charts, the why box,
the cost model and the bench read instead of its name. The function itself is ``methods.METHODS[key]``.
A new method is one function in ``METHODS``, one ``About`` and one ``ArmKind`` here (``register``), plus
its colours in ``components/looks.py`` (a default look serves until then).

Each arm gets a stable id: the method key for its first arm, then ``sr2``, ``sr3`` ... Events
carry that id in their ``arm`` field (``ArmSpec.events`` relabels the method's stream).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, Sequence

from .core.config import AUTO, RunConfig
from .core.events import Event
from .methods import METHODS, race
from .core.about import ABOUTS, GENERIC, About

def _config_names() -> set[str]:
    """RunConfig's fields an arm spec may name (``settings`` is set through its method's own fields)."""
    return {f.name for f in dataclasses.fields(RunConfig)} - {"settings"}


class ArmSpecError(ValueError):
    """An arm spec that names an unknown method, key or value."""


@dataclass(frozen=True)
class ArmKind:
    """A method in ``METHODS`` as a user names it (plain data)."""

    key: str                    # its key in METHODS
    name: str                   # display name
    options: tuple[str, ...]    # RunConfig fields, and its settings class's fields, an arm spec of it may set
    short: str = ""             # for narrow places (table headers): "SR", "BoN"; default: the name
    prunes: bool = False        # it decides mid-answer which candidates go on (a verdict places it on the
                                # baseline's Best-of-N curve; its decisions can be stepped through)
    about: About | None = None  # what it is, as data (specrej.core.about): schedule, words, signal, citation;
                                # None: ABOUTS[key]

    def __post_init__(self) -> None:
        if self.about is None:   # a method with no description of its own: rows in passes, generic words
            object.__setattr__(self, "about", ABOUTS.get(self.key, GENERIC))
        unknown = set(self.options) - _config_names() - set(self.setting_names)
        if unknown:
            raise ValueError(f"options {sorted(unknown)} are neither RunConfig fields nor fields of "
                             f"{self.key}'s settings.")

    @property
    def setting_names(self) -> tuple[str, ...]:
        """The fields of its own settings class (``About.settings``; none for a method without one)."""
        cls = self.about.settings if self.about is not None else None
        return tuple(f.name for f in dataclasses.fields(cls)) if cls is not None else ()

    @property
    def method(self):
        return METHODS[self.key]


REGISTRY: dict[str, ArmKind] = {}


def register(kind: ArmKind) -> ArmKind:
    """Add (or replace) a registry entry; its method must already be in ``METHODS``."""
    if kind.key not in METHODS:
        raise ValueError(f"register {kind.key!r} in specrej.methods.METHODS first.")
    REGISTRY[kind.key] = kind
    ABOUTS[kind.key] = kind.about   # the cost model reads a method's schedule by its key
    return kind


register(ArmKind("bon", "Best-of-N", ("n",), "BoN"))
register(ArmKind("bonc", "Best-of-N, continuous batching", ("n",), "BoN-c"))   # vLLM backend only
register(ArmKind("sr", "Speculative Rejection", ("n", "alpha", "decision", "interval", "keep_finished",
                                                 "first_decision", "rule"), "SR", prunes=True))

register(ArmKind("deepconf", ABOUTS["deepconf"].label("DeepConf-style"),
                 ("n", "warmup", "conf_percentile", "window", "conf_topk", "consensus", "pick"),
                 "DeepConf-style", prunes=True))
register(ArmKind("stbon", ABOUTS["stbon"].label("ST-BoN-style"), ("n", "buffer", "pick"), "ST-BoN-style",
                 prunes=True))

def rival_keys() -> tuple[str, ...]:
    """Every registered method that decides on its own signal, not the reward (``About.rival``), in registry order:
    the bench's ``--rivals``, the page's "Also race". Read when asked: a method registered later is among them."""
    return tuple(k for k, kind in REGISTRY.items() if kind.about.rival)


DEFAULT_ARMS = ("bon", "sr")   # Best-of-N (the baseline) and Speculative Rejection at the config's alpha


@dataclass(frozen=True)
class ArmSpec:
    method: str
    overrides: tuple[tuple[str, object], ...] = ()
    id: str = ""

    @property
    def kind(self) -> ArmKind:
        return REGISTRY[self.method]

    @property
    def spec(self) -> str:
        """The spec as one writes it: ``sr:alpha=0.9``."""
        return self.method + (":" + ",".join(f"{k}={_show(v)}" for k, v in self.overrides) if self.overrides else "")

    @property
    def label(self) -> str:
        """Display name with the settings it changes: ``Speculative Rejection (alpha=0.9)``."""
        extra = ", ".join(f"{k}={_show(v)}" for k, v in self.overrides)
        return self.kind.name + (f" ({extra})" if extra else "")

    @property
    def short(self) -> str:
        """Short label: ``SR alpha=0.9``."""
        extra = " ".join(f"{k}={_show(v)}" for k, v in self.overrides)
        return (self.kind.short or self.kind.name) + (f" {extra}" if extra else "")

    def config(self, base: RunConfig) -> RunConfig:
        """The base config with this arm's overrides, validated (ArmSpecError naming the arm): its RunConfig
        fields replaced, and, for a method with settings of its own, ``settings`` the method's settings in the
        base (``About.settings_for``) with the arm's settings overrides."""
        own = set(self.kind.setting_names)
        general = {k: v for k, v in self.overrides if k not in own}
        try:
            if own:
                mine = {k: v for k, v in self.overrides if k in own}
                general["settings"] = dataclasses.replace(self.kind.about.settings_for(base), **mine)
            return dataclasses.replace(base, **general)
        except (ValueError, TypeError) as e:
            raise ArmSpecError(f"arm {self.spec!r}: {e}") from None

    def events(self, lm, reward, base: RunConfig, admission=None) -> Iterator[Event]:
        """The method's event stream on this arm's config, every event carrying this arm's id (``admission``: a
        caller's ``core.budget.admit`` of it, which the method uses instead of admitting again)."""
        kw = {"admission": admission} if admission is not None and _takes(self.kind.method, "admission") else {}
        stream = self.kind.method(lm, reward, self.config(base), **kw)   # a registered method need not take one
        return _relabel(stream, self.id)


def _takes(fn, name: str) -> bool:
    """``fn`` accepts the keyword ``name`` (by name or through ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in params)


def _relabel(stream: Iterator[Event], arm: str) -> Iterator[Event]:
    try:
        for event in stream:
            yield event if event.arm == arm else dataclasses.replace(event, arm=arm)
    finally:
        stream.close()


def _show(v) -> str:
    return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _convert(text: str, key: str, raw: str, kind: ArmKind | None = None):
    """``raw`` as the type of ``key``'s default: the field of the method's settings class (``kind``), else
    RunConfig's."""
    cls = kind.about.settings if kind is not None and key in kind.setting_names else RunConfig
    default = next(f.default for f in dataclasses.fields(cls) if f.name == key)
    value = raw.strip()
    if not value:
        raise ArmSpecError(f"arm {text!r}: {key} has no value; write {key}=<value>.")
    if isinstance(default, bool):
        if value.lower() in _TRUE + _FALSE:
            return value.lower() in _TRUE
        raise ArmSpecError(f"arm {text!r}: {key}={value!r} is not true or false.")
    if key == "n" and value.lower() == AUTO:
        return AUTO
    if isinstance(default, int):
        try:
            return int(value)
        except ValueError:
            raise ArmSpecError(f"arm {text!r}: {key}={value!r} is not an integer.") from None
    if isinstance(default, float):
        try:
            return float(value)
        except ValueError:
            raise ArmSpecError(f"arm {text!r}: {key}={value!r} is not a number.") from None
    return value


def parse_arm(text: str) -> ArmSpec:
    """``method[:key=value,...]`` -> an ArmSpec without id (``parse_arms`` assigns it)."""
    if not isinstance(text, str) or not text.strip():
        raise ArmSpecError("an arm spec is empty: write a method such as 'bon' or 'sr:alpha=0.9'.")
    text = text.strip()
    method, colon, rest = text.partition(":")
    method = method.strip()
    if method not in REGISTRY:
        raise ArmSpecError(f"arm {text!r}: unknown method {method!r}; choose one of {', '.join(REGISTRY)}.")
    kind = REGISTRY[method]
    overrides: dict[str, object] = {}
    for part in (p for p in rest.split(",") if p.strip()) if rest else ():
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq:
            raise ArmSpecError(f"arm {text!r}: {part.strip()!r} is not key=value.")
        if key not in kind.options:
            raise ArmSpecError(f"arm {text!r}: {kind.name} does not take {key!r}; it takes "
                               f"{', '.join(kind.options) or 'no settings'}.")
        if key in overrides:
            raise ArmSpecError(f"arm {text!r}: {key} is set twice.")
        overrides[key] = _convert(text, key, raw, kind)
    if colon and not overrides:
        raise ArmSpecError(f"arm {text!r}: nothing after ':'; write key=value pairs or just {method!r}.")
    return ArmSpec(method, tuple(overrides.items()))


def parse_arms(specs: Sequence[str | ArmSpec] = DEFAULT_ARMS) -> tuple[ArmSpec, ...]:
    """Parse specs (strings or ArmSpecs) and give each arm its id, in order."""
    if isinstance(specs, str):
        specs = [specs]
    if not specs:
        raise ArmSpecError("no arms: name at least one, e.g. 'bon sr'.")
    seen: dict[str, int] = {}
    out = []
    for s in specs:
        arm = parse_arm(s) if isinstance(s, str) else s
        k = seen[arm.method] = seen.get(arm.method, 0) + 1
        out.append(dataclasses.replace(arm, id=arm.method if k == 1 else f"{arm.method}{k}"))
    return tuple(out)


def race_arms(lm, reward, base: RunConfig, arms: Sequence[str | ArmSpec] = DEFAULT_ARMS,
              referee=None, admissions=None) -> Iterator[Event]:
    """Every arm's events, interleaved at equal compute (``methods.race``; ``referee`` as there, e.g.
    ``match.StopWhenMatched``). Each arm's config is validated before any model work. ``admissions``: arm id ->
    a caller's admission of that arm (the page's planner admits each arm once)."""
    arms = parse_arms(arms) if not all(isinstance(a, ArmSpec) and a.id for a in arms) else tuple(arms)
    streams = {}
    for arm in arms:
        arm.config(base)  # raises ArmSpecError before any arm starts
    for arm in arms:
        streams[arm.id] = arm.events(lm, reward, base, (admissions or {}).get(arm.id))
    return race(streams, referee, sequential=lm.backend.exclusive)
