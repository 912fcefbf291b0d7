"""``python -m specrej``: race Best-of-N, Speculative Rejection or any arms on one prompt.

``--arms bon sr:alpha=0.5 sr:alpha=0.9`` races three arms (``specrej.arms``: ``method[:key=value,...]``);
``--method both`` (the default) is ``--arms bon sr``. The first arm is the baseline the others
are compared with (``specrej.analysis.compare``). Prints progress to stderr, a readable summary to stdout,
and (with ``--json``) the full event trace. Every RunConfig field is a flag; its help text comes
from the dataclass. So is every field of a method's own settings (``specrej.core.settings``: ``--warmup``,
``--buffer``, ``--pick`` ...): given, it goes to every arm of a method whose settings have it, unless the arm's
spec sets it (``--warmup 8`` makes ``deepconf`` ``deepconf:warmup=8``).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from .engine import precision
from .arms import DEFAULT_ARMS, REGISTRY, ArmSpec, parse_arms, race_arms
from .analysis.compare import Comparison, Tally, fmt_flops
from .core.about import settings_classes
from .core.config import AUTO, RunConfig
from .core.budget import sharing
from .core.events import Finished, Progress, Round, to_dict
from .analysis.match import StopWhenMatched
from .backends import BACKENDS, load_lm
from .origin import Clock, busy_words, provenance
from .record import Recorder, make_meta
from .rewards import check_prompt, load_reward, own_prompt

METHOD_ARMS = {"sr": ("sr",), "bon": ("bon",), "both": DEFAULT_ARMS}
RECORD_HELP = ("Record a race (its events, compactly) for instant replay in the app, e.g. python -m specrej record "
               "--out assets/recordings/x.json.gz --prompt '...' --arms bon:n=128 sr:n=auto --max-new-tokens 256")


def _n(text: str):
    """--n: a number of candidates, or 'auto' (Speculative Rejection's first batch fills the budget)."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number nor 'auto'") from None


class _Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """"(default: X)" after an option's help where it says something: never "(default: None)" nor a flag's
    "(default: False)", and not twice where the help already names its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or isinstance(action.default, bool) or action.default is argparse.SUPPRESS \
                or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser(record: bool = False) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specrej" + (" record" if record else ""),
                                description=RECORD_HELP if record else __doc__.splitlines()[0],
                                formatter_class=_Defaults)
    if record:
        p.add_argument("--out", type=Path, required=True, help="the recording to write (gzip JSON, e.g. x.json.gz)")
    else:
        p.add_argument("--prompts", type=Path, default=None, metavar="FILE.jsonl",
                       help="race every prompt of this JSONL file (each line {\"prompt\": ...} or a JSON string) "
                            "instead of --prompt, with a progress bar; a table of the results at the end")
        p.add_argument("--out", type=Path, default=None, metavar="RESULTS.jsonl",
                       help="with --prompts: append one result row a prompt here as it finishes; a rerun skips the "
                            "prompts already in it (specrej.many.race_many)")
        p.add_argument("--sweep", action="store_true",
                       help="with --prompts: race every prompt at every seed (--seeds) and alpha (--alphas), one row "
                            "each, then a summary of the speed-ups with 90%% bootstrap intervals over prompts and "
                            "seeds (specrej.sweep)")
        p.add_argument("--seeds", type=int, nargs="+", default=None, metavar="SEED",
                       help="with --sweep: the seeds (default: 0 1 2)")
        p.add_argument("--alphas", type=float, nargs="+", default=None, metavar="ALPHA",
                       help="with --sweep: the rejection rates (default: --alpha's one value)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--method", choices=list(METHOD_ARMS), default="both", help="which method(s) to run")
    which.add_argument("--arms", nargs="+", metavar="ARM", default=None,
                       help="arms to race, each method[:key=value,...], e.g. bon sr:alpha=0.5 "
                            "sr:alpha=0.9,decision=interval,interval=16; the first is the baseline. Methods: "
                            + "; ".join(f"{k} ({v.name}: {', '.join(v.options) or 'no settings'})"
                                        for k, v in REGISTRY.items()))
    p.add_argument("--model", default="embedded", help="generator: 'embedded', a hub id, a folder or a .gguf file")
    p.add_argument("--reward", default="embedded",
                   help="reward: embedded | preference[:text] | sentiment | instructions (IFEval's checkers on its own "
                        "prompts) | confidence | self-certainty | "
                        "hf:<hub id or folder> | py:<module or file.py>:<function, reward object or class> "
                        "(your own Python reward)")
    p.add_argument("--reward-batch-size", type=int, default=None, metavar="N",
                   help="a reward model's answers per forward pass (default: 16)")
    p.add_argument("--reward-label", default=None, metavar="LABEL",
                   help="which of a reward model's outputs is the score: an index or a label name of its id2label "
                        "(default: 0)")
    if not record:
        p.add_argument("--repeat", type=int, default=1, metavar="K",
                       help="race K times with the same settings and seed (the same tokens each time) and print "
                            "each arm's wall-time ratio as the median and range over the K races (default: 1)")
    p.add_argument("--preference", default=None, help="preference text for the preference reward")
    p.add_argument("--relevance", type=float, default=0.5, help="weight of prompt relevance in the preference reward")
    p.add_argument("--trust-remote-code", action="store_true", help="allow models that ship their own code")
    p.add_argument("--dtype", choices=["auto", "fp32", "bf16"], default=None,
                   help="generator precision; auto: bf16 on CUDA, and on a CPU where a load-time probe finds it "
                        "faster, else fp32 (default: SPECREJ_DTYPE, else auto)")
    p.add_argument("--backend", choices=list(BACKENDS), default=None,
                   help="inference engine: transformers (default) or vllm (needs vLLM; default: SPECREJ_BACKEND)")
    p.add_argument("--json", type=Path, default=None, help="write the full event trace here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--stop-when-matched", action="store_true",
                   help="stop the baseline (the first arm) once its best finished reward reaches the second arm's "
                        "winner; the summary says what that took (a lower bound if it never matched)")
    helps = RunConfig.help()
    for f in dataclasses.fields(RunConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "settings":   # an object: its fields are flags of their own (below)
            continue
        if f.name == "stop":
            p.add_argument(flag, action="append", default=[], help=helps[f.name])
        elif f.name == "keep_finished":
            p.add_argument(flag, action="store_true", help=helps[f.name])
        elif f.name == "budget":
            p.add_argument(flag, type=int, default=None, help=helps[f.name])
        elif f.name == "n":
            p.add_argument(flag, type=_n, default=f.default, help=helps[f.name])
        else:
            p.add_argument(flag, type=type(f.default), default=f.default, help=helps[f.name])
    for name, (default, text) in _setting_flags().items():
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=None,
                       help=f"{text} Given, it goes to every arm whose method takes it (default: {default}).")
    return p


def _setting_flags() -> dict[str, tuple[object, str]]:
    """The methods' own settings (``specrej.core.settings``) by name: (default, help), the first class's for a
    name two share (``pick``)."""
    out: dict[str, tuple[object, str]] = {}
    for cls in settings_classes():
        for f in dataclasses.fields(cls):
            out.setdefault(f.name, (f.default, f.metadata["help"]))
    return out


def with_settings(arms: tuple[ArmSpec, ...], given: dict[str, object]) -> tuple[ArmSpec, ...]:
    """Each arm with the settings flags ``given`` that its method takes and its spec does not set."""
    out = []
    for arm in arms:
        mine = dict(arm.overrides)
        extra = tuple((k, v) for k, v in given.items() if k in arm.kind.setting_names and k not in mine)
        out.append(dataclasses.replace(arm, overrides=arm.overrides + extra) if extra else arm)
    return tuple(out)


def _count(count: int, word: str) -> str:
    """'1 pass', '2 passes', '3 rounds'."""
    return f"{count} {word}" if count == 1 else f"{count} {word}{'es' if word.endswith(('s', 'x', 'ch', 'sh')) else 's'}"


# what each kind of round did, in the method's own words (``Round.marks``: its first mark names the round)
ROUND_WORDS = {"threshold set": ("threshold set", "thresholds set"), "stopped": ("stop", "stops"),
               "consensus": ("consensus stop", "consensus stops"),
               "filtered": ("after-run filter", "after-run filters"), "truncated": ("truncation", "truncations"),
               "diverged": ("truncation", "truncations")}


def rounds_words(arm: ArmSpec, f: Finished, rounds: list[Round]) -> str:
    """'2 decisions', '4 passes'; a rival's rounds each by what it did: 'threshold set, 2 stops, after-run filter'."""
    kinds = [r.marks[0][0] for r in rounds if r.marks]
    if not kinds or len(kinds) != len(rounds):
        return _count(f.rounds, arm.kind.about.round_word)
    counted: dict[str, int] = {}
    for k in kinds:
        counted[k] = counted.get(k, 0) + 1
    words = []
    for k, n in counted.items():
        one, many = ROUND_WORDS.get(k, (k, k))
        words.append(one if n == 1 else f"{n} {many}")
    return ", ".join(words)


def _arm_lines(arm: ArmSpec, f: Finished, rounds: list[Round] = ()) -> list[str]:
    led, w = f.ledger, f.winner
    return [
        f"== {arm.label} [{arm.id}] ({rounds_words(arm, f, list(rounds))})",
        f"   winner #{w.id}  reward {w.score:.4f}  ({w.tokens} tokens, {w.finish_reason})",
        "   " + w.text.strip().replace("\n", "\n   "),
        f"   generated {led.generated_tokens} tokens, reward read {led.reward_tokens}, prompt {led.prompt_tokens}; "
        f"{fmt_flops(led.flops)}; {led.wall_s:.1f} s ({led.decode_s:.1f} s decoding, {led.reward_s:.2f} s scoring "
        f"{_count(led.scored, 'answer')} in {_count(led.reward_calls, 'call')}{'' if led.reward_s else ': this reward costs nothing'}); peak KV {led.peak_kv_slots} of {led.budget} slots",
        "",
    ]


def _fate(arm: ArmSpec, base: ArmSpec, c: Comparison, rounds: list[Round], cfg: RunConfig | None) -> str:
    """What the challenger did with the baseline's winner, in its own words: kept, cut at a decision, stopped, or
    (a DeepConf-style warm-up trace written to the end) dropped by the after-run filter."""
    if c.kept_baseline_winner is None:
        return f"{base.label}'s winner #{c.baseline_winner} is not among its candidates"
    if c.kept_baseline_winner:
        return f"kept {base.label}'s winner #{c.baseline_winner}"
    about = arm.kind.about   # its own words, its decisions counted from 1
    at = c.baseline_winner_round_pruned
    r = next((r for r in rounds if r.index == at), None)
    kind = r.marks[0][0] if r is not None and r.marks else ""
    own = getattr(arm.config(cfg), "settings", None) if cfg is not None else None
    warm = c.baseline_winner < getattr(own, "warmup", 0)
    who = f"{base.label}'s winner #{c.baseline_winner}" + (" (a warm-up trace, written to the end)" if warm else "")
    if kind == "filtered":
        return f"dropped {who} in its after-run filter (its lowest {r.signal or 'signal'} was below the threshold)"
    if kind == "consensus":
        return f"stopped {who} when its vote reached consensus"
    if kind:   # a rival's round, by what it did
        return f"{about.cut_word} {who} at token {r.position} (its {ROUND_WORDS.get(kind, (kind,))[0]})"
    return f"{about.cut_word} {who} at its {about.round_word} {at + 1}"


def wall_why(a, b, base_label: str, busy: str | None = None) -> str:
    """What explains two arms' wall times (ledgers ``a``, the challenger's, and ``b``, the baseline's): their
    decoding steps where those differ (equal tokens in more steps: passes of fewer rows), the clock only where
    the work was the same step for step; and, where the machine was busy (``busy``: ``origin.busy_words``), that
    the clock is not reliable."""
    same_work = a.generated_tokens == b.generated_tokens and a.flops == b.flops
    if same_work and a.steps == b.steps:
        why = "the same tokens and FLOPs: the difference is this machine's clock, not the method's work"
    elif same_work:
        why = (f"the same tokens and FLOPs in decoding steps {a.steps} vs {b.steps}: "
               + (f"{base_label} ran them in more steps of fewer rows" if b.steps > a.steps else
                  f"{base_label} ran them in fewer steps of more rows")
               + " (a step's cost grows slower than its rows)")
    else:
        why = f"decoding steps {a.steps} vs {b.steps}, the FLOPs above"
    return why + ("; the machine was busy, so this clock is not reliable" if busy else "")


def _comparison_lines(arm: ArmSpec, base: ArmSpec, c: Comparison, rounds: list[Round] = (),
                      flat: float | None = None, cfg: RunConfig | None = None, fa: Finished | None = None,
                      fb: Finished | None = None, busy: str | None = None) -> list[str]:
    kept = _fate(arm, base, c, list(rounds), cfg)
    lines = [
        f"== {arm.label} against {base.label}",
        f"   reward:           {c.reward:.4f} vs {c.baseline_reward:.4f} "
        f"({'same winner' if c.same_winner else 'different winners'}; {kept})",
        f"   generated tokens: {c.tokens.words()}",
        f"   FLOPs:            {c.flops.words()}",
    ]
    if fa is not None and fb is not None:   # the clock beside the work that explains it
        lines.append(f"   wall time:        {c.wall.words()} ({fa.ledger.wall_s:.1f} s vs {fb.ledger.wall_s:.1f} s; "
                     f"{wall_why(fa.ledger, fb.ledger, base.label, busy)})")
    else:
        lines.append(f"   wall time:        {c.wall.words()}")
    if c.curve_given:
        lines.append("   baseline matched: " + (f"after {fmt_flops(c.baseline_matched_flops)}"
                                                if c.baseline_matched_flops is not None else "never"))
    if flat is not None and c.decisions:
        lines.append(f"   decided nothing: every one of {base.label}'s answers scored {flat:.4f}, so the reward ranks "
                     f"nothing here and its {_count(len(c.decisions), arm.kind.about.round_word)} could not matter")
    else:
        for d in c.decisions:
            rho = "undefined (one side has no spread)" if d.spearman is None else f"{d.spearman:.2f}"
            lines.append(f"   {arm.kind.about.round_word} {d.index + 1} at token {d.position}: Spearman("
                         f"{d.signal or 'partial reward'}, final reward) {rho} over {d.n_live} candidates")
    lines.append("")
    return lines


def flat_score(f: Finished | None) -> float | None:
    """The one score every finished answer of ``f`` got, where they all got the same (a race the reward cannot
    decide: no curve, no speed-up); None otherwise."""
    scores = {c.score for c in (f.candidates if f is not None else ()) if c.finish_reason is not None}
    return next(iter(scores)) if len(scores) == 1 else None


def verdict_lines(arms: tuple[ArmSpec, ...], tally: Tally, step) -> list[str]:
    """Time to equal reward, as the page states it: each pruning arm placed on the first arm's Best-of-N curve,
    priced at this machine's measured step (``step``: a ``StepCost``), scoring included."""
    from .analysis.verdict import from_race

    base = arms[0]
    fb = tally.finished.get(base.id)
    lines = []
    for arm in arms[1:]:
        fa = tally.finished.get(arm.id)
        if fa is None or fb is None or not arm.kind.prunes:
            continue
        try:
            v = from_race(fa, fb, tally.rounds.get(base.id, []), step, scoring=True)
        except ValueError as e:   # a NaN reward: no verdict, and why
            lines += [f"== time to equal reward, {arm.label}: none ({e})", ""]
            continue
        if v is None:
            lines += [f"== time to equal reward, {arm.label}: none ({base.label} did not write all its answers)", ""]
            continue
        lines.append(f"== time to equal reward, {arm.label} against {base.label} (decoding priced at this "
                     f"machine's measured step, scoring included; Best-of-k {v.schedule_words})")
        lines.append("   " + v.headline(arm.label, base.label, f"{v.seconds:.1f} s", f"{v.bon_seconds:.1f} s",
                                        score=lambda x: f"{x:.4f}"))
        if v.improvement is not None:
            lines.append(f"   improvement score {v.improvement:.1f} (the paper's: 100 = the best of all {v.n} "
                         f"answers, 0 = the worst); FLOPs {v.flops_ratio:.2f}x Best-of-k's at equal reward")
        lines.append("")
    return lines


def summary(arms: tuple[ArmSpec, ...], tally: Tally, cfg: RunConfig | None = None, step=None,
            busy: str | None = None) -> str:
    """Each arm's winner and ledger, then each challenger against the first arm, then (``step``: this machine's
    measured step) the time-to-equal-reward verdict of each arm that prunes. ``busy``: the words saying the machine
    was busy during the race (``origin.busy_words``), printed after the wall times they qualify."""
    lines = []
    for arm in arms:
        if arm.id in tally.finished:
            lines += _arm_lines(arm, tally.finished[arm.id], tally.rounds.get(arm.id, []))
    by_id = {a.id: a for a in arms}
    base = arms[0]
    flat = flat_score(tally.finished.get(base.id))
    for arm_id, c in tally.compare_all(base.id).items():
        lines += _comparison_lines(by_id[arm_id], base, c, tally.rounds.get(arm_id, []), flat, cfg,
                                   tally.finished.get(arm_id), tally.finished.get(base.id), busy)
    if step is not None:
        lines += verdict_lines(arms, tally, step)
    if busy:
        lines.append(f"== note: {busy}")
    return "\n".join(lines).rstrip("\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    record = bool(argv) and argv[0] == "record"
    args = build_parser(record).parse_args(argv[1:] if record else argv)
    if not record and (args.prompts is not None or args.out is not None or args.sweep):
        return many_main(args, argv)
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    try:
        settings = {k: v for k, v in vars(args).items() if k in fields}
        own = own_prompt(args.reward)   # a reward that scores only its own prompts: one of them, unless one is given
        if own is not None and settings.get("prompt") == RunConfig.prompt:
            settings["prompt"] = own
            if not args.quiet:
                print(f"[specrej] the {args.reward} reward scores its own prompts only: racing {own!r}",
                      file=sys.stderr)
        cfg = RunConfig(**settings)
        repeats = 1 if record else args.repeat
        if isinstance(repeats, bool) or repeats < 1:
            raise ValueError(f"--repeat must be a whole number of races >= 1, not {repeats}")
        if repeats > 1 and args.stop_when_matched:
            raise ValueError("--repeat times whole races: leave out --stop-when-matched")
        check_prompt(args.reward, cfg.prompt)   # a reward of its own prompts only refuses another before loading
        arms = with_settings(parse_arms(args.arms or METHOD_ARMS[args.method]),
                             {k: v for k in _setting_flags() if (v := getattr(args, k)) is not None})
        for arm in arms:
            arm.config(cfg)  # every arm's settings are valid before the models load
        t0 = time.perf_counter()
        lm = load_lm(args.model, backend=args.backend, trust_remote_code=args.trust_remote_code, dtype=args.dtype,
                     kv_slots=cfg.budget)
        reward = load_reward(args.reward, trust_remote_code=args.trust_remote_code, preference=args.preference,
                             relevance=args.relevance, batch_size=args.reward_batch_size, label=args.reward_label)
        # the decoding step is built (compiled, where it can be) by its first engine: timed here, before the
        # race, so that no arm's wall time pays for it; a recording measures this machine's step too, so that a
        # replay prices Best-of-N's curve in seconds here
        from .backends.steptime import RIVAL_READS, measure

        # (a rival's step, with its extra reads, is built and measured beside it: ST-BoN's reads its own graph)
        reads = RIVAL_READS if any(a.kind.about.rival for a in arms) else ()
        cost = measure(lm, steps=3, reads=reads) if record else measure(lm, rows=(2,), steps=1, reads=reads)
        step_cost = cost.to_record() if record else None
        if not args.quiet:
            print(f"[specrej] models ready in {time.perf_counter() - t0:.1f} s ({precision.short_name(lm.dtype)}, "
                  f"prompt cache {'shared' if sharing(lm, lm.backend) else 'copied'} across rows, decoding step "
                  "built before the race)", file=sys.stderr)
        trace, tally = [], Tally()
        referee = StopWhenMatched(arms[0].id, arms[1].id) if args.stop_when_matched and len(arms) > 1 else None
        recorder = Recorder()
        clock = Clock()
        for ev in race_arms(lm, reward, cfg, arms, referee):
            trace.append(to_dict(ev))
            tally.add(ev)
            recorder.add(ev)
            if not args.quiet and isinstance(ev, (Round, Progress, Finished)):
                print(_progress_line(ev, {a.id: a for a in arms}), file=sys.stderr)
        loads = [clock.stop()]
        walls = [repeat_walls(tally)]
        for k in range(2, repeats + 1):   # the same race again: only its clocks are new
            if not args.quiet:
                print(f"[specrej] race {k} of {repeats}", file=sys.stderr)
            again, clock = Tally(), Clock()
            for ev in race_arms(lm, reward, cfg, arms):
                again.add(ev)
            loads.append(clock.stop())
            walls.append(repeat_walls(again, tally))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    busy = busy_words(loads)
    if busy and not args.quiet:
        print(f"[specrej] {busy}", file=sys.stderr)
    print(summary(arms, tally, cfg, cost, busy=busy_words(loads[:1])))
    if repeats > 1:
        print("\n" + "\n".join(spread_lines(arms, walls, loads)))
    if referee is not None and referee.match is not None:
        print(match_line(arms, referee.match))
    if record:
        settings = {"arms": " ".join(a.spec for a in arms), "n": cfg.n, "max_new_tokens": cfg.max_new_tokens,
                    "budget": next(iter(tally.finished.values())).ledger.budget or cfg.budget,
                    "first_decision": cfg.first_decision, "alpha": cfg.alpha, "seed": cfg.seed,
                    "stop_when_matched": bool(referee)}
        rec = recorder.recording(make_meta(args.model, reward.name, settings, prompt=cfg.prompt,
                                           arms=[{"id": a.id, "spec": a.spec} for a in arms],
                                           step_cost=step_cost, dtype=precision.short_name(lm.dtype)))
        size = rec.save(args.out)
        print(f"\nrecording written to {args.out} ({size / 1024:.0f} KiB, {len(rec.events)} events)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "config": cfg.flat(), "model": args.model, "reward": reward.name,
            "dtype": precision.short_name(lm.dtype), "kv_sharing": "shared" if sharing(lm, lm.backend) else "copied",
            "arms": [{"id": a.id, "spec": a.spec, "method": a.method, "label": a.label,
                      "config": a.config(cfg).flat()} for a in arms],
            "comparison": {k: c.to_dict() for k, c in tally.compare_all(arms[0].id).items()},
            "wall_s_per_race": walls, "load_per_race": loads,
            "provenance": provenance(dtype=lm.dtype, device=getattr(lm, "device", None), lm=lm, reward=reward,
                                     load=loads[0], command=["python", "-m", "specrej", *argv]),
            "events": trace}, indent=1))
        print(f"\ntrace written to {args.json}")
    return 0


