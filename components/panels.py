"""Text panels: a ``RunView`` in, markdown / table rows / plain dicts out.

Every number comparing two arms comes from ``specrej.analysis.compare`` (``RunView.comparisons``), the
rule the CLI and the bench use too; this module only words it. Coupled randomness makes the
comparisons exact: candidate i writes the same text in every arm while it survives, so the
baseline's (Best-of-N's) candidate i is what a pruned candidate i would have become.
"""
from __future__ import annotations

import math


from specrej import Candidate
from specrej.analysis.compare import Comparison, fmt_times, reached
from specrej.rewards import kind_of, scale_of

from components.looks import look
from components.theme import fmt_flops, fmt_s, fmt_score, md_escape, snippet
from specrej.analysis.gpu_steps import GpuStep
from specrej.analysis.verdict import PASSES, SAME_TIME, SCHEDULE_WORDS, VLLM, Verdict, show_k
from specrej.analysis.why import Why, paper_setting, signal_strength
from specrej.analysis.why import from_race as why_from_race
from components.state.shared import gpu_steps
from components.state.view import ArmView, RunState, RunView

# ---------------------------------------------------------------- status line

STATUS_KINDS = ("idle", "live", "done", "error", "stopped")   # the status line's CSS styles (status-<kind>)
STATUS_KIND = {RunState.RUNNING: "live", RunState.DONE: "done", RunState.STOPPED: "stopped", RunState.LIMIT: "stopped",
               RunState.ERROR: "error"}


def _arm_status(arm: ArmView) -> str:
    name = md_escape(arm.spec.label)
    if arm.finished is not None:
        return f"**{name}** done in {fmt_s(arm.ledger.wall_s)}, {fmt_flops(arm.ledger.flops)}"
    if not arm.events:
        return f"**{name}** prefilling…"
    word = look(arm.spec.method).round_word
    if arm.prunes:
        k = len(arm.rounds)
        where = (f"{k} {word}{'s' if k != 1 else ''} taken" if k else f"no {word} yet") + f", {arm.n_live} live"
    else:
        waiting = sum(c.status == "waiting" for c in arm.candidates)
        where = f"{word} {len(arm.rounds) + 1}, {arm.n_live} live" + (f", {waiting} waiting" if waiting else "")
    return f"**{name}** {where}, token {arm.position}, {fmt_flops(arm.ledger.flops)}, {fmt_s(arm.ledger.wall_s)}"


def status_kind(view: RunView | None, *, starting: bool = False) -> str:
    """What the status line shows, for its style: idle, live, done, error or stopped."""
    if view is None:
        return "idle"
    return STATUS_KIND[view.state]


def status_markdown(view: RunView | None, *, starting: bool = False) -> str:
    if view is None:
        return "Press **Run** to start the race."
    note = f"\n\n*{md_escape(view.note)}*" if view.note else ""
    if view.state is RunState.ERROR:
        return error_markdown(view.message) + note
    if view.state is RunState.STOPPED:
        return STOPPED
    if view.state is RunState.LIMIT:
        return (f"**Stopped at the time limit** after {fmt_s(view.elapsed())}: {md_escape(view.message)} "
                "The charts and the partial result below show how far each method got." + note)
    fit = view.fit if view.recording is None else None
    expected = getattr(fit, "quiet_s", 0.0) or 0.0   # stated: the race's time here when quiet (``Fit.quiet_s``)
    if starting:
        return ("**Starting:** loading the models and prefilling the prompt…" + _expected_words(fit) + note)
    if view.recording is not None:   # a replay keeps its own clock: never "Done in" the recorded time
        took = fmt_s(view.recording.get("seconds", 0.0))
        stated = (view.fallback or {}).get("stated_s")
        of = f" of about {fmt_s(stated)}" if stated else ""
        behind = (view.fallback or {}).get("reason") == "behind"
        if behind:   # the room watched the live race until it fell behind: the first line says so, not "Replay done"
            head = (f"**{'Done' if view.state is RunState.DONE else 'Finishing'} from the recording**: the live race fell "
                    f"behind at {fmt_s(view.fallback.get('elapsed_s', 0.0))} (other work took the cores), its recording "
                    f"(recorded in {took}) ends it")
        elif view.state is RunState.DONE:
            head = f"**Replay done** in {fmt_s(view.elapsed())} (the recorded race took {took})"
        else:
            head = f"**Replaying a recording** · {fmt_s(view.elapsed())}{of} (recorded: {took})"
        if view.fallback:
            note = f"\n\n{fallback_words(view)}" + note
        if view.state is RunState.DONE and (clocks := clocks_line(view)):
            note += f"\n\n{clocks}"
    elif view.state is RunState.DONE:
        head = f"**Done** in {fmt_s(view.elapsed())}" + (f" (expected about {fmt_s(expected)})" if expected else "")
        if clocks := clocks_line(view):
            note += f"\n\n{clocks}"
    elif expected and fit.late(view.elapsed()):
        head = (f"**Racing, running late** · {fmt_s(view.elapsed())}, expected about {fmt_s(expected)} on this "
                f"machine when quiet ({getattr(fit, 'measured', '') or 'measured at start-up'}): its steps run "
                "slower now (other work shares its cores). The race goes on as set")
    else:
        head = f"**Racing** · {fmt_s(view.elapsed())}" + (f" of about {fmt_s(expected)}" if expected else "")
    return " · ".join([head] + [_arm_status(a) for a in view.display_order()]) + note


def _expected_words(fit) -> str:
    """' Expected to end in about 14 s on this machine when quiet (measured ...); its last measurement found it
    2.1x slower: ...' from the profile: the quiet time, the load of the last probe said beside it, never in it."""
    expected = getattr(fit, "quiet_s", 0.0) or 0.0
    if not expected:
        return ""
    load = getattr(fit, "load", 1.0)
    busy = (f"; its last measurement found it {load:.1f}x slower than that (other work shares its cores), so the race "
            "may take longer" if load >= 1.3 else "")
    when = getattr(fit, "measured", "") or "measured at start-up"
    return f" Expected to end in about {fmt_s(expected)} on this machine when quiet ({when}){busy}."


def fallback_words(view: RunView) -> str:
    """Why a Run plays the recording of its race instead of racing live (``RunView.fallback``)."""
    f, r = view.fallback or {}, view.recording or {}
    where = f"recorded on {md_escape(r.get('hardware', '?'))}, {md_escape(r.get('date', '?'))}"
    load = f.get("load", 1.0)
    busy = f" (this machine is {load:.1f}x slower than when quiet)" if load >= 1.3 else ""
    if f.get("reason") == "queue_full":
        return (f"**The queue is full** ({f.get('waiting', 0)} runs waiting), so rather than turn this Run away, "
                f"this is the **recording of the same race** (the same settings and seed, {where}), at once. "
                "Press **Run** again later to race it live.")
    if f.get("reason") == "capped":
        return (f"**{md_escape(str(f.get('why', '')).rstrip('.'))}.** So rather than turn this Run away, this is the "
                f"**recording of the same race** (the same settings and seed, {where}), at once.")
    if f.get("reason") == "behind":
        measured = f"{load:.1f}x slower than when quiet" if load >= 1.3 else "as fast as when quiet"
        bound = (f"lecture mode ends a race near the time it stated (at most {fmt_s(f['switch_s'])})"
                 if f.get("switch_s") else f"this deployment stops a run at {f.get('limit_s', 0):.0f} s")
        return (f"**The live race fell behind**: {fmt_s(f.get('elapsed_s', 0.0))} in, against about "
                f"{fmt_s(f.get('estimate_s', 0.0))} expected from this machine's profiled decoding speed "
                f"({measured}: other work took its cores since), and {bound}. "
                f"Rather than cut it, this is the **recording of the same race** (the same settings and seed, "
                f"{where}).")
    when = f.get("profile") or "measured at start-up"
    if f.get("reason") == "lecture":
        return (f"**Lecture mode: the recording of this race**, paced to end in about {fmt_s(f.get('stated_s', 0.0))}, "
                f"the live race's time on this machine when quiet. This machine's profile ({md_escape(when)}) finds "
                f"it {load:.1f}x slower than when quiet, so live it would take about "
                f"{fmt_s(f.get('estimate_s', 0.0))}. The same settings and seed, {where}.")
    return (f"**Live, this race would take about {fmt_s(f.get('estimate_s', 0.0))} here**{busy}, past this "
            f"deployment's time limit of {f.get('limit_s', 0):.0f} s, so this is the **recording of the same "
            f"race** (the same settings and seed, {where}). Press **Run** again when the machine is quieter to "
            "race it live.")


