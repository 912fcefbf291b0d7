"""Rejection rules: in what order a decision ranks its contenders (which ones it keeps).

A decision policy (``core.decisions``: ``MemoryFull``, ``EveryK``) says when to decide and how
many to keep (alpha, and memory when it forces more pruning); its rejection rule says which: it
ranks the pool, best first, and the policy keeps the head of that ranking. The live methods
(``specrej.methods``) and the simulator (``bench/simulate.py``) hand the same rule the same pool,
as ``Contender`` records (the simulator is the live method on a replay: one loop). The oracle
ceiling (``core.oracle``), which ranks by final reward, is a rule too. No torch here.

One file per rule (``base.py`` holds the protocol, ``Contender`` and the paper's rule):

- ``paper``: the paper's rule and the reference: the highest partial reward (ties: lower id).
- ``calibrated`` (``calibrated.py``): a linear score, fitted on coupled runs (``bench/fit_rule.py``),
  of the candidate's features standardised within the pool (partial reward, mean token
  log-probability, mean self-certainty, finished or not, length), with weights per decision
  length. It reads the generator's token statistics, so the method asks the backend for them
  (``uses_token_stats``) whatever the reward.
- ``schedule`` (``schedule.py``): the paper's ranking, but each decision's keep count follows the
  partial score's measured reliability (prune less early, more later): the ``keep_count`` hook.
- ``window`` (``window.py``): the partial reward averaged over the candidate's recent prefixes.
- ``upside`` (``upside.py``): the fitted probability of ending in the pool's top, from the partial
  score and how it moved. ``window`` and ``upside`` read earlier prefixes' scores, so they ask the
  method to score between decisions too (the ``score_every`` hook; counted reward calls).

Bundled rules are package data, ``specrej/data/rules/<name>.json`` (a wheel carries them), each
with a ``kind`` (default ``calibrated``) naming its class in ``KINDS``. ``get_rule(name)`` looks a
rule up in ``RULES``; ``RunConfig.rule`` and the arm key ``sr:rule=<name>`` name one.
"""
from __future__ import annotations

import json
from importlib.resources import files

from .base import PAPER, Contender, PaperRule, RejectionRule, RuleDefaults, rank, recent, zscores
from .calibrated import FEATURES, CalibratedRule, features
from .schedule import ScheduleRule
from .upside import UPSIDE_FEATURES, UpsideRule, upside_features
from .window import WindowRule

__all__ = ["PAPER", "Contender", "PaperRule", "RejectionRule", "RuleDefaults", "rank", "recent", "zscores", "FEATURES",
           "CalibratedRule", "features", "ScheduleRule", "UPSIDE_FEATURES", "UpsideRule", "upside_features",
           "WindowRule", "KINDS", "RULE_DIR", "RULES", "DEFAULT_RULE", "rule_from_dict", "get_rule"]

# The bundled rules ship inside the package (a wheel carries them); found through the package, not the source tree.
RULE_DIR = files("specrej").joinpath("data", "rules")

KINDS = {"calibrated": CalibratedRule, "schedule": ScheduleRule, "window": WindowRule, "upside": UpsideRule}


def rule_from_dict(d: dict) -> RejectionRule:
    """A rule from its JSON (``kind`` picks the class; none: calibrated, the first kind bundled)."""
    kind = d.get("kind", "calibrated")
    if kind not in KINDS:
        raise ValueError(f"rule {d.get('name')!r} is of kind {kind!r}; known kinds: {', '.join(KINDS)}.")
    return KINDS[kind].from_dict(d)


def _bundled() -> dict[str, RejectionRule]:
    rules: dict[str, RejectionRule] = {PAPER.name: PAPER}
    for path in sorted((p for p in RULE_DIR.iterdir() if p.name.endswith(".json")), key=lambda p: p.name):
        rule = rule_from_dict(json.loads(path.read_text(encoding="utf-8")))
        rules[rule.name] = rule
    return rules


RULES: dict[str, RejectionRule] = _bundled()
DEFAULT_RULE = PAPER.name


def get_rule(name: str | RejectionRule) -> RejectionRule:
    """The rule called ``name`` (a rule object passes through)."""
    if not isinstance(name, str):
        return name
    rule = RULES.get(name.strip())
    if rule is None:
        raise ValueError(f"rule={name!r} is unknown; choose one of {', '.join(RULES)}.")
    return rule