def many_main(args, argv: list[str]) -> int:
    """``--prompts FILE.jsonl [--out RESULTS.jsonl]``: every prompt raced by ``race_many`` (a progress bar on
    stderr, one row a prompt appended to ``--out``, resumable), then a line per prompt on stdout."""
    from .many import race_many, read_prompts, row_table

    try:
        if args.prompts is None:
            raise ValueError(f"{'--sweep' if args.sweep else '--out (a results file)'} goes with --prompts "
                             "FILE.jsonl; for one prompt, --json writes its trace")
        if not args.sweep and (args.seeds or args.alphas):
            raise ValueError("--seeds and --alphas go with --sweep")
        clash = [flag for flag, given in (("--prompt", args.prompt != RunConfig.prompt), ("--json", args.json),
                                          ("--stop-when-matched", args.stop_when_matched)) if given]
        if clash:
            raise ValueError(f"--prompts races a file of prompts: leave out {', '.join(clash)} (--out writes the "
                             "results)")
        prompts = read_prompts(args.prompts)
        fields = {f.name for f in dataclasses.fields(RunConfig)}
        settings = {k: v for k, v in vars(args).items() if k in fields and k != "prompt"}
        for prompt in prompts:
            check_prompt(args.reward, prompt)   # a reward of its own prompts only refuses another before loading
        arms = with_settings(parse_arms(args.arms or METHOD_ARMS[args.method]),
                             {k: v for k in _setting_flags() if (v := getattr(args, k)) is not None})
        for arm in arms:
            arm.config(RunConfig(prompt=prompts[0], **settings))   # every arm's settings valid before loading
        t0 = time.perf_counter()
        lm = load_lm(args.model, backend=args.backend, trust_remote_code=args.trust_remote_code, dtype=args.dtype,
                     kv_slots=settings.get("budget"))
        reward = load_reward(args.reward, trust_remote_code=args.trust_remote_code, preference=args.preference,
                             relevance=args.relevance, batch_size=args.reward_batch_size, label=args.reward_label)
        if not args.quiet:
            print(f"[specrej] models ready in {time.perf_counter() - t0:.1f} s ({precision.short_name(lm.dtype)}); "
                  f"racing {len(prompts)} prompts" + (f", results to {args.out}" if args.out else ""),
                  file=sys.stderr)
        if args.sweep:
            from .sweeps import sweep

            done = sweep(prompts, lm, reward, settings, arms, seeds=args.seeds or (0, 1, 2), alphas=args.alphas,
                         out=args.out, progress=not args.quiet, command=["python", "-m", "specrej", *argv])
            print(done.table())
            if args.out:
                print(f"\n{len(done.rows)} result rows in {args.out}")
            return 0
        rows = race_many(prompts, lm, reward, settings, arms, args.out, progress=not args.quiet,
                         command=["python", "-m", "specrej", *argv])
    except ValueError as e:
        notes = "".join(f" ({n})" for n in getattr(e, "__notes__", ()))
        print(f"error: {e}{notes}", file=sys.stderr)
        return 2
    print(row_table(rows))
    if args.out:
        print(f"\n{len(rows)} result rows in {args.out}")
    return 0