# where a recording's wall times and the verdict's priced times show together (the status line and the result)
def clocks_line(view: RunView) -> str:
    """The screen's two clocks reconciled in one line, with every number each shows: each method's wall clock as it
    ran (the status's "done in", the table) and its priced time (the verdict: decoding steps at the profiled step
    time, plus its timed scoring where the verdict adds it), and which Best-of-k the verdict compares with. ""
    without a verdict."""
    verdicts = view.verdicts()
    if not verdicts:
        return ""
    base = view.arms[view.baseline]
    arm_name, v = next(iter(verdicts.items()))
    arm = view.arms[arm_name]
    name, bname = md_escape(arm.spec.label), md_escape(base.spec.kind.name)
    where = "its recorded machine" if view.recording is not None else "this machine"
    scoring = view.step is not None   # the verdict adds each arm's timed scoring on this step (``RunView.verdicts``)
    priced = ("each decoding step at " + where + "'s profiled step time" + (", plus the method's scoring as timed"
              if scoring else "; scoring is not priced"))
    all_n = v.curve[-1].seconds if v.curve else 0.0
    k_words = (f"Best-of-{show_k(v.k)}, the answers it needs to match, {fmt_s(v.bon_seconds)}" if v.k is not None
               else f"all {v.n} answers, {fmt_s(v.bon_seconds)}")
    return (f"*Two clocks, one race. As it ran ({'its recorded clock' if view.recording is not None else 'the wall clock here'}; "
            f"the \"done in\" above and the table): {name} {fmt_s(arm.ledger.wall_s)}, {bname}'s {v.n} answers "
            f"{fmt_s(base.ledger.wall_s)}. Priced for the verdict ({priced}): {name} {fmt_s(v.seconds)}, {bname}'s "
            f"{v.n} answers {fmt_s(all_n)}; the verdict compares with {k_words}. The wall clock also holds sampling, "
            f"text decoding and whatever else {where} ran then, so it can be longer or shorter than the price.*")


REPLAY_START = "**Replaying** the recorded race…"


def badge_markdown(view: RunView, *, speed: float | None = None, replayed_s: float | None = None) -> str:
    """The badge a replay carries while it plays and after it ends: it is a recording, when and where it
    was recorded and how long it took then, its own replay clock, and the reward it was scored with."""
    r = view.recording or {}
    pace = "instantly" if speed is None or not math.isfinite(speed) else f"at {speed:g}× the recorded pace"
    clock = (f"recorded in {fmt_s(r.get('seconds', 0.0))}, replayed in {fmt_s(replayed_s)}" if replayed_s is not None
             else f"recorded in {fmt_s(r.get('seconds', 0.0))}, replaying {pace}")
    dtype = f" in {md_escape(r['dtype'])}" if r.get("dtype") else ""
    head = (f"**● Recording**, not a live run · {md_escape(r.get('model', '?'))}{dtype} on "
            f"{md_escape(r.get('hardware', '?'))}, {md_escape(r.get('date', '?'))} · {clock} · every time shown is "
            "that machine's")
    if r.get("page_race"):   # the page's own race: the same settings as Run's
        return head + (f" · scored with the **{md_escape(r.get('reward', '?'))}** reward, as set · **Run it live** "
                       "races these same settings on this machine.")
    return head + (f" · scored with the **{md_escape(r.get('reward', '?'))}** reward (the recording's own; your "
                   "Settings' reward is not used) · **Run it live** runs these settings here, scaled down to fit.")


STOPPED = "**Stopped.** Every arm was cancelled and its memory freed. Press Run to start again."


def error_markdown(message: str) -> str:
    """The message as plain text: it may quote what the user typed (escaped, never markup)."""
    return f"**Can't run:** {md_escape(str(message))}"


# ---------------------------------------------------------------- leaders

def leader(view: RunView, arm_id: str) -> tuple[str, str]:
    """(label, text) of the arm's current leader, for the text box under its chart."""
    arm = view.arms[arm_id]
    name = arm.spec.label
    c = arm.leader()
    if c is None:
        return f"{name} · waiting to start", ""
    if arm.finished is not None:
        return f"{name} · winner #{c.id} · reward {fmt_score(c.score)} · {c.tokens} tokens", c.text
    pruning = arm.prunes
    if c.score is None:
        hint = f"scored at the first {look(arm.spec.method).round_word}" if pruning else "scored when complete"
        return f"{name} · #{c.id} writing ({hint}) · {c.tokens} tokens", c.text
    if c.status == "finished":
        what = "leader (finished)" if pruning else "best finished so far"
        return f"{name} · {what} #{c.id} · reward {fmt_score(c.score)} · {c.tokens} tokens", c.text
    at = c.history[-1][0] if c.history else c.tokens
    return (f"{name} · leader #{c.id} · partial, at token {at}: reward {fmt_score(c.score)} so far (not finished) · "
            f"{c.tokens} tokens", c.text)


# ---------------------------------------------------------------- end of run

def _mb(x: int) -> str:
    return f"{x / 2**20:.0f} MB" if x >= 2**20 else f"{x / 1024:.0f} kB"


def _ledger_rows(view: RunView) -> list[str]:
    arms = view.display_order()
    reward = f"reward of the winner ({scale_of(view.reward_label).name})"
    rows: list[tuple[str, list[str]]] = [("winner", []), (reward, []), ("winner's length", []),
                                         ("tokens generated (all candidates)", []), ("tokens read by the reward", []),
                                         ("compute (generator + reward)", []),
                                         ("wall time (decoding + scoring)", []),
                                         ("peak KV cache", []), ("decisions / passes", [])]
    for arm in arms:
        f, led = arm.finished, arm.finished.ledger
        cells = [f"#{f.winner.id}", f"**{fmt_score(f.winner.score)}**", f"{f.winner.tokens} tokens",
                 f"{led.generated_tokens:,}", f"{led.reward_tokens:,}", f"**{fmt_flops(led.flops)}**",
                 f"{fmt_s(led.wall_s)} ({fmt_s(led.decode_s)} + {fmt_s(led.reward_s)})",
                 f"{led.peak_kv_slots:,} slots ({_mb(led.peak_memory_bytes)})",
                 rounds_words(arm)]
        for (_, col), cell in zip(rows, cells):
            col.append(cell)
    def head(a: ArmView) -> str:   # what the column counts: a baseline wrote every one of its answers
        n = len(a.finished.candidates)
        return md_escape(a.spec.label) + (f" · all {n} answers" if not a.prunes else "")

    out = ["*What each method spent in this race. Best-of-N's column is all of its answers; the verdict above "
           "compares with Best-of-k, the k answers it needs to match.*", "",
           "| | " + " | ".join(head(a) for a in arms) + " |", "|---|" + "---:|" * len(arms)]
    out += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows]
    leds = [a.finished.ledger for a in arms]
    if all(led.reward_s <= 0.01 * led.wall_s for led in leds):
        read = sum(led.reward_tokens for led in leds)
        why = (f"its model read {read:,} tokens in {fmt_s(sum(led.reward_s for led in leds))} in all, timed call by "
               "call" if read else "the reward reads no model, or reads statistics the engine already kept")
        out += ["", f"*Scoring was cheap here: under 1% of each method's time ({why}). With a large reward model it "
                "can be the largest cost; the verdict prices each method's scoring as its ledger timed it.*"]
    else:
        out += ["", "*Scoring is priced: each method's reward calls were timed (the + term above), and the verdict "
                "adds them to the decoding time (Best-of-k pays k/N of Best-of-N's).*"]
    return out


