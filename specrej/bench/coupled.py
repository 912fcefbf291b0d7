"""One coupled Best-of-N_max run, kept whole: every candidate's tokens and per-token statistics.

Coupled randomness makes candidate i write the same tokens in every method for as long as it
lives, so this one run says what any prefix of any candidate is. From it, without running the
model again:

- the reward of every candidate at every prefix (a partial reward at any decision length),
  for any reward kind: text rewards read ``decode(tokens[:t])``; the confidence rewards read the
  cumulative log-probability / self-certainty kept here per position;
- the Best-of-N curve by order statistics (``specrej.analysis.curve``);
- Speculative Rejection replayed offline at any budget, alpha and first decision
  (``specrej.bench.simulate``: the live methods driving a replay of this run,
  ``backends.replay``): a cheap way to choose defaults and to score rules.

The run decodes all N rows in one batch (no memory budget: what is recorded are tokens, not
timings, and the tokens do not depend on the batch).
"""
from __future__ import annotations

import json
import gzip
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.config import RunConfig
from ..core.cost import read_options
from ..backends.replay import MemoReward, recorded_stats
from ..backends.hf import LM
from ..rewards import Reward, TokenStats, checked


@dataclass
class CoupledRun:
    """Candidates 0..N-1 of one prompt. ``cum_lp[c][t]`` / ``cum_sc[c][t]``: the sums of
    log-probability / self-certainty over the first ``t + 1`` tokens of candidate c."""

    prompt: str
    prompt_tokens: int
    tokens: list[list[int]]
    cum_lp: list[list[float]]
    cum_sc: list[list[float]]
    finish: list[str]
    conf: list[list[float]] | None = None   # DeepConf's token confidence of every token (collected at conf_topk)
    conf_topk: int = 0
    coe: list[list[float]] | None = None    # ST-BoN's chain feature after every token (collected with hidden)

    @property
    def n(self) -> int:
        return len(self.tokens)

    def lengths(self) -> list[int]:
        return [len(t) for t in self.tokens]

    def stats(self, c: int, t: int) -> TokenStats:
        """Mean statistics of candidate c's first t tokens (t >= 1), as a replay reports them."""
        return recorded_stats(self, c, t)

    def to_dict(self) -> dict:
        return {"prompt": self.prompt, "prompt_tokens": self.prompt_tokens, "tokens": self.tokens,
                # full precision: a rounded statistic can break a rule's near-tie the other way, and the
                # saved runs must replay the bench's table exactly (fit_rule evaluate)
                "cum_lp": self.cum_lp, "cum_sc": self.cum_sc, "finish": self.finish,
                **({"conf": self.conf, "conf_topk": self.conf_topk} if self.conf is not None else {}),
                **({"coe": self.coe} if self.coe is not None else {})}

    @classmethod
    def from_dict(cls, d: dict) -> "CoupledRun":
        return cls(d["prompt"], d["prompt_tokens"], d["tokens"], d["cum_lp"], d["cum_sc"], d["finish"],
                   d.get("conf"), d.get("conf_topk", 0), d.get("coe"))


@torch.inference_mode()
def collect(lm: LM, cfg: RunConfig, *, reads: tuple[str, ...] = ()) -> CoupledRun:
    """Decode candidates 0..cfg.n-1 of cfg.prompt to the end, in one batch, keeping the statistics; with
    ``reads`` ``"top-<k>"`` every token's confidence too, with ``"hidden"`` every token's chain feature (what
    DeepConf and ST-BoN read, so the simulator can replay them)."""
    ids = lm.render(cfg.prompt)
    conf_topk, hidden = read_options(reads)
    engine = lm.backend.from_config(lm, ids, cfg, reads=tuple(reads))
    n = cfg.n
    tokens: list[list[int]] = [[] for _ in range(n)]
    cum_lp: list[list[float]] = [[] for _ in range(n)]
    cum_sc: list[list[float]] = [[] for _ in range(n)]
    finish = [""] * n
    conf: list[list[float]] = [[] for _ in range(n)]
    coe: list[list[float]] = [[] for _ in range(n)]
    rows = engine.start(list(range(n)))
    try:
        while len(rows):
            done = rows.step()
            for d in done:
                tokens[d.cand] = list(d.tokens)
                g = len(d.tokens)
                cum_lp[d.cand].append(d.mean_logprob * g)
                cum_sc[d.cand].append(d.mean_self_certainty * g)
                finish[d.cand] = d.reason
                conf[d.cand], coe[d.cand] = list(d.confidences), list(d.coe)
            for i, c in enumerate(rows.ids):
                lp, sc = rows.stats(i)   # means so far: back to sums
                cum_lp[c].append(lp * rows.generated)
                cum_sc[c].append(sc * rows.generated)
    finally:
        rows.release()
        engine.release()
    for c in range(n):
        assert len(cum_lp[c]) == len(tokens[c]), (c, len(cum_lp[c]), len(tokens[c]))
    return CoupledRun(cfg.prompt, len(ids), tokens, cum_lp, cum_sc, finish, conf if conf_topk else None,
                      conf_topk, coe if hidden else None)


class PrefixScorer:
    """Rewards of candidates' prefixes (memoised): ``score(cands, t)`` scores the first t tokens
    of each candidate (its whole response when it is shorter). ``memo``: the same reward with the
    same memory, for the replays of this run (``bench.simulate``): what one scored, the other reads."""

    def __init__(self, lm: LM, reward: Reward, run: CoupledRun):
        self.lm, self.reward, self.run = lm, reward, run
        self._memo: dict[tuple[int, int], float] = {}
        self.memo = MemoReward(reward)
        self.tokens_read = 0

    def score(self, cands: list[int], t: int) -> list[float]:
        run = self.run
        keys = [(c, min(t, len(run.tokens[c]))) for c in cands]
        todo = sorted({k for k in keys if k not in self._memo})
        if todo:
            texts = [self.lm.decode(run.tokens[c][:u]) for c, u in todo]
            stats = [run.stats(c, u) for c, u in todo]
            out = checked(self.reward, run.prompt, texts, stats)
            self.tokens_read += out.tokens_read
            self._memo.update(zip(todo, out.scores))
            self.memo.remember(run.prompt, texts, stats, out.scores)
        return [self._memo[k] for k in keys]

    def final(self) -> list[float]:
        return self.score(list(range(self.run.n)), max(self.run.lengths()))


def save_runs(runs: list[CoupledRun], path: Path, meta: dict) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"meta": meta, "runs": [r.to_dict() for r in runs]}, f)


def load_runs(path: Path) -> tuple[dict, list[CoupledRun]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    return raw["meta"], [CoupledRun.from_dict(r) for r in raw["runs"]]


def partial_spearman(runs, scorers, t: int) -> list[float]:
    """Spearman(partial reward after ``t`` tokens, final reward) over each run's candidates still writing
    at ``t`` (longer than ``t``), one per run; a run with fewer than 3 such candidates is left out."""
    from ..analysis.metrics import spearman

    rhos = []
    for run, scorer in zip(runs, scorers):
        final = scorer.final()
        live = [c for c in range(run.n) if len(run.tokens[c]) > t]
        rho = spearman(scorer.score(live, t), [final[c] for c in live]) if len(live) > 2 else None
        if rho is not None:
            rhos.append(rho)
    return rhos
