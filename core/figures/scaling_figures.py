"""Plotly figures for the scaling-law page. Pure functions of a ScalingLaw (and data); tested on their data."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative

from core.figures.ticks import log_axes
from core.serve.fmt import human, sci
from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.analysis.scaling import ScalingLaw, famous_table

COLORS = qualitative.Plotly
N_RANGE = (1e6, 1e14)
D_RANGE = (1e8, 1e14)
# legends go under the plot: above it they collide with the title
LAYOUT = dict(height=480, margin=dict(l=60, r=20, t=50, b=120), template="plotly_white",
              legend=dict(orientation="h", y=-0.2, x=0, yanchor="top"))
HALO = "0px 0px 3px white"  # text shadow that keeps labels readable on any background
LABEL_PX = 11  # the smallest label font: smaller is hard to read
LINE_PX = 14  # a line of 11 px text: plateau values closer than this would overlap
PLOT_PX = LAYOUT["height"] - LAYOUT["margin"]["t"] - LAYOUT["margin"]["b"]  # the plot area's height in pixels
PLATEAU_MARGIN_R = 52  # room for "plateau" and a value such as 2.930 (11 px) right of the plot


def _log_grid(lo, hi, n=200):
    return np.logspace(math.log10(lo), math.log10(hi), n)


def loss_vs_N(law: ScalingLaw, Ds=(1e9, 1e10, 1e11, 1e12, 1e13), N_range=N_RANGE) -> go.Figure:
    """The lecture's plot: L against N for several fixed D, each flattening onto E + B/D^beta (dashed)."""
    return _family(law, Ds, N_range, "N", "D", "parameters N", law.plateau_in_N, r"L∞ + B/D^β")


def loss_vs_D(law: ScalingLaw, Ns=(1e7, 1e8, 1e9, 1e10, 1e11), D_range=D_RANGE) -> go.Figure:
    """The mirror plot: L against D for several fixed N, each flattening onto E + A/N^alpha (dashed)."""
    return _family(law, Ns, D_range, "D", "N", "training tokens D", law.plateau_in_D, r"L∞ + A/N^α")


def _family(law, fixed, rng, var, other, xtitle, plateau, plateau_name):
    x = _log_grid(*rng)
    plateaus = [float(plateau(v)) for v in fixed]
    top = max(plateaus) + 0.6 * (max(plateaus) - law.E) + 0.3  # room for the descent onto the highest plateau
    traces, notes, labelled = [], [], []
    for i, (v, p) in enumerate(zip(fixed, plateaus)):
        color = COLORS[i % len(COLORS)]
        y = law.loss(x, v) if var == "N" else law.loss(v, x)
        traces.append(go.Scatter(x=x, y=y, mode="lines", name=f"{other} = {human(v)}: plateau {p:.3f}",
                                 line=dict(color=color),
                                 hovertemplate=f"{var} = %{{x:.3s}}<br>L = %{{y:.4f}}<extra>{other} = {human(v)}</extra>"))
        traces.append(go.Scatter(x=[x[0], x[-1]], y=[p, p], mode="lines", name=f"plateau, {other} = {human(v)}",
                                 line=dict(color=color, dash="dash", width=1), showlegend=False,
                                 hovertemplate=f"plateau {plateau_name} = {p:.4f}<extra></extra>"))
        # each plateau's value in the right margin at the dashed line's end, where no curve can run through it
        # (inside, the curves approach their plateaus from above and lie on their labels); a value too close to
        # one already written is left to the legend, which names them all
        if all(abs(p - q) * PLOT_PX / (1.05 * (top - law.E)) >= LINE_PX for q in labelled):
            labelled.append(p)
            # placed in axis-domain units: a data x at the very end of a log axis can round off it and vanish
            notes.append(dict(x=1, xref="x domain", xshift=3, y=p, text=f"{p:.3f}", showarrow=False,
                              xanchor="left", yanchor="middle", font=dict(size=LABEL_PX, color=color)))
    # the column's header, above the plot and flush with the figure's right edge
    notes.append(dict(x=1, xref="x domain", xshift=PLATEAU_MARGIN_R, y=1, yref="y domain", showarrow=False,
                      text=f"plateau {plateau_name}", xanchor="right", yanchor="bottom",
                      font=dict(size=LABEL_PX, color="#555")))
    traces.append(go.Scatter(x=[x[0], x[-1]], y=[law.E, law.E], mode="lines", name="L∞", showlegend=False,
                             line=dict(color="black", dash="dot", width=1), hovertemplate=f"L∞ = {law.E:.4f}<extra></extra>"))
    notes.append(dict(x=0, xref="x domain", y=law.E, text=f"L∞ = {law.E:.3f}", showarrow=False, xanchor="left",
                      yanchor="top", font=dict(size=LABEL_PX)))
    # built in one go: adding traces and annotations one at a time costs ~20x more, and this runs on every slider move
    layout = {**LAYOUT, "margin": {**LAYOUT["margin"], "r": PLATEAU_MARGIN_R}}
    fig = go.Figure(traces, dict(**layout, title=f"Loss against {var} at fixed {other}", annotations=notes,
                                 xaxis=dict(type="log", title=xtitle),
                                 yaxis=dict(title="loss L (nats per token)", range=[law.E - 0.05 * (top - law.E), top])))
    return log_axes(fig)


