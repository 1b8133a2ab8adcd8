"""Plotly figures of a scaling study (core.training.study): the runs with the fitted law through them, the residuals, and
the compute-optimal frontier on the (N, D) map beside the published ones. Pure functions of rows and laws."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.figures.ticks import log_axes
from core.serve.fmt import human
from core.analysis.scaling import ScalingLaw
from core.figures.scaling_figures import HALO, LAYOUT, _log_grid
from core.analysis.scaling_runs import MIN_RUNS
from core.training.study_files import rows_to_arrays

UNFITTED = f"the runs so far (the law is fitted from {MIN_RUNS} runs on)"  # a study figure's title before a fit

# the published frontiers in muted colours and dashes, so that this study's own (OURS, solid orange) stands out
PUBLISHED_STYLE = {"Chinchilla (Hoffmann et al. 2022)": dict(color="#495057", dash="dash"),
                   "Epoch replication (Besiroglu et al. 2024)": dict(color="#1c7ed6", dash="dot")}
OURS = "#e8590c"


def _palette(n: int) -> list[str]:
    """n colours in order, light to dark (small budgets and sizes light)."""
    return sample_colorscale("Viridis", [0.85 - 0.85 * i / max(1, n - 1) for i in range(n)])


def _panel_title(x: float, text: str) -> dict:
    return dict(x=x, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                text=text, font=dict(size=14))


def study_figure(rows: list[dict], law: ScalingLaw | None = None, title: str = "Your study",
                 unfitted: str = UNFITTED) -> go.Figure:
    """Left: loss against N, one colour per budget D; right: loss against D, one colour per size. With a law, the
    fitted L(N, D) runs through each group as a line of the same colour. Each group is named at its right end (two
    legends of look-alike colours would leave the reader matching them by eye)."""
    N, D, L = rows_to_arrays(rows)  # each (runs,)
    traces, notes, ranges = [], [], []
    # (x axis, y axis, x values, grouping values, group name, x name): the right panel swaps the roles of N and D
    panels = (("x", "y", N, D, "D", "N"), ("x2", "y2", D, N, "N", "D"))
    for xa, ya, x, group, gname, xname in panels:
        values = np.unique(group)
        # the fitted lines reach a little past the outermost runs; no runs (a study just started), no span
        span = _log_grid(x.min() / 1.3, x.max() * 1.3, 60) if len(x) else np.array([])
        right = float(span[-1]) if law is not None and len(span) else float(x.max()) if len(x) else 1.0
        # log axis ranges are in decades; 0.45 decades on the right leave room for the group labels
        ranges.append([math.log10(x.min() / 1.4) if len(x) else 0, math.log10(right) + 0.45])
        ends = []  # [y, label, colour] of each group's right end
        for v, color in zip(values, _palette(len(values))):
            sel = group == v
            order = np.argsort(x[sel])  # runs finish in any order; a line through them must run left to right
            label = f"{gname} = {human(v)}"
            traces.append(go.Scatter(
                x=x[sel][order], y=L[sel][order], mode="markers", name=label, showlegend=False,
                xaxis=xa, yaxis=ya, marker=dict(color=color, size=9, line=dict(color="white", width=1)),
                hovertemplate=f"{xname} = %{{x:,.0f}}<br>{gname} = {v:,.0f}<br>loss %{{y:.4f}}<extra>run</extra>"))
            end = float(L[sel][order][-1])  # the label sits at the last point, or at the line's end below
            if law is not None:
                y = law.loss(span, v) if xa == "x" else law.loss(v, span)
                end = float(y[-1])
                traces.append(go.Scatter(x=span, y=y, mode="lines", name=f"fit, {label}", showlegend=False,
                                         xaxis=xa, yaxis=ya, line=dict(color=color, width=2),
                                         hovertemplate=f"fitted L({xname} = %{{x:,.0f}}, {gname} = {human(v)}) = "
                                                       "%{y:.4f}<extra></extra>"))
            ends.append([end, label, color])
        # the smallest vertical distance between two labels: a share of the loss range, so it scales with the data
        gap = 0.045 * (float(L.max() - L.min()) + 0.2) if len(L) else 0.0
        for i in range(1, len(ends)):  # labels ordered top to bottom, never closer than gap
            ends.sort(key=lambda e: -e[0])
            ends[i][0] = min(ends[i][0], ends[i - 1][0] - gap)
        for y, label, color in ends:
            notes.append(dict(x=math.log10(right) + 0.03, y=y, xref=xa, yref=ya, text=label, showarrow=False,
                              xanchor="left", font=dict(size=11, color=color, shadow=HALO)))
    notes += [_panel_title(0.225, "loss against N: one colour per budget D"),
              _panel_title(0.775, "loss against D: one colour per model size N")]
    # without a law the title says why not (too few runs so far, or a grid too small ever to fit)
    sub = "the runs (points) and the fitted law L(N, D) (lines)" if law is not None else unfitted
    fig = go.Figure(traces, dict(
        **{**LAYOUT, "height": 500, "margin": dict(l=60, r=20, t=80, b=60)}, annotations=notes,
        title=dict(text=f"{title}: {sub}", y=0.98),
        xaxis=dict(type="log", title="parameters N (non-embedding)", domain=[0, 0.45], range=ranges[0]),
        xaxis2=dict(type="log", title="training tokens D (characters)", domain=[0.55, 1], range=ranges[1]),
        yaxis=dict(title="validation loss (nats per character)"), yaxis2=dict(anchor="x2", matches="y")))
    return log_axes(fig)


def residual_figure(rows: list[dict], law: ScalingLaw) -> go.Figure:
    """log L - log L_fit of every run against N, one colour per budget: a good fit leaves no pattern."""
    N, D, L = rows_to_arrays(rows)
    r = np.log(L) - np.log(law.loss(N, D))  # (runs,) in log loss, what the fit minimised; x 100 reads as percent
    traces = []
    for v, color in zip(np.unique(D), _palette(len(np.unique(D)))):
        sel = D == v
        traces.append(go.Scatter(x=N[sel], y=100 * r[sel], mode="markers", name=f"D = {human(v)}",
                                 marker=dict(color=color, size=9, line=dict(color="white", width=1)),
                                 hovertemplate="N = %{x:,.0f}<br>%{y:+.2f} % off the fit<extra></extra>"))
    # symmetric about zero, so above and below the fit look alike; at least ±1 %, so a tight fit is not magnified
    lim = max(1.0, 1.15 * 100 * float(np.abs(r).max()))
    traces.append(go.Scatter(x=[N.min() / 1.3, N.max() * 1.3], y=[0, 0], mode="lines", name="the fit",
                             showlegend=False, line=dict(color="black", width=1), hoverinfo="skip"))
    fig = go.Figure(traces, dict(
        **{**LAYOUT, "height": 400}, title="Residuals: how far each run lies from the fit",
        xaxis=dict(type="log", title="parameters N (non-embedding)"),
        yaxis=dict(title="log L − log L_fit (× 100 ≈ % of the loss)", range=[-lim, lim], zeroline=False)))
    return log_axes(fig)


def frontier_figure(law: ScalingLaw, rows: list[dict], published: dict[str, ScalingLaw]) -> go.Figure:
    """The (N, D) map at the study's own scale: the runs (coloured by loss), iso-compute lines, the compute-optimal
    frontier of the study's fit and those of the published laws over the same budgets."""
    N, D, L = rows_to_arrays(rows)
    C = FLOPS_PER_PARAM_TOKEN * N * D  # (runs,) each run's training compute
    # the frontiers are drawn over the runs' compute and half a decade either side
    lo_c, hi_c = math.log10(C.min()) - 0.5, math.log10(C.max()) + 0.5
    Cs = np.logspace(lo_c, hi_c, 100)
    # the map is drawn in log10 coordinates (not log axes) so that lines of equal C are straight: D = C / 6N
    lx = (math.log10(N.min()) - 0.6, math.log10(N.max()) + 0.6)
    ly = (math.log10(D.min()) - 0.6, math.log10(D.max()) + 0.6)
    traces, notes = [], []
    for e in range(math.ceil(lo_c), math.floor(hi_c) + 1):  # one dotted line per whole power of ten of C
        x = np.array(lx)
        y = e - math.log10(FLOPS_PER_PARAM_TOKEN) - x  # log D = log C - log 6 - log N
        traces.append(go.Scatter(x=x, y=y, mode="lines", line=dict(color="rgba(0,0,0,0.35)", width=1, dash="dot"),
                                 name=f"C = 1e{e}", showlegend=False, hoverinfo="skip"))
        xa = e - math.log10(FLOPS_PER_PARAM_TOKEN) - ly[1] + 0.05  # where the line leaves the top of the map
        if lx[0] < xa < lx[1] - 0.3:  # labelled only where the label fits inside the map
            notes.append(dict(x=xa, y=ly[1], text=f"C = 1e{e}", showarrow=False, xanchor="left", yanchor="top",
                              font=dict(size=10, color="#495057", shadow=HALO)))
    for name, other in published.items():
        n, d = other.compute_optimal(Cs)
        style = PUBLISHED_STYLE.get(name, dict(color="#868e96", dash="dash"))  # a law added to LAW_PRESETS later
        traces.append(go.Scatter(x=np.log10(n), y=np.log10(d), mode="lines", name=f"{name.split(' (')[0]}'s frontier",
                                 line=dict(width=2, **style), customdata=np.stack([Cs, d / n], 1),
                                 hovertemplate="C = %{customdata[0]:.3g}: N = 10^%{x:.2f}, D = 10^%{y:.2f}, "
                                               f"D/N = %{{customdata[1]:.1f}}<extra>{name}</extra>"))
    n, d = law.compute_optimal(Cs)
    traces.append(go.Scatter(x=np.log10(n), y=np.log10(d), mode="lines", name="this study's frontier",
                             line=dict(color=OURS, width=4), customdata=np.stack([Cs, d / n], 1),
                             hovertemplate="C = %{customdata[0]:.3g}: N = 10^%{x:.2f}, D = 10^%{y:.2f}, "
                                           "D/N = %{customdata[1]:.1f}<extra>this study</extra>"))
    traces.append(go.Scatter(
        x=np.log10(N), y=np.log10(D), mode="markers", name="the runs",
        marker=dict(color=L, colorscale="Viridis_r", size=11, line=dict(color="black", width=1),
                    colorbar=dict(title=dict(text="loss", side="right"), len=0.7)),
        customdata=np.stack([N, D, L, C], 1),  # (runs, 4): the hover shows the numbers, not their logs
        hovertemplate="N = %{customdata[0]:,.0f}, D = %{customdata[1]:,.0f}<br>loss %{customdata[2]:.4f}<br>"
                      f"C = {FLOPS_PER_PARAM_TOKEN}ND = %{{customdata[3]:.3g}}<extra></extra>"))

    def ticks(lo, hi):  # half-decade ticks labelled as counts (31.6k), since the axes hold logs
        vals = np.arange(math.ceil(lo * 2) / 2, hi + 1e-9, 0.5)
        return dict(tickvals=vals, ticktext=[human(10 ** v) for v in vals])

    return go.Figure(traces, dict(
        **{**LAYOUT, "height": 560}, annotations=notes,
        title="Compute-optimal frontiers at this study's scale",
        xaxis=dict(title="parameters N", range=list(lx), **ticks(*lx)),
        yaxis=dict(title="training tokens D", range=list(ly), **ticks(*ly))))

