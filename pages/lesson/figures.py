"""Compact figures of the lesson: one small chart each, readable in a column, drawn from a step's reveal
(core.lesson.Reveal.figure: a kind and its arguments)."""
from __future__ import annotations

import plotly.graph_objects as go

from core.figures.patching_figures import head_table_figure, sources_figure
from core.figures.ticks import axis_ticks

ANSWER = "#c0392b"   # the model's answer, once revealed
GUESS = "#3b5bdb"    # the learner's guess
PLAIN = "#9aa5b1"


def bars(labels: list[str], values: list[float], title: str, y_title: str, answer: int | None = None,
         guess: int | None = None, height: int = 300, tokens: bool = False) -> go.Figure:
    """One bar per option; after the reveal the model's answer is red and the learner's guess blue. ``tokens``: the
    labels are a prompt's tokens, bar i at position i + 1: the axis shows the tokens (thinned when many, then each
    with its position), the hover the position and the token."""
    colours = [ANSWER if i == answer else GUESS if i == guess else PLAIN for i in range(len(values))]
    hover = [f"{i + 1} '{t}'" for i, t in enumerate(labels)] if tokens else labels
    fig = go.Figure(go.Bar(x=list(range(len(values))), y=values, marker_color=colours, customdata=hover,
                           hovertemplate="%{customdata}: %{y:.3g}<extra></extra>"))
    if tokens:
        fig.update_xaxes(**axis_ticks(labels, offset=1))  # positions from 1, as on screen
    else:
        fig.update_xaxes(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels)
    fig.update_layout(title=title, height=height, margin=dict(l=50, r=10, t=50, b=50), yaxis_title=y_title,
                      showlegend=False)
    return fig


def step_figure(kind: str, args: dict) -> go.Figure:
    """A step's figure: "tokens" (one bar per position of the prompt), "bars" (one per option), "heads" (a head
    table, core.figures.patching_figures) or "sources" (a score split)."""
    if kind == "tokens":
        a = dict(args)
        return bars(a.pop("tokens"), a.pop("values"), tokens=True, **a)
    if kind == "bars":
        return bars(**args)
    if kind == "heads":
        return head_table_figure(**args)
    if kind == "sources":
        return sources_figure(**args)
    raise ValueError(f"no lesson figure of kind {kind!r}")