SUMMARY_PLACEHOLDER = ("### Result\nWhen every method finishes, their winners appear here side by side: reward, "
                       "tokens, compute, wall time and the speed-up.")


def reward_words(view: RunView, verdicts: dict | None = None) -> str:
    """Which reward scored the answers, what its numbers mean (``specrej.rewards.Scale``) and, with
    Best-of-N's curve, what a big difference is on this prompt."""
    scale = scale_of(view.reward_label)
    name = view.reward_label or scale.name
    out = (f"**Reward:** {md_escape(name)}: {md_escape(scale.meaning)}. Each reward has its own scale: "
           f"compare rewards within one run, not across rewards.")
    v = next(iter((verdicts or {}).values()), None)
    if v is not None and len(v.curve) > 1 and v.curve[-1].best > v.curve[0].best:
        one, top = v.curve[0].best, v.curve[-1].best
        out += (f" What a big difference is here: one answer scores {fmt_score(one)} on average, the best of all "
                f"{v.n} {fmt_score(top)}; that gap of {fmt_score(top - one)} is what {v.n}x the answers buy.")
    return out


TIME_NOTE = ("*How time is counted: every decoding step is priced at {machine}'s measured time for the rows "
             "decoding at that step (a row leaves when its answer ends or is pruned), measured {when}{scoring}. "
             "Best-of-N's curve is the expected best reward of k of its answers drawn at random (order statistics "
             "over its coupled answers), each k priced under the same memory budget {schedule}.*")


def time_note(view: RunView) -> str:
    """How the verdict's time is counted, on whose machine (the status's one line compares it with the wall clocks:
    ``clocks_line``), and on which schedule Best-of-k is priced (``Verdict.schedule_words``)."""
    r = view.recording
    machine = (f"the recording's machine ({md_escape(r.get('hardware', '?'))}, {md_escape(r.get('date', '?'))})"
               if r is not None else "this machine")
    when = "when it was recorded" if r is not None else "just before the race"
    scoring = ("; each method's reward scoring is added as its ledger timed it, call by call (Best-of-k pays k/N of "
               "Best-of-N's)" if view.step is not None else "; reward scoring is not priced")
    v = next(iter(view.verdicts().values()), None)
    schedule = v.schedule_words if v is not None else SCHEDULE_WORDS[PASSES]
    if v is not None and v.schedule == VLLM:
        schedule += ", not in the passes this race's Best-of-N ran"
    return TIME_NOTE.format(machine=machine, when=when, scoring=scoring, schedule=schedule)


STEPS_NOTE = ("*This machine's decoding step could not be measured, so time is counted in decoding steps. Best-of-N's "
              "curve is the expected best reward of k of its answers, each k under the same memory budget.*")


def first_at_top(v: Verdict) -> int:
    """The fewest answers whose expected best is Best-of-N's winner: N, unless t answers tie at the top score (then
    N - t + 1: every draw of that many holds one of them)."""
    if not v.curve:
        return v.n
    top = v.curve[-1].best
    return next((p.k for p in v.curve if p.best >= top - 1e-9 * max(1.0, abs(top))), v.n)


def _reward_note(c: Comparison, base: str) -> str:
    a, b = c.reward, c.baseline_reward
    if c.same_winner or reached(a, b):
        return f"matched {base}'s reward ({fmt_score(a)} vs {fmt_score(b)})"
    if a > 0 and b > 0:
        return f"reached {100 * a / b:.1f}% of {base}'s reward ({fmt_score(a)} vs {fmt_score(b)})"
    return f"its winner scored {fmt_score(a)} against {base}'s {fmt_score(b)}"


def _seconds(view: RunView, x: float) -> str:
    return fmt_s(x) if view.step is not None else f"{x:,.0f} decoding steps"


def gpu_line(view: RunView, arm: ArmView, v: Verdict, gpu: GpuStep) -> str:
    """The verdict's second reading: the same race with every decoding step priced at the step measured on a
    GPU (``RunView.gpu_verdicts``), labelled with the device, the config and the date. Empty when there is
    nothing to compare (a flat curve)."""
    if v.kind == "degenerate":
        return ""
    label, bname = md_escape(arm.spec.label), md_escape(view.arms[view.baseline].spec.kind.name)
    spent = f"({fmt_s(v.seconds)} against {fmt_s(v.bon_seconds)})"
    if v.kind == "below":
        words = f"{label} took {v.time_words(f'a single {bname} answer')} {spent}"
    elif v.beyond:
        words = (f"{label} took {'at least ' if v.speedup >= 1 + SAME_TIME else ''}"
                 f"{v.time_words(f'all {v.n} of {bname} answers')} {spent}")
    else:
        k = show_k(v.k)
        than = f"{bname}'s {k} answer{'s' * (k != '1')} to equal reward"
        words = f"{label} took {v.time_words(than)} {spent}"
    tail = (f" A step of {v.widest} rows is past the largest batch measured there ({gpu.cost.measured_max}): "
            "extrapolated along the last measured slope." if gpu.cost.extrapolates(v.widest) else "") + \
        (f" {v.reads_words('on the GPU')}" if v.reads else "")
    return (f"**{_cap(gpu.on)}, measured: {words}.** *The same decoding steps, each priced at the step measured on "
            f"the {md_escape(gpu.describe())}: the rows, the memory budget and Best-of-k's schedule stay this race's.{tail}*")