def _log_ticks(lo, hi):
    vals = list(range(math.ceil(lo), math.floor(hi) + 1))
    return dict(tickvals=vals, ticktext=[human(10.0**v) for v in vals])


# where each famous model's name goes, so that the models trained on ~1.4T tokens do not cover each other
LABEL_POSITION = {"Chinchilla": "bottom right", "LLaMA 65B": "middle left", "Llama 2 70B": "top left",
                  "GPT-3": "bottom left", "Gopher": "top center", "MT-NLG 530B": "bottom right", "PaLM": "top right"}


def loss_map(law: ScalingLaw, N_range=(1e7, 1e13), D_range=(1e9, 1e14), budgets=None) -> go.Figure:
    """Contours of L over (log N, log D), iso-compute lines C = 6ND, the compute-optimal frontier, and the
    famous models, each joined (dotted) to the optimum for its own compute."""
    lx = np.linspace(math.log10(N_range[0]), math.log10(N_range[1]), 121)
    ly = np.linspace(math.log10(D_range[0]), math.log10(D_range[1]), 101)
    z = law.loss(10.0 ** lx[None, :], 10.0 ** ly[:, None])  # (len ly, len lx)
    zmax = float(np.quantile(z, 0.95))
    traces, notes = [], []
    traces.append(go.Contour(x=lx, y=ly, z=np.minimum(z, zmax), colorscale="Viridis_r", name="loss",
                               contours=dict(showlabels=True, labelfont=dict(size=LABEL_PX, color="white", shadow="0px 0px 2px black")),
                               line=dict(width=0.5, color="rgba(255,255,255,0.5)"),
                               colorbar=dict(title=dict(text="L", side="right"), len=0.8), ncontours=18,
                               hovertemplate="N = 10^%{x:.2f}<br>D = 10^%{y:.2f}<br>L = %{z:.4f}<extra></extra>"))
    lo_c = math.log10(FLOPS_PER_PARAM_TOKEN) + lx[0] + ly[0]
    hi_c = math.log10(FLOPS_PER_PARAM_TOKEN) + lx[-1] + ly[-1]
    budgets = budgets or [10.0**e for e in range(math.ceil(lo_c) + 1, math.floor(hi_c), 2)]
    for C in budgets:
        # log D = log(C/6) - log N: a straight line of slope -1
        x = np.array([lx[0], lx[-1]])
        y = math.log10(C / FLOPS_PER_PARAM_TOKEN) - x
        traces.append(go.Scatter(x=x, y=y, mode="lines", line=dict(color="rgba(0,0,0,0.55)", width=1, dash="dot"),
                                 name=f"C = {sci(C)}", showlegend=False, hoverinfo="skip"))
        xa = math.log10(C / FLOPS_PER_PARAM_TOKEN) - ly[-1] + 0.15  # label where the line leaves the top
        if lx[0] < xa < lx[-1]:
            notes.append(dict(x=xa, y=ly[-1], text=f"C = {sci(C)}", showarrow=False, yanchor="top", xanchor="left",
                              font=dict(size=LABEL_PX, color="black", shadow=HALO)))
    Cs = np.logspace(lo_c, hi_c, 200)
    n_opt, d_opt = law.compute_optimal(Cs)
    traces.append(go.Scatter(x=np.log10(n_opt), y=np.log10(d_opt), mode="lines", name="compute-optimal frontier",
                             line=dict(color="#e8590c", width=3), customdata=np.stack([Cs, d_opt / n_opt], 1),
                             hovertemplate="optimum for C = %{customdata[0]:.3g}<br>N = 10^%{x:.2f}, D = 10^%{y:.2f}"
                                           "<br>D/N = %{customdata[1]:.1f}<extra></extra>"))
    rows = famous_table(law)
    # each model joined to its optimum: one trace, segments separated by gaps
    seg_x = [v for r in rows for v in (math.log10(r["N"]), math.log10(r["N_opt"]), None)]
    seg_y = [v for r in rows for v in (math.log10(r["D"]), math.log10(r["D_opt"]), None)]
    traces.append(go.Scatter(x=seg_x, y=seg_y, mode="lines", name="to the optimum", showlegend=False,
                             line=dict(color="black", width=1, dash="dot"), hoverinfo="skip"))
    traces.append(go.Scatter(
        x=np.log10([r["N_opt"] for r in rows]), y=np.log10([r["D_opt"] for r in rows]), mode="markers",
        name="optimum for the same compute", marker=dict(symbol="circle-open", size=9, color="#e8590c", line=dict(width=2)),
        text=[r["model"] for r in rows],
        hovertemplate="%{text} at the optimum<br>N = 10^%{x:.2f}, D = 10^%{y:.2f}<extra></extra>"))
    custom = [[human(r["N"]), human(r["D"]), r["tokens_per_param"], sci(r["compute"]), human(r["N_opt"]),
               human(r["D_opt"]), r["opt_tokens_per_param"], r["loss"], r["optimal_loss"], r["excess_loss"]]
              for r in rows]
    traces.append(go.Scatter(
        x=np.log10([r["N"] for r in rows]), y=np.log10([r["D"] for r in rows]), mode="markers+text", name="famous models",
        text=[r["model"] for r in rows], textposition=[LABEL_POSITION.get(r["model"], "top center") for r in rows],
        textfont=dict(color="black", size=LABEL_PX, shadow=HALO),
        marker=dict(symbol="diamond", size=11, color="white", line=dict(color="black", width=1)), customdata=custom,
        hovertemplate="<b>%{text}</b>: N = %{customdata[0]}, D = %{customdata[1]}<br>"
                      "tokens per parameter: %{customdata[2]:.1f}<br>"
                      f"compute {FLOPS_PER_PARAM_TOKEN}ND = %{{customdata[3]}} FLOPs<br>"
                      "optimum for that compute: N = %{customdata[4]}, D = %{customdata[5]} "
                      "(%{customdata[6]:.1f} tokens per parameter)<br>"
                      "loss %{customdata[7]:.4f}; at the optimum %{customdata[8]:.4f}: "
                      "%{customdata[9]:.4f} lower<extra></extra>"))
    return go.Figure(traces, dict(
        **{**LAYOUT, "height": 700, "legend": {**LAYOUT["legend"], "y": -0.12}}, annotations=notes,
        title="Loss over model size and data, with iso-compute lines and the compute-optimal frontier",
        xaxis=dict(title="parameters N", range=[lx[0], lx[-1]], **_log_ticks(lx[0], lx[-1])),
        yaxis=dict(title="training tokens D", range=[ly[0], ly[-1]], **_log_ticks(ly[0], ly[-1]))))


