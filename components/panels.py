"""Text panels: a ``RunView`` in, markdown / table rows / plain dicts out.

Every number comparing two arms comes from ``specrej.compare`` (``RunView.comparisons``), the
rule the CLI and the bench use too; this module only words it. Coupled randomness makes the
comparisons exact: candidate i writes the same text in every arm while it survives, so the
baseline's (Best-of-N's) candidate i is what a pruned candidate i would have become.
"""
from __future__ import annotations

import dataclasses

from specrej import Candidate
from specrej.compare import Comparison, fmt_times, reached
from specrej.rewards import scale_of

from .looks import look
from .theme import fmt_flops, fmt_s, fmt_score, md_escape, snippet
from .session.view import ArmView, RunView

# ---------------------------------------------------------------- status line

STATUS_KINDS = ("idle", "live", "done", "error", "stopped")


def _arm_status(arm: ArmView) -> str:
    name = md_escape(arm.spec.label)
    if arm.finished is not None:
        return f"**{name}** done in {fmt_s(arm.ledger.wall_s)}, {fmt_flops(arm.ledger.flops)}"
    if not arm.events:
        return f"**{name}** prefilling…"
    word = look(arm.spec.method).round_word
    if arm.chart == "pruning":
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
    if view.state in ("error", "stopped", "done"):
        return view.state
    if view.state == "limit":
        return "stopped"
    return "live"


def status_markdown(view: RunView | None, *, starting: bool = False) -> str:
    if view is None:
        return "Press **Run** to start the race."
    note = f"\n\n*{md_escape(view.note)}*" if view.note else ""
    if view.state == "error":
        return error_markdown(view.message) + note
    if view.state == "stopped":
        return STOPPED
    if view.state == "limit":
        return (f"**Stopped at the time limit** after {fmt_s(view.elapsed())}: {md_escape(view.message)} "
                "The charts and the partial result below show how far each method got." + note)
    if starting:
        return "**Starting:** loading the models and prefilling the prompt…" + note
    head = f"**Done** in {fmt_s(view.elapsed())}" if view.state == "done" else f"**Racing** · {fmt_s(view.elapsed())}"
    return " · ".join([head] + [_arm_status(a) for a in view.display_order()]) + note


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
    pruning = arm.chart == "pruning"
    if c.score is None:
        hint = f"scored at the first {look(arm.spec.method).round_word}" if pruning else "scored when complete"
        return f"{name} · #{c.id} writing ({hint}) · {c.tokens} tokens", c.text
    if c.status == "finished":
        what = "leader (finished)" if pruning else "best finished so far"
        return f"{name} · {what} #{c.id} · reward {fmt_score(c.score)} · {c.tokens} tokens", c.text
    at = c.history[-1][0] if c.history else c.tokens
    return f"{name} · leader #{c.id} · reward {fmt_score(c.score)} (at token {at}) · {c.tokens} tokens", c.text


# ---------------------------------------------------------------- end of run

def _mb(x: int) -> str:
    return f"{x / 2**20:.0f} MB" if x >= 2**20 else f"{x / 1024:.0f} kB"


def _ledger_rows(view: RunView) -> list[str]:
    arms = view.display_order()
    reward = f"reward of the winner ({scale_of(view.reward_label).name})"
    rows: list[tuple[str, list[str]]] = [("winner", []), (reward, []), ("winner's length", []),
                                         ("tokens generated (all candidates)", []), ("tokens read by the reward", []),
                                         ("compute (generator + reward)", []), ("wall time", []),
                                         ("peak KV cache", []), ("decisions / passes", [])]
    for arm in arms:
        f, led = arm.finished, arm.finished.ledger
        cells = [f"#{f.winner.id}", f"**{fmt_score(f.winner.score)}**", f"{f.winner.tokens} tokens",
                 f"{led.generated_tokens:,}", f"{led.reward_tokens:,}", f"**{fmt_flops(led.flops)}**",
                 fmt_s(led.wall_s), f"{led.peak_kv_slots:,} slots ({_mb(led.peak_memory_bytes)})",
                 look(arm.spec.method).rounds(f.rounds)]
        for (_, col), cell in zip(rows, cells):
            col.append(cell)
    out = ["| | " + " | ".join(md_escape(a.spec.label) for a in arms) + " |", "|---|" + "---:|" * len(arms)]
    out += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows]
    return out


