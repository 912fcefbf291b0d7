"""'Stop Best-of-N once it matches': the race ends Best-of-N when it reaches SR's winner, and says
what that took (a lower bound when it never does)."""
from __future__ import annotations

import math


from specrej import RunConfig, best_of_n, run_to_completion, speculative_rejection
from specrej.core.events import Candidate, Finished, Ledger, Progress
from specrej.analysis.match import StopWhenMatched
from specrej.methods import race
from specrej.record import decode, record

PROMPT = "Give me three tips for staying healthy."


def test_race_stops_best_of_n_once_it_matches(tiny_lm, length_reward):
    P = len(tiny_lm.render(PROMPT))
    shared = tiny_lm.shares_prefix
    budget = P + 16 * 8 if shared else 16 * (P + 8)      # Best-of-N runs many small passes
    cfg = RunConfig(prompt=PROMPT, n=16, alpha=0.5, max_new_tokens=24, budget=budget, seed=0, progress_every=2)
    full = run_to_completion(best_of_n(tiny_lm, length_reward, cfg))
    ref = StopWhenMatched()
    events = list(race({"sr": speculative_rejection(tiny_lm, length_reward, cfg),
                        "bon": best_of_n(tiny_lm, length_reward, cfg)}, referee=ref))
    fins = {e.arm: e for e in events if isinstance(e, Finished)}
    sr, bon = fins["sr"], fins["bon"]
    assert events[-1] is bon or events[-1] is sr
    m = bon.match
    assert m is not None and m.matched and not m.lower_bound and m.target == sr.winner.score
    assert bon.winner.score >= sr.winner.score
    assert m.ledger.flops <= bon.ledger.flops
    assert bon.ledger.generated_tokens < full.ledger.generated_tokens   # it stopped early (this seed's
    assert any(c.status in ("waiting", "live") for c in bon.candidates)  # winner is in an early pass)
    # Best-of-N's winner in the full run is at least as good: stopping never claims more than it has
    assert full.winner.score >= bon.winner.score
    # the match survives a recording
    back = [ev for _, ev in decode(record(iter(events), {}))]
    assert [e for e in back if isinstance(e, Finished) and e.arm == "bon"][-1].match.matched


def _ev(arm, scores, flops, finished=True, cls=Progress):
    cands = tuple(Candidate(i, "x", 3, "finished" if finished else "live", s) for i, s in enumerate(scores))
    led = Ledger(generator_flops=flops)
    if cls is Finished:
        return Finished(arm, max(cands, key=lambda c: c.score), cands, 1, led)
    return Progress(arm, 3, 0, cands, led)


def test_never_matching_is_a_lower_bound():
    ref = StopWhenMatched()
    out = ref(_ev("sr", [0.9], 10.0, cls=Finished))
    assert len(out) == 1
    assert ref(_ev("bon", [0.5], 20.0)) == [_ev("bon", [0.5], 20.0)]
    last = ref(_ev("bon", [0.5, 0.7], 40.0, cls=Finished))
    assert len(last) == 1 and last[0].match.lower_bound and last[0].match.ledger.flops == 40.0
    assert last[0].match.target == 0.9


def test_baseline_that_ended_first_is_told_its_match_when_the_challenger_ends():
    ref = StopWhenMatched()
    ref(_ev("bon", [0.2], 5.0))
    ref(_ev("bon", [0.2, 0.8], 9.0))
    assert ref(_ev("bon", [0.2, 0.8, 0.3], 12.0, cls=Finished))[0].match is None
    out = ref(_ev("sr", [0.7], 4.0, cls=Finished))
    assert [e.arm for e in out] == ["sr", "bon"]
    m = out[1].match
    assert m.matched and m.ledger.flops == 9.0 and m.finished == 2


def test_already_matched_when_the_challenger_ends_stops_at_once():
    ref = StopWhenMatched()
    ref(_ev("bon", [0.95], 7.0))
    out = ref(_ev("sr", [0.9], 8.0, cls=Finished))
    assert [type(e).__name__ for e in out] == ["Finished", "Finished"] and out[1].arm == "bon"
    assert out[1].match.ledger.flops == 7.0 and math.isclose(out[1].winner.score, 0.95)
