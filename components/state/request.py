"""What a visitor asks for: ``RunRequest``, the race's fields by name, each with its kind, range and help.

One typed, frozen dataclass. Each field's ``metadata`` holds its ``Spec`` (``fields.py``: kind, range, the
deployment limit that caps it) and its ``help``; the page's controls read their ranges and choices from
it (``components/ui.py``), the API's parameters are its fields in order (``app.request_signature``), and
``docs/deploying.md``'s table of the race's fields is ``field_table()`` (``tests/test_docs.py`` compares them).
Every value is checked here, once, before any work: ``RunRequest(...)`` checks kinds and ranges and
``RunRequest.parse(values, limits)`` (the API's and the page's raw values) also the deployment's limits;
a refusal is a ``FieldError`` naming the field. The settings the page offers come from ``RunConfig``
(``CONFIG_FIELDS``); the rest are the app's own. Imports only ``specrej``.
"""
from __future__ import annotations

import dataclasses
import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specrej import RunConfig
from specrej.arms import DEFAULT_ARMS, ArmSpec, parse_arms, rival_keys
from specrej.core.config import AUTO, DECISIONS
from specrej.core.budget import opening_rows
from specrej.core.config import DEFAULT_CPU_BUDGET
from specrej.core.rules import RULES

from components.state.fields import EXCERPT_CHARS, MAX_WHOLE, FieldError, Spec

MAX_SEED = 2**53 - 1   # the largest whole number a browser's number keeps exactly (a larger seed came back another)


def max_arms() -> int:
    """Arm slots on the page: Best-of-N, two Speculative Rejection settings, and every rival."""
    return 3 + len(rival_keys())

X_AXIS_CHOICES = ("time", "flops")   # the verdict chart's x axis
SR_STARTS = ("same", "auto")   # Speculative Rejection starts with Best-of-N's N, or fills memory at first_decision
CONFIG_FIELDS = ("n", "alpha", "max_new_tokens", "temperature", "top_p", "seed", "budget", "decision", "interval",
                 "first_decision")
# The page's defaults: the library's, except N and the first decision. N = the CPU budget's slots / 14
# tokens (32): Speculative Rejection opens with at most as many rows as Best-of-N writes answers, so with coupled
# randomness every answer it can pick is one Best-of-N writes too, and its result always falls on Best-of-N's
# curve (the verdict is a time, never only a bound). Two decisions on every example prompt.
PAGE_DEFAULTS = {"n": opening_rows(DEFAULT_CPU_BUDGET, 14), "first_decision": 14}
_DEFAULTS = {**{f.name: f.default for f in dataclasses.fields(RunConfig)}, **PAGE_DEFAULTS}
_HELP = RunConfig.help()


# characters that show nothing on their own: format characters (zero-width spaces and joiners, direction marks, a
# byte-order mark), spaces and separators, controls, combining marks with nothing to combine with, private use and
# unassigned code points, and the letters and symbols that are drawn blank (Hangul fillers, the blank Braille cell)
_UNSEEN_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me", "Co", "Cn", "Cs"})
_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def _visible(ch: str) -> bool:
    return not ch.isspace() and ch not in _BLANK_GLYPHS and unicodedata.category(ch) not in _UNSEEN_CATEGORIES


def _number_words(value: Any) -> str:
    """A number a client sent, as a number (never quoted as text); one too long to print by its length."""
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value) if value.bit_length() <= 4 * EXCERPT_CHARS else ""
    return text if text and len(text) <= EXCERPT_CHARS else "a number too long to quote"


@dataclass(frozen=True)
class RequestSpec(Spec):
    """A race field's ``Spec`` with the request's own checks on top of ``Spec.check``: text a model reads
    (``plain``) holds no control character but newline (``\\n``, also as ``\\r\\n``) and tab, and, where it may not be
    blank (``empty=False``), shows something: zero-width spaces alone are blank; a yes/no field sent a number
    names the number as a number ("not 1", not "not '1'")."""

    plain: bool = False

    def check(self, name: str, value: Any, limits: Any = None) -> Any:
        if self.kind == "flag" and isinstance(value, (int, float)) and not isinstance(value, bool):
            raise FieldError(f"{name} must be true or false, not {_number_words(value)}.")
        checked = super().check(name, value, limits)
        if self.kind != "text" or not isinstance(checked, str) or not self.plain:
            return checked
        for i, ch in enumerate(checked):
            if unicodedata.category(ch) == "Cc" and ch not in "\n\t" \
                    and not (ch == "\r" and checked[i + 1:i + 2] == "\n"):
                raise FieldError(f"{name} holds a control character (U+{ord(ch):04X}) at character {i + 1}: only "
                                 "newlines and tabs are allowed; remove it and send again.")
        if not self.empty and not any(_visible(ch) for ch in checked):
            raise FieldError(f"{name} has no visible text (only spaces or invisible characters such as zero-width "
                             "spaces): type a message for the model to answer.")
        return checked

    def words(self, limits: Any = None) -> str:
        said = super().words(limits)
        if self.kind == "text" and self.plain:
            said = said.replace(", not blank", ", with visible text") + "; no control characters but newline and tab"
        return said