SUMMARY_PLACEHOLDER = ("### Result\nWhen every method finishes, their winners appear here side by side: reward, "
                       "tokens, compute, wall time and the speed-up.")


def reward_words(view: RunView) -> str:
    """Which reward scored the answers and what its numbers mean (``specrej.rewards.Scale``)."""
    scale = scale_of(view.reward_label)
    name = view.reward_label or scale.name
    return (f"**Reward:** {md_escape(name)}: {md_escape(scale.meaning)}. Each reward has its own scale: "
            f"compare rewards within one run, not across rewards.")


def _reward_note(c: Comparison, base: str) -> str:
    a, b = c.reward, c.baseline_reward
    if c.same_winner or reached(a, b):
        return f"matched {base}'s reward ({fmt_score(a)} vs {fmt_score(b)})"
    if a > 0 and b > 0:
        return f"reached {100 * a / b:.1f}% of {base}'s reward ({fmt_score(a)} vs {fmt_score(b)})"
    return f"its winner scored {fmt_score(a)} against {base}'s {fmt_score(b)}"


def _challenger_lines(view: RunView, arm: ArmView, c: Comparison) -> list[str]:
    base_arm = view.arms[c.baseline]
    label, base = md_escape(arm.spec.label), md_escape(base_arm.spec.label)
    lines = [f"**Speed-up:** {label} used **{c.flops.words('compute')}** ({c.wall.words('wall time')}) "
             f"and {_reward_note(c, base)}."]
    if c.curve_given:
        if c.baseline_matched_flops is None:
            lines.append(f"{base} never reached {label}'s reward.")
        else:
            total = base_arm.finished.ledger.flops
            share = c.baseline_matched_flops / total if total else 0.0
            times = c.baseline_matched_flops / arm.finished.ledger.flops if arm.finished.ledger.flops else 0.0
            lines.append(f"{base}'s best answer first reached that reward after "
                         f"{fmt_flops(c.baseline_matched_flops)} ({share:.0%} of its run; "
                         f"{fmt_times(times)}× {label}'s compute).")
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
        lines.append(f"{ask} It had no candidate #{bid}.")
    elif not c.kept_baseline_winner:
        tokens, partial = c.baseline_winner_partial or ("?", None)
        lines.append(f"{ask} Yes: candidate #{bid} was pruned in round {c.baseline_winner_round_pruned} with a "
                     f"partial reward of {fmt_score(partial)} at token {tokens}; had it continued it would have "
                     f"scored {fmt_score(c.baseline_reward)}.")
    elif c.same_winner:
        lines.append(f"{ask} No: candidate #{bid} survived every round and won both.")
    else:
        lines.append(f"{ask} No: candidate #{bid} was not pruned.")
    d = c.first_decision
    if arm.chart == "pruning" and not arm.rounds:
        lines.append(f"\n{label} never had to decide here: all N candidates fit the memory budget to the end, so it "
                     f"did what {base} did. Raise N or lower the memory budget to see pruning.")
    elif d is not None and d.spearman is not None:
        lines.append(f"\nHow well did the first partial rewards predict the final ones? Spearman ρ = "
                     f"**{d.spearman:.2f}** over {d.n_live} candidates at token {d.position}.")
    return lines


def summary_markdown(view: RunView) -> str:
    cmps = view.comparisons()
    if not view.done:
        return SUMMARY_PLACEHOLDER
    lines = ["### Result", ""] + _ledger_rows(view) + ["", reward_words(view), ""]
    for arm in view.display_order():
        if arm.arm in cmps:
            lines += _challenger_lines(view, arm, cmps[arm.arm]) + [""]
    exact = all(a.ledger.dtype == "float32" for a in view.arms.values())
    lines.append("*FLOPs are estimated as 2 × parameters × tokens for each model. Randomness is coupled: "
                 "candidate i writes the same text in every method while it survives"
                 + ("." if exact else f" (up to {view.arms[next(iter(view.arms))].ledger.dtype} rounding: a few "
                    "candidates can drift once the batch changes size; float32 is exact).") + "*")
    return "\n".join(lines)


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
        rows["decisions / passes"].append(look(arm.spec.method).rounds(arm.finished.rounds if arm.finished else len(arm.rounds)))
    lines += [f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows.items()]
    lines += ["", reward_words(view)]
    lines += ["", "*No speed-up is stated: the methods did not both finish. Lower N or the new tokens, or raise "
              "the limit (SPECREJ_MAX_RUN_SECONDS) on a private deployment, to see the whole race.*"]
    return "\n".join(lines)


