"""What a method is, as data: how it schedules its rows, what its decisions cut by and in what words, its
signal, whether alpha applies, its citation and the adaptations this project made (issue 40).

Every method has one ``About`` (``ABOUTS``, by method key; ``specrej.arms.ArmKind.about`` carries it, and each
method module re-exports its own as ``ABOUT``). It lives in the core because the core's cost model reads a
method's schedule and the core imports nothing above it. The page, the charts, the why box, the request, the
cost model and the bench read it instead of branching on a method's name (``tests/test_method_data.py`` looks
for such branches outside ``specrej/methods/`` and this table). A rival's own settings are a frozen dataclass of
``specrej.core.settings`` that its ``About.settings`` names and ``About.settings_for(cfg)`` reads. No torch.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Mapping

from .settings import DeepConfSettings, STBoNSettings

PASSES = "passes"     # the rows that fit at full length at once (Best-of-N's passes; DeepConf: any trace may run on)
OPENING = "opening"   # all its opening rows in one batch, capped by what the budget holds (SR, ST-BoN)


@dataclass(frozen=True)
class About:
    """A method described for whoever shows, prices or benchmarks it."""

    schedule: str                  # PASSES or OPENING: how its rows fill memory
    round_word: str                # one of its Round events: "pass", "decision", "stop", "truncation"
    cut_word: str                  # what happens to a row it drops: "pruned", "stopped", "truncated"
    decides_by: str = ""           # what its decisions rank by, in words ("" for a method that never cuts)
    signal: str | None = None      # its own signal's name when it decides without the reward (a rival)
    signal_axis: str = ""          # that signal's axis, in words (higher is better)
    alpha_applies: bool = False    # its decisions keep round((1 - alpha) x n)
    auto_n: bool = False           # n='auto' (the first batch fills memory) is its own
    citation: str = ""             # "Fu et al., 2025": the paper it follows
    blurb: str = ""                # what it does, in one plain sentence (the page's option for it says this)
    paper: str = ""                # the paper's title and identifier
    adaptations: tuple[str, ...] = ()   # every way this project's version differs from the paper's
    own_signal_rewards: tuple[tuple[str, str], ...] = ()   # (reward kind, why): rewards that read its own signal,
                                                           # so a race they judge is judged by what it decides with
    settings: type | None = None   # its own settings' frozen dataclass (specrej.core.settings); None: RunConfig's
                                   # fields are all it takes (Best-of-N, Speculative Rejection)

    @property
    def rival(self) -> bool:
        """Decides on its own signal (no reward) over Best-of-N's candidates: the bench's --rivals."""
        return self.signal is not None

    @property
    def adapted(self) -> str:
        """One line: "adapted here: ...", naming every adaptation ("" when it follows its paper as it is)."""
        return ("adapted here: " + "; ".join(self.adaptations) + ".") if self.adaptations else ""

    def judged_by_own_signal(self, reward_kind: str) -> str:
        """Why a race judged by the reward ``reward_kind`` judges this method by its own signal ("" if it does not)."""
        return next((why for kind, why in self.own_signal_rewards if kind == reward_kind), "")

    def settings_for(self, cfg):
        """This method's settings in the run ``cfg``: ``cfg.settings`` when it is an instance of this method's
        class, else the class's defaults (None for a method with no settings of its own)."""
        if self.settings is None:
            return None
        own = getattr(cfg, "settings", None)
        return own if isinstance(own, self.settings) else self.settings()

    def label(self, name: str) -> str:
        """The method's name with its citation: "DeepConf-style (Fu et al., 2025)"."""
        return f"{name} ({self.citation})" if self.citation else name


BON = About(PASSES, "pass", "pruned")
BONC = About(PASSES, "pass", "pruned")
SR = About(OPENING, "decision", "pruned", decides_by="partial reward", alpha_applies=True, auto_n=True,
           citation="Sun et al., 2024",
           paper="Fast Best-of-N Decoding via Speculative Rejection, NeurIPS 2024, arXiv 2410.20290")
