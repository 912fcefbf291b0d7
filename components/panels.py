"""Text panels: a ``RunView`` in, markdown / table rows / plain dicts out.

The comparisons here (speed-up, "did Speculative Rejection prune Best-of-N's winner?") read the
two arms' finished candidates; coupled randomness makes them exact: candidate i writes the same
text in both arms while it survives, so Best-of-N's candidate i is what Speculative Rejection's
candidate i would have become.
"""
from __future__ import annotations

import dataclasses

from specrej import Candidate
from specrej.metrics import spearman, speedup

from .theme import ARM_NAMES, fmt_flops, fmt_ratio, fmt_s, fmt_score, md_escape, snippet
from .view import ArmView, RunView

TABLE_HEADERS = ["id", "Spec. Rejection", "round pruned", "partial / final score (SR)", "tokens (SR)",
                 "final score had it continued (BoN)", "BoN rank", "answer (as Best-of-N finished it)"]
TABLE_TYPES = ["number", "str", "number", "number", "number", "number", "number", "str"]


# ---------------------------------------------------------------- status line

def _arm_status(arm: ArmView) -> str:
    name = ARM_NAMES[arm.arm]
    if arm.finished is not None:
        return f"**{name}** done in {fmt_s(arm.ledger.wall_s)}, {fmt_flops(arm.ledger.flops)}"
    if not arm.events:
        return f"**{name}** prefilling…"
    if arm.arm == "sr":
        k = len(arm.rounds)
        where = (f"{k} decision{'s' if k != 1 else ''} taken" if k else "no decision yet") + f", {arm.n_live} live"
    else:
        waiting = sum(c.status == "waiting" for c in arm.candidates)
        where = f"pass {len(arm.rounds) + 1}, {arm.n_live} live" + (f", {waiting} waiting" if waiting else "")
    return f"**{name}** {where}, token {arm.position}, {fmt_flops(arm.ledger.flops)}, {fmt_s(arm.ledger.wall_s)}"


def status_markdown(view: RunView | None, *, starting: bool = False) -> str:
    if view is None:
        return "Press **Run** to start the race."
    note = f"\n\n*{md_escape(view.note)}*" if view.note else ""
    if view.state == "error":
        return error_markdown(view.message) + note
    if view.state == "stopped":
        return "**Stopped.** Both arms were cancelled and their memory freed. Press Run to start again."
    if starting:
        return "**Starting:** loading the models and prefilling the prompt…" + note
    sr, bon = view.arms["sr"], view.arms["bon"]
    head = f"**Done** in {fmt_s(view.elapsed())}" if view.state == "done" else f"**Racing** · {fmt_s(view.elapsed())}"
    return f"{head} · {_arm_status(sr)} · {_arm_status(bon)}{note}"


def error_markdown(message: str) -> str:
    """The message as plain text: it may quote what the user typed (escaped, never markup)."""
    return f"**Can't run:** {md_escape(str(message))}"


# ---------------------------------------------------------------- leaders

def leader(view: RunView, arm_name: str) -> tuple[str, str]:
    """(label, text) of the arm's current leader, for the text box under its chart."""
    arm = view.arms[arm_name]
    name = ARM_NAMES[arm_name]
    c = arm.leader()
    if c is None:
        return f"{name} · waiting to start", ""
    if arm.finished is not None:
        return f"{name} · winner #{c.id} · reward {fmt_score(c.score)} · {c.tokens} tokens", c.text
    if c.score is None:
        hint = "scored at the first decision" if arm_name == "sr" else "scored when complete"
        return f"{name} · #{c.id} writing ({hint}) · {c.tokens} tokens", c.text
    if c.status == "finished":
        what = "best finished so far" if arm_name == "bon" else "leader (finished)"
        return f"{name} · {what} #{c.id} · reward {fmt_score(c.score)} · {c.tokens} tokens", c.text
    at = c.history[-1][0] if c.history else c.tokens
    return f"{name} · leader #{c.id} · reward {fmt_score(c.score)} (at token {at}) · {c.tokens} tokens", c.text


# ---------------------------------------------------------------- end of run

def _bon_curve(view: RunView) -> list[tuple[float, float]]:
    return [(p.flops, p.best) for p in view.arms["bon"].curve if p.best is not None and p.flops > 0]


