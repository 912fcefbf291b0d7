"""A backend that replays recorded continuations instead of running a model. No torch here.

The seam between the one loop and what it drives (issue 25), as vLLM v1 splits its scheduler
from a mock model runner:

- **The methods own the loop.** ``specrej.methods`` (through ``methods.run._Run``) prefills,
  starts rows, steps them, scores, decides and prunes, exactly as in a live run; the decision
  policy and rejection rule (``core.decisions``, ``core.rules``) say who lives.
- **The budget answers every slot question.** ``core.budget.KVBudget`` says what fits, the rows
  n='auto' opens with, the cap after a decision, and the slots a batch holds, from the rows'
  lengths that this backend reports (``lengths``), as every backend does.
- **The backend reports only what a real backend reports**: its rows (candidate ids), their
  tokens and lengths, the rows that ended at each step (reason, token statistics). Scores go
  through the reward the method was given; for a replay of a coupled run that is a memoising
  reward (``MemoReward``, shared with ``bench.coupled.PrefixScorer``), so a prefix is scored once
  however many replays read it.

What it replays is a recording of tokens (``RecordedTokens``; ``specrej.record.Recording`` is another
thing, a race's events): per candidate, its token ids, the cumulative log-probability and
self-certainty after each token (or none) and why it ended. ``bench.coupled.CoupledRun`` is one (a
real Best-of-N run of every candidate to its end); ``Script`` is one written by hand (the methods'
torch-free tests). Coupled randomness makes candidate c write the same tokens in every method and
batch (its draws depend only on (seed, c, position)), so replaying its recorded tokens is what the
engine would have done. A replayed run is exact where the recording is: the same sampling settings
and stop strings; ``max_new_tokens`` up to the recording's (a candidate the recording cut at its
own limit cannot be replayed further, and says so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ..core.cost import read_options
from ..core.scoring import Reward, Scored, TokenStats, as_reward, checked
from . import Done, Sampling

ENDINGS = ("eos", "stop", "length")


class RecordedTokens(Protocol):
    """What a replay reads (``bench.coupled.CoupledRun`` and ``Script`` are recordings)."""

    prompt_tokens: int
    tokens: Sequence[Sequence[int]]           # candidate c's token ids, to its end
    cum_lp: Sequence[Sequence[float]] | None  # sums of log-probability over its first t + 1 tokens
    cum_sc: Sequence[Sequence[float]] | None  # the same for self-certainty
    finish: Sequence[str]                     # why it ended: "eos" | "stop" | "length"
    # optional (a recording made with them): DeepConf's token confidences at ``conf_topk``, ST-BoN's chain
    # feature after each token (``Batch.confidences``, ``Batch.coe``); None where it kept none
    conf: Sequence[Sequence[float]] | None
    conf_topk: int
    coe: Sequence[Sequence[float]] | None


@dataclass(frozen=True)
class Script:
    """A recording written by hand: candidate c writes ``tokens[c]`` and ends for ``finish[c]``
    (default "eos"); no token statistics unless given."""

    prompt_tokens: int
    tokens: Sequence[Sequence[int]]
    finish: Sequence[str] = ()
    cum_lp: Sequence[Sequence[float]] | None = None
    cum_sc: Sequence[Sequence[float]] | None = None
    conf: Sequence[Sequence[float]] | None = None   # token confidences (DeepConf's), one per token
    conf_topk: int = 0                               # the k they were taken at (0: none kept)
    coe: Sequence[Sequence[float]] | None = None    # chain features (ST-BoN's), one per token

    def __post_init__(self) -> None:
        if not self.finish:
            object.__setattr__(self, "finish", ("eos",) * len(self.tokens))
        if len(self.finish) != len(self.tokens) or any(f not in ENDINGS for f in self.finish):
            raise ValueError(f"a script needs one ending per candidate, each one of {ENDINGS}.")
        if any(len(t) < 1 for t in self.tokens):
            raise ValueError("every scripted candidate writes at least one token.")
        for name in ("conf", "coe"):
            per = getattr(self, name)
            if per is not None and [len(x) for x in per] != [len(t) for t in self.tokens]:
                raise ValueError(f"a script's {name} needs one value per token of every candidate.")


def recorded_stats(rec: RecordedTokens, c: int, t: int) -> TokenStats:
    """Candidate c's mean statistics over its first t tokens (as ``CoupledRun.stats``; NaN when the
    recording kept none)."""
    if rec.cum_lp is None or rec.cum_sc is None or t < 1:
        return TokenStats(math.nan, math.nan)
    t = min(t, len(rec.tokens[c]))
    return TokenStats(rec.cum_lp[c][t - 1] / t, rec.cum_sc[c][t - 1] / t)


class Replay:
    """A ``BackendFactory`` bound to one recording (an instance, not a class: it carries the recording).

    ``allow_sharing``: may rows hold the prompt's slots once (the run counts the prompt once when
    the LM shares too). ``budget``: the slots a run without one gets (None: such a run is refused)."""

    name = "replay"
    exclusive = False    # each replay has its own rows: arms interleave freely
    refills = True       # rows keep their own lengths, so a running batch can take new ones

    def __init__(self, recording: RecordedTokens, *, allow_sharing: bool = True, budget: int | None = None):
        self.recording, self.allow_sharing, self.budget = recording, allow_sharing, budget

    def __call__(self, lm, prompt_ids: list[int], *, sampling: Sampling = Sampling(), seed: int = 0,
                 n_total: int, max_new_tokens: int, stop: tuple[str, ...] = (), share_prefix: bool | None = None,
                 stats: bool = True, reads: tuple[str, ...] = ()) -> "ReplayEngine":
        conf_topk, hidden = read_options(reads)
        rec = self.recording
        if conf_topk and (getattr(rec, "conf", None) is None or getattr(rec, "conf_topk", 0) != conf_topk):
            held = getattr(rec, "conf_topk", 0) if getattr(rec, "conf", None) is not None else 0
            raise ValueError(f"this recording holds no token confidences at top-{conf_topk}"
                             + (f" (it holds them at top-{held})" if held else "") + ": record it with "
                             f"reads=('top-{conf_topk}',) (bench.coupled.collect) to replay DeepConf.")
        if hidden and getattr(rec, "coe", None) is None:
            raise ValueError("this recording holds no hidden-state chain features: record it with reads=('hidden',) "
                             "(bench.coupled.collect) to replay ST-BoN.")
        return ReplayEngine(rec, lm, prompt_ids, n_total=n_total, max_new_tokens=max_new_tokens, stats=stats,
                            conf=bool(conf_topk), hidden=hidden)

    def from_config(self, lm, prompt_ids: list[int], cfg, *, n_total: int | None = None,
                    share_prefix: bool | None = None, stats: bool = True, reads: tuple[str, ...] = ()) -> "ReplayEngine":
        return self(lm, prompt_ids, n_total=cfg.n if n_total is None else n_total,
                    max_new_tokens=cfg.max_new_tokens, share_prefix=share_prefix, stats=stats, reads=reads)

    def default_budget(self, lm) -> int:
        if self.budget is None:
            raise ValueError("a replay has no memory of its own: give the run a budget (RunConfig.budget), "
                             "or the Replay one.")
        return self.budget


class ReplayEngine:
    """One prompt's recording, ready to hand out rows (``backends.Backend``)."""

    extra_prefill_tokens = 0
    engine_steps = 0     # steps its rows took

    def __init__(self, recording: RecordedTokens, lm, prompt_ids: list[int], *, n_total: int, max_new_tokens: int,
                 stats: bool, conf: bool = False, hidden: bool = False):
        if len(prompt_ids) != recording.prompt_tokens:
            raise ValueError(f"the recording's prompt has {recording.prompt_tokens} tokens, this one "
                             f"{len(prompt_ids)}: replay the prompt it recorded.")
        if n_total > len(recording.tokens):
            raise ValueError(f"the recording holds {len(recording.tokens)} candidates; a run of {n_total} "
                             "cannot be replayed from it.")
        self.recording, self.lm, self.max_new_tokens, self.stats = recording, lm, max_new_tokens, stats
        self.conf, self.hidden = conf, hidden

    def start(self, cand_ids: list[int]) -> "ReplayRows":
        return ReplayRows(self, cand_ids)

    def peak_memory_bytes(self, peak_slots: int) -> int:
        return peak_slots * self.lm.kv_bytes_per_slot

    def release(self) -> None:
        pass   # nothing is held: the recording belongs to its owner


