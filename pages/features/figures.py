"""Figures of the Features page (Plotly): a unit's activation histogram, the tokens its direction promotes and
suppresses, each prompt token's loss change with a unit switched off, and the purity of neurons against features."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from core.features.browse import OffLosses, UnitCard

ON = "#e6550d"      # orange: a unit's activation
UP, DOWN = "#2c7fb8", "#d95f0e"
MARGIN = dict(l=10, r=10, t=40, b=10)


def histogram_figure(card: UnitCard) -> go.Figure:
    """Counts of the unit's nonzero activations over (0, max] on the held-out text."""
    e = card.hist_edges
    mids = (e[:-1] + e[1:]) / 2
    fig = go.Figure(go.Bar(x=mids, y=card.hist_counts, width=float(e[1] - e[0]) if len(e) > 1 else None,
                           marker_color=ON, hovertemplate="activation %{x:.2f}: %{y:,} tokens<extra></extra>"))
    fig.update_layout(title=f"Activations where it fires: {card.fires:,} of {card.total:,} tokens "
                            f"(density {card.density:.2%})", height=260, margin=MARGIN, bargap=0.05,
                      xaxis_title="activation", yaxis_title="tokens")
    return fig


def logit_figure(card: UnitCard) -> go.Figure:
    """The promoted (top) and suppressed (bottom) tokens of the direct path as horizontal bars."""
    rows = list(reversed(card.suppressed)) + list(reversed(card.promoted))  # the largest at the top
    tokens = [f"'{t}' " for t, _ in rows]
    values = [v for _, v in rows]
    fig = go.Figure(go.Bar(x=values, y=list(range(len(rows))), orientation="h",
                           marker_color=[UP if v > 0 else DOWN for v in values], customdata=tokens,
                           hovertemplate="%{customdata}: %{x:+.3f}<extra></extra>"))
    fig.update_layout(title="Direct effect on the logits, per unit of activation", height=420, margin=MARGIN,
                      yaxis=dict(tickvals=list(range(len(rows))), ticktext=tokens, tickfont=dict(family="monospace")),
                      xaxis_title="logit change")
    return fig


def off_loss_figure(off: OffLosses, tokens: list[str]) -> go.Figure:
    """Each next token's loss change with the unit off (bars), over the unit's activation where it was read."""
    n = len(off.change)
    labels = [f"{i + 2}:{tokens[i + 1]}" for i in range(n)]  # the token being predicted, counted from 1
    ch = off.change
    fig = go.Figure()
    fig.add_bar(x=list(range(n)), y=ch, marker_color=[DOWN if v > 0 else UP for v in ch], name="loss change",
                customdata=np.stack([off.clean, off.off, off.acts[:-1]], 1), text=labels, textposition="none",
                hovertemplate="%{text}<br>loss %{customdata[0]:.3f} → %{customdata[1]:.3f} (%{y:+.3f})<br>"
                              "unit at the position before: %{customdata[2]:.2f}<extra></extra>")
    step = max(1, n // 40)  # at most about 40 labels: a long prompt's axis stays readable
    fig.update_layout(title="Loss of each next token: switched off minus clean (above 0: the unit helped)",
                      height=300, margin=MARGIN, showlegend=False, yaxis_title="loss change (nats)",
                      xaxis=dict(tickvals=list(range(0, n, step)), ticktext=labels[::step], tickangle=-60,
                                 tickfont=dict(family="monospace")))
    return fig


def purity_figure(sets: dict[str, np.ndarray]) -> go.Figure:
    """Overlaid histograms of token purity, one per unit set ({name: (n,) purities, NaN for silent units})."""
    fig = go.Figure()
    for name, p in sets.items():
        p = p[~np.isnan(p)]
        fig.add_histogram(x=p, name=f"{name} ({len(p)})", histnorm="percent", opacity=0.6,
                          xbins=dict(start=0, end=1.0001, size=0.05))
    fig.update_layout(barmode="overlay", height=300, margin=MARGIN, xaxis_title="token purity of the top 20",
                      yaxis_title="% of units", title="How single-token each unit is",
                      legend=dict(orientation="h", y=-0.3))
    return fig
