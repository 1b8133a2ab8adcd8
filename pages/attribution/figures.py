"""The attribution graph drawn (issue 46): positions left to right, layers bottom to top, node size by influence on
the output, edges blue where they promote their target and red where they suppress it, thicker for larger weights.
Pure function of the page's node and edge lists (pages.attribution.view.pruned_lists)."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from core.figures.scaling_figures import HALO

PROMOTE, SUPPRESS = "#1c7ed6", "#e03131"
KIND_STYLE = {"features": ("circle", "#f08c00"), "errors": ("square", "#868e96"), "tokens": ("diamond", "#2f9e44"),
              "positions": ("diamond-open", "#2f9e44"), "logits": ("star", "#7048e8")}
WIDTH_BINS = (0.25, 0.5, 1.0)  # an edge's share of the largest weight: up to a quarter thin, ... over a half thick


def graph_figure(nodes: list[dict], edges: list[dict], n_layers: int, tick_text: list[str],
                 selected: int | None = None, max_edges: int = 400, pinned=()) -> go.Figure:
    at = {n["node"]: (n["x"], n["y"]) for n in nodes}
    traces = []
    shown = [e for e in edges if e["source"] in at and e["target"] in at][:max_edges]
    top = max((abs(e["weight"]) for e in shown), default=1.0) or 1.0
    # one trace per sign and width class: a line per edge would make hundreds of traces
    for sign, color in ((1, PROMOTE), (-1, SUPPRESS)):
        for lo, hi, width in ((0, WIDTH_BINS[0], 0.7), (WIDTH_BINS[0], WIDTH_BINS[1], 1.6),
                              (WIDTH_BINS[1], WIDTH_BINS[2] + 1e-9, 3.2)):
            xs, ys = [], []
            for e in shown:
                share = abs(e["weight"]) / top
                if np.sign(e["weight"]) == sign and lo < share <= hi:
                    (x0, y0), (x1, y1) = at[e["source"]], at[e["target"]]
                    xs += [x0, x1, None]
                    ys += [y0, y1, None]
            if xs:
                traces.append(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                         line=dict(color=color, width=width),
                                         opacity=0.35 if selected is None else 0.15))
    if selected is not None:  # the selected node's own edges drawn over the rest
        for e in shown:
            if selected in (e["source"], e["target"]):
                (x0, y0), (x1, y1) = at[e["source"]], at[e["target"]]
                traces.append(go.Scatter(x=[x0, x1], y=[y0, y1], mode="lines", showlegend=False, hoverinfo="skip",
                                         line=dict(color=PROMOTE if e["weight"] > 0 else SUPPRESS,
                                                   width=1 + 3 * abs(e["weight"]) / top)))
    # edge hover: an invisible marker at each edge's middle names its ends and weight
    mid = [((at[e["source"]][0] + at[e["target"]][0]) / 2, (at[e["source"]][1] + at[e["target"]][1]) / 2, e)
           for e in shown[:150]]
    labels = {n["node"]: n["label"] for n in nodes}
    traces.append(go.Scatter(x=[m[0] for m in mid], y=[m[1] for m in mid], mode="markers", showlegend=False,
                             marker=dict(size=6, color="rgba(0,0,0,0)"),
                             hovertext=[f"{labels[e['source']]} → {labels[e['target']]}: {e['weight']:+.3f}"
                                        for _, _, e in mid], hoverinfo="text"))
    inf = np.array([n["influence"] for n in nodes]) if nodes else np.zeros(0)
    big = float(inf.max()) if len(inf) and inf.max() > 0 else 1.0
    for kind, (symbol, color) in KIND_STYLE.items():
        mine = [n for n in nodes if n["kind"] == kind]
        if not mine:
            continue
        size = [8 + 22 * (n["influence"] / big) ** 0.5 if kind in ("features", "errors") else 12 for n in mine]
        traces.append(go.Scatter(
            x=[n["x"] for n in mine], y=[n["y"] for n in mine], mode="markers", name=kind.rstrip("s"),
            customdata=[n["node"] for n in mine], text=[n["label"] for n in mine],
            marker=dict(symbol=symbol, size=size, color=color, line=dict(color="black" if kind != "positions" else
                                                                          color, width=1)),
            unselected=dict(marker=dict(opacity=1)),  # a click inspects a node: it must not grey out the others
            hovertemplate="%{text}<extra></extra>"))
    off = [n for n in nodes if n["node"] in set(pinned)]
    if off:  # the features switched off below, crossed out where they sit
        traces.append(go.Scatter(x=[n["x"] for n in off], y=[n["y"] for n in off], mode="markers", name="switched off",
                                 marker=dict(symbol="x-thin", size=22, line=dict(color="black", width=3)),
                                 hoverinfo="skip"))
    ticks = list(range(len(tick_text)))
    return go.Figure(traces, dict(
        height=560, template="plotly_white", margin=dict(l=70, r=20, t=40, b=110), dragmode="pan",
        legend=dict(orientation="h", y=-0.28, x=0),
        xaxis=dict(tickvals=ticks, ticktext=tick_text, tickangle=0, showgrid=False, zeroline=False,
                   title="position in the prompt (→ the output)"),
        yaxis=dict(tickvals=[-0.25, 0] + [l + 1 for l in range(n_layers)] + [n_layers + 1],
                   ticktext=["position", "token"] + [f"block {l + 1}" for l in range(n_layers)] + ["output"],
                   zeroline=False, range=[-0.6, n_layers + 1.5]),
        annotations=[dict(x=0, y=1.02, xref="paper", yref="paper", showarrow=False, xanchor="left",
                          text="blue: promotes its target · red: suppresses it · size: influence on the output",
                          font=dict(size=12, shadow=HALO))]))
