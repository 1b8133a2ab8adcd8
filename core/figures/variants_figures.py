"""Figures of the Why each piece page: the variants' loss curves overlaid, their losses side by side, and one head of
the model trained without a mask."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


# the shipped study as the figures read it (core.views.variants_view reads it back from its files)
@dataclass
class Study:
    rows: dict[str, dict]           # variant id -> its variants.csv row, numbers as numbers
    curves: dict[str, list[dict]]   # variant id -> its evaluations, ascending steps
    problems: list[str]             # rows or files that could not be read, in words

    def has(self, *ids: str) -> bool:
        return all(i in self.rows for i in ids)

    def loss(self, vid: str, key: str = "causal_val_loss") -> float:
        return self.rows[vid][key]


def curves_figure(study: Study, chosen: list[str], live: list[dict] | None = None, live_name: str = "your run",
                  key: str = "val_loss") -> go.Figure:
    """Validation (or training) loss against step for the chosen variants, and a run training now on top."""
    fig = go.Figure()
    for i, vid in enumerate(chosen):
        pts = study.curves.get(vid, [])
        if not pts:
            continue
        fig.add_trace(go.Scatter(x=[p["step"] for p in pts], y=[p[key] for p in pts], mode="lines", name=vid,
                                 line=dict(color=_COLORS[i % len(_COLORS)], width=3 if vid == "lecture" else 2),
                                 hovertemplate=f"{vid}<br>step %{{x:,}}<br>loss %{{y:.3f}}<extra></extra>"))
    if live:
        fig.add_trace(go.Scatter(x=[p["step"] for p in live], y=[p[key] for p in live], mode="lines+markers",
                                 name=live_name, line=dict(color="black", width=2, dash="dot"),
                                 hovertemplate=live_name + "<br>step %{x:,}<br>loss %{y:.3f}<extra></extra>"))
    what = "validation loss as trained" if key == "val_loss" else "training loss"
    # "study" in the title: the shipped study is of character models, whichever model the sidebar has
    fig.update_layout(title=f"{what.capitalize()} while training (the variant study)", height=420, xaxis_title="optimisation step",
                      yaxis_title="cross-entropy (nats per character)", margin=dict(l=60, r=20, t=50, b=50),
                      legend=dict(orientation="v", x=1.01, y=1, xanchor="left"))
    return fig


def losses_figure(study: Study) -> go.Figure:
    """Each variant's held-out loss as trained and under the causal mask (how it must generate), lowest first."""
    rows = sorted(study.rows.values(), key=lambda r: r["causal_val_loss"])
    names = [r["variant"] for r in rows]
    fig = go.Figure([
        go.Bar(y=names, x=[r["causal_val_loss"] for r in rows], orientation="h", name="under the causal mask",
               marker_color="#1f77b4", hovertemplate="%{y}<br>causal loss %{x:.3f}<extra></extra>"),
        go.Bar(y=names, x=[r["val_loss"] for r in rows], orientation="h", name="as trained",
               marker_color="#ff7f0e", hovertemplate="%{y}<br>loss as trained %{x:.3f}<extra></extra>"),
    ])
    lecture = study.rows.get("lecture")
    if lecture:
        fig.add_vline(x=lecture["causal_val_loss"], line=dict(color="gray", dash="dash", width=1),
                      annotation_text="the lecture's model", annotation_position="bottom right")
    fig.update_layout(barmode="group", title="Held-out loss of every variant in the study", height=max(380, 26 * len(rows) + 120),
                      xaxis_title="cross-entropy (nats per character)", yaxis=dict(autorange="reversed"),
                      margin=dict(l=150, r=20, t=60, b=50),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


def stare_figure(pattern: np.ndarray, tokens: list[str], title: str) -> go.Figure:
    """One head's (n, n) weights; a bright line just above the diagonal is a head reading the next token."""
    n = len(tokens)
    fig = go.Figure(go.Heatmap(z=pattern, x=list(range(n)), y=list(range(n)), colorscale="Blues", zmin=0, zmax=1,
                               colorbar=dict(title="weight"),
                               hovertemplate="query %{y} · key %{x}<br>weight %{z:.2f}<extra></extra>"))
    step = max(1, n // 32)
    ticks = dict(tickmode="array", tickvals=list(range(0, n, step)), ticktext=tokens[::step])
    fig.update_xaxes(title_text="key j", tickangle=0, **ticks)
    fig.update_yaxes(title_text="query i", autorange="reversed", **ticks)
    fig.update_layout(title=title, height=520, margin=dict(l=60, r=20, t=50, b=50))
    return fig
