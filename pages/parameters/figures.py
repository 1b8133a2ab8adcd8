"""Figures of the parameters-and-cost page. Pure functions: numbers in, plotly figure out."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from core.analysis.cost import Timing, crossover_block, crossover_recurrent, layer_costs, linear_terms, quadratic_terms

# (key in count_parameters, legend name, formula, colour): attention blues, MLP oranges, the rest muted
PARTS = [
    ("W_Q", "W_Q", "d²", "#08519c"), ("W_K", "W_K", "d²", "#3182bd"), ("W_V", "W_V", "d²", "#6baed6"),
    ("W_O", "W_O", "d²", "#9ecae1"),
    ("W1", "MLP W1", "d·d_ff", "#e6550d"), ("W2", "MLP W2", "d_ff·d", "#fdae6b"),
    ("biases", "biases", "4d + d_ff + d", "#bdbdbd"),
    ("norms", "LayerNorms", "4d per block, 2d final", "#969696"),
    ("token_embedding", "token embedding", "m·d", "#31a354"), ("position_embedding", "positions", "n_ctx·d", "#a1d99b"),
    ("output", "output map", "d·m", "#756bb1"),
]
_PER_BLOCK = {"W_Q", "W_K", "W_V", "W_O", "W1", "W2", "biases", "norms"}


def parameter_bar(counts: dict, n_layers: int) -> go.Figure:
    """Two stacked bars in percent: one block, and the whole model (every block-level part times L)."""
    rows = ["one block", f"whole model (L = {n_layers})"]
    totals = [counts["per_block"], counts["total"]]
    fig = go.Figure()
    for key, name, formula, colour in PARTS:
        if not counts.get(key) and key == "biases":  # the lecture's model has none: no empty legend entry
            continue
        if key in _PER_BLOCK:
            whole = n_layers * counts[key] + (counts["final_norm"] if key == "norms" else 0)
            values, form = [counts[key], whole], [formula, f"L·{formula}" if key != "norms" else "4dL + 2d"]
        else:
            values, form = [None, counts[key]], [None, formula]
        # percentages as text: plotly's own %{percent...} variables do not exist for bars
        text = [f"{v / t:.0%}" if v and v / t >= 0.03 else "" for v, t in zip(values, totals)]
        fig.add_trace(go.Bar(
            y=rows, x=values, name=name, orientation="h", marker_color=colour, customdata=form, text=text,
            textposition="inside", insidetextanchor="middle",
            hovertemplate=f"{name}: " + "%{customdata} = %{x:,} parameters<extra></extra>"))
    fig.update_layout(barmode="stack", barnorm="percent", height=300, xaxis_title="share of the parameters (%)",
                      yaxis=dict(autorange="reversed"), margin=dict(l=10, r=10, t=10, b=10),
                      legend=dict(orientation="h", y=-0.3, x=0, yanchor="top", traceorder="normal"), uniformtext_minsize=11,
                      uniformtext_mode="hide")
    return fig


def flops_figure(d: int, d_ff: int, n_ctx: int | None = None, n_max: float | None = None) -> go.Figure:
    """Multiplications of one layer against n on log-log axes, with both crossovers marked."""
    n_block, n_rec = crossover_block(d, d_ff), crossover_recurrent(d)
    n_max = n_max or max(1e6, 100.0 * n_block)
    n = np.logspace(0, np.log10(n_max), 240)
    c = layer_costs(n, d, d_ff)
    curves = [
        ("attention's n² terms: 2n²d", quadratic_terms(n, d), dict(color="#08519c", width=4)),
        ("block's nd² terms: 4nd² + 2n·d·d_ff", linear_terms(n, d, d_ff), dict(color="#e6550d", width=4)),
        ("scores QKᵀ: n²d (the weighted sum AV costs the same)", c["scores"], dict(color="#6baed6", width=2)),
        ("projections W_Q, W_K, W_V, W_O: 4nd²", c["projections"], dict(color="#fdae6b", width=2)),
        ("MLP: 2n·d·d_ff", c["mlp"], dict(color="#a63603", width=2, dash="dot")),
        ("recurrent layer: 2nd²", c["recurrent"], dict(color="#31a354", width=2, dash="dash")),
    ]
    fig = go.Figure()
    for name, y, line in curves:
        fig.add_trace(go.Scatter(x=n, y=y, mode="lines", name=name, line=line,
                                 hovertemplate="n = %{x:,.0f}<br>%{y:.3g} multiplications<extra>" + name.split(":")[0]
                                 + "</extra>"))
    # (n, label, colour, arrow offset): the n^2 terms overtake the block's nd^2 terms; attention's mixing
    # costs what a recurrent layer does
    marks = [(n_block, f"n = 2d + d_ff = {n_block:,}", "#08519c", (40, 50)),
             (n_rec, f"n = d = {n_rec:,}", "#31a354", (-40, -50))]
    # in floats: 2n²d at a wide model's crossover passes 2^63, and numpy takes no log of a Python int that big
    heights = [quadratic_terms(float(m[0]), d) for m in marks]
    fig.add_trace(go.Scatter(
        x=[m[0] for m in marks], y=heights, mode="markers", name="crossovers",
        marker=dict(size=12, color=[m[2] for m in marks], line=dict(color="white", width=1.5)),
        hovertemplate="crossover at n = %{x:,}<br>%{y:.3g} multiplications<extra></extra>"))
    for (x, text, colour, (ax, ay)), y in zip(marks, heights):  # annotations on log axes: log10 of the data
        fig.add_annotation(x=np.log10(x), y=np.log10(y), text=text, showarrow=True, ax=ax, ay=ay,
                           arrowcolor=colour, font=dict(color=colour, size=13), xanchor="left" if ax > 0 else "right",
                           bgcolor="rgba(255,255,255,0.85)")
    if n_ctx:  # a trace, not add_vline: annotations on log axes would need log10 coordinates
        lo, hi = quadratic_terms(1.0, d), max(quadratic_terms(n_max, d), linear_terms(n_max, d, d_ff))
        fig.add_trace(go.Scatter(x=[n_ctx, n_ctx], y=[lo, hi], mode="lines", name=f"model context n_ctx = {n_ctx:,}",
                                 line=dict(color="#636363", dash="dot", width=1.5), hoverinfo="skip"))
    fig.update_layout(height=520, margin=dict(l=70, r=20, t=40, b=60), hovermode="closest",
                      xaxis=dict(type="log", title="sequence length n (tokens)", range=[0, np.log10(n_max)]),
                      yaxis=dict(type="log", title="multiplications per layer", exponentformat="power"),
                      legend=dict(x=0.01, y=0.99, bgcolor="rgba(255,255,255,0.8)"),
                      title=f"Cost of one layer for d = {d:,}, d_ff = {d_ff:,}")
    return fig


def timing_figure(t: Timing, name: str = "model") -> go.Figure:
    """Measured seconds per call against n (log-log), with the fitted power laws over the fitted range."""
    fig = go.Figure()
    ns = np.asarray(t.ns, dtype=float)
    fit = ns >= t.fit_from
    for label, ts, slope, colour in (("attention", t.attention_s, t.attention_slope, "#08519c"),
                                     ("MLP", t.mlp_s, t.mlp_slope, "#e6550d")):
        ts = np.asarray(ts)
        fig.add_trace(go.Scatter(x=ns, y=ts * 1e3, mode="lines+markers", name=f"{label} (measured)",
                                 line=dict(color=colour),
                                 hovertemplate="n = %{x:,}<br>%{y:.3f} ms<extra>" + label + "</extra>"))
        # the fitted line t = c n^slope through the geometric mean of the fitted points
        x = ns[fit]
        c = np.exp(np.mean(np.log(ts[fit]) - slope * np.log(x)))
        fig.add_trace(go.Scatter(x=x, y=c * x**slope * 1e3, mode="lines", name=f"{label} fit: slope {slope:.2f}",
                                 line=dict(color=colour, dash="dash", width=3), hoverinfo="skip"))
    fig.add_vrect(x0=t.fit_from, x1=t.ns[-1], fillcolor="#bdbdbd", opacity=0.2, line_width=0)
    fig.add_annotation(x=np.log10(t.fit_from), y=1, yref="paper", text="fitted range", showarrow=False,
                       xanchor="left", yanchor="top")  # annotation x on a log axis is log10(n)
    fig.update_layout(height=440, margin=dict(l=70, r=20, t=40, b=60),
                      xaxis=dict(type="log", title="sequence length n (tokens)", tickvals=t.ns,
                                 ticktext=[f"{n:,}" for n in t.ns]),
                      yaxis=dict(type="log", dtick=1, title="time per call (ms), fastest of repeats"),
                      legend=dict(x=0.01, y=0.99, bgcolor="rgba(255,255,255,0.8)"),
                      title=f"{name}: one attention sublayer and one MLP on a (1, n, d) input")
    return fig
