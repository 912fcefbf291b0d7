"""What a visitor asks for: ``RunRequest``, the page's and the API's fields by name.

``RunRequest``'s fields and defaults come from ``RunConfig`` (the settings the page offers,
``CONFIG_FIELDS``), plus the app's own: the model and reward choices, the second setting and
the race chart's axis. The page passes its inputs by these names; the runtime
(``components/session/stream.py``) checks and races them. Imports only ``specrej``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import field, make_dataclass
from typing import Any

from specrej import RunConfig
from specrej.arms import DEFAULT_ARMS, ArmSpec, parse_arms
from specrej.config import AUTO
from specrej.core.config import DEFAULT_CPU_BUDGET

MAX_SEED = 2**63 - 1
MAX_ARMS = 5   # arm slots on the page: Best-of-N, two Speculative Rejection settings, the two rivals
RIVALS = ("deepconf", "stbon")   # the request's checkboxes: each races that rival (plain booleans, as the guard wants)
X_AXIS_CHOICES = ("time", "flops")   # the verdict chart's x axis


# ---------------------------------------------------------------- the request

CONFIG_FIELDS = ("n", "alpha", "max_new_tokens", "temperature", "top_p", "seed", "budget", "decision", "interval",
                 "first_decision")
SR_STARTS = ("same", "auto")   # Speculative Rejection starts with Best-of-N's N, or fills memory at first_decision
# The page's defaults: the library's, except N and the first decision. N = the CPU budget's slots / 14
# tokens (32): Speculative Rejection opens with at most as many rows as Best-of-N writes answers, so with coupled
# randomness every answer it can pick is one Best-of-N writes too, and its result always falls on Best-of-N's
# curve (the verdict is a time, never only a bound). Two decisions on every example prompt.
PAGE_DEFAULTS = {"n": DEFAULT_CPU_BUDGET // 14, "first_decision": 14}
_DEFAULTS = {**{f.name: f.default for f in dataclasses.fields(RunConfig)}, **PAGE_DEFAULTS}


class _Request:
    def config(self, progress_every: int) -> RunConfig:
        """A validated RunConfig (ValueError with a message that says what to change)."""
        kw = {name: getattr(self, name) for name in CONFIG_FIELDS}
        kw["budget"] = None if kw["budget"] in (None, 0, "") else kw["budget"]
        kw["rule"] = _DEFAULTS["rule"] if self.rule in (None, "") else self.rule   # RunConfig checks the rest
        seed = kw["seed"]
        if isinstance(seed, int) and not isinstance(seed, bool) and seed > MAX_SEED:
            raise ValueError(f"seed={seed} is too large: use a seed below 2**63.")
        return RunConfig(prompt=self.prompt if isinstance(self.prompt, str) else "", progress_every=progress_every,
                         **kw)

    def arms(self, base: tuple = DEFAULT_ARMS) -> tuple[ArmSpec, ...]:
        """The run's arms: ``base``, and with ``second`` a second Speculative Rejection setting
        (both Speculative Rejection arms then name their settings)."""
        arms = list(parse_arms(base))
        if self.second is True:
            differ = self.second_decision != self.decision
            first = ArmSpec("sr", (("alpha", self.alpha),) + ((("decision", self.decision),) if differ else ()))
            other = ArmSpec("sr", (("alpha", self.second_alpha),)
                            + ((("decision", self.second_decision),) if differ else ()))
            k = next((i for i, a in enumerate(arms) if a.method == "sr" and not a.overrides), None)
            if k is None:
                arms.append(first)
            else:
                arms[k] = first
            arms.append(other)
        for r in RIVALS:
            if getattr(self, r) not in (True, False, None, 0, 1):
                raise ValueError(f"{r}={getattr(self, r)!r}: true or false (race that rival too, or not).")
        arms += [ArmSpec(r) for r in RIVALS if getattr(self, r) and not any(a.method == r for a in arms)]
        if self.sr_start not in SR_STARTS:
            raise ValueError(f"sr_start={self.sr_start!r}: choose 'same' (Best-of-N's N) or 'auto' (fills memory at "
                             "the first decision).")
        if self.sr_start == "auto":   # the paper's first batch: every SR arm without its own N fills memory
            arms = [dataclasses.replace(a, overrides=a.overrides + (("n", AUTO),))
                    if a.method == "sr" and "n" not in dict(a.overrides) else a for a in arms]
        arms = parse_arms([dataclasses.replace(a, id="") for a in arms])
        if len(arms) > MAX_ARMS:
            raise ValueError(f"{len(arms)} arms do not fit the page (at most {MAX_ARMS}): turn off the second "
                             "setting.")
        return arms


RunRequest = make_dataclass(
    "RunRequest",
    [("prompt", Any, field(default="")), ("model", Any, field(default="")), ("reward", Any, field(default="")),
     ("preference", Any, field(default=""))]
    + [(name, Any, field(default=_DEFAULTS[name])) for name in CONFIG_FIELDS]
    + [("second", Any, field(default=False)), ("second_alpha", Any, field(default=0.9)),
       ("second_decision", Any, field(default=_DEFAULTS["decision"])), ("x_axis", Any, field(default="time")),
       ("sr_start", Any, field(default="auto")), ("stop_when_matched", Any, field(default=False)),
       ("rule", Any, field(default=_DEFAULTS["rule"])), ("fit", Any, field(default=True)),
       ("step", Any, field(default=False)), ("deepconf", Any, field(default=False)),
       ("stbon", Any, field(default=False))],
    bases=(_Request,), frozen=True)
RunRequest.__doc__ = ("What the user asked for, as the page (or the API) sends it, by name: the RunConfig "
                      "settings the page offers, the model and reward choices, a second Speculative Rejection "
                      "setting to compare, the race chart's axis, how Speculative Rejection starts ('same' N as "
                      "Best-of-N, or 'auto': the rows that fill memory at first_decision tokens) and whether the "
                      "race stops Best-of-N once it matches Speculative Rejection's winner, and the rule that picks which "
                      "candidates a decision keeps (specrej.core.rules); whether a race too long for this machine as it "
                      "is now plays the labelled recording of the same race instead (fit; session/pace.py: load "
                      "never changes the settings) and whether the page "
                      "steps through the decisions at the end (step), and which rivals race too (deepconf, stbon: "
                      "each with its library defaults and Best-of-N's N; their winners picked by the reward).")
REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(RunRequest))
