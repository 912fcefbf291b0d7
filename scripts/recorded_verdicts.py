"""The verdict of every recorded paper-scale race, as the page's replay states it.

    python scripts/recorded_verdicts.py            # assets/recordings/
    python scripts/recorded_verdicts.py FOLDER

Replays each recording instantly through the page's own frames (``components.session.recordings``) and prints
one markdown row: Best-of-N's k to reach Speculative Rejection's reward, both times (priced at the recording
machine's measured decoding step, which the recording keeps; Best-of-k as vLLM v1 schedules it, the page's
yardstick), the speed-up in time, the same against Best-of-k in fixed passes (each answer reserving its full
length: the yardstick before issue 63), the FLOPs ratio, the improvement score, and what the recording took to
make. No model is loaded.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    from components.frames import drawn
    from components.session.recordings import RECORDINGS, index, replay_updates

    argv = sys.argv[1:] if argv is None else argv
    folder = Path(argv[0]) if argv else RECORDINGS
    print("| prompt | SR opens with | decisions | Best-of-N needs | time SR / Best-of-k (vLLM) | speed-up in time "
          "(vLLM) | (fixed passes) | FLOPs SR / Best-of-k | improvement | recorded in |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for prompt, path in sorted(index(folder).items()):
        last = None
        for last in drawn(replay_updates(prompt, "inf", folder=folder)):
            pass
        view = last.view
        v = view.verdicts().get("sr") if view is not None else None
        name = (view.cfg.prompt if view is not None else prompt)[:40]
        if v is None:
            print(f"| {name} | | | no verdict (Best-of-N stopped once it matched: no curve of N answers) | | | | | | |")
            continue
        sr = view.arms["sr"]
        unit = "s" if view.step is not None else " steps"
        if v.kind in ("degenerate", "below"):   # no k: a flat curve, or below one answer's average
            print(f"| {name} | {v.kind}: no time to equal reward |")
            continue
        k = f"> {v.n} (a bound)" if v.beyond else f"k = {v.k:.1f} of {v.n}"
        bound = " (at least)" if v.beyond else ""
        fixed = f"{v.passes_seconds / v.seconds:.2f}x{bound}" if v.passes_seconds is not None else "(no budget)"
        print(f"| {name} | {len(sr.finished.candidates)} | {sr.finished.rounds} | {k} "
              f"| {v.seconds:.1f}{unit} / {v.bon_seconds:.1f}{unit} | **{v.speedup:.2f}x**{bound} | {fixed} "
              f"| {v.flops_ratio:.2f}x | {v.improvement:.1f} | {view.recording['seconds']:.0f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
