"""What a reward is to the methods: the protocol, its result, and the check every score passes. No torch.

The reward kinds themselves (models, embeddings, the generator's confidence) live in
``specrej.rewards``, which re-exports these names; the methods (``specrej.methods``) and the replay
backend (``specrej.backends.replay``) need only this module, so they run without torch.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence, runtime_checkable


class RewardError(ValueError):
    """A reward spec that names nothing, or a reward that returned bad scores."""


@dataclass(frozen=True)
class TokenStats:
    """Per-candidate statistics the engine keeps while decoding."""

    mean_logprob: float          # mean log-probability of the sampled tokens (untempered)
    mean_self_certainty: float   # mean KL(uniform || p) over the steps


@dataclass(frozen=True)
class Scored:
    scores: list[float]
    tokens_read: int = 0


@runtime_checkable
class Reward(Protocol):
    """What the methods call: ``score`` is the only required member.

    ``score(prompt, responses, stats)`` returns a ``Scored`` (or a plain sequence of floats: ``tokens_read``
    is then 0); a ``score(prompt, responses)`` that takes no statistics is called without them. Optional
    attributes, with the defaults ``as_reward`` gives an object that lacks them:

    - ``name: str``: how results name the reward (default: the class's name);
    - ``n_params: int``: parameters of the model it runs, 0 if none (default 0). Its FLOPs
      (``core.cost.flop_model_of``): its own ``flop_model`` (a ``core.cost.FlopModel``) where it has one, else
      read off its ``model`` (non-embedding weights and attention), else 2 x n_params x tokens_read;
    - ``uses_token_stats: bool``: it reads the engine's ``TokenStats`` (default False: the engine skips them).

    A plain function ``fn(prompt, responses) -> list[float]`` is accepted wherever a reward is
    (``as_reward`` wraps it in ``CallableReward``)."""

    def score(self, prompt: str, responses: Sequence[str],
              stats: Sequence[TokenStats] | None = None) -> Scored: ...


class CallableReward:
    """Wrap ``fn(prompt, responses) -> list[float]`` as a reward."""

    n_params, uses_token_stats = 0, False

    def __init__(self, fn: Callable[[str, list[str]], Sequence[float]], name: str | None = None):
        if not callable(fn):
            raise RewardError(f"CallableReward needs a function fn(prompt, responses) -> list[float], not {fn!r}.")
        self.fn, self.name = fn, name or getattr(fn, "__name__", "callable")

    def score(self, prompt, responses, stats=None) -> Scored:
        out = self.fn(prompt, list(responses))
        return out if isinstance(out, Scored) else Scored(list(out), 0)


class _Defaulted:
    """A reward object that lacks some optional member (``Reward``), seen with the defaults."""

    def __init__(self, reward):
        self.reward = reward
        self.name = str(getattr(reward, "name", None) or type(reward).__name__)
        self.n_params = int(getattr(reward, "n_params", 0) or 0)
        self.uses_token_stats = bool(getattr(reward, "uses_token_stats", False))
        self._with_stats = _takes_stats(reward.score)

    def score(self, prompt, responses, stats=None):
        return self.reward.score(prompt, responses, stats) if self._with_stats else self.reward.score(prompt, responses)

    def __repr__(self) -> str:
        return f"as_reward({self.reward!r})"


def _takes_stats(method) -> bool:
    """Whether ``method`` accepts a third positional argument (the statistics); True where it cannot be told."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)


def as_reward(obj) -> Reward:
    """``obj`` as a full reward: returned as is where it has every member, seen with the defaults of the
    optional ones where it lacks some (``Reward``), a plain function wrapped in ``CallableReward``;
    anything else is a RewardError that says what a reward is. A loaded model (a torch module, whose ``score``
    may be its classification layer, and which is callable) or a pipeline is no reward by itself: RewardError
    naming ``load_reward(model, tokenizer=tokenizer)``."""
    if _loaded_model(obj):
        raise RewardError(f"a loaded {type(obj).__name__} is not a reward by itself: wrap it with "
                          "load_reward(model, tokenizer=tokenizer) (a sequence-classification model) or "
                          "load_reward(pipe) (a text-classification pipeline).")
    score = getattr(obj, "score", None)
    if callable(score):
        complete = all(hasattr(obj, a) for a in _OPTIONAL) and _takes_stats(score)
        return obj if complete else _Defaulted(obj)
    if callable(obj):
        return CallableReward(obj)
    raise RewardError(f"{obj!r} is not a reward: give an object with a score(prompt, responses, stats) method, "
                      "a function fn(prompt, responses) -> list[float], or a spec for load_reward.")


_OPTIONAL = ("name", "n_params", "uses_token_stats")


def _loaded_model(obj) -> bool:
    """A torch module or a transformers pipeline, known by its classes (this module does not import torch)."""
    return any((c.__name__ == "Module" and c.__module__ == "torch.nn.modules.module")
               or (c.__name__ == "Pipeline" and c.__module__.startswith("transformers."))
               for c in type(obj).__mro__)


def checked(reward: Reward, prompt: str, responses: Sequence[str],
            stats: Sequence[TokenStats] | None = None) -> Scored:
    """Score and check the result: one finite float per response, else RewardError. An exception raised inside the
    reward goes on as it is, with a note naming the reward."""
    if not responses:
        return Scored([], 0)
    reward = as_reward(reward)   # any reward: only score is required
    name = reward.name
    try:
        out = reward.score(prompt, list(responses), stats)
    except Exception as e:   # the reward's own failure keeps its type; the note names the reward it came from
        e.add_note(f"raised inside the reward {name!r} (its score() on {len(responses)} response"
                   f"{'s' if len(responses) != 1 else ''} to the prompt {prompt[:40]!r})")
        raise
    if isinstance(out, Scored):
        raw, read = out.scores, out.tokens_read
    elif isinstance(out, (str, bytes)) or not isinstance(out, Iterable):
        raise RewardError(f"reward {name!r} returned {type(out).__name__} {_short(out)}; score must return a "
                          "Scored or one float per response.")
    else:
        raw, read = out, 0
    scores = []
    for s in raw:
        if isinstance(s, (str, bytes)):   # float("0.5") would pass: a string is no score, whatever it reads
            raise RewardError(f"reward {name!r} returned a string ({_short(s)}) where a score goes; "
                              "rewards must be finite floats.")
        try:
            scores.append(float(s))
        except (TypeError, ValueError):
            raise RewardError(f"reward {name!r} returned {type(s).__name__} {_short(s)} where a score goes; "
                              "rewards must be finite floats.") from None
    if len(scores) != len(responses):
        raise RewardError(f"reward {name!r} returned {len(scores)} scores for {len(responses)} responses.")
    bad = [i for i, s in enumerate(scores) if not math.isfinite(s)]
    if bad:
        raise RewardError(f"reward {name!r} returned a non-finite score ({scores[bad[0]]}) "
                          f"for {len(bad)} of {len(scores)} responses; rewards must be finite floats.")
    return Scored(scores, int(read))


def _short(value, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