# ---------------------------------------------------------------- the candidates table

def candidate_table(view: RunView) -> tuple[list[str], list[str], list[str], list[list]]:
    """(headers, datatypes, column widths, rows): one row per candidate id; for each arm with a
    pruning chart what it did with the candidate, for each arm with a final chart the final
    score and rank; the answer as the baseline (else the first final arm) finished it."""
    arms = view.display_order()
    finals = [a for a in arms if a.chart != "pruning"]
    base = view.arms[view.baseline]
    answer_from = base if base.chart != "pruning" else (finals[0] if finals else base)
    headers, types, widths, cols = ["id"], ["number"], [5], []
    for a in arms:
        s = _column_name(a, arms)
        by_id = {c.id: c for c in a.candidates}
        if a.chart == "pruning":
            win = a.finished.winner.id if a.finished else None
            headers += [s, f"round pruned ({s})", f"partial / final score ({s})", f"tokens ({s})"]
            types += ["str", "number", "number", "number"]
            widths += [10, 8, 9, 7]
            cols.append(lambda i, by_id=by_id, win=win: _pruning_cells(by_id.get(i), i == win))
        else:
            ranked = sorted((c for c in by_id.values() if c.status == "finished" and c.score is not None),
                            key=lambda c: (-c.score, c.id))
            rank = {c.id: k + 1 for k, c in enumerate(ranked)}
            headers += [f"final score had it continued ({s})", f"{s} rank"]
            types += ["number", "number"]
            widths += [10, 6]
            cols.append(lambda i, by_id=by_id, rank=rank: _final_cells(by_id.get(i), rank.get(i)))
    headers.append(f"answer (as {answer_from.spec.label} finished it)")
    types.append("str")
    widths.append(max(25, 100 - sum(widths)))
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
    total = sum(widths)
    return headers, types, [f"{100 * w / total:.0f}%" for w in widths], rows


def _column_name(arm: ArmView, arms: list[ArmView]) -> str:
    """An arm in a narrow table header: its kind's short name ("SR", "BoN"), with its settings only when
    another arm of the same kind needs telling apart ("SR alpha=0.8")."""
    kind = arm.spec.kind
    alone = sum(a.spec.kind is kind for a in arms) == 1
    return (kind.short or kind.name) if alone else arm.spec.short


def _pruning_cells(c: Candidate | None, won: bool) -> list:
    if c is None:
        return ["–", None, None, None]
    return ["winner" if won else c.status, c.round_pruned,
            round(c.score, 4) if c.score is not None else None, c.tokens]


def _final_cells(c: Candidate | None, rank: int | None) -> list:
    done = c is not None and c.status == "finished" and c.score is not None
    return [round(c.score, 4) if done else None, rank]


def candidate_rows(view: RunView) -> list[list]:
    return candidate_table(view)[3]


# ---------------------------------------------------------------- JSON

def _cand(c: Candidate) -> dict:
    return {"id": c.id, "score": c.score, "tokens": c.tokens, "finish_reason": c.finish_reason, "text": c.text}


def summary_dict(view: RunView) -> dict:
    """Winners, ledgers and the comparisons: JSON-ready (the same numbers the trace holds)."""
    out: dict = {"prompt": view.cfg.prompt, "generator": view.model_label, "reward": view.reward_label,
                 "state": view.state, "config": dataclasses.asdict(view.cfg), "baseline": view.baseline, "arms": {}}
    for a, arm in view.arms.items():
        f = arm.finished
        out["arms"][a] = {
            "name": arm.spec.label, "spec": arm.spec.spec, "method": arm.spec.method,
            "winner": _cand(f.winner) if f else None,
            "rounds": f.rounds if f else len(arm.rounds),
            "ledger": arm.ledger.to_dict(),
        }
    out["comparison"] = {a: c.to_dict() for a, c in view.comparisons().items()} or None
    out["first_event_s"] = view.first_event_s
    return out
