"""What the methods decide: forced pruning when memory is short, and which candidate wins.

Written against mutants that once survived the suite: the forced-pruning branch of
``methods._decide`` never ran, and choosing the winner with ``min`` passed every library test.
"""
from __future__ import annotations

import pytest

from specrej import CallableReward, Round, RunConfig, best_of_n, run_to_completion, speculative_rejection

PROMPT = "Give me three tips for staying healthy."


def slots(rows: int, p: int, generated: int, shared: bool) -> int:
    """KV slots that ``rows`` rows of a P-token prompt hold after ``generated`` tokens were fed: the
    prompt once when the rows share it (``lm.shares_prefix``), else once per row."""
    return p + rows * generated if shared else rows * (p + generated)


def rounds_of(lm, reward, cfg) -> tuple[list[Round], object]:
    events = list(speculative_rejection(lm, reward, cfg))
    return [e for e in events if isinstance(e, Round)], events[-1]


def pool_at(r: Round) -> list:
    """Candidates in contention when round ``r`` decided: all but those pruned in earlier rounds."""
    return [c for c in r.candidates if not (c.status == "pruned" and c.round_pruned < r.index)]


# budget = what (rows) rows hold after (tokens) tokens; (0.05, 12, 11, 7): the 11 rows alpha keeps
# fit exactly at the decision token, whether the prompt is shared or not
@pytest.mark.parametrize("alpha,n,rows,tokens", [(0.0, 12, 12, 6), (0.05, 12, 11, 7), (0.3, 10, 10, 6)])
def test_memory_forces_pruning_of_the_lowest_and_only_when_the_kept_rows_cannot_fit(tiny_lm, length_reward,
                                                                                     alpha, n, rows, tokens):
    p, shared = len(tiny_lm.render(PROMPT)), tiny_lm.shares_prefix
    budget = slots(rows, p, tokens, shared)   # memory fills after a few tokens: the decision token
    cfg = RunConfig(prompt=PROMPT, n=n, alpha=alpha, max_new_tokens=30, budget=budget, seed=5, progress_every=0)
    rounds, finished = rounds_of(tiny_lm, length_reward, cfg)
    assert rounds
    for r in rounds:
        pool = pool_at(r)
        asked = len(pool) - max(1, round((1 - alpha) * len(pool)))   # what alpha alone prunes
        pruned_now = [c for c in r.candidates if c.status == "pruned" and c.round_pruned == r.index]
        kept_live = [c for c in r.candidates if c.status == "kept"]
        assert r.n_pruned == len(pruned_now) and r.n_kept == len(pool) - len(pruned_now)
        after = r.position + 1          # tokens fed once the next step is through
        fits = slots(len(kept_live), p, after, shared) <= budget
        if r.forced:   # more than alpha asked, exactly down to the rows that fit
            assert len(pruned_now) > asked
            assert fits and slots(len(kept_live) + 1, p, after, shared) > budget
        else:
            assert len(pruned_now) == asked and fits
        # the pruned are the lowest-scoring: none beats a kept candidate
        if pruned_now:
            assert max(c.score for c in pruned_now) <= r.threshold == min(
                c.score for c in pool if c not in pruned_now)
    if alpha == 0.0:   # alpha=0 keeps everyone, so only memory can prune: it must have
        assert any(r.forced for r in rounds)
        assert any(c.status == "pruned" for c in finished.candidates)
    if alpha == 0.05:  # keeps 11 of 12, and 11 rows fit exactly at the decision token: no forcing
        assert not rounds[0].forced and rounds[0].n_pruned == 1
    assert all(c.status in ("finished", "pruned") for c in finished.candidates)


def _expected_winner(f):
    done = [c for c in f.candidates if c.status == "finished"]
    best = max(c.score for c in done)
    return min(c.id for c in done if c.score == best), best


@pytest.mark.parametrize("method", [best_of_n, speculative_rejection])
@pytest.mark.parametrize("sign", [1, -1])
def test_the_winner_is_the_highest_scoring_finished_candidate(tiny_lm, method, sign):
    # both directions of the same reward, so a winner chosen by min (or by id) cannot pass both
    reward = CallableReward(lambda p, rs: [sign * (len(set(r)) + 0.01 * len(r)) for r in rs], name="signed")
    cfg = RunConfig(prompt=PROMPT, n=8, alpha=0.5, max_new_tokens=16, budget=8 * 50, seed=9, progress_every=0)
    f = run_to_completion(method(tiny_lm, reward, cfg))
    scores = {c.score for c in f.candidates if c.status == "finished"}
    assert len(scores) > 1, "the test needs candidates with different scores"
    win_id, best = _expected_winner(f)
    assert f.winner.score == best and f.winner.id == win_id and f.winner.status == "finished"


def test_ties_go_to_the_lowest_candidate_id(tiny_lm):
    flat = CallableReward(lambda p, rs: [1.0] * len(rs), name="flat")
    cfg = RunConfig(prompt=PROMPT, n=6, alpha=0.5, max_new_tokens=8, budget=6 * 50, seed=1, progress_every=0)
    for method in (best_of_n, speculative_rejection):
        f = run_to_completion(method(tiny_lm, flat, cfg))
        assert f.winner.id == min(c.id for c in f.candidates if c.status == "finished")