def verdict_lines(view: RunView, arm: ArmView, v: Verdict, gpu: tuple[GpuStep, Verdict] | None = None) -> list[str]:
    """The paper's comparison in words: where this arm's result falls on Best-of-N's curve, in time (the
    verdict, one sentence per ``Verdict.kind``; with ``gpu``, the same race priced on a measured GPU step
    beside it), then the improvement score and the FLOPs, each with what it means."""
    base = view.arms[view.baseline]
    label, bname = md_escape(arm.spec.label), md_escape(base.spec.kind.name)
    t_sr, t_bon = _seconds(view, v.seconds), _seconds(view, v.bon_seconds)
    head = v.headline(label, bname, t_sr, t_bon, score=fmt_score, flops=fmt_flops, bold=lambda s: f"**{s}**")
    if v.kind == "degenerate":   # N = 1 or every score equal: no curve, no score, nothing more to say
        return [head]
    all_n = v.kind == "reached" and v.k >= v.n - 1e-9
    if view.step is not None and view.step.extrapolates(v.widest):
        head += (f" *A step of {v.widest} rows is priced beyond the largest batch measured here "
                 f"({view.step.measured_max} rows): extrapolated along the last measured slope.*")
    lowered = [r for r, s, f in zip(view.step.rows, view.step.seconds, view.step.fitted) if f < s] if view.step else []
    if lowered:
        head += (f" *A step of {', '.join(map(str, lowered))} row{'s' * (lowered != [1])} measured slower than a "
                 "larger batch (load while it was measured): it is priced at the larger batch's time, since more "
                 "rows never cost less.*")
    if view.step is not None and v.reads:   # a rival's own extra reads, in its time or said to be left out
        where = "on the recording's machine" if view.recording is not None else "on this machine"
        head += f" *{v.reads_words(where)}*"
    if v.passes_faster:   # vLLM's blocks hold fewer answers than whole-length reservations in a small budget
        head += (f" *Best-of-k in fixed passes (each answer reserving its full length) would take "
                 f"{_seconds(view, v.passes_seconds)} here, less than as vLLM pages it (in this budget its whole blocks of 16 "
                 f"slots and its preemptions cost more than reserving whole lengths): against that schedule {label} took "
                 f"{v.passes_time_words()}.*")
    second = gpu_line(view, arm, gpu[1], gpu[0]) if gpu is not None else ""
    if second:
        head += "\n\n" + second
    scale = f"(the paper's score: 100 = the best of all {v.n} answers, 0 = the worst)"
    if v.beyond:
        score = f"Improvement score **{v.improvement:.1f}**: above Best-of-{v.n}'s winner {scale}."
    elif all_n:
        score = f"Improvement score **{v.improvement:.1f}**: Best-of-{v.n}'s winner, equal to the digits shown {scale}."
    else:
        first = first_at_top(v)
        reaches = (f"only with all {v.n}" if first >= v.n else
                   f"from Best-of-{first} on (answers tie at the top score)")
        score = (f"Improvement score **{v.improvement:.1f}**: {100 - v.improvement:.1f} points below "
                 f"Best-of-{v.n}'s winner {scale}, which Best-of-N reaches {reaches}"
                 + (", and below what one answer scores on average." if v.kind == "below" else "."))
    r = v.flops_ratio
    k_word = f"Best-of-{v.n}" if v.beyond else "Best-of-1" if v.kind == "below" else f"Best-of-{show_k(v.k)}"
    if not 0 < r < math.inf:   # one side counted no FLOPs: no ratio
        return [head, "", score, "", f"FLOPs: {label} spent {fmt_flops(v.flops)}, {k_word} {fmt_flops(v.bon_flops)}."]
    spent = ("about as many FLOPs as" if abs(math.log(r)) < math.log(1 + SAME_TIME) else
             f"{fmt_times(r if r >= 1 else 1 / r)}x {'more' if r >= 1 else 'fewer'} FLOPs than")
    flops = (f"FLOPs: {label} spent {spent} {k_word} ({fmt_flops(v.flops)} against {fmt_flops(v.bon_flops)})"
             + (": more rows per step, fewer steps. A step's time grows far slower than its rows, so more "
                "FLOPs can take less time." if r > 1 and v.time_words().endswith("less time") else "."))
    return [head, "", score, "", flops]


def headline(view: RunView, arm: ArmView, c: Comparison, v: Verdict | None,
             gpu: tuple[GpuStep, Verdict] | None = None) -> list[str]:
    """The verdict (``verdict_lines``), or without Best-of-N's whole curve what each spent."""
    if v is not None:
        return verdict_lines(view, arm, v, gpu)
    base = md_escape(view.arms[c.baseline].spec.label)
    return [f"**{md_escape(arm.spec.label)}** used {c.flops.words('compute')} ({c.wall.words('wall time')}) and "
            f"{_reward_note(c, base)}. No time-to-equal-reward verdict: {base} did not write all of its answers "
            "(it stopped once it matched), so its curve over N is unknown."]


def _challenger_lines(view: RunView, arm: ArmView, c: Comparison) -> list[str]:
    base_arm = view.arms[c.baseline]
    label, base = md_escape(arm.spec.label), md_escape(base_arm.spec.label)
    lines = []
    m = base_arm.finished.match
    if m is not None and m.challenger == arm.arm:
        times = m.ledger.flops / arm.finished.ledger.flops if arm.finished.ledger.flops else 0.0
        if m.matched:
            lines.append(f"**Stopped once it matched:** {base} reached {fmt_score(m.target)} after "
                         f"{fmt_flops(m.ledger.flops)} and {fmt_s(m.ledger.wall_s)} ({m.finished} answers finished; "
                         f"{fmt_times(times)}× {label}'s compute).")
        else:
            lines.append(f"**Never matched:** {base} did not reach {fmt_score(m.target)}; matching would take more "
                         f"than {fmt_flops(m.ledger.flops)} ({fmt_times(times)}× {label}'s compute): a lower bound.")
    lines.append("")
    bid = c.baseline_winner
    ask = f"**Did {label} prune {base}'s winner?**"
    if c.kept_baseline_winner is None:
        opened = len(arm.finished.candidates) if arm.finished is not None else 0
        lines.append(f"{ask} No: it never drew #{bid}. It opened with {opened} answers (#0 to #{opened - 1}), and with "
                     f"coupled randomness answer #{bid} exists only in {base}, which wrote more.")
    elif not c.kept_baseline_winner:
        about = arm.spec.kind.about
        at = c.baseline_winner_round_pruned
        tokens, partial = c.baseline_winner_partial or (None, None)
        if tokens is None and at is not None and at < len(arm.round_events):
            tokens = arm.round_events[at].position   # the decision's own token (it read no reward of it)
        how = (f"with a partial reward of {fmt_score(partial)}" if partial is not None else
               f"on its {about.signal or about.decides_by}" if (about.signal or about.decides_by) else "")
        where = " ".join(x for x in (how, f"at token {tokens}" if tokens is not None else "") if x)
        lines.append(f"{ask} Yes: candidate #{bid} was {about.cut_word} at its {about.round_word} "
                     f"{_decision_no(at)}{' ' + where if where else ''}; had it continued it would have scored "
                     f"{fmt_score(c.baseline_reward)}.")
    elif c.same_winner:
        lines.append(f"{ask} No: candidate #{bid} survived every {arm.spec.kind.about.round_word} and won both.")
    else:
        lines.append(f"{ask} No: candidate #{bid} was not pruned.")
    d = c.first_decision
    if arm.prunes and not arm.rounds:
        lines.append(f"\n{label} never had to decide here: all N candidates fit the memory budget to the end, so it "
                     f"did what {base} did. Raise N or lower the memory budget to see pruning.")
    elif d is not None and d.spearman is not None:
        about = arm.spec.kind.about
        what = (f"its {about.signal} at its first {about.round_word}" if about.rival
                else "the first partial rewards")
        lines.append(f"\nHow well did {what} predict the final rewards? Spearman ρ = "
                     f"**{d.spearman:.2f}** over {d.n_live} candidates at token {d.position}"
                     + (" (too few to tell)." if d.n_live < 3 else "."))
    return lines


