"""Figures of heads forming: each head's scores against the training step (from heads.csv rows)."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.serve.fmt import head_label
from core.analysis.induction import THRESHOLD, formation_step

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
LABEL_PX = 12  # the threshold label's font size
MARGIN_R = 72  # room right of the panels for the threshold label ("threshold" at 12 px is about 55 px wide)


def head_series(rows: list[dict], key: str) -> dict[tuple[int, int], tuple[list[int], list[float]]]:
    """(layer, head) -> (steps, values of ``key``), steps ascending."""
    out: dict[tuple[int, int], tuple[list[int], list[float]]] = {}
    for r in sorted(rows, key=lambda r: r["step"]):
        if key in r:
            xs, ys = out.setdefault((r["layer"], r["head"]), ([], []))
            xs.append(r["step"])
            ys.append(r[key])
    return dict(sorted(out.items()))


def formation_figure(rows: list[dict], threshold: float = THRESHOLD, total_steps: int | None = None,
                     title: str = "Heads forming while training", units: str = "characters") -> go.Figure:
    """Two panels over the training step: every head's induction score (top, with the threshold and the step
    where a head first crossed it) and previous-token score (bottom). One colour per head in both panels;
    heads of the first layer dotted."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=(f"induction score (probe: random {units} written twice)",
                                        "previous-token score"))
    n_heads = 1 + max((r["head"] for r in rows), default=0)
    for row, key in ((1, "induction"), (2, "previous_token")):
        for (layer, head), (xs, ys) in head_series(rows, key).items():
            color = _COLORS[(layer * n_heads + head) % len(_COLORS)]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=head_label(layer, head), legendgroup=f"{layer}-{head}",
                                     showlegend=row == 1, line=dict(color=color, width=2, dash="dot" if layer == 0 else "solid"),
                                     hovertemplate=f"{head_label(layer, head)}<br>step %{{x:,}}<br>{key.replace('_', '-')} "
                                                   "score %{y:.3f}<extra></extra>"), row=row, col=1)
    fig.add_hline(y=threshold, line=dict(color="gray", dash="dash", width=1), row=1, col=1)
    # the threshold's label in the right margin, at the line's end: inside the panel the formation line (often
    # early, at the left) or a head's curve would run through it
    fig.add_annotation(x=1, xref="x domain", xanchor="left", xshift=4, y=threshold, yref="y", yanchor="middle",
                       text=f"threshold<br>{threshold:.2f}", showarrow=False, align="left",
                       font=dict(color="gray", size=LABEL_PX))
    formed = formation_step(rows, threshold)
    if formed is not None:
        fig.add_vline(x=formed, line=dict(color="crimson", width=1), row="all", col=1)
        fig.add_annotation(x=formed, y=0.55, yref="y domain", text=f" formed at step {formed:,}", showarrow=False,
                           xanchor="left", font=dict(color="crimson"), bgcolor="rgba(255,255,255,0.8)", row=1, col=1)
    fig.update_yaxes(range=[0, 1], title_text="mean weight", row=1, col=1)
    fig.update_yaxes(range=[0, 1], title_text="mean weight", row=2, col=1)
    fig.update_xaxes(title_text="optimisation step", row=2, col=1)
    if total_steps:
        fig.update_xaxes(range=[0, total_steps])
    fig.update_layout(title=title, height=560, margin=dict(l=60, r=MARGIN_R, t=60, b=50),
                      legend=dict(orientation="h", y=-0.12, x=0.5, xanchor="center", yanchor="top"))
    return fig


def copy_loss_figure(rows: list[dict], total_steps: int | None = None, unit: str = "character") -> go.Figure:
    """The probe's loss on the first and the second copy against the step: the gap is what copying buys."""
    steps = sorted({r["step"] for r in rows if "first_copy_loss" in r})
    first = {r["step"]: r["first_copy_loss"] for r in rows if "first_copy_loss" in r}
    second = {r["step"]: r["second_copy_loss"] for r in rows if "second_copy_loss" in r}
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=[first[s] for s in steps], mode="lines", name="first copy",
                             hovertemplate="step %{x:,}<br>first copy %{y:.3f} nats<extra></extra>"))
    fig.add_trace(go.Scatter(x=steps, y=[second[s] for s in steps], mode="lines", name="second copy",
                             hovertemplate="step %{x:,}<br>second copy %{y:.3f} nats<extra></extra>"))
    fig.update_layout(title="Probe loss: first copy vs second copy", xaxis_title="optimisation step",
                      yaxis_title=f"cross-entropy (nats per {unit})", height=300,
                      margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    if total_steps:
        fig.update_xaxes(range=[0, total_steps])
    return fig