def repeat_walls(tally: Tally, first: Tally | None = None) -> dict[str, float]:
    """Each arm's wall seconds in one race; ValueError where a repeat of ``first`` wrote other tokens (the
    same settings and seed write the same ones: anything else is not the same race timed again)."""
    if first is not None:
        for arm_id, f in tally.finished.items():
            f0 = first.finished[arm_id]
            if (f.ledger.generated_tokens, f.winner.id) != (f0.ledger.generated_tokens, f0.winner.id):
                raise ValueError(f"--repeat: arm {arm_id} wrote {f.ledger.generated_tokens} tokens (winner "
                                 f"#{f.winner.id}) where the first race wrote {f0.ledger.generated_tokens} (winner "
                                 f"#{f0.winner.id}): the races are not the same, so their clocks do not compare")
    return {arm_id: f.ledger.wall_s for arm_id, f in tally.finished.items()}


def spread_lines(arms: tuple[ArmSpec, ...], walls: list[dict[str, float]], loads: list[dict] | None = None) -> list[str]:
    """Each challenger's wall-time ratio against the first arm (baseline / challenger, per race) over the
    repeated races: the median, the range and each race's, and the median seconds of both. ``loads``: each race's
    ``origin.Clock`` record; the races run on a busy machine are named (their clocks waited for the CPU)."""
    import statistics

    base = arms[0]
    lines = [f"== wall time over {len(walls)} races (the same settings and seed: each race wrote the same tokens)"]
    busy = [i + 1 for i, x in enumerate(loads or ()) if x.get("busy")]
    if busy:
        lines.append(f"   note (race{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))}): {busy_words(loads)}")
    for arm in arms[1:]:
        pairs = [(w[base.id], w[arm.id]) for w in walls if base.id in w and arm.id in w]
        ratios = [b / a for b, a in pairs if a > 0 and b > 0]
        if not ratios:
            continue
        mid = statistics.median(ratios)
        lines.append(f"   {arm.label} against {base.label}: wall ratio {base.id}/{arm.id} {mid:.2f} median, "
                     f"{min(ratios):.2f} to {max(ratios):.2f} (races: {', '.join(f'{r:.2f}' for r in ratios)}); "
                     f"median wall {statistics.median(a for _, a in pairs):.2f} s vs "
                     f"{statistics.median(b for b, _ in pairs):.2f} s")
    return lines


