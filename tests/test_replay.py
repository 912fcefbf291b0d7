"""The methods on a torch-free backend: a replay of a hand-written script (``backends.replay``).

Every number below is worked out by hand from the script; the same scenario runs in a fresh
interpreter where importing torch fails, so the methods, the budget, the rules and the replay
need no torch."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from specrej.backends.replay import MemoReward, Replay, Script
from specrej.core.config import RunConfig
from specrej.core.events import Finished, Round
from specrej.core.scoring import Scored
from specrej.methods import best_of_n, best_of_n_refill, run_to_completion, speculative_rejection

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ByteLM:
    """A model's outside without a model: one token per byte, the prompt as is."""

    name: str = "bytes"
    shares_prefix: bool = True
    n_params: int = 1000
    max_positions: int | None = None
    dtype: str = "float32"
    kv_bytes_per_slot: int = 8

    def render(self, prompt: str) -> list[int]:
        return list(prompt.encode())

    def decode(self, tokens) -> str:
        return bytes(tokens).decode("latin-1")


@dataclass
class LastLetter:
    """Reward: the code of the response's last character (so a prefix's reward is plain to see)."""

    name: str = "last-letter"
    n_params: int = 0
    uses_token_stats: bool = False
    calls: int = 0

    def score(self, prompt, responses, stats=None) -> Scored:
        self.calls += 1
        return Scored([float(ord(r[-1])) for r in responses], sum(map(len, responses)))


# candidate: its text (one token per letter), all ending at EOS. Candidate 4 ends at token 4;
# candidate 3 looks middling at token 4 ('e') and ends best ('z').
TEXTS = ["aaaaaaaa", "ffffffff", "bbbbbbbb", "eeeezzzz", "dddd", "cccccccc"]
SCRIPT = Script(prompt_tokens=4, tokens=[list(t.encode()) for t in TEXTS])
# the prompt (4 slots, held once) + 6 rows x 4 tokens: the rows fit until token 4
CFG = RunConfig(prompt="abcd", n=6, alpha=0.5, max_new_tokens=10, budget=4 + 6 * 4, progress_every=0)


def sr_scenario() -> dict:
    events = list(speculative_rejection(ByteLM(), LastLetter(), CFG, engine=Replay(SCRIPT)))
    rounds = [e for e in events if isinstance(e, Round)]
    fin = events[-1]
    assert isinstance(fin, Finished)
    return {"rounds": [(r.index, r.position, r.n_kept, r.n_pruned, r.forced, r.threshold) for r in rounds],
            "status": {c.id: (c.status, c.tokens, c.round_pruned) for c in fin.candidates},
            "winner": (fin.winner.id, fin.winner.text, fin.winner.score),
            "ledger": (fin.ledger.steps, fin.ledger.generated_tokens, fin.ledger.peak_kv_slots, fin.rounds)}


def test_speculative_rejection_on_a_script_by_hand():
    out = sr_scenario()
    # steps 1-4 decode 6 rows; candidate 4 ends at token 4 ('dddd', 100); a 5th token for the 5 others
    # would need 4 + 5 x 5 = 29 > 28 slots: decision 0 at token 4. Pool: finished 4 (100) and live
    # 0 (97, 'a'), 1 (102), 2 (98), 3 (101), 5 (99); keep round(0.5 x 6) = 3: 1, 3 and 4.
    assert out["rounds"] == [(0, 4, 3, 3, False, 100.0)]
    assert out["status"] == {0: ("pruned", 4, 0), 1: ("finished", 8, None), 2: ("pruned", 4, 0),
                             3: ("finished", 8, None), 4: ("finished", 4, None), 5: ("pruned", 4, 0)}
    assert out["winner"] == (3, "eeeezzzz", 122.0)
    # 8 steps; 4 x 6 + 4 x 2 = 32 tokens; the most held: after step 4, 4 + 5 x 4 = 24 slots
    assert out["ledger"] == (8, 32, 24, 1)