def summary_markdown(view: RunView) -> str:
    cmps = view.comparisons()
    if not view.done:
        return SUMMARY_PLACEHOLDER
    verdicts = view.verdicts()
    gpu, on_gpu = view.gpu_verdicts(gpu_steps())
    lines = ["### Result", ""]
    for arm in view.display_order():
        if arm.arm in cmps:
            second = (gpu, on_gpu[arm.arm]) if arm.arm in on_gpu else None
            lines += headline(view, arm, cmps[arm.arm], verdicts.get(arm.arm), second) + [""]
    why = why_markdown(view, verdicts)
    if why:
        lines += [why, ""]
    lines += _ledger_rows(view) + ["", reward_words(view, verdicts), ""]
    for arm in view.display_order():
        if arm.arm in cmps:
            lines += _challenger_lines(view, arm, cmps[arm.arm]) + [""]
    if verdicts:
        lines.append(time_note(view) if view.step is not None else STEPS_NOTE)
        lines.append("")
    exact = all(a.ledger.dtype == "float32" for a in view.arms.values())
    lines.append("*FLOPs are counted as the field counts them, for each model: 2 × its non-embedding parameters × "
                 "tokens, plus attention's 2 × layers × context × width per token (a recording keeps the count it was "
                 "made with). Randomness is coupled: "
                 "candidate i writes the same text in every method while it survives"
                 + ("." if exact else f" (up to {view.arms[next(iter(view.arms))].ledger.dtype} rounding: a few "
                    "candidates can drift once the batch changes size; float32 is exact).") + "*")
    fell = sorted({a.ledger.step for a in view.arms.values() if "capture failed" in a.ledger.step})
    if fell:   # the captured GPU step failed in this process: the race went on without it (``captured._give_up``)
        lines += ["", f"*Decoding step: {md_escape(fell[0])}. The race went on without the CUDA graph (same "
                  "tokens so far); the server log has the traceback.*"]
    return "\n".join(lines)


# ---------------------------------------------------------------- why this speed-up

def _x(r: float) -> str:
    """A factor as the page says it: '4x', '1.6x', '0.52x'."""
    return f"{fmt_times(r)}x" if r >= 1 else f"{r:.2g}x"


def _count(n: float, one: str, many: str) -> str:
    return f"{n:,.0f} {one if round(n) == 1 else many}"


def _fewer(r: float) -> str:
    """Best-of-N's steps over Speculative Rejection's, in words: '4x fewer', 'as many', '1.2x more'."""
    if fmt_times(r if r >= 1 else 1 / r) == "1":
        return "as many"
    return f"{_x(r)} fewer" if r > 1 else f"{_x(1 / r)} more"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _room_words(w: Why, sr: str, about=None) -> str:
    """Best-of-N's passes against Speculative Rejection's one: the most its steps can shrink, and how far they did.
    Against vLLM's paging (``Why.schedule``) the passes are named as fixed passes' (a bound for full-length answers
    reserving their length) and the steps as vLLM's (which can exceed the passes': a small budget in blocks)."""
    where = f"in the {w.budget:,}-slot budget" if w.budget else "in the memory budget"
    if w.shared is not None:
        where += " (the prompt stored once)" if w.shared else " (a copy of the prompt in every row)"
    rows = _count(w.rows_per_pass, "row", "rows")
    paged = w.schedule == VLLM
    needs = (f"each answer reserving its full length, needs {_count(w.passes, 'fixed pass', 'fixed passes')} of "
             f"{rows} {where}" if paged else f"needs {w.passes} passes of {rows} {where}")
    could = ("against fixed passes of full-length answers its decoding steps could shrink at most" if paged
             else "its decoding steps can shrink at most")
    early = "" if paged else _early_words(w)
    if about is not None and about.rival and about.schedule == "passes":
        head = (f"Best-of-{w.n} at {w.length} tokens{',' if paged else ''} {needs}; {sr} writes its "
                f"traces in passes of at most {_count(w.opening_rows, 'row', 'rows')} too (any trace may reach full "
                "length), so its steps shrink only where its stops end a pass early or, on an engine that refills, "
                "free a slot for the next trace")
    elif about is not None and about.rival:
        head = (f"Best-of-{w.n} at {w.length} tokens{',' if paged else ''} {needs}; {sr} opens with "
                f"{_count(w.opening_rows, 'row', 'rows')} in one pass and writes one answer on after it truncates, so "
                f"{could} {w.bound}x" + early)
    elif w.passes == 1:
        head = (f"Best-of-{w.n} at {w.length} tokens fits in one pass of {rows} {where}, so {sr}'s one pass "
                "cannot shrink its decoding steps")
    else:
        head = (f"Best-of-{w.n} at {w.length} tokens{',' if paged else ''} {needs}; {sr} opens with "
                f"{_count(w.opening_rows, 'row', 'rows')} in one pass, so {could} {w.bound}x" + early)
    if paged:   # the steps the verdict priced: vLLM's, for all N and at equal reward
        head += (f". As vLLM pages Best-of-N (KV blocks of 16 slots taken as answers write, preemption by recompute), "
                 f"all {w.n} of its answers took {w.full_steps:,.0f} steps against its {w.sr_steps:,} "
                 f"({_fewer(w.room)})")
        if w.beyond:
            return head + ", and Best-of-N never reaches its reward."
        return head + f"; at equal reward it took {w.bon_steps:,.0f} steps ({_fewer(w.step_ratio)})."
    if w.beyond:
        return (head + f": all {w.bon_steps:,.0f} of Best-of-N's steps against its {w.sr_steps:,} "
                f"({_fewer(w.step_ratio)}), and Best-of-N never reaches its reward.")
    return head + f": at equal reward, Best-of-N took {w.bon_steps:,.0f} steps against its {w.sr_steps:,} ({_fewer(w.step_ratio)})."


def _early_words(w: Why) -> str:
    """The passes bound holds for full-length answers; said so where answers that ended early beat it."""
    if not w.past_bound:
        return ""
    return (f" were every answer written to full length; its answers ended early (a pass ends with its longest "
            f"answer), so all {w.n} of Best-of-N's answers took {w.full_steps:,.0f} steps against its "
            f"{w.sr_steps:,} ({_fewer(w.room)}), the most its steps could shrink here")


def _price_words(w: Why, machine: str) -> str:
    """What a wider step costs on the machine that ran the race (or that time is counted in steps)."""
    if not w.measured:
        return ("No decoding step was measured for this race, so time is counted in decoding steps: every step "
                "costs the same, and the speed-up is the steps saved.")
    if fmt_times(w.price if w.price >= 1 else 1 / w.price) == "1":
        mean = "about as much as Best-of-N's"
    else:
        mean = f"{_x(w.price)} Best-of-N's" if w.price > 1 else f"{_x(1 / w.price)} less than Best-of-N's"
    narrow = ", as its cuts narrow the batch" if w.price < w.opening_price else ""
    if w.opening_rows == w.rows_per_pass:   # as wide as Best-of-N's passes: no wider step to price
        whose = "a fixed pass of Best-of-N's" if w.schedule == VLLM else "Best-of-N's"
        return (f"{_cap(machine)}, its widest step is {whose} ({_count(w.rows_per_pass, 'row', 'rows')}), and "
                f"its steps cost {mean} on average{narrow}.")
    return (f"{_cap(machine)}, one step of {_count(w.opening_rows, 'row', 'rows')} costs {_x(w.opening_price)} one "
            f"of {_count(w.rows_per_pass, 'row', 'rows')}, and its steps cost {mean} on average{narrow}.")


def _fate_words(w: Why, sr: str, about=None) -> str:
    f = w.fate
    if f.fate == "never_drawn":
        return f"was never drawn ({sr} opened with {w.opening_rows} rows, and #{w.bon_winner} was not among them)"
    if f.fate == "pruned":
        cut, word = (about.cut_word, f"its {about.round_word}") if about is not None and about.rival else ("cut", "decision")
        return f"was {cut} at {word} {f.decision}" + (f" (token {f.position})" if f.position is not None else "")
    return "was kept to the end"


