"""Plain data (scaling curves, fits) to a text table, a Plotly figure and a PNG."""
from __future__ import annotations

from pathlib import Path

from .samplers import LABELS
from .targets import TARGETS

# Okabe-Ito, readable on light and dark backgrounds; also told apart by marker and dash.
SAMPLER_STYLE = {
    "sequential": ("#888888", "circle", "dot"),
    "token": ("#E69F00", "square", "dash"),
    "block": ("#0072B2", "diamond", "solid"),
    "block-adaptive": ("#009E73", "triangle-up", "dashdot"),
}
SHORT = {"sequential": "sequential", "token": "token verification", "block": "block verification",
         "block-adaptive": "block, adaptive"}
TARGET_TITLES = {"mixture": "mixture of products", "curie-weiss": "Curie–Weiss", "potts": "Potts / Ising chain"}


def _params(p: dict) -> str:
    return ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in p.items() if k != "seed")


def text_report(exactness: list[dict], scaling: list[dict]) -> str:
    lines = ["Exactness (chi² against the exact law by enumeration; TV against the Monte Carlo noise floor)",
             f"{'target':<13}{'sampler':<16}{'n':>3}{'q':>3}{'samples':>9}{'chi2 p':>9}{'TV':>9}{'floor':>9}"]
    for e in exactness:
        lines.append(f"{e['target']:<13}{e['sampler']:<16}{e['n']:>3}{e['q']:>3}{e['samples']:>9}"
                     f"{e['chi2_p']:>9.3f}{e['tv']:>9.4f}{e['tv_floor']:>9.4f}")
    lines += ["", "Scaling: mean oracle rounds (queries) against n; slope of log rounds on log n"]
    for s in scaling:
        pts = "  ".join(f"{n}:{r:.1f}" for n, r in zip(s["ns"], s["rounds_mean"]))
        lines.append(f"{s['target']:<13}{s['sampler']:<16}slope {s['slope']:5.2f}  (queries {s['queries_slope']:4.2f})"
                     f"  {pts}")
    return "\n".join(lines)


def scaling_figure(scaling: list[dict]):
    """One log-log panel per target, one line per sampler, slopes in the legend."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    targets = [t for t in TARGETS if any(s["target"] == t for s in scaling)]
    titles = []
    for t in targets:
        p = next(s["params"] for s in scaling if s["target"] == t)
        titles.append(f"{TARGET_TITLES[t]} ({_params(p)})")
    fig = make_subplots(rows=1, cols=len(targets), subplot_titles=titles, horizontal_spacing=0.06)
    for col, t in enumerate(targets, start=1):
        for s in (s for s in scaling if s["target"] == t):
            colour, marker, dash = SAMPLER_STYLE[s["sampler"]]
            fig.add_trace(go.Scatter(
                x=s["ns"], y=s["rounds_mean"], mode="lines+markers",
                name=f"{SHORT[s['sampler']]}: slope {s['slope']:.2f}",
                line=dict(color=colour, dash=dash, width=2.5), marker=dict(symbol=marker, size=9, color=colour),
                legendgroup=f"{t}", legendgrouptitle_text=TARGET_TITLES[t],
                hovertemplate="n = %{x}<br>rounds = %{y:.1f}<extra>" + LABELS[s["sampler"]] + "</extra>"),
                row=1, col=col)
        ns = sorted({n for s in scaling if s["target"] == t for n in s["ns"]})
        fig.update_xaxes(type="log", title_text="n (sites)", row=1, col=col, showgrid=True, tickvals=ns,
                         gridcolor="rgba(128,128,128,0.25)")
        fig.update_yaxes(type="log", row=1, col=col, showgrid=True, dtick=1, gridcolor="rgba(128,128,128,0.25)",
                         minor=dict(showgrid=True, gridcolor="rgba(128,128,128,0.1)"))
    fig.update_yaxes(title_text="oracle rounds (mean)", row=1, col=1)
    fig.update_layout(template="none", paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      font=dict(color="#7f7f7f", size=13), height=460, margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(orientation="h", y=-0.2, groupclick="toggleitem"), uirevision="scaling")
    return fig


def write_png(scaling: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = [t for t in TARGETS if any(s["target"] == t for s in scaling)]
    fig, axes = plt.subplots(1, len(targets), figsize=(5 * len(targets), 4.4), squeeze=False)
    mpl_marker = {"circle": "o", "square": "s", "diamond": "D", "triangle-up": "^"}
    mpl_dash = {"dot": ":", "dash": "--", "solid": "-", "dashdot": "-."}
    for ax, t in zip(axes[0], targets):
        for s in (s for s in scaling if s["target"] == t):
            colour, marker, dash = SAMPLER_STYLE[s["sampler"]]
            ax.loglog(s["ns"], s["rounds_mean"], mpl_dash[dash], marker=mpl_marker[marker], color=colour,
                      label=f"{s['sampler']}: slope {s['slope']:.2f}")
        p = next(s["params"] for s in scaling if s["target"] == t)
        ax.set_title(f"{TARGET_TITLES[t]} ({_params(p)})", fontsize=10)
        ax.set_xlabel("n (sites)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("oracle rounds (mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