DEEPCONF = About(
    PASSES, "stop", "stopped", decides_by="group confidence", signal="group confidence",
    signal_axis="group confidence: the mean over the window of minus the mean top-k log-probability; higher = surer",
    citation="Fu et al., 2025", paper="Deep Think with Confidence, arXiv 2508.15260",
    blurb="stops a trace when the model's own confidence drops below a threshold set by a few warm-up traces",
    adaptations=(
        "the window is 8 tokens (the page) or 1/8 of the length (the bench), not 2048",
        "the warm-up is a few traces (4 on the page, 1/16 of N in the bench), not 16 of 256",
        "the traces are open-ended answers under a memory budget, at most the rows that fit at full length at once",
        "the consensus stop is off by default (open-ended answers have no extracted answer to agree on)",
        "the race's reward picks the winner among the traces the filter kept (pick=reward); pick=paper is the "
        "paper's confidence-weighted vote, where the official code's default answer is an unweighted majority",
        "the warm-up traces run before any other trace starts (with 2 of them, a serial pass of 1-2 rows)",
        "a stopped trace writes the token that took it below the threshold, then leaves"),
    own_signal_rewards=(
        ("self-certainty", "the self-certainty reward is DeepConf's token confidence taken over the whole vocabulary, "
                           "minus a constant"),
        ("confidence", "the confidence reward, the mean log-probability of the tokens written, reads the same "
                       "next-token distribution as DeepConf's token confidence")),
    settings=DeepConfSettings)
STBON = About(
    OPENING, "truncation", "truncated", decides_by="consistency", signal="consistency",
    signal_axis="consistency: minus the mean squared distance of its hidden-state chain to the others'; "
                "higher = more consistent",
    citation="Wang et al., 2025",
    blurb="all answers run until they differ, then it keeps the one whose hidden states agree most with the "
          "others'",
    paper="Sampling-efficient test-time scaling: self-estimating the Best-of-N sampling in early decoding, "
          "NeurIPS 2025, arXiv 2503.01422",
    adaptations=(
        "the race's reward picks the winner among the answers written to the end (pick=reward); the paper keeps "
        "the most consistent one (pick=paper), a method that needs no reward model",
        "memory may force the truncation before c + tau (the Round says forced)",
        "an answer that ends early leaves the batch, its chain feature frozen at its end",
        "open-ended answers of at most max_new_tokens, not reasoning chains"),
    settings=STBoNSettings)

GENERIC = About(PASSES, "round", "pruned")   # a registered method that gives no About of its own
ABOUTS: dict[str, About] = {"bon": BON, "bonc": BONC, "sr": SR, "deepconf": DEEPCONF, "stbon": STBON}


def settings_classes() -> tuple[type, ...]:
    """Every registered method's settings class, once each, in ``ABOUTS``' order."""
    return tuple(dict.fromkeys(a.settings for a in ABOUTS.values() if a.settings is not None))


def settings_fields() -> dict:
    """Every settings class's fields by name with their defaults, flat (``RunConfig.flat``; a name two methods
    share, such as ``pick``, has one default)."""
    out: dict = {}
    for cls in settings_classes():
        out.update(asdict(cls()))
    return out


def settings_from_flat(flat: Mapping):
    """The settings object that ``flat`` (settings by name, ``RunConfig.flat``'s shape) holds: None when every
    setting there is its default, else the first method's class whose fields hold every setting away from its
    default, built from ``flat``. A ValueError when no one class holds them (two methods' settings at once)."""
    defaults = settings_fields()
    changed = {k for k, v in flat.items() if k in defaults and v != defaults[k]}
    if not changed:
        return None
    for cls in settings_classes():
        names = {f.name for f in fields(cls)}
        if changed <= names:
            return cls(**{k: flat[k] for k in names if k in flat})
    raise ValueError(f"settings {sorted(changed)} belong to no one method; give one method's settings at a time.")
