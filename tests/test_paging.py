"""Best-of-N as vLLM v1 schedules it (``specrej.analysis.paging``): hand-worked cases, a plain step-by-step loop
written after ``vllm/v1/core/sched/scheduler.py`` as the reference for the event-driven simulation, and the
online property that gives every k from one order."""
from __future__ import annotations

import itertools
import random

import pytest

from specrej.analysis.curve import paged_schedule
from specrej.analysis.paging import preemption_stats, schedule_seconds, vllm_curve, vllm_schedule, vllm_steps
from specrej.core.budget import KVBudget


def plain_loop(lengths, order, budget, block_size, max_seqs=None, rows_out=None):
    """vLLM's ``Scheduler.schedule`` then ``update_from_output``, one step at a time, in blocks (FCFS, no token
    budget): (ends by position in the order, preemptions, recomputed tokens); ``rows_out`` gets each step's
    scheduled requests."""
    P, B = budget.prompt_len, block_size
    total = budget.total // B
    shared = (P - 1) // B if budget.shared else 0
    blocks = lambda tokens: -(-tokens // B)   # noqa: E731
    written = {i: 0 for i in range(len(order))}
    held = {i: 0 for i in range(len(order))}
    length = {i: lengths[c] for i, c in enumerate(order)}
    waiting, running, ends = list(range(len(order))), [], {}
    pre = rec = 0

    def used():
        return sum(held.values()) + (shared if running else 0)

    step = 0
    while waiting or running:
        step += 1
        preempted, scheduled = False, []
        i = 0
        while i < len(running):   # 1) running, in order
            r = running[i]
            need = blocks(P + written[r]) - shared - held[r]
            while used() + need > total:
                victim = running.pop()
                held[victim] = 0
                waiting.insert(0, victim)
                pre, rec, preempted = pre + 1, rec + written[victim], True
                if victim == r:
                    break
            if r not in running:
                break
            held[r] += need
            scheduled.append(r)
            i += 1
        if not preempted:          # 2) waiting, head first
            while waiting and (max_seqs is None or len(running) < max_seqs):
                r = waiting[0]
                need = blocks(P + written[r]) - shared + (0 if running else shared)
                if used() + need > total:
                    break
                waiting.pop(0)
                held[r] = blocks(P + written[r]) - shared
                running.append(r)
                scheduled.append(r)
        if rows_out is not None:
            rows_out.append(len(scheduled))
        for r in scheduled:        # 3) every scheduled request writes a token; the last one ends it
            written[r] += 1
            if written[r] == length[r]:
                running.remove(r)
                held[r] = 0
                ends[r] = step
    return tuple(ends[i] for i in range(len(order))), pre, rec


def test_three_answers_by_hand():
    """Prompt of 4 tokens shared, blocks of 4, 16 slots = 4 blocks; lengths 6, 3, 2 (A, B, C in that order).

    The prompt's full blocks: floor((4-1)/4) = 0 (its one block is its last, recomputed per row), so every row
    holds ceil((4 + g)/4) blocks to write token g+1: 1 block for g = 0, 2 for g = 1..4, 3 for g = 5..8.
    Step 1: A, B, C admitted, 1 block each (3 of 4), each writes token 1. Step 2: each needs a 2nd block (g = 1):
    A takes the 4th; B finds none and preempts C (the latest: its block freed, C back at the head with its 1
    token), then takes it; no admission in a step with a preemption; A and B write token 2. Step 3: nobody needs
    a block; C would need 2 blocks, 0 free: waits; B writes its 3rd token and ends (2 blocks free). Step 4: C
    re-admitted, its 1 token recomputed in the prefill (ceil(5/4) = 2 blocks), writes its 2nd token and ends. A
    writes token 5 at step 5 and needs a 3rd block at step 6 (g = 5): free; it writes token 6 and ends.
    Ends: A 6, B 3, C 4; Best-of-1..3: 6, 6, 6; 1 preemption, 1 token recomputed."""
    kv = KVBudget(16, 4, True)
    s = vllm_schedule([6, 3, 2], [0, 1, 2], kv, block_size=4)
    assert s.ends == (6, 3, 4) and s.preemptions == 1 and s.recomputed == 1
    assert s.steps() == [6, 6, 6]
    assert plain_loop([6, 3, 2], [0, 1, 2], kv, 4) == (s.ends, 1, 1)


def test_a_preempted_answer_recomputes_at_once_and_waits_at_the_head():
    """Prompt 2 tokens (its one block is its last: nothing shared), blocks of 2, 8 slots = 4 blocks; lengths
    A 5, B 5, C 1, D 2 in that order. A row holds ceil((2 + g)/2) blocks to write token g+1: 1 at g = 0, 2 at
    g = 1..2, 3 at g = 3..4.

    Step 1: A, B, C, D admitted (1 block each, 4 of 4), each writes token 1; C ends (1 free). Step 2: A takes
    the free block for g = 1; B needs one, none free: preempts D (the latest; 1 token), takes its block; A and
    B write token 2. Step 3: D would need 2 blocks (its token recomputed), 0 free: waits; A, B write token 3.
    Step 4: A needs a 3rd block (g = 3), none free: preempts B (the latest; 3 tokens; B goes to the head, before
    D): 2 free, A takes 1; A writes token 4. Step 5: B would need 3 of 1 free: waits (and D behind it); A writes
    token 5 and ends (4 free). Step 6: B re-admitted with its 3 tokens recomputed (3 blocks), writes token 4;
    D needs 2 of 1 free: waits behind it. Step 7: B writes token 5 and ends. Step 8: D re-admitted (2 blocks),
    writes token 2 and ends. Ends A 5, B 7, C 1, D 8; Best-of-1..4: 5, 7, 7, 8; 2 preemptions, 1 + 3 tokens
    recomputed."""
    kv = KVBudget(8, 2, True)
    s = vllm_schedule([5, 5, 1, 2], [0, 1, 2, 3], kv, block_size=2)
    assert s.ends == (5, 7, 1, 8) and s.preemptions == 2 and s.recomputed == 4
    assert s.steps() == [5, 7, 7, 8]
    assert plain_loop([5, 5, 1, 2], [0, 1, 2, 3], kv, 2) == (s.ends, 2, 4)


def test_block_size_one_with_room_for_all_is_every_answer_at_once():
    """Enough blocks for every answer at full length: nothing waits, Best-of-k is the longest of the first k."""
    kv = KVBudget(100, 3, True)
    s = vllm_schedule([4, 9, 2, 7], [0, 1, 2, 3], kv, block_size=1)
    assert s.ends == (4, 9, 2, 7) and s.preemptions == 0 and s.steps() == [4, 9, 9, 9]


def test_the_event_driven_schedule_is_the_plain_loop():
    """Random lengths, prompts, block sizes, budgets, shared or copied prompts: the event-driven simulation
    gives the plain step loop's ends, preemptions and recomputed tokens."""
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        B = rng.choice([1, 2, 4, 16])
        P = rng.randint(1, 40)
        n = rng.randint(1, 9)
        lengths = [rng.randint(1, 60) for _ in range(n)]
        shared = rng.random() < 0.8
        per = (P if not shared else 0) + max(lengths) + B
        total = rng.randint(P + per, P + per * (n + 1))
        kv = KVBudget(total, P, shared)
        order = list(range(n))
        rng.shuffle(order)
        try:
            got = vllm_schedule(lengths, order, kv, B)
        except ValueError:
            continue
        assert plain_loop(lengths, order, kv, B) == (got.ends, got.preemptions, got.recomputed), \
            (lengths, order, total, P, shared, B)
        checked += 1
    assert checked > 300


def test_the_schedule_is_online_so_one_order_gives_every_k():
    """A preempted request is always the latest admitted, so the first k answers never wait for a later one:
    the first k of an order end when they end with the rest of the order there."""
    rng = random.Random(3)
    for _ in range(60):
        n = rng.randint(2, 8)
        lengths = [rng.randint(1, 40) for _ in range(n)]
        kv = KVBudget(rng.randint(60, 200), rng.randint(1, 20), True)
        try:
            whole = vllm_schedule(lengths, list(range(n)), kv, 4)
        except ValueError:
            continue
        for k in range(1, n + 1):
            assert vllm_schedule(lengths, list(range(k)), kv, 4).steps()[-1] == whole.steps()[k - 1]


def test_against_the_reserve_at_admission_schedule_with_block_size_one():
    """Blocks of one slot and room for every answer to grow: never slower than reserving each answer's final
    length at its start (``curve.paged_schedule``), on every order of four answers."""
    kv = KVBudget(10, 0, True)
    lengths = [6, 5, 3, 2]
    for order in itertools.permutations(range(4)):
        grow = vllm_schedule(lengths, order, kv, 1).steps()
        reserve = paged_schedule(lengths, order, kv)
        assert all(g <= r for g, r in zip(grow, reserve)), (order, grow, reserve)


def test_expected_steps_and_errors():
    kv = KVBudget(10, 0, True)
    steps = vllm_steps([6, 5, 3, 2], kv, block_size=1)
    assert steps[0] == pytest.approx(4.0)     # Best-of-1: the mean length
    assert steps == sorted(steps)
    assert steps[-1] == pytest.approx(sum(vllm_schedule([6, 5, 3, 2], o, kv, 1).steps()[-1]
                                          for o in itertools.permutations(range(4))) / 24)
    assert preemption_stats([6, 5, 3, 2], kv, 1)["preemptions"] >= 0
    with pytest.raises(ValueError, match="does not fit"):
        vllm_schedule([40], [0], kv, 1)
    with pytest.raises(ValueError):
        vllm_steps([], kv)


def in_order(s, price) -> list[float]:
    """Seconds of Best-of-k for every k, each segment between two changes of the schedule priced at the rows of the
    first k answers running in it, added segment after segment."""
    n = len(s.ends)
    steps = sorted({c[0] for c in s.changes} | {max(s.ends) + 1})
    running, out = [0] * n, [0.0] * n
    for t, t_next in zip(steps, steps[1:]):
        for when, i, d in s.changes:
            if when == t:
                running[i] += d
        rows = 0
        for k in range(n):
            rows += running[k]
            out[k] += float(t_next - t) * price[rows]
    return out


def test_seconds_of_every_k_from_one_schedule():
    """Each step priced at the rows of the first k answers that run in it: the same as running the first k alone
    step by step and pricing each step's scheduled requests."""
    rng = random.Random(11)
    price = [0.0] + [1.0 + 0.25 * r + (0.01 * r * r) for r in range(1, 20)]
    for _ in range(40):
        n = rng.randint(1, 8)
        lengths = [rng.randint(1, 30) for _ in range(n)]
        kv = KVBudget(rng.randint(40, 160), rng.randint(1, 12), rng.random() < 0.8)
        try:
            s = vllm_schedule(lengths, list(range(n)), kv, 4)
        except ValueError:
            continue
        got = schedule_seconds(s, price)
        for k in range(1, n + 1):
            rows = []
            plain_loop(lengths[:k], list(range(k)), kv, 4, rows_out=rows)
            assert got[k - 1] == pytest.approx(sum(price[r] for r in rows)), (lengths, k)
            # and bit for bit the segments' costs added in the schedule's order (plain floats below): no BLAS
            # kernel's order or fused multiply-add, so a committed table's seconds recompute exactly on any CPU
            assert got[k - 1] == in_order(s, price)[k - 1], (lengths, k)
    steps, secs = vllm_curve([6, 5, 3, 2], KVBudget(10, 0, True), 1, step_s=lambda r: 2.0)
    assert secs[0] == pytest.approx(2.0 * 4.0) and secs[-1] >= 2.0 * steps[-1] - 1e-9
