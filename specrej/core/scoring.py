"""What a reward is to the methods: the protocol, its result, and the check every score passes. No torch.

The reward kinds themselves (models, embeddings, the generator's confidence) live in
``specrej.rewards``, which re-exports these names; the methods (``specrej.methods``) and the replay
backend (``specrej.backends.replay``) need only this module, so they run without torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence


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


class Reward(Protocol):
    name: str
    n_params: int  # parameters of the model it runs (0 if none): FLOPs = 2 x n_params x tokens_read
    uses_token_stats: bool  # False: the engine skips the per-step statistics for it

    def score(self, prompt: str, responses: Sequence[str],
              stats: Sequence[TokenStats] | None = None) -> Scored: ...


def checked(reward: Reward, prompt: str, responses: Sequence[str],
            stats: Sequence[TokenStats] | None = None) -> Scored:
    """Score and check the result: one finite float per response, else RewardError."""
    if not responses:
        return Scored([], 0)
    out = reward.score(prompt, list(responses), stats)
    scores = [float(s) for s in out.scores]
    if len(scores) != len(responses):
        raise RewardError(f"reward {reward.name!r} returned {len(scores)} scores for {len(responses)} responses.")
    bad = [i for i, s in enumerate(scores) if not math.isfinite(s)]
    if bad:
        raise RewardError(f"reward {reward.name!r} returned a non-finite score ({scores[bad[0]]}) "
                          f"for {len(bad)} of {len(scores)} responses; rewards must be finite floats.")
    return Scored(scores, int(out.tokens_read))
