"""Speculative Rejection done the reference code's way, on the same engine, for comparison.

The reference implementation keeps no KV cache across a decision: it decodes the survivors to
text, re-tokenises prompt + response, left-pads the batch and prefills it again before
decoding on. Here that is ``RefRows.keep``: the same rows, sampling, coupled randomness, budget
rule and decision code (``speculative_rejection`` runs unchanged, given ``RefEngine`` through its
public ``engine=`` seam), except that every prune throws the cache away and re-prefills the
survivors (with an attention mask and per-row positions, as padded batches need). Re-prefilled
tokens, padding included (it is computed), go into ``Engine.extra_prefill_tokens``, which the
ledger adds to ``prompt_tokens`` and so to its FLOPs.

Re-tokenising a decoded response does not always give back the sampled ids, so the two runs
can drift apart after a decision; the bench reports whether they chose the same winner.
"""
from __future__ import annotations

from typing import Iterator

import torch

from ..config import RunConfig
from ..backends.hf import Engine, Rows
from ..kvcache import grow_in_place
from ..events import Event
from ..methods import speculative_rejection
from ..models import LM
from ..rewards import Reward


class RefRows(Rows):
    """Rows whose prune re-tokenises and re-prefills the survivors (left-padded)."""

    def __init__(self, engine: "RefEngine", rows: Rows):
        super().__init__(engine, rows.ids, rows.cache, rows.logits)
        n, p = len(rows.ids), engine.prompt_len
        self.mask = torch.ones(n, p, dtype=torch.long, device=rows.logits.device)   # [rows, cache length]
        self.pos = torch.full((n,), p, dtype=torch.long, device=rows.logits.device)  # next position per row

    def slots(self) -> int:
        return len(self.ids) * self.mask.shape[1]

    def slots_per_row_after_step(self) -> int:
        g = self.generated + 1
        return self.mask.shape[1] + (1 if g < self.engine.max_new_tokens else 0)

    def _forward(self, tok: torch.Tensor) -> None:
        self.mask = torch.cat([self.mask, self.mask.new_ones(len(tok), 1)], dim=1)
        out = self.engine.lm.model(input_ids=tok[:, None], attention_mask=self.mask, position_ids=self.pos[:, None],
                                   past_key_values=self.cache, use_cache=True)
        self.cache, self.logits = out.past_key_values, out.logits[:, -1].float()
        self.pos = self.pos + 1

    def _select(self, indices: list[int]) -> None:
        super()._select(indices)
        if indices:
            idx = torch.tensor(indices, device=self.mask.device)
            self.mask, self.pos = self.mask[idx], self.pos[idx]

    @torch.inference_mode()
    def keep(self, indices: list[int]) -> None:
        """A decision: prune, then drop the cache and re-prefill the survivors from their text."""
        self._select(indices)
        if not indices:
            return
        e, lm = self.engine, self.engine.lm
        seqs = [e.prompt_ids + lm.tokenizer(lm.decode(t), add_special_tokens=False)["input_ids"] for t in self.tokens]
        width = max(len(s) for s in seqs)
        pad = lm.tokenizer.pad_token_id
        pad = pad if pad is not None else min(lm.eos_ids)
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=self.mask.device)
        self.mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=self.mask.device)
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.cache = None
        out = lm.model(input_ids=ids, attention_mask=self.mask, position_ids=positions, use_cache=True,
                       logits_to_keep=1)
        self.cache, self.logits = out.past_key_values, out.logits[:, -1].float()
        grow_in_place(self.cache)               # the same cache growth as the engine's own rows
        self.pos = self.mask.sum(-1)
        e.extra_prefill_tokens += ids.numel()    # re-prefilled tokens, padding included


class RefEngine(Engine):
    """The engine whose rows re-prefill at every decision."""

    allow_sharing = False   # the reference code keeps a copy of the prompt per row

    def __init__(self, lm: LM, prompt_ids: list[int], **kwargs):
        super().__init__(lm, prompt_ids, **kwargs)
        self.prompt_ids = list(prompt_ids)

    def start(self, cand_ids: list[int]) -> Rows:
        return RefRows(self, super().start(cand_ids))


def speculative_rejection_reference_style(lm: LM, reward: Reward, cfg: RunConfig) -> Iterator[Event]:
    """``speculative_rejection`` with the reference code's re-tokenise + re-prefill at every decision."""
    return speculative_rejection(lm, reward, cfg, engine=RefEngine)