def isoflop_curves(law: ScalingLaw, budgets=(1e19, 1e21, 1e23, 1e25), span: float = 2.5) -> go.Figure:
    """For each budget C: L against N along D = C/(6N), the grid minimum marked, and the closed-form optimum."""
    traces, valleys = [], []
    for i, C in enumerate(budgets):
        color = COLORS[i % len(COLORS)]
        n_opt, d_opt = law.compute_optimal(C)
        valleys.append(float(law.loss(n_opt, d_opt)))
        N = n_opt * np.logspace(-span, span, 301)
        L = law.loss(N, C / (FLOPS_PER_PARAM_TOKEN * N))
        k = int(np.argmin(L))
        traces.append(go.Scatter(x=N, y=L, mode="lines", name=f"C = {sci(C)} FLOPs", line=dict(color=color),
                                 hovertemplate="N = %{x:.3s}<br>L = %{y:.4f}<extra>C = " + sci(C) + "</extra>"))
        traces.append(go.Scatter(x=[N[k]], y=[L[k]], mode="markers", name=f"grid minimum, C = {sci(C)}",
                                 marker=dict(color=color, size=12, symbol="circle-open", line=dict(width=2)),
                                 showlegend=False, hovertemplate="minimum on the curve: N = %{x:.3s}, L = %{y:.4f}<extra></extra>"))
        traces.append(go.Scatter(x=[n_opt], y=[float(law.loss(n_opt, d_opt))], mode="markers", showlegend=i == 0,
                                 name="closed-form optimum", legendgroup="closed",
                                 marker=dict(color="black", size=7, symbol="x"),
                                 hovertemplate="closed form: N_opt = %{x:.3s}<br>L = %{y:.4f}<extra></extra>"))
    fig = go.Figure(traces, dict(**LAYOUT, title="Iso-FLOP curves: each budget spent on every split of N and D",
                                 xaxis=dict(type="log", title=f"parameters N (with D = C / {FLOPS_PER_PARAM_TOKEN}N)"),
                                 yaxis=dict(title="loss L (nats per token)",
                                            range=[min(valleys) - 0.1, max(valleys) + 0.6])))
    return log_axes(fig)