def _signal_words(w: Why, sr: str, about=None) -> str:
    """The partial reward's rank correlation at the first decision and the fate of Best-of-N's winner."""
    if w.first_decision is None and about is not None and about.rival:
        did = f"made no {about.round_word} (its {about.signal} never {about.cut_word} an answer)"
        return f"{sr} {did}, and Best-of-N's winner #{w.bon_winner} {_fate_words(w, sr, about)}."
    if w.first_decision is None:
        return (f"{sr} never had to decide (every answer fit the budget to the end), and Best-of-N's winner "
                f"#{w.bon_winner} {_fate_words(w, sr)}.")
    what = f"its own {w.signal} (no reward model)" if w.signal else "the partial reward"
    if w.rho is None:
        rho = f"{what}'s rank correlation with the final rewards is undefined (too few answers, or all tied)"
    else:
        rho = (f"{what} ranked {w.rho_live} answers with Spearman ρ = {w.rho:.2f} ({w.strength} "
               "agreement) against their final rewards (Best-of-N wrote each to the end)")
    rival = about is not None and about.rival
    spread = rival and about.schedule == "passes"   # its traces start at different times: its own tokens differ
    first = (f"At its first {about.round_word} in time (token {w.first_decision}"
             + (f"; each {about.round_word} comes at its own trace's token)" if spread else ")")
             if rival else f"At the first decision (token {w.first_decision})")
    return f"{first} {rho}, and Best-of-N's winner #{w.bon_winner} {_fate_words(w, sr, about)}."


def _cause_words(w: Why, sr: str, about=None) -> str:
    """Which reasons made Speculative Rejection lose or gain little (``Why.causes``)."""
    parts = []
    for c in w.causes:
        if c == "bound":
            room = ("there were no steps to save" if _fewer(w.room) == "as many" else
                    f"no steps were saved: it took {_x(1 / w.room)} more steps than all of Best-of-N's answers"
                    if w.room < 1 else f"at most {_x(w.room)} fewer steps were possible")
            fit = (f"all of Best-of-N's answers took {w.full_steps:,.0f} steps as vLLM pages them"
                   if w.schedule == VLLM else f"Best-of-N's answers fit in {_count(w.passes, 'pass', 'passes')}")
            parts.append(f"the bound: {fit}, so {room}")
        elif c == "signal":
            k = "all" if w.k is None else f"about {show_k(w.k)}"
            at = f"with ρ = {w.rho:.2f} at token {w.first_decision}, " if w.rho is not None else ""
            f = w.fate
            rival = about is not None and about.rival
            cut = f"{about.cut_word} Best-of-N's winner at its {about.round_word}" if rival else \
                "cut Best-of-N's winner at decision"
            did = (f"{sr} {cut} {f.decision}" if f.fate == "pruned" else
                   f"{sr} never drew Best-of-N's winner" if f.fate == "never_drawn" else
                   f"{sr} kept Best-of-N's winner")
            parts.append(f"the early signal: {at}{did}, and Best-of-N needed only {k} of its {w.n} answers "
                         f"({w.bon_steps:,.0f} of its {w.full_steps:,.0f} steps) to match what {sr} kept")
        else:
            fewer = _fewer(w.step_ratio)
            tail = ("while it took as many steps as Best-of-N" if fewer == "as many" else
                    f"more than the {fewer} steps it took" if w.price > w.step_ratio else
                    f"which turned {fewer} steps into {_x(w.speedup)} less time")
            parts.append(f"the step price: its steps cost {_x(w.price)} Best-of-N's on average, {tail}")
    head = "**What made it lose:** " if w.outcome == "lost" else "**What kept the gain small:** "
    return head + "; and ".join(parts) + "."


def _paper_words(w: Why, machine: str) -> str:
    """The same room arithmetic on the paper's setting (``specrej.analysis.why.paper_setting``)."""
    ps = paper_setting()
    first, big, (lo, hi) = ps.points[0], ps.largest, ps.bounds
    here = ""
    if w.opening_price is not None and w.opening_rows != w.rows_per_pass:
        grows = "it grows with them" if w.opening_price >= 1.1 else "it barely does either"
        here = f"; {machine} {grows}: {_x(w.opening_price)} from {_count(w.rows_per_pass, 'row', 'rows')} to {w.opening_rows}"
    return (f"*The paper, by the same arithmetic: Best-of-{first.n} to Best-of-{big.n:,} is {lo} to {big.passes} passes "
            f"of {ps.bon_batch} rows (run side by side on {first.gpus} to {big.gpus} GPUs and counted as GPU time), "
            f"answers up to {ps.length:,} tokens, while Speculative Rejection opens with up to {ps.first_batch:,} rows "
            f"on one GPU (its first decision at token {ps.first_decision_min} or later): its decoding steps can shrink "
            f"up to {hi}x, the room for the {ps.reported[0]}-{ps.reported[1]}x the paper reports. There a step costs "
            f"barely more with more rows (a GPU reads the weights once per step for every row){here}.*")


def why_markdown(view: RunView, verdicts: dict | None = None) -> str:
    """"Why this speed-up" (or "Why Speculative Rejection lost here") beside each verdict, from the race's
    own numbers (``specrej.analysis.why``): the room Best-of-N's passes leave, the price of a wider step on the
    machine that ran the race (a replay's: the recording's), the partial reward's rank correlation at the
    first decision and the fate of Best-of-N's winner; when Speculative Rejection lost or gained little,
    which of these made it; then the same arithmetic on the paper's setting. "" without a verdict."""
    verdicts = view.verdicts() if verdicts is None else verdicts
    base = view.arms[view.baseline]
    machine = "on the recording's machine" if view.recording is not None else "on this machine"
    out = []
    for a, v in verdicts.items():
        arm = view.arms[a]
        w = why_from_race(arm.finished, arm.round_events, base.finished, base.round_events, v, view.step,
                          view.cfg.max_new_tokens)
        if w is None:
            continue
        sr = md_escape(arm.spec.label)
        if fmt_times(w.speedup if w.speedup >= 1 else 1 / w.speedup) == "1":
            title = "Why there is no speed-up here"
        elif w.outcome == "lost":
            title = f"Why {md_escape(arm.spec.kind.name)} lost here ({_x(1 / w.speedup)} more time)"
        else:
            title = f"Why this speed-up ({_x(w.speedup)}{', at least' if w.beyond else ''})"
        if len(verdicts) > 1:
            title += f": {sr}"
        about = arm.spec.kind.about
        body = [f"#### {title}", "", " ".join([_room_words(w, sr, about), _price_words(w, machine),
                                              _signal_words(w, sr, about)])]
        if about.rival:
            pick = arm.finished.picked_by if arm.finished is not None else "reward"
            by = ("the race's reward among the answers it wrote to the end" if pick == "reward"
                  else "its paper's own rule, without the reward")
            body += ["", f"*{sr}'s winner was named by {by} (pick={pick}). {_cap(about.adapted)} The paper: "
                         f"{about.paper}.*"]
            if why := about.judged_by_own_signal(kind_of(view.reward_label) or ""):
                body += ["", f"**The judge reads this method's own signal:** {why}, so this race judges "
                             f"{md_escape(arm.spec.kind.name)} by what it decides with. For a judge this method does not decide with, "
                             "choose the preference reward."]
        if w.causes:
            body += ["", _cause_words(w, sr, about)]
        if not about.rival:   # the paper's room arithmetic is Speculative Rejection's (its first batch, its passes)
            body += ["", _paper_words(w, machine)]
        out.append("\n".join(body))
    return "\n\n".join(out)


