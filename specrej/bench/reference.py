"""Speculative Rejection done the reference code's way, on the same engine, for comparison.

The reference implementation keeps no KV cache across a decision: it decodes the survivors to
text, re-tokenises prompt + response, left-pads the batch and prefills it again before
decoding on. Here that is ``RefRows.keep``: the same rows, sampling, coupled randomness, budget
rule and decision code (``speculative_rejection`` runs unchanged, given ``RefEngine`` through its
public ``engine=`` seam), except that every prune throws the cache away and re-prefills the
survivors (with an attention mask and per-row positions, as padded batches need). Re-prefilled
tokens, padding included (it is computed), go into ``RefEngine.extra_prefill_tokens``, which the
ledger adds to ``prompt_tokens`` and so to its FLOPs.

Built by composition: ``RefEngine`` holds a transformers ``Engine`` and ``RefRows`` its ``Rows``,
through their public surface: ``Engine.start(ids, feed=...)`` (how sampled tokens go into the
model: here with the padded rows' mask and positions) and the rows' ``keep``, ``cache`` and ``logits``.

Re-tokenising a decoded response does not always give back the sampled ids, so the two runs
can drift apart after a decision; the bench reports whether they chose the same winner.
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..core.config import RunConfig
from ..backends.hf import Engine, Rows
from ..engine.kvcache import cache_of, grow_in_place, with_cache
from ..core.events import Event
from ..methods import speculative_rejection
from ..backends.hf import LM
from ..rewards import Reward


class RefRows:
    """Rows whose prune re-tokenises and re-prefills the survivors (left-padded). Implements
    ``backends.Batch`` over the engine's own ``Rows``, which step and sample as ever."""

    def __init__(self, engine: "RefEngine", cand_ids: list[int]):
        self.engine = engine
        self.width = engine.prompt_len                 # the cache's length: prompt, padding and fed tokens
        self.pad = {c: 0 for c in cand_ids}            # left padding of each candidate's row
        self.rows: Rows = engine.engine.start(cand_ids, feed=self._feed)

    ids = property(lambda self: self.rows.ids)
    tokens = property(lambda self: self.rows.tokens)
    generated = property(lambda self: self.rows.generated)

    def __len__(self) -> int:
        return len(self.rows)

    def lengths(self) -> list[int]:
        """Every row holds the whole padded width beyond its own copy of the prompt."""
        return [self.width - self.engine.prompt_len] * len(self.rows)

    def stats(self, i: int) -> tuple[float, float]:
        return self.rows.stats(i)

    def step(self):
        return self.rows.step()

    def add(self, cand_ids: list[int]) -> None:
        raise ValueError("the reference engine's rows share one length: a running batch takes no new rows")

    def release(self) -> None:
        self.rows.release()

    def _mask(self, device) -> torch.Tensor:
        """[rows, width]: 0 on each row's left padding."""
        return torch.tensor([[0] * self.pad[c] + [1] * (self.width - self.pad[c]) for c in self.rows.ids],
                            dtype=torch.long, device=device)

    def _feed(self, rows: Rows, tok: torch.Tensor) -> tuple[torch.Tensor, object]:
        """One token per row (tok: [rows]) at each row's own next position, under the padded mask."""
        self.width += 1
        mask = self._mask(tok.device)
        pos = mask.sum(-1, keepdim=True) - 1                                           # [rows, 1]
        out = self.engine.lm.model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos,
                                   **with_cache(self.engine.lm.model, rows.cache), use_cache=True)
        return out.logits[:, -1].float(), cache_of(out)

    @torch.inference_mode()
    def keep(self, indices: list[int]) -> None:
        """A decision: prune, then drop the cache and re-prefill the survivors from their text."""
        rows = self.rows
        rows.keep(indices)
        if not indices:
            return
        e, lm = self.engine, self.engine.lm
        seqs = [e.prompt_ids + lm.tokenizer(lm.decode(t), add_special_tokens=False)["input_ids"] for t in rows.tokens]
        self.width = max(len(s) for s in seqs)
        self.pad = {c: self.width - len(s) for c, s in zip(rows.ids, seqs)}
        pad = lm.tokenizer.pad_token_id
        pad = pad if pad is not None else min(lm.eos_ids)
        device = rows.logits.device
        ids = torch.tensor([[pad] * (self.width - len(s)) + s for s in seqs], device=device)
        mask = self._mask(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        rows.cache = None
        out = lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        rows.cache, rows.logits = cache_of(out), out.logits[:, -1].float()
        grow_in_place(rows.cache)               # the same cache growth as the engine's own rows
        e.extra_prefill_tokens += ids.numel()    # re-prefilled tokens, padding included


class RefEngine:
    """A transformers ``Engine`` (held, not subclassed) whose rows re-prefill at every decision.
    Implements ``backends.Backend`` and, as a class, ``backends.BackendFactory``."""

    name = Engine.name
    allow_sharing = False   # the reference code keeps a copy of the prompt per row
    exclusive = Engine.exclusive
    refills = False
    default_budget = staticmethod(Engine.default_budget)

    def __init__(self, lm: LM, prompt_ids: list[int], **kwargs):
        self.engine = Engine(lm, prompt_ids, **kwargs)
        self.lm, self.prompt_ids, self.prompt_len = lm, list(prompt_ids), len(prompt_ids)
        self.extra_prefill_tokens = 0

    @classmethod
    def from_config(cls, lm: LM, prompt_ids: list[int], cfg: RunConfig, *, n_total: int | None = None,
                    share_prefix: bool | None = None, stats: bool = True, reads: tuple[str, ...] = ()) -> "RefEngine":
        if reads:
            raise ValueError(f"the reference engine reads only the logits, not {', '.join(reads)}: race the rivals "
                             "on the transformers backend.")
        return cls(lm, prompt_ids, **Engine.settings(cfg, n_total=n_total), share_prefix=share_prefix, stats=stats)

    @property
    def engine_steps(self) -> int:
        return self.engine.engine_steps

    def start(self, cand_ids: list[int]) -> RefRows:
        return RefRows(self, list(cand_ids))

    def peak_memory_bytes(self, peak_slots: int) -> int:
        return self.engine.peak_memory_bytes(peak_slots)

    def release(self) -> None:
        self.engine.release()


def speculative_rejection_reference_style(lm: LM, reward: Reward, cfg: RunConfig) -> Iterator[Event]:
    """``speculative_rejection`` with the reference code's re-tokenise + re-prefill at every decision."""
    return speculative_rejection(lm, reward, cfg, engine=RefEngine)
