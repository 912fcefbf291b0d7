"""Limits and loading policy for a public deployment (no UI code here).

A public Space gets pasted junk, huge numbers and requests for models it should not load.
``Limits`` caps what one request may ask for; ``ModelPolicy`` says which models may be loaded
at all. Both read environment variables so a private deployment can lift them:

  SPECREJ_MAX_PROMPT_CHARS  (default 2000)   SPECREJ_MAX_N               (default 32)
  SPECREJ_MAX_NEW_TOKENS    (default 256)    SPECREJ_MAX_BUDGET          (default 16384 KV slots)
  SPECREJ_MAX_RUN_SECONDS   (default 120)    SPECREJ_ALLOWED_MODELS      (comma-separated specs)
  SPECREJ_MAX_AUTO_N        (default 512: rows n='auto' may open with, budget / first decision)
  SPECREJ_ALLOW_REMOTE_CODE (default 0)      SPECREJ_ALLOW_CUSTOM_MODELS (default 0)

The defaults are sized for a free CPU Space (2 vCPUs, 16 GB, one run at a time): a run at every
limit holds at most 16384 slots of KV cache over all its arms (``check_race``) (0.75 GB for the embedded model in fp32) and the
worker for at most two minutes; with the app's per-client cap (SPECREJ_MAX_RUNS_PER_CLIENT, 2)
one client can hold the worker for at most two such runs.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Mapping

from specrej.core.config import AUTO, RunConfig, env_int


class LimitError(ValueError):
    """A request over one of the deployment's limits."""


class PolicyError(PermissionError):
    """A model this deployment may not load."""


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Limits:
    max_prompt_chars: int = 2000
    max_n: int = 32
    max_auto_n: int = 512
    max_new_tokens: int = 256
    max_budget: int = 16384
    max_run_seconds: int = 120

    ENV = {
        "max_prompt_chars": "SPECREJ_MAX_PROMPT_CHARS", "max_n": "SPECREJ_MAX_N", "max_auto_n": "SPECREJ_MAX_AUTO_N",
        "max_new_tokens": "SPECREJ_MAX_NEW_TOKENS", "max_budget": "SPECREJ_MAX_BUDGET",
        "max_run_seconds": "SPECREJ_MAX_RUN_SECONDS",
    }

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Limits":
        env = os.environ if env is None else env
        base = cls()
        return replace(base, **{f: env_int(var, getattr(base, f), env=env, error=LimitError) for f, var in cls.ENV.items()})

    def over(self, name: str, value: float, said: str) -> str | None:
        """The one check of a deployment limit (the request's fields and each arm's config both ask it): the
        refusal when ``value`` is past the limit ``name`` (a field of this class), naming the limit and its
        environment variable; None when it is within. ``said`` is the value in words ("N is 40 candidates")."""
        limit = getattr(self, name)
        if value <= limit:
            return None
        return f"{said}; this deployment allows at most {limit:g} ({self.ENV[name]})."

    def check(self, cfg: RunConfig) -> None:
        """Raise LimitError naming the limit (and its environment variable) that cfg exceeds."""
        over = [
            ("max_prompt_chars", len(cfg.prompt), f"the prompt is {len(cfg.prompt)} characters long"),
            ("max_n", cfg.n, f"N is {cfg.n} candidates") if cfg.n != AUTO else
            ("max_auto_n", (rows := auto_rows_bound(cfg)), f"auto N (budget / first decision) is {rows} rows"),
            ("max_new_tokens", cfg.max_new_tokens, f"max new tokens is {cfg.max_new_tokens} tokens"),
            ("max_budget", cfg.budget or 0, f"the memory budget is {cfg.budget} KV slots"),
        ]
        for name, value, said in over:
            if (why := self.over(name, value, said)) is not None:
                raise LimitError(why)

    def check_race(self, cfgs) -> None:
        """LimitError where a race's arms (``cfgs``: each arm's config), holding their caches at once, would hold
        more than ``max_budget`` slots together (``core.budget.admit_race``): a race at every limit holds at
        most ``max_budget``. An arm counts the budget it will get (``session.budget.planned``: its own, the
        CPU budget on a CPU); on a GPU an automatic budget is sized from the memory free as the arm starts."""
        from components.session import budget
        from specrej.core.budget import admit_race

        planned = [budget.planned(cfg.budget) for cfg in cfgs]
        why = admit_race([b for b in planned if b is not None], self.max_budget,
                         limit_name=f"this deployment's memory budget ({self.ENV['max_budget']})")
        if why:
            raise LimitError(why[0].upper() + why[1:])


@dataclass(frozen=True)
class ModelPolicy:
    """Which generator and reward specs may load. Offered specs are always allowed; anything
    else needs SPECREJ_ALLOW_CUSTOM_MODELS=1 or a place on SPECREJ_ALLOWED_MODELS."""

    allowed: frozenset[str] = field(default_factory=frozenset)
    allow_custom: bool = False
    allow_remote_code: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, offered: tuple[str, ...] = ()) -> "ModelPolicy":
        env = os.environ if env is None else env
        listed = {s.strip() for s in env.get("SPECREJ_ALLOWED_MODELS", "").split(",") if s.strip()}
        return cls(frozenset(listed | set(offered)), _flag(env, "SPECREJ_ALLOW_CUSTOM_MODELS"),
                   _flag(env, "SPECREJ_ALLOW_REMOTE_CODE"))

    def check(self, spec: str, *, trust_remote_code: bool = False) -> str:
        """Return the spec if it may load, else raise PolicyError saying how to allow it."""
        if not isinstance(spec, str) or not spec.strip():
            raise PolicyError("no model was chosen.")
        spec = spec.strip()
        if trust_remote_code and not self.allow_remote_code:
            raise PolicyError("models that run their own code (trust_remote_code) are disabled here; "
                              "the operator can enable them with SPECREJ_ALLOW_REMOTE_CODE=1.")
        if spec not in self.allowed and not self.allow_custom:
            raise PolicyError(f"model {spec[:80]!r} is not on this deployment's allowlist "
                              "(SPECREJ_ALLOWED_MODELS).")
        return spec


def auto_rows_bound(cfg: RunConfig) -> int:
    """The most rows n='auto' can open with (the prompt's own slots would only lower it), at the budget
    the run will get (``session.budget.planned``: on a GPU it comes from free memory, unknown before
    the model loads, so the bound is AUTO_MAX_ROWS)."""
    from components.session import budget
    from specrej.core.budget import AUTO_MAX_ROWS, opening_rows

    planned = budget.planned(cfg.budget)
    return AUTO_MAX_ROWS if planned is None else opening_rows(planned, cfg.first_decision)


def smaller_budget(cfg: RunConfig, used_budget: int) -> RunConfig:
    """The config to retry with after running out of memory: half the budget."""
    return replace(cfg, budget=max(1, used_budget // 2))
