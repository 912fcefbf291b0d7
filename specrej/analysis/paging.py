"""Best-of-N as vLLM v1 schedules it: a paged KV cache that grows as answers write, preemption by recompute.

What it knows: each answer's length (coupled answers: the Best-of-N run wrote them), the prompt's length, the
memory budget in KV slots (``KVBudget``) and the block size. What it does not know: time, tokens' text, any
engine. It counts the engine steps (one forward pass of every scheduled request) that vLLM v1's scheduler
(``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``, FCFS policy) takes to finish the answers, exactly
and deterministically, for one order of arrival; ``vllm_steps`` averages over orders as ``curve.refill_steps``
does.

The memory, in blocks of ``block_size`` token slots (16 as vLLM), ``budget.total // block_size`` of them::

    | prompt's full blocks, held once  | row 0's own blocks | row 1's own blocks | ... free ...  |
      (the prefix cache: floor((P-1)/B))   ceil((P+g)/B) - shared each, for g tokens written

A request that is to write its token g+1 in a step needs blocks for the prompt's P tokens and its g tokens
(the last one sampled is fed back): ``ceil((P + g) / B)`` in all, of which the prompt's full blocks are
shared through the prefix cache (``floor((P - 1) / B)``: vLLM recomputes a prompt's last token, so a prompt
of a whole number of blocks shares one block fewer). Without a shared prompt (``budget.shared`` False) every
block is the request's own.

One step, as the scheduler runs it:

1. The running requests, in the order they were admitted: each takes the block its next token needs; when
   none is free, the most recently admitted running request is preempted (its blocks freed, its generated
   tokens kept, put back at the head of the waiting queue), again until the block fits or the request has
   preempted itself.
2. Only if nobody was preempted in this step: the waiting requests, head first, each admitted while its
   blocks fit (a new answer: its prompt; a preempted one: its prompt and every token it had written,
   recomputed in this one step's prefill); the first that does not fit stops the queue (first come, first
   served).
3. Every scheduled request writes one token; a request that wrote its last token ends, and its blocks are
   free from the next step on.

Assumed of the engine: a step's token budget and sequence cap do not bind (``max_seqs`` can set the cap); no
watermark (vLLM's default); no speculative decoding; answers share no block but the prompt's. Checked against
vLLM 0.32's own ``Scheduler`` driven without a model (``tests/test_paging_vllm.py``): every answer's end step
equal on committed prompts, 27 preemptions included. Not exact where the prompt ends on a block boundary (P a
multiple of B): there vLLM's fresh requests recompute the prompt's last block into a copy each while a resumed
request shares a cached copy (which one depends on the block pool's eviction order, not modelled), so this counts
a copy per answer and over-counts Best-of-N's steps (one graded prompt of 48 tokens: 179 steps against vLLM's 152). Because a preempted request is always the latest admitted,
the first k answers of an order never wait for a later one: one simulation of an order gives Best-of-k's
steps for every k (the schedule is online), as ``curve.paged_schedule``'s.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..core.budget import KVBudget

BLOCK_SIZE = 16   # vLLM's default KV block size


@dataclass(frozen=True)
class VllmSchedule:
    """One order's schedule: ``ends[i]``, the step at which the i-th answer of the order wrote its last token;
    ``preemptions``, requests preempted; ``recomputed``, generated tokens recomputed at resumption; ``changes``,
    ``(step, i, +1 / -1)``: the i-th answer runs from that step on (+1) or no longer runs from it (-1)."""

    ends: tuple[int, ...]
    preemptions: int
    recomputed: int
    changes: tuple[tuple[int, int, int], ...] = ()

    def widest(self) -> int:
        """The most answers running in any one step."""
        rows = most = 0
        for _, _, d in sorted(self.changes):
            rows += d
            most = max(most, rows)
        return most

    def steps(self) -> list[int]:
        """Steps of Best-of-k for k = 1..len(ends) (entry k-1): the first k answers of the order are done."""
        out, end = [], 0
        for e in self.ends:
            end = max(end, e)
            out.append(end)
        return out


@dataclass
class _Request:
    index: int          # position in the order
    length: int         # tokens it writes
    written: int = 0    # tokens written so far (kept across a preemption)
    held: int = 0       # own blocks held (0 while waiting)
    since: int = 0      # the step it was (re)admitted at; ``written`` is as of then
    seq: int = -1       # admission number: running order; -1 while waiting


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def vllm_schedule(lengths: Sequence[int], order: Sequence[int], budget: KVBudget, block_size: int = BLOCK_SIZE,
                  max_seqs: int | None = None) -> VllmSchedule:
    """The steps of the answers ``lengths[c]`` for c in ``order``, all queued at step 1 in that order, under
    ``budget`` in blocks of ``block_size`` slots, as vLLM v1 schedules them (the module's docstring). Exact and
    deterministic; event-driven (only the steps where a block is taken, an answer ends or one may be admitted
    are visited), checked step by step against a plain loop in ``tests/test_paging.py``."""
    if block_size < 1:
        raise ValueError("block_size must be at least 1")
    P, B = budget.prompt_len, block_size
    total = budget.total // B
    shared = (P - 1) // B if budget.shared and P > 0 else 0

    def own(written: int) -> int:   # own blocks to write token written + 1
        return _blocks(P + written, B) - shared

    if any(shared + own(L - 1) > total for L in lengths):
        raise ValueError(f"an answer of {max(lengths)} tokens does not fit the budget of {budget.total} slots "
                         f"({total} blocks of {B}) alone")
    reqs = [_Request(i, max(1, int(lengths[c]))) for i, c in enumerate(order)]
    waiting: list[_Request] = list(reversed(reqs))   # a stack: the head is waiting[-1]
    running: list[_Request] = []
    ends = [0] * len(reqs)
    free = total
    preemptions = recomputed = 0
    changes: list[tuple[int, int, int]] = []
    events: list[tuple[int, int, int]] = []   # (step, kind 0 need / 1 end, seq): lazy, checked against ``by_seq``
    by_seq: dict[int, _Request] = {}
    seq = 0

    def written_at(r: _Request, step: int) -> int:   # tokens written before ``step``
        return r.written + step - r.since

    def schedule_events(r: _Request, step: int, admitted: bool) -> None:
        """After r holds its blocks for ``step``: the next step it needs a block (and, when just admitted, the
        step it ends)."""
        w = written_at(r, step)
        end = step + r.length - w - 1
        if admitted:
            heapq.heappush(events, (end, 1, r.seq))
        nxt = step + (_blocks(P + w, B) * B - P + 1 - w)   # the first step whose P + written crosses a block
        if nxt <= end:
            heapq.heappush(events, (nxt, 0, r.seq))

    def release(r: _Request) -> int:
        freed = r.held + (shared if len(running) == 0 else 0)   # the prompt's blocks go with the last request
        r.held, r.seq = 0, -1
        return freed

    step, admit = 1, True
    while waiting or running:
        # 1) running requests that need a block at this step, in admission order; preempt the latest if none is free
        needs = []
        while events and events[0][0] == step and events[0][1] == 0:
            _, _, s = heapq.heappop(events)
            if s in by_seq:
                needs.append(s)
        preempted = False
        for s in sorted(needs):
            r = by_seq.get(s)
            if r is None:          # preempted earlier in this step
                continue
            while free < 1:
                victim = running.pop()
                del by_seq[victim.seq]
                victim.written = written_at(victim, step)
                changes.append((step, victim.index, -1))
                free += release(victim)
                waiting.append(victim)
                preemptions += 1
                recomputed += victim.written
                preempted = True
                if victim is r:
                    break
            if r.seq == -1:        # preempted itself: nothing after it runs (it was the last)
                break
            free -= 1
            r.held += 1
            schedule_events(r, step, admitted=False)
        # 2) the waiting queue, head first, only in a step without preemption
        if not preempted and admit and waiting:
            while waiting and (max_seqs is None or len(running) < max_seqs):
                r = waiting[-1]
                need = own(r.written) + (shared if not running else 0)
                if need > free:
                    break
                waiting.pop()
                free -= need
                r.held, r.since, r.seq = own(r.written), step, seq
                seq += 1
                running.append(r)
                changes.append((step, r.index, 1))
                by_seq[r.seq] = r
                schedule_events(r, step, admitted=True)
            admit = False
        # 3) answers that wrote their last token at this step end; their blocks are free from the next step
        while events and events[0][0] == step:
            _, kind, s = heapq.heappop(events)
            r = by_seq.get(s)
            if kind != 1 or r is None:
                continue
            del by_seq[s]
            running.remove(r)
            ends[r.index] = step
            changes.append((step + 1, r.index, -1))
            free += release(r)
            admit = True
        if preempted:
            admit = True
        if admit and waiting:
            step += 1
        elif events:
            step = max(step + 1, events[0][0])
        elif waiting:
            raise AssertionError("waiting answers with nothing running: the budget check above should prevent it")
        else:
            break
    return VllmSchedule(tuple(ends), preemptions, recomputed, tuple(changes))


def schedule_seconds(s: VllmSchedule, price: Sequence[float]) -> list[float]:
    """Seconds of Best-of-k for k = 1..N (entry k-1) on one order's schedule, each step priced at
    ``price[rows]``, the rows of the first k answers that run in it (``price[0]`` is 0: the first k are done).
    Online as the steps are: the first k answers run in a step exactly when they run there with the rest, so
    one schedule prices every k. A recomputing answer's prefill is priced as one more row (a bound from below
    on Best-of-N's time)."""
    n = len(s.ends)
    steps = sorted({c[0] for c in s.changes} | {max(s.ends) + 1})
    at = {t: j for j, t in enumerate(steps)}
    delta = np.zeros((len(steps), n))
    for t, i, d in s.changes:
        delta[at[t], i] += d
    running = np.cumsum(delta, axis=0)[:-1]          # [segments, answers]: 1 where the answer runs
    rows = np.cumsum(running, axis=1).astype(int)    # [segments, k]: rows of the first k answers
    lengths = np.diff(np.array(steps, dtype=float))  # steps in each segment
    # summed segment by segment, in order, for every k at once: the same bits on any CPU (a matrix product's
    # order and fused multiply-adds follow the BLAS kernel the CPU picks; a committed table must recompute exactly)
    return (lengths[:, None] * np.asarray(price, float)[rows]).sum(axis=0).tolist()


def vllm_steps(lengths: Sequence[int], budget: KVBudget, block_size: int = BLOCK_SIZE, draws: int = 256,
               seed: int = 0) -> list[float]:
    """Expected engine steps of Best-of-k for k = 1..N (entry k-1) as vLLM v1 schedules it (``vllm_schedule``),
    averaged over orders of the candidates as ``curve.refill_steps`` does (every order when N! <= ``draws``, else
    ``draws`` seeded random ones: the same inputs give the same curve)."""
    return vllm_curve(lengths, budget, block_size, None, draws, seed)[0]


def fits(lengths: Sequence[int], budget: KVBudget, block_size: int = BLOCK_SIZE) -> bool:
    """Does the longest answer fit the budget alone in whole blocks (what ``vllm_schedule`` needs)? A budget that
    holds an answer in slots may not in blocks of ``block_size`` (the last block is whole)."""
    if not lengths or block_size < 1:
        return False
    longest = max(1, int(max(lengths)))
    return _blocks(budget.prompt_len + longest - 1, block_size) <= budget.total // block_size


def vllm_curve(lengths: Sequence[int], budget: KVBudget, block_size: int = BLOCK_SIZE,
               step_s: Callable[[int], float] | None = None, draws: int = 256,
               seed: int = 0) -> tuple[list[float], list[float] | None]:
    """``vllm_steps``, and with ``step_s`` (seconds of a step of r rows) the expected seconds of Best-of-k over the
    same orders (``schedule_seconds``); None without it."""
    steps, seconds, _ = vllm_priced(lengths, budget, block_size, step_s, draws, seed)
    return steps, seconds


def vllm_priced(lengths: Sequence[int], budget: KVBudget, block_size: int = BLOCK_SIZE,
                step_s: Callable[[int], float] | None = None, draws: int = 256,
                seed: int = 0) -> tuple[list[float], list[float] | None, int]:
    """``vllm_curve``, and the widest step of all N answers over those orders (the most rows any priced step
    decodes: the verdict's ``widest``)."""
    from .curve import _orders

    n = len(lengths)
    if n == 0:
        raise ValueError("vllm_steps needs at least one length")
    orders = _orders(n, draws, seed)
    price = [0.0] + [step_s(r) for r in range(1, n + 1)] if step_s is not None else None
    total, seconds, widest = [0.0] * n, np.zeros(n), 0
    for order in orders:
        s = vllm_schedule(lengths, order, budget, block_size)
        for k, e in enumerate(s.steps()):
            total[k] += e
        widest = max(widest, s.widest())
        if price is not None:
            seconds += schedule_seconds(s, price)
    return ([t / len(orders) for t in total], ((seconds / len(orders)).tolist() if price is not None else None),
            widest)


def preemption_stats(lengths: Sequence[int], budget: KVBudget, block_size: int = BLOCK_SIZE, draws: int = 256,
                     seed: int = 0) -> dict:
    """Mean preemptions and recomputed tokens per order when all N answers run (what the recompute costs)."""
    from .curve import _orders

    orders = _orders(len(lengths), draws, seed)
    runs = [vllm_schedule(lengths, o, budget, block_size) for o in orders]
    return {"preemptions": math.fsum(r.preemptions for r in runs) / len(runs),
            "recomputed_tokens": math.fsum(r.recomputed for r in runs) / len(runs)}
