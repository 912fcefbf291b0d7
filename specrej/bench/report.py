"""Turning a bench result (plain data) into a terminal table, a Plotly figure and a PNG."""
from __future__ import annotations

from pathlib import Path

MB = 1024 * 1024


def _speed(s: dict | None) -> str:
    if not s:
        return "-"
    return (">=" if s["lower_bound"] else "") + f"{s['value']:.2f}x"


def efficiency_table(agg: dict, meta: dict) -> str:
    n_max = agg["n_max"]
    lines = [
        f"Efficiency: {agg['prompts']} prompts ({meta['prompt_set']}), generator {meta['model']}, reward "
        f"{meta['reward']}, max_new_tokens {meta['max_new_tokens']}, budget {meta['budget']} KV slots, seed {meta['seed']}",
        f"Reference: Best-of-{n_max}. The Best-of-N curve is read off one Best-of-{n_max} run per prompt "
        f"(coupled randomness: Best-of-k = candidates 0..k-1); SR runs at N={n_max}.",
        "",
        f"{'method':<20}{'improvement':>12}{'rel FLOPs':>11}{'rel wall':>10}{'speed-up':>10}{'(wall)':>9}"
        f"{'kept BoN win':>14}{'rank corr d1':>14}{'rounds':>8}",
    ]
    for b in agg["bon"]:
        lines.append(f"{b['method']:<20}{b['improvement_score']:>12.1f}{b['relative_flops']:>11.3f}"
                     f"{b['relative_wall']:>10.3f}")
    for s in agg["sr"]:
        rc = s["rank_correlation"]
        d1 = rc[0]["mean_spearman"] if rc and rc[0]["mean_spearman"] is not None else None
        lines.append(f"{s['method']:<20}{s['improvement_score']:>12.1f}{s['relative_flops']:>11.3f}"
                     f"{s['relative_wall']:>10.3f}{_speed(s['speedup_flops']):>10}{_speed(s['speedup_wall']):>9}"
                     f"{s['kept_bon_winner']:>14.0%}{(f'{d1:.2f}' if d1 is not None else '-'):>14}"
                     f"{s['mean_rounds']:>8.1f}")
    lines.append("")
    lines.append("speed-up: compute Best-of-N needs for the same improvement score (log-interpolated on its curve) "
                 "over SR's; '>=' = SR beat the largest N (a lower bound).")
    lines.append("rank corr: Spearman of partial reward at a decision vs the same candidate's final reward, "
                 "mean over prompts; by decision:")
    for s in agg["sr"]:
        parts = [f"d{d['decision']}@{d['mean_position']:.0f}tok: " +
                 (f"{d['mean_spearman']:.2f}" if d["mean_spearman"] is not None else "-")
                 for d in s["rank_correlation"]]
        lines.append(f"  {s['method']:<18}" + ("  ".join(parts) if parts else "no decision"))
    return "\n".join(lines)


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


def figure(agg: dict, title: str):
    """Plotly figure: improvement score against relative compute (FLOPs and wall time), log x."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("relative FLOPs", "relative wall time"))
    for col, key in ((1, "relative_flops"), (2, "relative_wall")):
        fig.add_trace(go.Scatter(
            x=[b[key] for b in agg["bon"]], y=[b["improvement_score"] for b in agg["bon"]], mode="lines+markers+text",
            text=[f"N={b['n']}" for b in agg["bon"]], textposition="top left", name="Best-of-N",
            line=dict(color="#1f77b4"), showlegend=col == 1), row=1, col=col)
        fig.add_trace(go.Scatter(
            x=[s[key] for s in agg["sr"]], y=[s["improvement_score"] for s in agg["sr"]], mode="markers+text",
            text=[f"α={s['alpha']:g}" for s in agg["sr"]], textposition="bottom right",
            name="Speculative Rejection", marker=dict(color="#d62728", size=11, symbol="star"),
            showlegend=col == 1), row=1, col=col)
        fig.update_xaxes(type="log", title_text="compute relative to Best-of-%d" % agg["n_max"], row=1, col=col)
        fig.update_yaxes(title_text="improvement score", row=1, col=col)
    fig.update_layout(title=title, template="plotly_white", height=480, width=1100)
    return fig


def write_png(agg: dict, title: str, path: Path) -> bool:
    """The same figure with matplotlib (kaleido is not needed); False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    for ax, key, label in ((axes[0], "relative_flops", "FLOPs"), (axes[1], "relative_wall", "wall time")):
        xs, ys = [b[key] for b in agg["bon"]], [b["improvement_score"] for b in agg["bon"]]
        ax.plot(xs, ys, "o-", color="#1f77b4", label="Best-of-N")
        for i, (b, x, y) in enumerate(zip(agg["bon"], xs, ys)):
            first = i == 0   # the leftmost label goes right of its point, inside the axes
            ax.annotate(f"N={b['n']}", (x, y), textcoords="offset points", xytext=(6, 2) if first else (-6, 6),
                        ha="left" if first else "right", fontsize=8)
        sx, sy = [s[key] for s in agg["sr"]], [s["improvement_score"] for s in agg["sr"]]
        ax.plot(sx, sy, "*", color="#d62728", markersize=13, label="Speculative Rejection")
        for s, x, y in zip(agg["sr"], sx, sy):
            ax.annotate(f"α={s['alpha']:g}", (x, y), textcoords="offset points", xytext=(6, -10), fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel(f"{label} relative to Best-of-{agg['n_max']}")
        ax.set_ylabel("improvement score")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
