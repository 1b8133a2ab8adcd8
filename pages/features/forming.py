"""The features-forming figure (core.features.forming): for each followed feature of the final SAE, its best
decoder cosine in a small SAE trained at each snapshot step, on a log step axis, with the 0.7 line, the step where
it first crosses it marked, what matching finds in noise (chance), and the second seed at the last step: how much
of a curve is the SAE's own training rather than the model's."""
from __future__ import annotations

import plotly.graph_objects as go

from core.features.forming import Forming

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


def forming_figure(r: Forming, height: int = 460) -> go.Figure:
    fig = go.Figure()
    formed = r.formed
    for j, f in enumerate(r.features):
        color = _COLORS[j % len(_COLORS)]
        name = f"feature {f}"
        fig.add_trace(go.Scatter(
            x=r.steps, y=r.cosine[:, j].tolist(), mode="lines+markers", name=name, legendgroup=name,
            line=dict(color=color, width=1.5), marker=dict(size=6, color=color),
            hovertemplate=f"{name}<br>step %{{x:,}}<br>best cosine %{{y:.2f}}<extra></extra>"))
        if formed[j] is not None:
            at = r.steps.index(formed[j])
            fig.add_trace(go.Scatter(
                x=[formed[j]], y=[float(r.cosine[at, j])], mode="markers", legendgroup=name, showlegend=False,
                marker=dict(symbol="star", size=14, color=color, line=dict(width=1, color="black")),
                hovertemplate=f"{name} formed at step %{{x:,}}<extra></extra>"))
        fig.add_trace(go.Scatter(  # the other seed at the last step: the spread a retrained SAE alone gives
            x=[r.steps[-1]], y=[float(r.seed_cosine[1, j])], mode="markers", legendgroup=name, showlegend=False,
            marker=dict(symbol="circle-open", size=9, color=color),
            hovertemplate=f"{name}, another seed at step %{{x:,}}: %{{y:.2f}}<extra></extra>"))
    fig.add_hline(y=r.threshold, line=dict(color="black", dash="dash", width=1),
                  annotation_text=f"formed: cosine ≥ {r.threshold}", annotation_position="top left")
    fig.add_hline(y=r.chance, line=dict(color="#999", dash="dot", width=1),
                  annotation_text=f"chance ({r.chance:.2f})", annotation_position="bottom left")
    fig.update_layout(
        title="When each feature appears: its best match in an SAE trained at each snapshot",
        xaxis=dict(type="log", title="training step (log scale)"),
        yaxis=dict(title="best decoder cosine with the final SAE's feature", range=[0, 1.02]),
        height=height, margin=dict(l=60, r=20, t=60, b=50), legend=dict(font=dict(size=10)))
    return fig


def forming_rows(r: Forming) -> list[dict]:
    """One table row per followed feature: how often it fires, when it formed, its cosine at the last step with
    the two seeds."""
    rows = []
    for j, f in enumerate(r.features):
        rows.append({"feature": f, "fires on": f"{r.frequency[j]:.1%}",
                     "formed at step": r.formed[j],
                     "cosine at the last step": round(float(r.cosine[-1, j]), 2),
                     "another seed": round(float(r.seed_cosine[1, j]), 2)})
    return rows
