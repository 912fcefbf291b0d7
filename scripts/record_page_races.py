"""Record the page's own races: the defaults and the Classroom preset on every example prompt, in fp32.

A Run too long for its machine as it is now (a busy Space, a lecture hall's shared laptop) plays the labelled
recording of that same race instead of changing it (``components/session/stream.py``); these are those
recordings. Each is raced exactly as the page races it (``stream.record``: the same checks, arms and settings),
on this machine, with its quiet decoding step stored for the replay's verdict.

    SPECREJ_DTYPE=fp32 python scripts/record_page_races.py [--out assets/recordings/page] [--only PRESET]

Run it on a quiet machine (``uptime``): the recorded pace is what a replay at real pace shows.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def presets() -> dict[str, dict]:
    from components.state.shared import CLASSROOM

    page = {k: v for k, v in CLASSROOM.items() if k not in ("fit", "step")}
    return {"defaults": {}, "classroom": page}


def slug(prompt: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", prompt.lower())[:40].strip("-")


def main() -> None:
    from components.session import stream
    from components.session.context import AppContext
    from components.state.request import RunRequest
    from components.state.shared import PAGE_RACES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=PAGE_RACES)
    ap.add_argument("--only", choices=sorted(presets()), default=None)
    args = ap.parse_args()
    os.environ.setdefault("SPECREJ_DTYPE", "fp32")
    ctx = AppContext.from_env()
    from components.session import startup

    startup.warm(ctx)
    for name, preset in presets().items():
        if args.only and name != args.only:
            continue
        for prompt in ctx.examples:
            t = time.perf_counter()
            req = RunRequest(prompt=prompt, model=ctx.default_model, reward=ctx.default_reward,   # as the page sends
                             preference=ctx.default_preference, **preset)
            path = stream.record(ctx, req, args.out / f"{slug(prompt)}-{name}.json.gz")
            print(f"{path}: {time.perf_counter() - t:.1f} s, {path.stat().st_size / 1024:.0f} KiB", flush=True)


if __name__ == "__main__":
    main()