def comparison(view: RunView) -> dict | None:
    """The end-of-run numbers both the summary and the JSON read; None until both arms finish."""
    sr, bon = view.arms["sr"].finished, view.arms["bon"].finished
    if sr is None or bon is None:
        return None
    bw = bon.winner
    sr_by_id = {c.id: c for c in sr.candidates}
    twin = sr_by_id.get(bw.id)
    pruned = twin is not None and twin.status == "pruned"
    out = {
        "compute_ratio": bon.ledger.flops / sr.ledger.flops if sr.ledger.flops else None,
        "token_ratio": bon.ledger.generated_tokens / sr.ledger.generated_tokens if sr.ledger.generated_tokens else None,
        "wall_ratio": bon.ledger.wall_s / sr.ledger.wall_s if sr.ledger.wall_s else None,
        "reward_gap": sr.winner.score - bw.score,
        "bon_winner_id": bw.id,
        "bon_winner_pruned_by_sr": pruned,
        "bon_winner_round_pruned": twin.round_pruned if pruned else None,
        "bon_winner_partial_score": (twin.history[-1][1] if pruned and twin.history else None),
        "same_winner": sr.winner.id == bw.id,
        "sr_rounds": sr.rounds,
        "bon_passes": bon.rounds,
    }
    curve = _bon_curve(view)
    if curve and sr.ledger.flops > 0:
        s = speedup(curve, sr.winner.score, sr.ledger.flops)
        out["bon_flops_to_match_sr"] = s.value * sr.ledger.flops
        out["speedup_to_match"] = s.value
        out["speedup_is_lower_bound"] = s.lower_bound
    # How well the first decision's partial rewards predicted the final ones.
    marks = view.arms["sr"].rounds
    if marks:
        t0 = marks[0].position
        bon_final = {c.id: c.score for c in bon.candidates if c.score is not None}
        pairs = [(c.history[0][1], bon_final[c.id]) for c in sr.candidates
                 if c.history and c.history[0][0] == t0 and c.id in bon_final]
        out["spearman_round0"] = spearman([p for p, _ in pairs], [f for _, f in pairs]) if len(pairs) > 1 else None
        out["spearman_round0_n"] = len(pairs)
        out["round0_position"] = t0
    return out


def _plural(k: int, word: str) -> str:
    return f"{k} {word}" + ("" if k == 1 else ("es" if word.endswith("s") else "s"))


def _ledger_rows(view: RunView) -> list[str]:
    s, b = view.arms["sr"].finished, view.arms["bon"].finished
    ls, lb = s.ledger, b.ledger

    def mb(x: int) -> str:
        return f"{x / 2**20:.0f} MB" if x >= 2**20 else f"{x / 1024:.0f} kB"

    rows = [
        ("winner", f"#{s.winner.id}", f"#{b.winner.id}"),
        ("reward of the winner", f"**{fmt_score(s.winner.score)}**", f"**{fmt_score(b.winner.score)}**"),
        ("winner's length", f"{s.winner.tokens} tokens", f"{b.winner.tokens} tokens"),
        ("tokens generated (all candidates)", f"{ls.generated_tokens:,}", f"{lb.generated_tokens:,}"),
        ("tokens read by the reward", f"{ls.reward_tokens:,}", f"{lb.reward_tokens:,}"),
        ("compute (generator + reward)", f"**{fmt_flops(ls.flops)}**", f"**{fmt_flops(lb.flops)}**"),
        ("wall time", fmt_s(ls.wall_s), fmt_s(lb.wall_s)),
        ("peak KV cache", f"{ls.peak_kv_slots:,} slots ({mb(ls.peak_memory_bytes)})",
         f"{lb.peak_kv_slots:,} slots ({mb(lb.peak_memory_bytes)})"),
        ("decisions / passes", _plural(s.rounds, "decision"), _plural(b.rounds, "pass")),
    ]
    out = ["| | Speculative Rejection | Best-of-N |", "|---|---:|---:|"]
    out += [f"| {a} | {x} | {y} |" for a, x, y in rows]
    return out


SUMMARY_PLACEHOLDER = ("### Result\nWhen both methods finish, their winners appear here side by side: reward, "
                       "tokens, compute, wall time and the speed-up.")