def test_best_of_n_passes_and_refill_on_a_script_by_hand():
    # Best-of-N fits (28 - 4) // 9 = 2 rows at full length (9 fed tokens): passes {0,1} {2,3} {4,5}
    fin = run_to_completion(best_of_n(ByteLM(), LastLetter(), CFG, engine=Replay(SCRIPT)))
    assert (fin.rounds, fin.ledger.steps, fin.winner.id) == (3, 24, 3)
    assert fin.ledger.generated_tokens == sum(map(len, TEXTS)) == 44
    # refilled: 0,1 end at 8 -> 2,3 start, end at 16 -> 4,5 start; 4 ends at 20, 5 at 24
    fin = run_to_completion(best_of_n_refill(ByteLM(), LastLetter(), CFG, engine=Replay(SCRIPT)))
    assert (fin.rounds, fin.ledger.steps, fin.winner.id) == (1, 24, 3)
    assert fin.ledger.peak_kv_slots == 4 + 7 + 7       # two rows of 7 fed tokens (the 8th is never fed)


def test_the_script_runs_where_torch_cannot_be_imported():
    code = ("import sys; sys.modules['torch'] = None\n"          # any `import torch` now fails
            f"sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
            "import test_replay as t\n"
            "print(t.sr_scenario()['winner'])\n"
            "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "(3, 'eeeezzzz', 122.0)"


def test_the_replay_stops_where_its_recording_does():
    cut = Script(prompt_tokens=4, tokens=[[97] * 5, [98] * 3], finish=["length", "eos"])
    cfg = RunConfig(prompt="abcd", n=2, max_new_tokens=5, budget=100, progress_every=0)
    fin = run_to_completion(best_of_n(ByteLM(), LastLetter(), cfg, engine=Replay(cut)))
    assert [(c.tokens, c.finish_reason) for c in fin.candidates] == [(5, "length"), (3, "eos")]
    shorter = RunConfig(prompt="abcd", n=2, max_new_tokens=2, budget=100, progress_every=0)
    fin = run_to_completion(best_of_n(ByteLM(), LastLetter(), shorter, engine=Replay(cut)))
    assert [(c.tokens, c.finish_reason) for c in fin.candidates] == [(2, "length"), (2, "length")]
    longer = RunConfig(prompt="abcd", n=2, max_new_tokens=8, budget=100, progress_every=0)
    with pytest.raises(ValueError, match="max_new_tokens <= 5"):
        run_to_completion(best_of_n(ByteLM(), LastLetter(), longer, engine=Replay(cut)))
    with pytest.raises(ValueError, match="holds 2 candidates"):
        run_to_completion(best_of_n(ByteLM(), LastLetter(), RunConfig(prompt="abcd", n=3, max_new_tokens=5,
                                                                      budget=100), engine=Replay(cut)))
    with pytest.raises(ValueError, match="give the run a budget"):
        run_to_completion(best_of_n(ByteLM(), LastLetter(), RunConfig(prompt="abcd", n=2), engine=Replay(cut)))


def test_memo_reward_scores_each_response_once():
    inner = LastLetter()
    memo = MemoReward(inner)
    first = memo.score("p", ["ab", "cd", "ab"])
    assert first.scores == [98.0, 100.0, 98.0] and first.tokens_read == 4 and inner.calls == 1
    again = memo.score("p", ["cd", "xy"])
    assert again.scores == [100.0, 121.0] and again.tokens_read == 2 and inner.calls == 2   # only "xy" is read
    assert memo.score("other prompt", ["ab"]).tokens_read == 2                            # keyed by prompt too


# ------------------------------------------------------------------ Best-of-N's winner, and the oracle
# Seven candidates; Speculative Rejection opens with the first six (n=6), so candidate 6, whose final
# reward is the best ('~' = 126), is never drawn. Candidate 2 looks worst at token 4 ('b') and ends
# second best ('y' = 121): the paper's rule prunes it at the first decision, the oracle keeps it.
TEXTS7 = ["aaaaaaaa", "ffffffff", "bbbbyyyy", "eeeezzzx", "dddd", "cccccccc", "~~~~~~~~"]
SCRIPT7 = Script(prompt_tokens=4, tokens=[list(t.encode()) for t in TEXTS7])
FINAL7 = {c: float(ord(t[-1])) for c, t in enumerate(TEXTS7)}


def _sr(policy=None):
    events = list(speculative_rejection(ByteLM(), LastLetter(), CFG, engine=Replay(SCRIPT7), policy=policy))
    return events[-1], [e for e in events if isinstance(e, Round)]


def test_the_winners_fate_never_drawn_pruned_or_kept():
    from specrej.analysis.compare import winner_fate

    fin, rounds = _sr()
    # decision 1 at token 4 keeps 1 ('f'), 3 ('e') and 4 ('dddd', finished): 2 goes
    assert [r.position for r in rounds] == [4]
    assert winner_fate(6, fin, rounds).to_dict() == {"fate": "never_drawn", "decision": None, "position": None}
    assert winner_fate(6, fin, rounds).words() == "never drawn (outside the first batch)"
    assert winner_fate(2, fin, rounds).to_dict() == {"fate": "pruned", "decision": 1, "position": 4}
    assert winner_fate(3, fin, rounds).to_dict() == {"fate": "kept", "decision": None, "position": None}
    assert fin.winner.id == 3 and fin.winner.score == float(ord("x"))


def test_the_oracle_keeps_the_best_final_rewards_through_the_same_loop():
    from specrej.core.decisions import decision_rule
    from specrej.core.oracle import OracleRule
    from specrej.core.rules import Contender

    oracle = OracleRule(FINAL7)
    pool = [Contender(c, 0.0, 4) for c in (0, 2, 3, 5)]
    assert oracle.rank(pool, 4) == [2, 3, 5, 0]                # y, x, c, a: the partial scores play no part
    with pytest.raises(ValueError, match="no final reward"):
        oracle.rank([Contender(9, 0.0, 4)], 4)
    fin, rounds = _sr(decision_rule(alpha=0.5, rule=oracle))
    # at token 4 the pool by final reward is 2 y, 3 x, 1 f, 4 d (finished), 5 c, 0 a: keep 3 of 6
    assert {c.id for c in rounds[0].candidates if c.status in ("kept", "finished")} == {1, 2, 3}
    # the ceiling: the best final reward the first batch drew (never candidate 6: it was not drawn)
    assert (fin.winner.id, fin.winner.score) == (2, 121.0) == (2, max(FINAL7[c] for c in range(6)))
    paper, _ = _sr()
    assert paper.winner.score < fin.winner.score


@pytest.mark.parametrize("says_when_set", [True, False])
def test_a_paced_replays_pause_ends_the_moment_it_is_stopped(says_when_set):
    """A paced recording can wait tens of seconds between events; a stopped replay asleep there kept its event
    pending, and the next Replay pressed waited for it (the click benchmark: no answer in 60 s). The pause wakes
    on the stop (a flag that says when it is set, or one asked every 0.1 s)."""
    import threading

    from conftest import HANG_GUARD_S

    from components.deploy.clients import StopFlag
    from components.session.recordings import stoppable_sleep

    flag = StopFlag()
    stop = flag if says_when_set else (lambda: flag())
    sleep = stoppable_sleep(stop)
    asleep = threading.Thread(target=sleep, args=(10 * HANG_GUARD_S,), daemon=True)
    asleep.start()
    asleep.join(0.2)
    assert asleep.is_alive()          # it does pause ...
    flag.set()
    asleep.join(HANG_GUARD_S)
    assert not asleep.is_alive()      # ... until the stop, not for the whole pause