class ReplayRows:
    """The rows decoding now (``backends.Batch``): each takes its next recorded token per step."""

    def __init__(self, engine: ReplayEngine, cand_ids: list[int]):
        self.engine = engine
        self.ids: list[int] = []
        self.tokens: list[list[int]] = []
        self.generated = 0      # the oldest row's length (rows of a refilled batch differ)
        self.add(cand_ids)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, cand_ids: list[int]) -> None:
        n = len(self.engine.recording.tokens)
        bad = [c for c in cand_ids if not 0 <= c < n]
        if bad:
            raise ValueError(f"candidates {bad[:3]} were never recorded (the recording holds 0..{n - 1}).")
        self.ids += list(cand_ids)
        self.tokens += [[] for _ in cand_ids]

    def lengths(self) -> list[int]:
        return [len(t) for t in self.tokens]

    def stats(self, i: int) -> tuple[float, float]:
        if not self.engine.stats:
            return math.nan, math.nan
        st = recorded_stats(self.engine.recording, self.ids[i], len(self.tokens[i]))
        return st.mean_logprob, st.mean_self_certainty

    def confidences(self, i: int) -> Sequence[float]:
        if not self.engine.conf:
            return ()
        return self.engine.recording.conf[self.ids[i]][:len(self.tokens[i])]

    def coe(self, i: int) -> Sequence[float]:
        if not self.engine.hidden:
            return ()
        return self.engine.recording.coe[self.ids[i]][:len(self.tokens[i])]

    def step(self) -> list[Done]:
        e, rec = self.engine, self.engine.recording
        assert self.ids, "step() on an empty batch"
        done: list[Done] = []
        alive: list[int] = []
        for i, c in enumerate(self.ids):
            written, t = rec.tokens[c], len(self.tokens[i]) + 1
            if t > len(written):   # the recording ended it earlier for a reason this run does not share
                raise ValueError(f"candidate {c} was recorded to {len(written)} tokens only (it ended by "
                                 f"{rec.finish[c]!r}); replay with max_new_tokens <= {len(written)}.")
            self.tokens[i].append(written[t - 1])
            reason = None
            if t == len(written) and rec.finish[c] != "length":
                reason = rec.finish[c]
            elif t >= e.max_new_tokens:
                reason = "length"
            elif t == len(written):
                raise ValueError(f"candidate {c} was recorded to its own limit of {t} tokens; replay with "
                                 f"max_new_tokens <= {t}.")
            if reason:
                lp, sc = self.stats(i)
                done.append(Done(c, self.tokens[i], reason, lp, sc, tuple(self.confidences(i)), tuple(self.coe(i))))
            else:
                alive.append(i)
        self.generated += 1
        e.engine_steps += 1
        if done:
            self.keep(alive)
        return done

    def keep(self, positions: Sequence[int]) -> None:
        self.ids = [self.ids[i] for i in positions]
        self.tokens = [self.tokens[i] for i in positions]

    def release(self) -> None:
        self.ids, self.tokens = [], []