def partial_markdown(view: RunView) -> str:
    """A run stopped before every arm finished: each arm's best so far, what it spent, its rounds."""
    lines = ["### Partial result (stopped at the time limit)", "",
             "| | " + " | ".join(md_escape(a.spec.label) for a in view.display_order()) + " |",
             "|---|" + "---:|" * len(view.arms)]
    rows: dict[str, list[str]] = {k: [] for k in ("state", "best finished answer so far", "candidates finished",
                                                   "tokens generated", "compute (generator + reward)", "wall time",
                                                   "decisions / passes")}
    for arm in view.display_order():
        led, best = arm.ledger, arm.best_finished()
        done = sum(c.status == "finished" for c in arm.candidates)
        rows["state"].append("finished" if arm.finished is not None else f"at token {arm.position}")
        rows["best finished answer so far"].append(f"#{best.id}: **{fmt_score(best.score)}**" if best else "none yet")
        rows["candidates finished"].append(f"{done} of {len(arm.candidates)}")
        rows["tokens generated"].append(f"{led.generated_tokens:,}")
        rows["compute (generator + reward)"].append(f"**{fmt_flops(led.flops)}**")
        rows["wall time"].append(fmt_s(led.wall_s))
        rows["decisions / passes"].append(rounds_words(arm))
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()]
    lines += ["", reward_words(view)]
    lines += ["", "*No speed-up is stated: the methods did not both finish. Lower N or the new tokens, or raise "
              "the limit (SPECREJ_MAX_RUN_SECONDS) on a private deployment, to see the whole race.*"]
    return "\n".join(lines)


# ---------------------------------------------------------------- the candidates table

def candidate_table(view: RunView) -> tuple[list[str], list[str], list[str], list[list]]:
    """(headers, datatypes, column widths, rows): one row per candidate id; for each arm with a
    pruning chart what it did with the candidate, for each arm with a final chart the final
    score and rank; the answer as the baseline (else the first final arm) finished it. A narrow
    column is as wide as its longest header word (headers break between words only) and its longest
    cell, the answer takes the rest."""
    arms = view.display_order()
    finals = [a for a in arms if not a.prunes]
    base = view.arms[view.baseline]
    answer_from = base if not base.prunes else (finals[0] if finals else base)
    headers, types, cols = ["id"], ["number"], []
    for a in arms:
        s = _column_name(a, arms, view.cfg)
        by_id = {c.id: c for c in a.candidates}
        if a.prunes:
            win = a.finished.winner.id if a.finished else None
            headers += [s, f"round pruned ({s})", f"partial / final score ({s})", f"tokens ({s})"]
            types += ["str", "number", "number", "number"]
            cols.append(lambda i, by_id=by_id, win=win: _pruning_cells(by_id.get(i), i == win))
        else:
            ranked = sorted((c for c in by_id.values() if c.status == "finished" and c.score is not None),
                            key=lambda c: (-c.score, c.id))
            rank = {c.id: k + 1 for k, c in enumerate(ranked)}
            headers += [f"final score had it continued ({s})", f"{s} rank"]
            types += ["number", "number"]
            cols.append(lambda i, by_id=by_id, rank=rank: _final_cells(by_id.get(i), rank.get(i)))
    headers.append(f"answer (as {answer_from.spec.label} finished it)")
    types.append("str")
    ans = {c.id: c for c in answer_from.candidates}
    fallback = {c.id: c for a in arms for c in a.candidates}
    winner = answer_from.finished.winner.id if answer_from.finished else None
    rows = []
    n = max((len(a.candidates) for a in arms), default=0) or (view.cfg.n if isinstance(view.cfg.n, int) else 0)
    for i in range(n):
        row: list = [i]
        for col in cols:
            row += col(i)
        a = ans.get(i)
        text = a.text if a is not None and a.status == "finished" else (fallback[i].text if i in fallback else "")
        row.append(snippet(("★ " if i == winner else "") + text, 220))
        rows.append(row)

    # Widths as shares of the table, sized in pixels for the table on a 1280-px screen (~1180 px): a bold
    # header character ~8.5 px, a cell's ~8 px, plus the cell's padding and the header's sort button.
    table_px = 1180

    def px(j: int, header: str) -> float:
        word = max(len(w) for w in header.split())
        cell = max((len(str(r[j])) for r in rows if r[j] is not None), default=1)
        return max(8.5 * word + 40, 8 * cell + 24, 44)

    widths = [px(j, h) for j, h in enumerate(headers[:-1])]
    widths.append(max(0.25 * table_px, table_px - sum(widths)))
    total = sum(widths)
    return headers, types, [f"{100 * w / total:.1f}%" for w in widths], rows


def _column_name(arm: ArmView, arms: list[ArmView], base=None) -> str:
    """An arm in a narrow table header: its kind's short name ("SR", "BoN"), with the settings that tell it
    apart when another arm is of the same kind ("SR α=0.8"; a setting the arm leaves at the base config's
    ``base`` shows that value), in words short enough for a narrow column."""
    kind = arm.spec.kind
    same = [a for a in arms if a.spec.kind is kind]
    name = kind.short or kind.name
    if len(same) == 1:
        return name

    def value(a: ArmView, k: str):
        return dict(a.spec.overrides).get(k, getattr(base, k, None))

    def show(v) -> str:
        return str(v).lower() if isinstance(v, bool) else f"{v:g}" if isinstance(v, float) else str(v)

    keys = dict.fromkeys(k for a in same for k, _ in a.spec.overrides)
    differ = [k for k in keys if len({show(value(a, k)) for a in same}) > 1]
    words = [f"α={show(value(arm, k))}" if k == "alpha" else f"{k}={show(value(arm, k))}" for k in differ
             if value(arm, k) is not None]
    return " ".join([name] + (words or [f"#{same.index(arm) + 1}"]))


def _pruning_cells(c: Candidate | None, won: bool) -> list:
    if c is None:
        return ["–", None, None, None]
    return ["winner" if won else c.status, _decision_no(c.round_pruned),
            round(c.score, 4) if c.score is not None else None, c.tokens]


def _decision_no(index: int | None):
    """A decision's number as the step panel counts it (from 1): events index rounds from 0."""
    return None if index is None else index + 1


def _final_cells(c: Candidate | None, rank: int | None) -> list:
    done = c is not None and c.status == "finished" and c.score is not None
    return [round(c.score, 4) if done else None, rank]


def candidate_rows(view: RunView) -> list[list]:
    return candidate_table(view)[3]


# ---------------------------------------------------------------- one decision (step mode)

def rounds_words(arm: ArmView) -> str:
    """An arm's Rounds counted in its own words: '2 decisions', '2 passes'; a rival's by what each did (the Round's
    last mark): its cuts ('0 stops', '1 truncation') and its other moves by name ('threshold set', 'filtered')
    (DeepConf's threshold and filter were counted as 2 stops when it stopped none)."""
    counted = look(arm.spec.method).rounds
    about = arm.spec.kind.about
    events = arm.round_events
    if not about.rival or not any(r.marks for r in events):
        return counted(arm.finished.rounds if arm.finished is not None else len(arm.rounds))
    did = [r.marks[-1][0] if r.marks else about.cut_word for r in events]
    others = {m: did.count(m) for m in did if m != about.cut_word}
    return ", ".join([counted(did.count(about.cut_word))]
                     + [m if k == 1 else f"{m} {k}x" for m, k in others.items()])