def _f(default: Any, spec: Spec, help: str | None = None, name: str | None = None):
    return field(default=default, metadata={"spec": spec, "help": help or _HELP[name]})


@dataclass(frozen=True, kw_only=True)
class RunRequest:
    """What the user asked for, as the page (or the API) sends it, by name: the RunConfig settings the page
    offers, the model and reward choices, a second Speculative Rejection setting to compare, the race chart's
    axis, how Speculative Rejection starts, whether Best-of-N stops once it matches, the rule a decision keeps
    by, whether a race too long for this machine now plays the labelled recording of the same race (``fit``;
    load never changes the settings), whether the page steps through the decisions at the end, and which rivals
    race too (``rivals``)."""

    prompt: str = _f("", RequestSpec("text", limit="max_prompt_chars", max_chars=20_000, empty=False, plain=True),
                     "The message the model answers (through its chat template).")
    model: str = _f("", Spec("text"), "The generator: one of the models this deployment offers.")
    reward: str = _f("", Spec("text"), "The reward: one of the rewards this deployment offers.")
    preference: str = _f("", RequestSpec("text", max_chars=500, plain=True),
                         "With reward 'preference': the answer wanted, in words.")
    n: int = _f(_DEFAULTS["n"], Spec("whole", lo=1, limit="max_n"),
                "Best-of-N's N: how many answers it writes to the end (Speculative Rejection's too with "
                "sr_start='same').")
    alpha: float = _f(_DEFAULTS["alpha"], Spec("number", lo=0.0, hi=0.95), name="alpha")
    max_new_tokens: int = _f(_DEFAULTS["max_new_tokens"], Spec("whole", lo=1, limit="max_new_tokens"),
                             name="max_new_tokens")
    temperature: float = _f(_DEFAULTS["temperature"], Spec("number", lo=0.05, hi=2.0), name="temperature")
    top_p: float = _f(_DEFAULTS["top_p"], Spec("number", lo=0.05, hi=1.0), name="top_p")
    seed: int = _f(_DEFAULTS["seed"], Spec("whole", lo=0, hi=MAX_SEED), name="seed")
    budget: int | None = _f(0, Spec("whole", lo=0, limit="max_budget", none=True),
                            "Memory budget in KV-cache slots (rows x length) both methods obey; 0 or null: "
                            f"automatic ({DEFAULT_CPU_BUDGET} on a CPU, from free memory on a GPU).")
    decision: str = _f(_DEFAULTS["decision"], Spec("choice", choices=DECISIONS), name="decision")
    interval: int = _f(_DEFAULTS["interval"], Spec("whole", lo=1, hi=256), name="interval")
    first_decision: int = _f(_DEFAULTS["first_decision"], Spec("whole", lo=1, hi=128),
                             "With sr_start='auto': Speculative Rejection opens with the rows that fill the budget "
                             "at this many generated tokens, where its first decision comes.")
    second: bool = _f(False, RequestSpec("flag"), "Race a second Speculative Rejection setting (three arms).")
    second_alpha: float = _f(0.9, Spec("number", lo=0.0, hi=0.95), "The second setting's alpha.")
    second_decision: str = _f(_DEFAULTS["decision"], Spec("choice", choices=DECISIONS),
                              "When the second setting decides.")
    x_axis: str = _f("time", Spec("choice", choices=X_AXIS_CHOICES), "The verdict chart's x axis.")
    sr_start: str = _f("auto", Spec("choice", choices=SR_STARTS),
                       "Speculative Rejection starts with Best-of-N's N ('same') or the rows that fill the budget "
                       "at first_decision tokens ('auto', the paper's first batch).")
    stop_when_matched: bool = _f(False, RequestSpec("flag"), "Stop Best-of-N once it matches Speculative Rejection's winner.")
    rule: str = _f(_DEFAULTS["rule"], Spec("choice", choices=tuple(RULES)), name="rule")
    fit: bool = _f(True, RequestSpec("flag"), "When this machine is too busy for the race to end in time, play the "
                   "labelled recording of the same race instead (the race itself is never changed).")
    step: bool = _f(False, RequestSpec("flag"), "Step through the decisions at the end.")
    rivals: tuple[str, ...] = _f((), RequestSpec("subset", choices=rival_keys),
                                 "Rivals to race too (methods that decide on their own signal, not the reward), "
                                 "each at its library defaults with Best-of-N's N; the reward picks each one's "
                                 "winner.")
    lecture: bool = _f(False, RequestSpec("flag"), "Lecture mode: the race plays the same way every time, live when this "
                       "machine's measurement says it ends within its target, else its labelled recording paced to the "
                       "live race's time (``components/session/pace.py``). Never changes the race's settings.")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):   # kinds and ranges; numbers as ints or floats
            object.__setattr__(self, f.name, f.metadata["spec"].check(f.name, getattr(self, f.name)))

    # -- from raw values
    @classmethod
    def parse(cls, values: Mapping[str, Any] | Sequence[Any], limits: Any = None) -> RunRequest:
        """The request from raw values (by name, or positional in ``REQUEST_FIELDS`` order), every field
        checked by kind and range and (``limits``: a ``components.deploy.limits.Limits``) against the
        deployment's limits; FieldError naming the first field that fails."""
        if not isinstance(values, Mapping):
            values = list(values)
            if len(values) != len(REQUEST_FIELDS):
                raise FieldError(f"A run takes {len(REQUEST_FIELDS)} values ({', '.join(REQUEST_FIELDS[:3])} ...); "
                                 f"the request has {len(values)}.")
            values = dict(zip(REQUEST_FIELDS, values))
        unknown = [k for k in values if k not in REQUEST_FIELDS]
        if unknown and unknown[0] in rival_keys():   # the field of each rival before ``rivals`` named them all
            raise FieldError(f"A run has no field {unknown[0]!r}: race it with rivals=[{unknown[0]!r}].")
        if unknown:
            raise FieldError(f"A run has no field {str(unknown[0])[:40]!r}.")
        specs = {f.name: f.metadata["spec"] for f in dataclasses.fields(cls)}
        return cls(**{k: specs[k].check(k, v, limits) for k, v in values.items()})   # in this deployment's words

    def check_limits(self, limits: Any) -> None:
        """FieldError naming the first field past this deployment's limits (its environment variable)."""
        if limits is None:
            return
        for f in dataclasses.fields(self):
            f.metadata["spec"].check(f.name, getattr(self, f.name), limits)

    # -- what the race runs
    def config(self, progress_every: int) -> RunConfig:
        """The RunConfig of these settings (already checked: RunConfig's own checks pass)."""
        kw = {name: getattr(self, name) for name in CONFIG_FIELDS}
        kw["budget"] = self.budget or None   # 0 or null: automatic
        return RunConfig(prompt=self.prompt, progress_every=progress_every, rule=self.rule, **kw)

    def arms(self, base: tuple = DEFAULT_ARMS) -> tuple[ArmSpec, ...]:
        """The run's arms: ``base``, and with ``second`` a second Speculative Rejection setting
        (both Speculative Rejection arms then name their settings)."""
        arms = list(parse_arms(base))
        if self.second:
            differ = self.second_decision != self.decision
            first = ArmSpec("sr", (("alpha", self.alpha),) + ((("decision", self.decision),) if differ else ()))
            other = ArmSpec("sr", (("alpha", self.second_alpha),)
                            + ((("decision", self.second_decision),) if differ else ()))
            k = next((i for i, a in enumerate(arms) if a.kind.about.alpha_applies and not a.overrides), None)
            if k is None:
                arms.append(first)
            else:
                arms[k] = first
            arms.append(other)
        arms += [ArmSpec(r) for r in rival_keys() if r in self.rivals and not any(a.method == r for a in arms)]
        if self.sr_start == "auto":   # the paper's first batch: every SR arm without its own N fills memory
            arms = [dataclasses.replace(a, overrides=a.overrides + (("n", AUTO),))
                    if a.kind.about.auto_n and "n" not in dict(a.overrides) else a for a in arms]
        arms = parse_arms([dataclasses.replace(a, id="") for a in arms])
        if len(arms) > max_arms():
            raise FieldError(f"second: {len(arms)} arms do not fit the page (at most {max_arms()}): turn off the "
                             "second setting or a rival.")
        return arms


REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RunRequest))
SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in dataclasses.fields(RunRequest)}
HELP: dict[str, str] = {f.name: f.metadata["help"] for f in dataclasses.fields(RunRequest)}


def field_table(limits: Any = None) -> str:
    """The race's fields as a markdown table (name, what it takes, default): ``docs/deploying.md`` holds it."""
    rows = ["| Field | Takes | Default |", "|---|---|---|"]
    for f in dataclasses.fields(RunRequest):
        default = ("`\"\"`" if f.default == "" else f"`{json.dumps(list(f.default))}`" if isinstance(f.default, tuple)
                   else f"`{str(f.default).lower() if isinstance(f.default, bool) else f.default}`")
        rows.append(f"| `{f.name}` | {f.metadata['spec'].words(limits)} | {default} |")
    return "\n".join(rows)