@dataclass
class MemoReward:
    """``reward`` with a memory: a (prompt, response, statistics) it has scored is not scored again
    (the statistics only where the reward reads them). Misses are scored together, in one call.
    ``tokens_read`` reports what the reward read for the misses: a remembered score costs nothing.

    Exact for a deterministic reward; a model scored in batches may differ in its last digits from
    one batch to another (padding), as two live runs do."""

    reward: Reward
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.reward = as_reward(self.reward)

    @property
    def name(self) -> str:
        return self.reward.name

    @property
    def n_params(self) -> int:
        return self.reward.n_params

    @property
    def uses_token_stats(self) -> bool:
        return bool(self.reward.uses_token_stats)

    def _key(self, prompt: str, response: str, stats: TokenStats | None):
        return (prompt, response, stats if self.uses_token_stats else None)

    def remember(self, prompt: str, responses: Sequence[str], stats: Sequence[TokenStats] | None,
                 scores: Sequence[float]) -> None:
        """Store scores computed elsewhere (``PrefixScorer``'s own calls) under the same keys."""
        for j, (r, s) in enumerate(zip(responses, scores)):
            self._memo[self._key(prompt, r, stats[j] if stats else None)] = s

    def score(self, prompt: str, responses: Sequence[str], stats: Sequence[TokenStats] | None = None) -> Scored:
        keys = [self._key(prompt, r, stats[j] if stats else None) for j, r in enumerate(responses)]
        first = {k: j for j, k in reversed(list(enumerate(keys)))}   # each new key once, where it first comes
        todo = [first[k] for k in dict.fromkeys(keys) if k not in self._memo]
        read = 0
        if todo:
            out = checked(self.reward, prompt, [responses[j] for j in todo], [stats[j] for j in todo] if stats else None)
            read = out.tokens_read
            for j, s in zip(todo, out.scores):
                self._memo[keys[j]] = s
        return Scored([self._memo[k] for k in keys], read)
