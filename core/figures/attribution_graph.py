"""The attribution graph drawn (issues 46, 57): positions left to right, the embeddings at the bottom and each block
above them, the output's logits in a column of their own at the right (core.figures.attribution_layout places every node
clear of the others); node size by influence on the output, each node's short text beside it; edges blue where they
promote their target and red where they suppress it, thicker for larger weights. The selected node's edges are drawn
over the rest and every node it has no kept edge with is dimmed. Pure function of the page's node and edge lists
(pages.attribution.view.pruned_lists, core.analysis.supernodes.merge)."""
from __future__ import annotations

import plotly.graph_objects as go

from core.figures.scaling_figures import HALO
from core.figures.attribution_layout import Layout, place

PROMOTE, SUPPRESS = "#1c7ed6", "#e03131"
KIND_STYLE = {"features": ("circle", "#f08c00"), "groups": ("hexagon", "#e8590c"), "errors": ("square", "#868e96"),
              "tokens": ("diamond", "#2f9e44"), "positions": ("diamond-open", "#2f9e44"), "logits": ("star", "#7048e8")}
WIDTH_BINS = (0.25, 0.5, 1.0)  # an edge's share of the largest weight: up to a quarter thin, ... over a half thick
MARGIN = dict(l=80, r=20, t=40, b=70)
DIM = 0.3  # a node's opacity when another is selected and no kept edge joins them


def _edge_traces(shown: list[dict], mine: list[dict], lay: Layout, dim: bool) -> list:
    """One line trace per sign and width class (a trace per edge would make hundreds), dimmed when a node is
    selected; then its own edges (``mine``, every kept one) drawn over them."""
    top = max((abs(e["weight"]) for e in shown), default=1.0) or 1.0
    traces = []
    for sign, color in ((1, PROMOTE), (-1, SUPPRESS)):
        for lo, hi, width in ((0, WIDTH_BINS[0], 0.7), (WIDTH_BINS[0], WIDTH_BINS[1], 1.6),
                              (WIDTH_BINS[1], WIDTH_BINS[2] + 1e-9, 3.2)):
            xs, ys = [], []
            for e in shown:
                if (e["weight"] > 0) == (sign > 0) and lo < abs(e["weight"]) / top <= hi:
                    xs += [lay.x[e["source"]], lay.x[e["target"]], None]
                    ys += [lay.y[e["source"]], lay.y[e["target"]], None]
            if xs:
                traces.append(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                         line=dict(color=color, width=width),
                                         opacity=0.08 if dim else 0.35))
    for e in mine:
        traces.append(go.Scatter(x=[lay.x[e["source"]], lay.x[e["target"]]],
                                 y=[lay.y[e["source"]], lay.y[e["target"]]], mode="lines", showlegend=False,
                                 hoverinfo="skip", line=dict(color=PROMOTE if e["weight"] > 0 else SUPPRESS,
                                                             width=1 + 3 * min(1.0, abs(e["weight"]) / top))))
    return traces


def _edge_hover(shown: list[dict], lay: Layout, labels: dict) -> go.Scatter:
    """An invisible marker at each edge's middle names its ends and weight; none over a node's marker, where it
    would take the node's click (Plotly gives a click to the nearest point, a small one first)."""
    def clear(e):
        x, y = (lay.x[e["source"]] + lay.x[e["target"]]) / 2, (lay.y[e["source"]] + lay.y[e["target"]]) / 2
        return all(abs(x - lay.x[n]) > s / 2 + 8 or abs(y - lay.y[n]) > s / 2 + 8 for n, s in lay.size.items())
    mid = [e for e in shown[:150] if clear(e)]
    return go.Scatter(x=[(lay.x[e["source"]] + lay.x[e["target"]]) / 2 for e in mid],
                      y=[(lay.y[e["source"]] + lay.y[e["target"]]) / 2 for e in mid], mode="markers",
                      showlegend=False, name="edges", marker=dict(size=6, color="rgba(0,0,0,0)"), hoverinfo="text",
                      hovertext=[f"{labels[e['source']]} → {labels[e['target']]}: {e['weight']:+.3f}" for e in mid])


def graph_figure(nodes: list[dict], edges: list[dict], n_layers: int, n_pos: int, selected: int | None = None,
                 max_edges: int = 400, pinned=(), lay: Layout | None = None) -> go.Figure:
    lay = lay or place(nodes, n_pos)
    drawn = [e for e in edges if e["source"] in lay.x and e["target"] in lay.x]
    shown, labels = drawn[:max_edges], {n["node"]: n["label"] for n in nodes}
    mine = [] if selected is None else [e for e in drawn if selected in (e["source"], e["target"])]
    near = None if selected is None else {selected} | {v for e in mine for v in (e["source"], e["target"])}
    traces = _edge_traces(shown, mine, lay, selected is not None) + [_edge_hover(shown, lay, labels)]
    for kind, (symbol, color) in KIND_STYLE.items():
        mine = [n for n in nodes if n["kind"] == kind]
        if not mine:
            continue
        traces.append(go.Scatter(
            x=[lay.x[n["node"]] for n in mine], y=[lay.y[n["node"]] for n in mine], mode="markers+text",
            name=kind.rstrip("s"), customdata=[n["node"] for n in mine], hovertext=[n["label"] for n in mine],
            text=[n["text"] for n in mine], textfont=dict(size=lay.font, shadow=HALO),
            textposition=[("top center" if lay.above[n["node"]] else "bottom center") if n["node"] in lay.above
                          else "middle right" for n in mine],
            marker=dict(symbol=symbol, size=[lay.size[n["node"]] for n in mine], color=color,
                        opacity=[1 if near is None or n["node"] in near else DIM for n in mine],
                        line=dict(color="black" if kind != "positions" else color, width=1)),
            unselected=dict(marker=dict(opacity=1)),  # a click inspects a node: it must not grey out the others
            hovertemplate="%{hovertext}<extra></extra>"))
    off = [n for n in nodes if n["node"] in set(pinned)]
    if off:  # the features switched off below, crossed out where they sit
        traces.append(go.Scatter(x=[lay.x[n["node"]] for n in off], y=[lay.y[n["node"]] for n in off],
                                 mode="markers", name="switched off", hoverinfo="skip",
                                 marker=dict(symbol="x-thin", size=[lay.size[n["node"]] + 4 for n in off],
                                             line=dict(color="black", width=3))))
    names = {0: "embeddings", n_layers + 1: "output"} | {l + 1: f"block {l + 1}" for l in range(n_layers)}
    return go.Figure(traces, dict(
        height=lay.height + MARGIN["t"] + MARGIN["b"], template="plotly_white", margin=MARGIN, dragmode="pan",
        legend=dict(orientation="h", y=-0.02, yanchor="top", x=0), showlegend=True,
        xaxis=dict(range=[0, lay.width], showgrid=False, zeroline=False, showticklabels=False),
        yaxis=dict(range=[0, lay.height], tickvals=[y for y, _ in lay.bands],
                   ticktext=[names.get(r, "") for _, r in lay.bands], zeroline=False, showgrid=False, fixedrange=True),
        annotations=[dict(x=0, y=1.0, xref="paper", yref="paper", showarrow=False, xanchor="left", yanchor="bottom",
                          text="the prompt left to right · blue: promotes its target · red: suppresses it · size: influence on the output",
                          font=dict(size=12, shadow=HALO)),
                     dict(x=lay.output_x, y=lay.height, xref="x", yref="y", showarrow=False, yanchor="bottom",
                          text="output", font=dict(size=12))]))
