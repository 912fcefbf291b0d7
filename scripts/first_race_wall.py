"""Identical races in one fresh process: each arm's wall time and the wall ratio, race by race.

    python scripts/first_race_wall.py [--races 3] [--n 16] [--tokens 32]

The embedded generator and a plain-function reward (no model: the ratio is the decoding's), Speculative
Rejection and Best-of-N raced as the library races them (``race``). Before ``warm_up`` the first race charged
the one-off build of the decoding step to whichever arm stepped first. Figures, never assertions: say the CPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--races", type=int, default=3)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    from specrej import Finished, RunConfig, best_of_n, load_generator, race, speculative_rejection

    lm = load_generator()
    cfg = RunConfig(prompt="Give me three tips for staying healthy.", n=a.n, max_new_tokens=a.tokens, alpha=0.5)

    def variety(prompt, responses):
        return [len(set(r)) + 0.01 * len(r) for r in responses]

    for k in range(a.races):
        done = {e.arm: e for e in race({"sr": speculative_rejection(lm, variety, cfg), "bon": best_of_n(lm, variety, cfg)})
                if isinstance(e, Finished)}
        sr, bon = done["sr"].ledger.wall_s, done["bon"].ledger.wall_s
        print(f"race {k + 1}: Speculative Rejection {sr:.2f} s, Best-of-N {bon:.2f} s, Best-of-N / SR {bon / sr:.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