def match_line(arms: tuple[ArmSpec, ...], m) -> str:
    base = arms[0]
    if m.matched:
        return (f"== {base.label} stopped once it matched {m.target:.4f}: it took {fmt_flops(m.ledger.flops)}, "
                f"{m.ledger.generated_tokens} tokens, {m.ledger.wall_s:.1f} s ({m.finished} candidates finished)")
    return (f"== {base.label} never matched {m.target:.4f}: matching takes more than {fmt_flops(m.ledger.flops)}, "
            f"{m.ledger.generated_tokens} tokens, {m.ledger.wall_s:.1f} s (a lower bound)")


def _progress_line(ev, arms: dict[str, ArmSpec]) -> str:
    led = ev.ledger
    head = f"[{ev.arm:>3}] {led.wall_s:6.1f}s {led.generated_tokens:6d} tok"
    if isinstance(ev, Round):
        thr = f", threshold {ev.threshold:.3f}" if ev.threshold is not None else ""
        return f"{head}  round {ev.index} at token {ev.position}: kept {ev.n_kept}, pruned {ev.n_pruned}{thr}"
    if isinstance(ev, Finished):
        return f"{head}  done: winner #{ev.winner.id} reward {ev.winner.score:.4f}"
    return f"{head}  token {ev.position}, {ev.n_live} live"
