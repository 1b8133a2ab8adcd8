"""Compact figures of the lesson: one small bar chart each, readable in a column."""
from __future__ import annotations

import plotly.graph_objects as go

from core.figures.ticks import axis_ticks

ANSWER = "#c0392b"   # the model's answer, once revealed
GUESS = "#3b5bdb"    # the learner's guess
PLAIN = "#9aa5b1"


def bars(labels: list[str], values: list[float], title: str, y_title: str, answer: int | None = None,
         guess: int | None = None, height: int = 300, tokens: bool = False) -> go.Figure:
    """One bar per option; after the reveal the model's answer is red and the learner's guess blue. ``tokens``: the
    labels are a prompt's tokens (thinned when many, each bar's full label on hover)."""
    colours = [ANSWER if i == answer else GUESS if i == guess else PLAIN for i in range(len(values))]
    fig = go.Figure(go.Bar(x=list(range(len(values))), y=values, marker_color=colours, customdata=labels,
                           hovertemplate="%{customdata}: %{y:.3g}<extra></extra>"))
    if tokens:
        fig.update_xaxes(**axis_ticks(labels))
    else:
        fig.update_xaxes(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels)
    fig.update_layout(title=title, height=height, margin=dict(l=50, r=10, t=50, b=50), yaxis_title=y_title,
                      showlegend=False)
    return fig
