"""Turning a bench result (plain data) into terminal tables and the paper's figure (PNG)."""
from __future__ import annotations

from pathlib import Path

from ..arms import REGISTRY

MB = 1024 * 1024


def _speed(s: dict | None) -> str:
    if not s:
        return "-"
    return (">=" if s["lower_bound"] else "") + f"{s['value']:.2f}x"


def engine_table(eng: dict) -> str:
    g, m, r = eng["vs_generate"], eng["matmul"], eng["vs_reference"]
    bw = eng.get("bandwidth")
    e, h = g["engine"], g["generate"]
    lim = m["flops_per_s"]
    lines = [
        f"Engine speed ({eng['device']}, {eng['threads']} threads, {eng.get('dtype', m['dtype'])}, prompt cache "
        f"{eng.get('kv_sharing', 'copied')} across rows; ratios from this one run)",
        f"  matmul limit: {m['size']}^3 {m['dtype']} = {lim / 1e9:.1f} GFLOP/s (median of {m['samples']} taken "
        f"between the runs; range {m.get('min_flops_per_s', lim) / 1e9:.1f}-{m['best_flops_per_s'] / 1e9:.1f})",
    ]
    if bw:
        lines.append(f"  read bandwidth: {bw['mbytes']:.0f} MB {bw['dtype']} matrix-vector = "
                     f"{bw['bytes_per_s'] / 1e9:.1f} GB/s (median of {bw['samples']}; range "
                     f"{bw['min_bytes_per_s'] / 1e9:.1f}-{bw['best_bytes_per_s'] / 1e9:.1f})")
    lines += [
        f"  engine vs transformers generate, {g['rows']} rows x {g['length']} new tokens, sampling, KV cache:",
        f"    {'':<18}{'tok/s':>8}{'wall s':>9}{'GFLOP/s':>9}{'of limit':>10}{'peak KV MB':>12}",
        f"    {'engine':<18}{e['tokens_per_s']:>8.1f}{e['wall_s']:>9.2f}{e['flops_per_s'] / 1e9:>9.1f}"
        f"{e['fraction_of_limit']:>10.0%}{e['peak_memory_bytes'] / MB:>12.1f}",
        f"    {'generate':<18}{h['tokens_per_s']:>8.1f}{h['wall_s']:>9.2f}{h['flops_per_s'] / 1e9:>9.1f}"
        f"{h['fraction_of_limit']:>10.0%}{h['peak_memory_bytes'] / MB:>12.1f}",
        f"    engine / generate: {g['speedup']:.2f}x tokens/s, {1 / g['memory_ratio']:.2f}x peak memory",
    ]
    sweep = eng["decode_sweep"]
    if sweep and "roofline_s" in sweep[0]:
        lines += ["  one decoding step by batch size, against its roofline = max((weights + KV read) / bandwidth, "
                  "2 x params x rows / matmul limit):",
                  f"    {'rows':>6}{'step ms':>9}{'range':>13}{'roofline ms':>13}{'bound':>9}{'x roofline':>12}"
                  f"{'GFLOP/s':>9}"]
        for s in sweep:
            lines.append(f"    {s['rows']:>6}{s['step_s'] * 1e3:>9.1f}{s['step_min_s'] * 1e3:>6.1f}-"
                         f"{s['step_max_s'] * 1e3:<6.1f}{s['roofline_s'] * 1e3:>13.2f}{s['bound']:>9}"
                         f"{s['vs_roofline']:>12.2f}{s['flops_per_s'] / 1e9:>9.1f}")
    else:
        lines += ["  one decoding step by batch size (FLOP/s = 2 x params x rows / step time):",
                  "    " + "  ".join(f"{s['rows']} rows {s['step_s'] * 1e3:.0f} ms {s['flops_per_s'] / 1e9:.1f} GF/s "
                                   f"({s['fraction_of_limit']:.0%})" for s in sweep)]
    if "coupling" in eng:
        c = eng["coupling"]
        lines.append(f"  coupling: {c['diverged']} of {c['compared']} candidates wrote other tokens in batches of "
                     f"{', '.join(map(str, c['batches']))} rows than with all {c['n']} ({c['length']} tokens)"
                     + (f"; first differing token {', '.join(map(str, c['diverged_at_tokens']))}"
                        if c["diverged"] else ""))
    lines.append(f"  Speculative Rejection (N={r['n']}, alpha={r['alpha']:g}, {r['max_new_tokens']} tokens"
                 + (f", a decision every {r['interval']} tokens" if "interval" in r else "")
                 + "): engine vs reference-style re-tokenise + re-prefill:")
    for name in ("engine", "reference_style"):
        led = r[name]["ledger"]
        lines.append(f"    {name:<18}wall {led['wall_s']:.2f} s, {led['flops'] / 1e9:.1f} GFLOP "
                     f"({led['prompt_tokens']} prefilled tokens), peak KV {led['peak_memory_bytes'] / MB:.1f} MB, "
                     f"{r[name]['rounds']} decisions")
    lines.append(f"    reference-style / engine: {r['wall_ratio']:.2f}x wall, {r['flops_ratio']:.2f}x FLOPs, "
                 f"{r['memory_ratio']:.2f}x peak memory; same winner: {'yes' if r['same_winner'] else 'no'}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- the paper's protocol
PAPER_MEASURES = (("steps", "decode steps"), ("steps_refill", "decode steps, BoN slots refilled"),
                  ("steps_paged", "decode steps, BoN paged, reserving at admission"),
                  ("steps_vllm", "engine steps, BoN as vLLM v1 schedules it"),
                  ("flops", "FLOPs"), ("wall_vllm", "wall time, BoN as vLLM schedules it"))


def _flat_line(agg: dict) -> list[str]:
    """The prompts left out because every Best-of-N answer scored the same there (``protocol.aggregate``)."""
    flat = agg.get("flat_prompts") or []
    if not flat:
        return []
    return [f"Left out: {len(flat)} prompt{'s' if len(flat) > 1 else ''} where every Best-of-{agg['n_ref']} answer "
            f"scored the same ({', '.join(flat)}): the reward tells no answer from another there, so any arm would "
            f"score 100 on it for free. Every figure below is over the other {agg['prompts']}."]


def paper_table(agg: dict, meta: dict) -> str:
    """The protocol's table: the Best-of-N curve at powers of two, then each Speculative Rejection point
    (rule, alpha, first decision) with its raw and capped improvement and their 90% intervals."""
    n_ref = agg["n_ref"]
    wall_note = meta.get("wall_note") or "wall times depend on the machine's load"
    lines = [
        f"Paper protocol: {agg['prompts']} prompts ({meta['prompt_set']}), generator {meta['model']} "
        f"({meta.get('dtype', '?')}), reward {meta['reward']}, {meta['max_new_tokens']} new tokens, budget "
        f"{meta['budget']} KV slots, seed {meta['seed']}",
        *_flat_line(agg),
        f"Reference: Best-of-{n_ref} under the same budget. Best-of-k for every k is the expected best of k random "
        f"candidates (order statistics over one coupled Best-of-{n_ref} run), with its expected compute in passes "
        "of the rows that fit at full length (x steps) or with those slots refilled as answers end (x refill).",
        "Best-of-N wall time is MODELLED from step times measured at the budgeted batch "
        f"({_step_model_text(agg)}); Speculative Rejection's is measured where it ran ('run'). Wall: {wall_note}.",
        "",
        f"{'method':<44}{'src':>5}{'improv':>7}{'90% CI':>14}{'capped':>7}{'90% CI':>14}"
        f"{'x steps':>9}{'x refill':>9}{'x paged':>9}{'x vLLM':>9}{'x FLOPs':>9}{'x wall':>9}{'x wallV':>9}"
        f"{'kept win':>9}",
    ]
    for b in agg["bon"]:
        if b["k"] & (b["k"] - 1) == 0 or b["k"] == n_ref:
            lines.append(f"{'Best-of-%d' % b['k']:<44}{'':>5}{b['improvement']:>7.1f}")
    for s in agg["sr"]:
        name = (f"{s['label']} (N={s['n']:.0f})" if s.get("label") else
                f"SR {s.get('rule', 'paper')} a={s['alpha']:g} T={s['first_decision']} (N~{s['n']:.0f})")
        lines.append(f"{name:<44}{s.get('source', 'run')[:3]:>5}{s['improvement']:>7.1f}"
                     f"{_ci(s.get('improvement_ci90')):>14}{s.get('improvement_capped', s['improvement']):>7.1f}"
                     f"{_ci(s.get('improvement_capped_ci90')):>14}{_speed(s.get('speedup_steps')):>9}"
                     f"{_speed(s.get('speedup_steps_refill')):>9}{_speed(s.get('speedup_steps_paged')):>9}"
                     f"{_speed(s.get('speedup_steps_vllm')):>9}{_speed(s.get('speedup_flops')):>9}"
                     f"{_speed(s.get('speedup_wall')):>9}{_speed(s.get('speedup_wall_vllm')):>9}"
                     f"{s['kept_bon_winner']:>9.0%}")
    lines += ["", "x = speed-up at equal improvement score (raw): the compute Best-of-N needs for SR's score "
              "(log-interpolated on its curve, every k) over SR's; '>=' = SR beat Best-of-%d (a lower bound). "
              "capped = each prompt's best counted at most Best-of-%d's best. src: sim = replayed by the simulator "
              "from the coupled run; run = ran for real. Best-of-N's decode steps four ways: fixed passes of the "
              "rows that fit at full length (x steps, the paper's), those slots refilled as answers end (x refill), "
              "a paged KV cache where each answer reserves its real length when it starts (x paged), and as vLLM v1 "
              "schedules it (x vLLM: blocks of %d slots taken as tokens are written, the latest admitted answer "
              "preempted and recomputed when a block is short; the baseline the claims are priced against). x wall: "
              "against Best-of-N in fixed passes, rows leaving as answers end; x wallV: against Best-of-N as vLLM "
              "schedules it, each step priced at its rows (both modelled; the step model is extrapolated past the "
              "largest batch measured). kept win: the share of prompts where SR kept Best-of-%d's winner to the end "
              "(see the fates below)." % (n_ref, n_ref, agg.get("vllm_block_size", 16), n_ref),
              "Decode steps track accelerator time where a step's cost hardly depends on the rows (a GPU); "
              "FLOPs track total work; CPU wall time sits between."]
    forced = [(s, s["forced"]) for s in agg["sr"]
              if s.get("forced") is not None and s.get("label") and (s["forced"] or _rival(s))]
    for s, ids in forced:   # a rival the memory budget cut short before its own decision (ST-BoN before c + tau)
        lines.append(f"{s['label']}: memory forced its decision before its own rule's point on {len(ids)} of "
                     f"{agg['prompts']} prompts" + (f" ({', '.join(ids)})" if ids else "") + ".")
    gpu = agg.get("gpu")
    if gpu:
        lines.append(f"Priced {gpu['on']}, measured ({gpu['measured']}): the same decode steps, each at that "
                     f"GPU's step for its rows (Best-of-{n_ref}: {gpu['bon_ref_s']:.3g} s over the prompts); "
                     "speed-up at equal improvement score:")
        lines += [f"  {_name(s)}: {_speed(s.get('speedup_gpu'))} ({s['gpu_s']:.3g} s)" for s in agg["sr"]
                  if s.get("speedup_gpu")]
    for s in agg["sr"]:
        if "drift" in s:
            d = s["drift"]
            lines.append(f"  {_name(s)} ran for real: "
                         f"{d['text_differs']} of {d['compared']} candidates wrote another text than in the coupled "
                         f"reference, {d['score_differs']} another score; " + _agrees(s.get("simulator_agrees"), n_ref))
    lines += _ceiling_lines(agg)
    lines.append("Spearman of partial vs final reward at each decision (mean over prompts):")
    for s in agg["sr"]:
        parts = [f"d{d['decision']}@{d['mean_position']:.0f}tok: " +
                 (f"{d['mean_spearman']:.2f}" if d["mean_spearman"] is not None else "-")
                 for d in s["rank_correlation"]]
        lines.append(f"  {_name(s)}: "
                     + ("  ".join(parts) or "no decision"))
    return "\n".join(lines)


def _name(s: dict) -> str:
    """A point's short name: a rival's spec (and how it ran), or SR's rule, alpha and first decision."""
    return s["label"] if s.get("label") else f"{s.get('rule', 'paper')} a={s['alpha']:g} T={s['first_decision']}"


def _speed_ci(s: dict | None, ci: dict | None) -> str:
    if not s:
        return "-"
    out = _speed(s)
    if ci:
        out += f" [{ci['low']:.1f}, {'>=' if ci['high_lower_bound'] else ''}{ci['high']:.1f}]"
    return out


def _speed_boot(s: dict, m: str) -> str:
    """'2.23x {1.88, 2.55} (1.78x, 1.34x)': the speed-up, its bootstrap interval over prompts, and what it would
    be had the method scored 0.1 and 1 point less."""
    b, less = s.get(f"speedup_{m}_boot90"), s.get(f"speedup_{m}_less") or {}
    out = _speed(s.get(f"speedup_{m}"))
    if b:
        out += (f" {{{'>=' if b['low_lower_bound'] else ''}{b['low']:.2f}, "
                f"{'>=' if b['high_lower_bound'] else ''}{b['high']:.2f}}}")
    if less:
        out += " (" + ", ".join(_speed(v) for v in less.values()) + ")"
    return out


def fate_words(counts: dict | None, prompts: int) -> str:
    """'kept 5, pruned at decision 1: 4, at decision 2: 1, never drawn 2 (of 12)': what became of
    Best-of-N's winner. Never drawn = outside SR's first batch (no rule could keep it), not pruned."""
    if not counts:
        return "-"
    at = counts.get("pruned_at_decision") or {}
    parts = [f"kept {counts['kept']}"]
    parts += [f"pruned at decision {d}: {k}" for d, k in at.items()]
    parts.append(f"never drawn {counts['never_drawn']}")
    return ", ".join(parts) + f" (of {prompts})"


def _ceiling_lines(agg: dict) -> list[str]:
    """Per point: decode-step speed-ups against each Best-of-N baseline with their intervals, the oracle
    ceiling and the rule's gap to it, and what became of Best-of-N's winner."""
    lines = ["", "Speed-up in decode steps against each Best-of-N baseline, [at the ends of the improvement's 90% "
             "interval]; against vLLM's schedule, in steps and wall time, {90% bootstrap interval over prompts} and "
             "(the speed-up had the method scored 0.1 / 1 point less); the oracle ceiling (a rule keeping the best FINAL rewards through the same loop: the most "
             "any rule reaches at that point) and the gap to it; Best-of-N's winner: kept to the end, pruned at a "
             "decision, or never drawn (outside SR's first batch). A rival (DeepConf, ST-BoN) starts all N_ref "
             "candidates, so its oracle is Best-of-N_ref's own winner (100) and its gap is all it lost:"]
    for s in agg["sr"]:
        name = _name(s)
        oracle = (f"oracle {s['oracle_improvement']:.1f} {_ci(s.get('oracle_improvement_ci90'))} "
                  f"(gap {s['gap_to_oracle']:.1f})" if "oracle_improvement" in s else "oracle - (first batch > N_ref)")
        lines.append(f"  {name}: fixed {_speed_ci(s.get('speedup_steps'), s.get('speedup_steps_ci90'))}, refill "
                     f"{_speed_ci(s.get('speedup_steps_refill'), s.get('speedup_steps_refill_ci90'))}, paged "
                     f"{_speed_ci(s.get('speedup_steps_paged'), s.get('speedup_steps_paged_ci90'))}; {oracle}")
        for m, word in (("steps_vllm", "vLLM steps"), ("wall_vllm", "vLLM wall")):
            if s.get(f"speedup_{m}"):
                lines.append(f"    {word} {_speed_boot(s, m)}")
        lines.append(f"    Best-of-{agg['n_ref']}'s winner: {fate_words(s.get('winner_fate_counts'), agg['prompts'])}")
    return lines


def _ci(ci) -> str:
    return "-" if not ci else f"[{ci[0]:.1f}, {ci[1]:.1f}]"


def _num(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _step_model_text(agg: dict) -> str:
    pts = agg.get("step_model") or []
    return ", ".join(f"{r} rows {s * 1e3:.0f} ms/step" for r, s in pts) or "no step model"


def paper_png(agg: dict, title: str, path: Path) -> bool:
    """The paper's figure: improvement score against compute relative to Best-of-N_ref, log x, one panel
    per measure; the Best-of-N curve and Speculative Rejection's points. False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    from matplotlib.colors import to_rgba
    from matplotlib.lines import Line2D

    measures = [(m, label) for m, label in PAPER_MEASURES if agg["bon"][0].get(f"rel_{m}") is not None]
    cols = 2 if len(measures) > 2 else len(measures)
    rows = -(-len(measures) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.4 * rows + 1.0), squeeze=False)
    # one colour per rule (the paper's filled, the others hollow, so coinciding points stay visible) and one
    # marker per (alpha, first decision); the key sits under the panels, the speed-ups are in the table
    rules = list(dict.fromkeys(s.get("rule") or s["method"] for s in agg["sr"]))   # a rival: its method
    colour = {r: c for r, c in zip(rules, ("#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"))}
    settings = list(dict.fromkeys((s["alpha"], s["first_decision"]) for s in agg["sr"]))
    marker = {k: m for k, m in zip(settings, "*DP^vsXpho<>")}
    def points(ax, m):
        for s in agg["sr"]:
            x = s.get(f"rel_{m}")
            if x is None:
                continue
            rule = s.get("rule") or s["method"]
            # the paper's filled markers a little see-through (their edge solid): one on another shows both
            ax.plot([x], [s["improvement"]], linestyle="none", marker=marker[(s["alpha"], s["first_decision"])],
                    markersize=13 if rule == "paper" else 10, color=colour[rule],
                    markerfacecolor=to_rgba(colour[rule], 0.6) if rule == "paper" else "none", markeredgewidth=1.6)

    for ax, (m, label) in zip(axes.flat, measures):
        xs, ys = [b[f"rel_{m}"] for b in agg["bon"]], [b["improvement"] for b in agg["bon"]]
        ax.plot(xs, ys, "-", color="#0072B2")
        marks = [b for b in agg["bon"] if b["k"] & (b["k"] - 1) == 0 or b["k"] == agg["n_ref"]]
        ax.plot([b[f"rel_{m}"] for b in marks], [b["improvement"] for b in marks], "o", color="#0072B2", markersize=4)
        for b in marks:
            ax.annotate(f"{b['k']}", (b[f"rel_{m}"], b["improvement"]), textcoords="offset points",
                        xytext=(-4, 5), ha="right", fontsize=8, color="#0072B2")
        points(ax, m)
        ax.set_xscale("log")
        ax.set_title(f"{label}" + (" (Best-of-N modelled)" if m == "wall" else ""), fontsize=10)
        ax.set_xlabel(f"relative to Best-of-{agg['n_ref']} (log)")
        ax.set_ylabel("improvement score")
        ax.grid(True, which="both", alpha=0.3)
    spare = list(axes.flat)[len(measures):]
    near = [s for s in agg["sr"] if s.get(f"rel_{measures[0][0]}") is not None]
    xs = [s[f"rel_{measures[0][0]}"] for s in near]
    if spare and near and max(xs) < 1.5 * min(xs):
        # the first panel's points up close: within a factor 1.5 on its log axis they sit on each other
        ax, m = spare.pop(0), measures[0][0]
        ys = [s["improvement"] for s in near]
        dx, dy = (max(xs) - min(xs)) or max(xs) * 0.05, (max(ys) - min(ys)) or 1.0
        points(ax, m)
        ax.set_xlim(min(xs) - 0.15 * dx, max(xs) + 0.15 * dx)
        ax.set_ylim(min(ys) - 0.15 * dy, max(ys) + 0.15 * dy)
        ax.set_title(f"{measures[0][1]}: the Speculative Rejection points up close (linear x)", fontsize=10)
        ax.set_xlabel(f"relative to Best-of-{agg['n_ref']}")
        ax.set_ylabel("improvement score")
        ax.grid(True, alpha=0.3)
    for ax in spare:
        ax.axis("off")
    handles = [Line2D([], [], color="#0072B2", marker="o", markersize=4, label="Best-of-k, k = 1 ... "
                      f"{agg['n_ref']} (order statistics)")]
    handles += [Line2D([], [], linestyle="none", marker="o", markersize=9, color=colour[r],
                       markerfacecolor=colour[r] if r == "paper" else "none", markeredgewidth=1.6,
                       label=REGISTRY[r].name if r in REGISTRY else f"Speculative Rejection, {r} rule")
                 for r in rules]
    handles += [Line2D([], [], linestyle="none", marker=marker[k], markersize=10, color="#555555",
                       label=f"α = {k[0]:g}, first decision T = {k[1]}" if k[0] is not None else "a rival (its own "
                       "settings)") for k in settings]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1 if rows > 1 else 0.18, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _agrees(checked: str | None, n_ref: int) -> str:
    """'simulator agrees on 12/12 prompts', or why it could not be checked."""
    if not checked or checked.endswith("/0"):
        return f"not simulated (its first batch exceeds the coupled run's {n_ref} candidates)"
    return f"simulator agrees on {checked} prompts"


def _rival(s: dict) -> bool:
    """A later method raced against Speculative Rejection (its ``About`` says so): its forced decisions are counted
    even where there were none."""
    kind = REGISTRY.get(s.get("method"))
    return bool(kind is not None and kind.about is not None and kind.about.rival)
