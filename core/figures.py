"""Plotly figure builders. Pure functions: data in, figure out; tested on the figure's data."""
from __future__ import annotations

import plotly.graph_objects as go


def loss_curve(rows: list[dict], title: str = "Training loss") -> go.Figure:
    """Train and validation loss against step from a checkpoint's log rows."""
    fig = go.Figure()
    for key, name, dash in (("train_loss", "training", "solid"), ("val_loss", "validation", "dash")):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=name,
                                     line=dict(dash=dash),
                                     hovertemplate="step %{x:,}<br>" + name + " loss %{y:.3f}<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="optimisation step", yaxis_title="cross-entropy (nats per character)",
                      height=360, margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=1.02, x=1,
                                                                                    xanchor="right", yanchor="bottom"))
    return fig
