"""``python -m specrej``: run Best-of-N, Speculative Rejection or both on one prompt.

Prints progress to stderr, a readable summary to stdout, and (with ``--json``) the full event
trace. Every RunConfig field is a flag; its help text comes from the dataclass.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from . import precision
from .config import RunConfig
from .events import ARM_NAMES, Finished, Progress, Round, to_dict
from .methods import METHODS, race
from .models import load_generator
from .rewards import load_reward

ARMS = {"sr": ["sr"], "bon": ["bon"], "both": ["sr", "bon"]}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specrej", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--method", choices=list(ARMS), default="both", help="which method(s) to run")
    p.add_argument("--model", default="embedded", help="generator: 'embedded', a hub id, a folder or a .gguf file")
    p.add_argument("--reward", default="embedded",
                   help="reward: embedded | preference[:text] | sentiment | confidence | self-certainty | "
                        "hf:<hub id or folder>")
    p.add_argument("--preference", default=None, help="preference text for the preference reward")
    p.add_argument("--relevance", type=float, default=0.5, help="weight of prompt relevance in the preference reward")
    p.add_argument("--trust-remote-code", action="store_true", help="allow models that ship their own code")
    p.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default=None,
                   help="generator precision; auto: bf16 on CUDA, and on a CPU where a load-time probe finds it "
                        "faster, else fp32 (default: SPECREJ_DTYPE, else auto)")
    p.add_argument("--json", type=Path, default=None, help="write the full event trace here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    helps = RunConfig.help()
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "stop":
            p.add_argument(flag, action="append", default=[], help=helps[f.name])
        elif f.name == "keep_finished":
            p.add_argument(flag, action="store_true", help=helps[f.name])
        elif f.name == "budget":
            p.add_argument(flag, type=int, default=None, help=helps[f.name])
        else:
            p.add_argument(flag, type=type(f.default), default=f.default, help=helps[f.name])
    return p


def _fmt_flops(x: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:.2f} {unit}"
    return f"{x:.0f} FLOP"


def summary(finished: dict[str, Finished]) -> str:
    lines = []
    for arm, f in finished.items():
        led = f.ledger
        lines += [
            f"== {ARM_NAMES[arm]} ({f.rounds} {'rounds' if arm == 'sr' else 'passes'})",
            f"   winner #{f.winner.id}  reward {f.winner.score:.4f}  ({f.winner.tokens} tokens, {f.winner.finish_reason})",
            "   " + f.winner.text.strip().replace("\n", "\n   "),
            f"   generated {led.generated_tokens} tokens, reward read {led.reward_tokens}, prompt {led.prompt_tokens}; "
            f"{_fmt_flops(led.flops)}; {led.wall_s:.1f} s; peak KV {led.peak_kv_slots} slots",
            "",
        ]
    if set(finished) == {"sr", "bon"}:
        sr, bon = finished["sr"], finished["bon"]
        pruned = next(c for c in sr.candidates if c.id == bon.winner.id)
        lines += [
            "== Speed-up of Speculative Rejection over Best-of-N (same N, same budget)",
            f"   generated tokens: {bon.ledger.generated_tokens / max(sr.ledger.generated_tokens, 1):.2f}x fewer",
            f"   FLOPs:            {bon.ledger.flops / max(sr.ledger.flops, 1):.2f}x fewer",
            f"   wall time:        {bon.ledger.wall_s / max(sr.ledger.wall_s, 1e-9):.2f}x faster",
            f"   reward:           {sr.winner.score:.4f} vs {bon.winner.score:.4f} "
            f"({'same winner' if sr.winner.id == bon.winner.id else 'different winners'}; Best-of-N's winner "
            f"#{bon.winner.id} was {'pruned by Speculative Rejection' if pruned.status == 'pruned' else 'kept'})",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    try:
        cfg = RunConfig(**{k: v for k, v in vars(args).items() if k in fields})
        t0 = time.perf_counter()
        lm = load_generator(args.model, trust_remote_code=args.trust_remote_code, dtype=args.dtype)
        reward = load_reward(args.reward, trust_remote_code=args.trust_remote_code,
                             preference=args.preference, relevance=args.relevance)
        if not args.quiet:
            print(f"[specrej] models ready in {time.perf_counter() - t0:.1f} s ({precision.short_name(lm.dtype)}, "
                  f"prompt cache {'shared' if lm.shares_prefix else 'copied'} across rows)", file=sys.stderr)
        trace, finished = [], {}
        for ev in race({arm: METHODS[arm](lm, reward, cfg) for arm in ARMS[args.method]}):
            trace.append(to_dict(ev))
            if isinstance(ev, Finished):
                finished[ev.arm] = ev
            if not args.quiet and isinstance(ev, (Round, Progress, Finished)):
                print(_progress_line(ev), file=sys.stderr)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(summary(finished))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"config": dataclasses.asdict(cfg), "model": args.model,
                                         "dtype": precision.short_name(lm.dtype),
                                         "kv_sharing": "shared" if lm.shares_prefix else "copied",
                                         "reward": reward.name, "events": trace}, indent=1))
        print(f"\ntrace written to {args.json}")
    return 0


def _progress_line(ev) -> str:
    led = ev.ledger
    head = f"[{ev.arm:>3}] {led.wall_s:6.1f}s {led.generated_tokens:6d} tok"
    if isinstance(ev, Round):
        what = "decision" if ev.arm == "sr" else "pass"
        thr = f", threshold {ev.threshold:.3f}" if ev.threshold is not None else ""
        return f"{head}  {what} {ev.index} at token {ev.position}: kept {ev.n_kept}, pruned {ev.n_pruned}{thr}"
    if isinstance(ev, Finished):
        return f"{head}  done: winner #{ev.winner.id} reward {ev.winner.score:.4f}"
    return f"{head}  token {ev.position}, {ev.n_live} live"
