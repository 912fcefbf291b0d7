"""How each method is shown: its colours, the kind of chart that suits it, what its rounds are called.

Presentation only (the library's ``specrej.arms.REGISTRY`` says what a method is: name, options).
``LOOKS`` maps a method key to its ``Look``; a method without one is shown with ``DEFAULT``
(a final-reward chart in neutral colours), so registering a new method in the library is enough to
see it in the app, and adding a ``Look`` here gives it its own colours and words.

Chart kinds: "pruning" (reward over tokens with the prunes), "final" (final reward when complete) and
"signal" (a rival's own signal over tokens, with its stops or its truncation: DeepConf, ST-BoN).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

CHART_KINDS = ("pruning", "final", "signal")


@dataclass(frozen=True)
class Look:
    colours: tuple[str, ...]    # hex colours: the first arm of this method gets the first, and so on
    chart: str                  # "pruning" | "final" | "signal"
    round_word: str = "round"   # what one of its Round events is: "decision", "pass"

    def __post_init__(self) -> None:
        if self.chart not in CHART_KINDS:
            raise ValueError(f"chart={self.chart!r}: use one of {', '.join(CHART_KINDS)}.")
        if not self.colours:
            raise ValueError("a look needs at least one colour.")

    def rounds(self, k: int) -> str:
        """'1 decision', '3 decisions', '2 passes'."""
        word = self.round_word
        return f"{k} {word}" + ("" if k == 1 else "es" if word.endswith("s") else "s")


# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies)
LOOKS: dict[str, Look] = {
    "bon": Look(("#0072B2", "#56B4E9"), "final", "pass"),
    "sr": Look(("#D55E00", "#CC79A7", "#E69F00"), "pruning", "decision"),
    "deepconf": Look(("#009E73",), "signal", "stop"),
    "stbon": Look(("#000000",), "signal", "truncation"),
}
def signal_axis(about) -> str:
    """A rival's signal chart's y axis, from its ``About.signal_axis`` ("name: what it is; higher = ..."): the
    name, then in small type which way is better ("higher = surer"; higher is better for both rivals)."""
    name, _, rest = (about.signal_axis or "the method's own signal").partition(": ")
    rest = rest.rpartition("; ")[2]   # "higher = surer": what a chart's height of ~300 px holds under the name
                                      # (the whole definition ran past the plot, over an export's subtitle)
    return name + (f"<br><span style='font-size:12px'>{rest}</span>" if rest else "")


DEFAULT = Look(("#009E73", "#999999"), "final", "round")


def look(method: str) -> Look:
    return LOOKS.get(method, DEFAULT)


def colour(arm) -> str:
    """An arm's colour: its method's k-th colour for its k-th arm (ids ``sr``, ``sr2``, ``sr3`` ...)."""
    colours = look(arm.method).colours
    k = re.fullmatch(re.escape(arm.method) + r"(\d*)", arm.id or arm.method)
    index = int(k.group(1)) - 1 if k and k.group(1) else 0
    return colours[index % len(colours)]
