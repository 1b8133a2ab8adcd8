"""Figures of the answer keys (issue 59): a method's scores as bars against the page's threshold (the key's members
coloured once it is revealed), and the key's circuit drawn as a graph from the tokens to the logits."""
from __future__ import annotations

import plotly.graph_objects as go

from core.analysis.answer_keys import parse_component

MAX_BARS = 16                      # the highest scores drawn; an edge method scores up to 54 edges on these keys
IN_KEY, NOT_IN_KEY, HIDDEN = "#c0392b", "#adb5bd", "#3b5bdb"
ROW_PX = 22                        # a bar's height on the screen, label included


def scores_figure(labels: tuple[str, ...], values: tuple[float, ...], threshold: float, title: str,
                  members: tuple[bool, ...] | None = None) -> go.Figure:
    """Horizontal bars, highest on top, at most MAX_BARS of them; a dashed line at ``threshold``. ``members``
    (the key revealed): the key's bars red, the others grey; None: every bar one colour."""
    order = sorted(range(len(values)), key=lambda i: -values[i] if values[i] == values[i] else float("inf"))
    order = order[:MAX_BARS][::-1]  # Plotly draws the first bar at the bottom
    fig = go.Figure()
    groups = [("scores", [True] * len(order), HIDDEN)] if members is None else [
        ("in the key", [members[i] for i in order], IN_KEY), ("not in the key", [not members[i] for i in order],
                                                               NOT_IN_KEY)]
    for name, keep, colour in groups:
        rows = [i for i, k in zip(order, keep) if k]
        fig.add_bar(y=[labels[i] for i in rows], x=[values[i] for i in rows], orientation="h", name=name,
                    marker_color=colour, text=[f"{values[i]:.2f}" for i in rows], textposition="auto",
                    hovertemplate="%{y}: %{x:.3f}<extra></extra>")
    fig.add_vline(x=threshold, line_dash="dash", line_color="#495057",
                  annotation_text=f"threshold {threshold:.2f}", annotation_position="bottom right")
    fig.update_layout(title=dict(text=title, font_size=14), height=110 + ROW_PX * len(order), barmode="overlay",
                      margin=dict(l=10, r=10, t=50, b=30), showlegend=members is not None,
                      legend=dict(orientation="h", y=-0.12), yaxis=dict(automargin=True, categoryorder="array",
                                                                       categoryarray=[labels[i] for i in order]))
    return fig


def _places(components: tuple[str, ...], n_layers: int, n_heads: int) -> dict[str, tuple[float, float]]:
    """(x, y) of every node: the tokens at the bottom left, each layer's heads in a row and its MLP in the row above
    (a block's heads write before its MLP reads), right of the heads, the logits at the top left. The left column
    holds nothing else, so that a direct tokens -> logits edge crosses no node, nor does a head -> head edge cross an
    MLP."""
    at = {"tokens": (0.0, 0.0)}
    for name in components:
        c = parse_component(name)
        at[name] = (n_heads + 0.8, 2 * c.layer + 2) if c.kind == "mlp" else (c.head + 1.0, 2 * c.layer + 1)
    at["logits"] = (0.0, 2 * n_layers + 1)
    return at


def key_figure(components: tuple[str, ...], key: tuple[str, ...], edges: tuple[tuple[str, str], ...], n_layers: int,
               n_heads: int, title: str) -> go.Figure:
    """The model's components (``components``: all of them, as the screen writes them) with the key's in colour and
    its ``edges`` as arrows, from the tokens at the bottom to the logits at the top."""
    at = _places(components, n_layers, n_heads)
    fig = go.Figure()
    for s, t in edges:  # arrows first, under the nodes; each ends short of its target's centre
        (x0, y0), (x1, y1) = at[s], at[t]
        fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", showarrow=True,
                           arrowhead=3, arrowsize=1.4, arrowwidth=2, arrowcolor=IN_KEY, standoff=16, startstandoff=14,
                           text="")
    nodes = ["tokens", *components, "logits"]
    inside = set(key) | {"tokens", "logits"}
    for group, colour, size in ((True, IN_KEY, 30), (False, NOT_IN_KEY, 22)):
        names = [n for n in nodes if (n in inside) == group]
        fig.add_scatter(x=[at[n][0] for n in names], y=[at[n][1] for n in names], mode="markers+text", text=names,
                        textposition="middle right", marker=dict(size=size, color=colour), cliponaxis=False,
                        name="the key" if group else "not in the key", hovertemplate="%{text}<extra></extra>")
    fig.update_layout(title=dict(text=title, font_size=14), height=120 + 60 * (2 * n_layers + 1),
                      margin=dict(l=10, r=10, t=50, b=10), showlegend=False,
                      xaxis=dict(visible=False, range=[-0.5, n_heads + 2]),
                      yaxis=dict(visible=False, range=[-0.6, 2 * n_layers + 1.6]))
    return fig