def summary_markdown(view: RunView) -> str:
    cmp = comparison(view)
    if cmp is None:
        return SUMMARY_PLACEHOLDER
    sr, bon = view.arms["sr"].finished, view.arms["bon"].finished
    lines = ["### Result", ""] + _ledger_rows(view) + [""]
    a, b = sr.winner.score, bon.winner.score
    if a >= b:
        reward_note = f"matched Best-of-N's reward ({fmt_score(a)} vs {fmt_score(b)})"
    elif a > 0 and b > 0:
        reward_note = f"reached {100 * a / b:.1f}% of Best-of-N's reward ({fmt_score(a)} vs {fmt_score(b)})"
    else:
        reward_note = f"its winner scored {fmt_score(a)} against Best-of-N's {fmt_score(b)}"
    lines.append(f"**Speed-up:** Speculative Rejection used **{fmt_ratio(cmp['compute_ratio'])} less compute** "
                 f"({fmt_ratio(cmp['wall_ratio'])} less wall time) and {reward_note}.")
    if "bon_flops_to_match_sr" in cmp:
        if cmp["speedup_is_lower_bound"]:
            lines.append("Best-of-N never reached Speculative Rejection's reward.")
        else:
            share = cmp["bon_flops_to_match_sr"] / bon.ledger.flops if bon.ledger.flops else 0.0
            lines.append(f"Best-of-N's best answer first reached that reward after "
                         f"{fmt_flops(cmp['bon_flops_to_match_sr'])} ({share:.0%} of its run; "
                         f"{fmt_ratio(cmp['speedup_to_match'])} Speculative Rejection's compute).")
    lines.append("")
    bid = cmp["bon_winner_id"]
    if cmp["bon_winner_pruned_by_sr"]:
        twin = next(c for c in sr.candidates if c.id == bid)
        lines.append(f"**Did Speculative Rejection prune Best-of-N's winner?** Yes: candidate #{bid} was pruned in "
                     f"round {cmp['bon_winner_round_pruned']} with a partial reward of "
                     f"{fmt_score(cmp['bon_winner_partial_score'])} at token {twin.history[-1][0] if twin.history else '?'}; "
                     f"had it continued it would have scored {fmt_score(bon.winner.score)}.")
    elif cmp["same_winner"]:
        lines.append(f"**Did Speculative Rejection prune Best-of-N's winner?** No: candidate #{bid} survived every "
                     "round and won both.")
    else:
        lines.append(f"**Did Speculative Rejection prune Best-of-N's winner?** No: candidate #{bid} was not pruned.")
    if not view.arms["sr"].rounds:
        lines.append("\nSpeculative Rejection never had to decide here: all N candidates fit the memory budget to "
                     "the end, so it did what Best-of-N did. Raise N or lower the memory budget to see pruning.")
    elif cmp.get("spearman_round0") is not None:
        lines.append(f"\nHow well did the first partial rewards predict the final ones? Spearman ρ = "
                     f"**{cmp['spearman_round0']:.2f}** over {cmp['spearman_round0_n']} candidates at token "
                     f"{cmp['round0_position']}.")
    lines.append("\n*FLOPs are estimated as 2 × parameters × tokens for each model. Randomness is coupled: "
                 "candidate i writes the same text in both methods while it survives.*")
    return "\n".join(lines)


def candidate_rows(view: RunView) -> list[list]:
    """One row per candidate id: what SR did with it and what it became in Best-of-N."""
    sr = {c.id: c for c in view.arms["sr"].candidates}
    bon = {c.id: c for c in view.arms["bon"].candidates}
    ranked = sorted((c for c in bon.values() if c.status == "finished" and c.score is not None),
                    key=lambda c: (-c.score, c.id))
    rank = {c.id: i + 1 for i, c in enumerate(ranked)}
    sr_f, bon_f = view.arms["sr"].finished, view.arms["bon"].finished
    rows = []
    for i in range(view.cfg.n):
        s, b = sr.get(i), bon.get(i)
        status = s.status if s is not None else "–"
        if sr_f is not None and sr_f.winner.id == i:
            status = "winner"
        text = b.text if b is not None and b.status == "finished" else (s.text if s is not None else "")
        if bon_f is not None and bon_f.winner.id == i:
            text = "★ " + text
        rows.append([
            i, status,
            s.round_pruned if s is not None and s.round_pruned is not None else None,
            round(s.score, 4) if s is not None and s.score is not None else None,
            s.tokens if s is not None else None,
            round(b.score, 4) if b is not None and b.status == "finished" and b.score is not None else None,
            rank.get(i),
            snippet(text, 220),
        ])
    return rows


def _cand(c: Candidate) -> dict:
    return {"id": c.id, "score": c.score, "tokens": c.tokens, "finish_reason": c.finish_reason, "text": c.text}


def summary_dict(view: RunView) -> dict:
    """Winners, ledgers and the comparison: JSON-ready (the same numbers the trace holds)."""
    out: dict = {"prompt": view.cfg.prompt, "generator": view.model_label, "reward": view.reward_label,
                 "state": view.state, "config": dataclasses.asdict(view.cfg), "arms": {}}
    for a, arm in view.arms.items():
        f = arm.finished
        out["arms"][a] = {
            "name": ARM_NAMES[a],
            "winner": _cand(f.winner) if f else None,
            "rounds": f.rounds if f else len(arm.rounds),
            "ledger": arm.ledger.to_dict(),
        }
    out["comparison"] = comparison(view)
    out["first_event_s"] = view.first_event_s
    return out