def fit_figure(law: ScalingLaw, N, D, loss) -> go.Figure:
    """The runs collapsed onto the fitted law: left, L - B/D^beta against N on E + A/N^alpha; right,
    L - A/N^alpha against D on E + B/D^beta. Every run lands on both curves when the law fits."""
    N, D, loss = (np.asarray(v, dtype=float) for v in (N, D, loss))
    traces = []
    panels = ((N, loss - law.data_term(D), law.plateau_in_D, "E + A/N^α", "x", "y"),
              (D, loss - law.capacity_term(N), law.plateau_in_N, "E + B/D^β", "x2", "y2"))
    for i, (x, y, curve, name, xa, ya) in enumerate(panels):
        grid = _log_grid(x.min() / 2, x.max() * 2, 120)
        traces.append(go.Scatter(x=x, y=y, mode="markers", name="your runs", showlegend=i == 0, xaxis=xa, yaxis=ya,
                                 marker=dict(color=COLORS[0], size=6, opacity=0.7),
                                 hovertemplate="%{x:.3s}<br>%{y:.4f}<extra>run</extra>"))
        traces.append(go.Scatter(x=grid, y=curve(grid), mode="lines", name=f"fitted {name}", xaxis=xa, yaxis=ya,
                                 line=dict(color=COLORS[1 + i], width=2)))
    # two panels laid out by hand (make_subplots costs three times the rest of the figure)
    titles = [dict(x=x, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                   text=t, font=dict(size=14)) for x, t in ((0.225, "capacity: L − B/D^β against N"),
                                                             (0.775, "data: L − A/N^α against D"))]
    fig = go.Figure(traces, dict(**LAYOUT, annotations=titles,
                                 xaxis=dict(type="log", title="parameters N", domain=[0, 0.45]),
                                 xaxis2=dict(type="log", title="training tokens D", domain=[0.55, 1]),
                                 yaxis=dict(title="loss (nats per token)"), yaxis2=dict(anchor="x2")))
    return log_axes(fig)