def _rival_happened(r, about, label: str, cfg, rounds=()) -> str:
    """What a rival's Round did, in its own words (``About``; the Round's marks say which of its moves it is;
    ``rounds``: the arm's Round events, for where its threshold was set)."""
    what = {m for m, _ in r.marks}
    own = about.settings_for(cfg)   # its own settings (specrej.core.settings), as the arm ran
    bar = f"**{fmt_score(r.signal_threshold)}**" if r.signal_threshold is not None else "its threshold"
    sig = about.signal
    set_at = next((p for e in rounds for m, p in e.marks if m == "threshold set"), None)
    source = f" (set by its warm-up traces, written to token {set_at})" if set_at is not None else ""
    if "threshold set" in what:
        keep = getattr(own, "conf_percentile", None)   # the share of warm-up traces the threshold keeps (%)
        which = (f"the {_ordinal(100 - keep)} percentile of those (it keeps about {keep:g}% of traces)"
                 if keep is not None and 0 < keep < 100 else "a percentile of those")
        return (f"**What happened:** {label} decides on its own {sig}, not on a reward. Its "
                f"{_count(len(r.signals), 'warm-up trace was', 'warm-up traces were')} written to the end, and each "
                f"one's lowest {sig} (over any {own.window} tokens in a row) was read; {which} sets the threshold at "
                f"{bar} ({r.n_kept} of {len(r.signals)} at or above it). Every later trace stops the step its {sig} "
                f"over its last {own.window} tokens falls below it.")
    if "filtered" in what:
        return (f"**What happened:** after the run, the paper's filter: {_count(r.n_pruned, 'finished trace', 'finished traces')} "
                f"whose lowest {sig} is below {bar}{source} {'is' if r.n_pruned == 1 else 'are'} dropped, no reward "
                f"read ({_count(r.n_kept, 'trace remains', 'traces remain')} to pick the winner from).")
    if "consensus" in what:
        return (f"**What happened:** the answers written so far agree (the top answer's share of the vote reached "
                f"{own.consensus:g}): {label} starts no more traces and stops {_count(r.n_pruned, 'trace', 'traces')} "
                "still writing.")
    if "truncated" in what:
        why = ("memory was full before its buffer ended" if r.forced else
               "its divergence step c plus its buffer came" + (f" (c = token {dict(r.marks)['diverged']})"
                                                                 if "diverged" in what else ""))
        return (f"**What happened:** {why}, so {label} keeps the answer whose hidden-state chain was most "
                f"consistent with the others' most often and truncates the other {r.n_pruned} (no reward read)."
                + (" Memory forced this truncation before the buffer ended." if r.forced else ""))
    if "stopped" in what:
        return (f"**What happened:** {label} read the {sig} of {_count(len(r.signals), 'trace', 'traces')} writing "
                f"(over each one's last {own.window} tokens): {_count(r.n_pruned, 'trace', 'traces')} fell below the "
                f"threshold {bar}{source} and {'stops' if r.n_pruned == 1 else 'stop'} here (no reward read); "
                f"{_count(r.n_kept, 'goes', 'go')} on.")
    # any other rival's move, in its About's words (a method registered later: its signal, what it cuts)
    under = f" (its threshold {bar})" if r.signal_threshold is not None else ""
    return (f"**What happened:** {label} read its own {sig} of {_count(len(r.signals), 'answer', 'answers')} "
            f"writing{under}: {_count(r.n_pruned, 'answer is', 'answers are')} {about.cut_word} here (no reward "
            f"read); {_count(r.n_kept, 'goes', 'go')} on.")


def _ordinal(x: float) -> str:
    """10 -> '10th', 1 -> '1st', 2.5 -> '2.5th'."""
    if x != int(x):
        return f"{x:g}th"
    n = int(x)
    return f"{n}" + ("th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def _absent_words(c, about) -> str:
    """Why candidate ``c`` is not among those a decision ranked, from its status then."""
    return {"pruned": f"was already {about.cut_word} at an earlier {about.round_word}.",
            "waiting": "has not started yet (it waits for a free row).",
            "finished": "had already finished (this decision did not read it).",
            }.get(c.status, f"is writing, but this {about.round_word} did not read it.")


def decision_markdown(view: RunView, k: int) -> str:
    """Decision ``k`` (0-based, over every pruning arm's decisions in token order: ``RunView.checkpoints``), in plain words: how
    many were writing, the threshold, who is cut, the rank correlation so far, and what Best-of-N's
    eventual winner is doing."""
    from specrej.analysis.compare import decision_rank, final_scores

    from components.charts import decision_pool

    cp = view.checkpoints[k]
    arm = cp.arms[cp.arm]
    r = arm.round_events[cp.index]
    label = md_escape(arm.spec.label)
    pool = decision_pool(r)
    n_cut = sum(c.status == "pruned" for c in pool)
    base = view.arms[view.baseline]
    about = arm.spec.kind.about
    mine = arm.spec.config(view.cfg)   # this arm's own settings (a second setting has its own alpha)
    if about.rival:
        did = r.marks[-1][0] if r.marks else about.round_word
        lines = [f"### Decision {k + 1} of {len(view.checkpoints)}: {label}, {did} at token {r.position}", "",
                 _rival_happened(r, about, label, mine, arm.round_events)]
    else:
        lines = [f"### Decision {k + 1} of {len(view.checkpoints)}: {label} at token {r.position}", ""]
        why = "memory was full" if mine.decision == "budget" else "its interval came"
        bar = (f"; the lowest kept score, the threshold, is **{fmt_score(r.threshold)}**"
               if r.threshold is not None else "")
        lines.append(f"**What happened:** {why}, so {label} scored every answer in progress on its partial text "
                     f"({len(pool)} in all). It keeps the top {r.n_kept} (alpha = {mine.alpha:g}: it cuts about "
                     f"{mine.alpha:.0%}) and stops writing the other {n_cut}{bar}."
                     + (" Memory forced more cuts than alpha asked for." if r.forced else ""))
    tied = [c for c in pool if fmt_score(c.score) == fmt_score(r.threshold)] if not about.rival else []
    if len(tied) > 1 and any(c.status == "pruned" for c in tied):
        lines.append(f"\n**Ties:** {len(tied)} answers score {fmt_score(r.threshold)} to the digits shown, at the "
                     "threshold. Equal partial rewards are broken by candidate number (the lower number is kept), so "
                     "the same seed always cuts the same ones"
                     + ("; a recording's scores are rounded to 5 decimals, so answers that differed beyond that "
                        "can look tied." if view.recording is not None else "."))
    if base.finished is not None and not base.prunes:
        final = final_scores(base.finished)
        d = decision_rank(r, final)
        if d.spearman is not None and d.n_live < 3:
            lines.append(f"\n**Did {f'its {about.signal}' if about.rival else 'the partial reward'} predict the final "
                         f"reward?** Too few to tell: it read only {d.n_live} answers that Best-of-N also wrote to the "
                         "end, and a rank correlation over so few says nothing.")
        elif d.spearman is not None:
            strength = signal_strength(d.spearman)
            what = f"its {about.signal}" if about.rival else "the partial reward"
            these = f"this {about.signal}" if about.rival else "these partial rewards"
            lines.append(f"\n**Did {what} predict the final reward?** Spearman ρ = **{d.spearman:.2f}** "
                         f"({strength} agreement) between {these} and the rewards the same answers "
                         f"end with (Best-of-N wrote each of them to the end: randomness is coupled)."
                         + ("" if about.rival else " The dots on the chart are those final rewards."))
        w = base.finished.winner.id
        rank = next((i + 1 for i, c in enumerate(pool) if c.id == w), None)
        mine = next((c for c in r.candidates if c.id == w), None)
        bname = md_escape(base.spec.kind.name)
        if mine is None:
            fate = f"was never drawn by {label} (it wrote fewer candidates than {bname})."
        elif rank is None:
            fate = _absent_words(mine, about)
        elif mine.status == "pruned" and mine.round_pruned == r.index:
            fate = (f"ranks {rank} of {len(pool)} here: **it is {about.cut_word} now**, although it would have won "
                    f"{bname}.")
        else:
            fate = f"ranks {rank} of {len(pool)} here: **it survives** this decision."
        lines.append(f"\n**{bname}'s eventual winner (#{w}, final reward {fmt_score(base.finished.winner.score)})** {fate}")
    lines.append("\nPress **Next decision** to go on, or **Run to the end** for the result.")
    return "\n".join(lines)
