"""Plotly figures of every head at once on the Attention page: the small multiples (each head's pattern, clickable),
the layer x head table of one measure and the tables of every measure."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from core.analysis.attention import ROLE_INFO, future_mask
from core.figures.common import MASKED_GREY, dict_figure, f32, grid_of_panels, on_panel, panel_axes, panel_axis

GRID_ALL_HEADS = 16  # up to this many heads in all, every head is drawn; more, and a table plus a few layers
GRID_MAX_LAYERS = 3  # layers drawn head by head at once when not every head is


def click_targets(n: int, per_side: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Points spread over a head's (n, n) square, so that a click anywhere lands near one of them."""
    ticks = (np.arange(per_side) + 0.5) * n / per_side - 0.5
    x, y = np.meshgrid(ticks, ticks)
    return x.ravel(), y.ravel()


GRID_MAX_COLS = 6   # heads side by side in the small multiples: wider, a thumbnail gets too small to read
GRID_PANEL_PX = 210  # height of one row of thumbnails (their titles come on top)
GRID_GAP_PX = 48


def grid_columns(h: int) -> int:
    """Thumbnails per row for h heads: all of them up to GRID_MAX_COLS, else rows of equal length (12 -> 6)."""
    return h if h <= GRID_MAX_COLS else math.ceil(h / math.ceil(h / GRID_MAX_COLS))


def all_heads_figure(patterns, selected: tuple[int, int] | None = None, layers: list[int] | None = None,
                     block: int = 1) -> go.Figure:
    """Small multiples: the pattern of every head of the chosen ``layers`` (default all), one shared colour
    scale. ``patterns``: per layer an (h, t, t) array (a window's patterns, or their thumbnails from
    ``core.analysis.attention.pool_pattern``, ``block`` positions per cell); cells above the diagonal are masked (grey).
    A layer's heads fill rows of at most GRID_MAX_COLS thumbnails, so each stays large enough to read.

    Heatmaps cannot be clicked in Streamlit, so each head also carries invisible scatter points over its
    whole square (after all the heatmaps, with customdata [layer, head]): clicking a head selects one."""
    h = patterns[0].shape[0]
    t = patterns[0].shape[-1]
    layers = list(range(len(patterns))) if layers is None else list(layers)
    cols = grid_columns(h)
    per_layer = math.ceil(h / cols)
    rows = per_layer * len(layers)
    cells = [(layers[i // per_layer], (i % per_layer) * cols + c) for i in range(rows) for c in range(cols)]
    plot_px = rows * GRID_PANEL_PX + (rows - 1) * GRID_GAP_PX
    layout = grid_of_panels(rows, cols, 0.02, GRID_GAP_PX / plot_px if rows > 1 else 0.0,
                            [f"layer {l + 1} · head {k + 1}" if k < h else "" for l, k in cells])
    for note in layout["annotations"]:
        note["yshift"] = 5  # the titles a little higher, clear of the red frame around a panel
    future = future_mask(t)
    spots = {}  # (layer, head) -> (row, col) of its panel
    for i, (l, k) in enumerate(cells):
        if k < h:
            spots[l, k] = (i // cols + 1, i % cols + 1)
    data = [dict(type="heatmap", z=f32(np.where(future, np.nan, patterns[l][k])), coloraxis="coloraxis",
                 hoverinfo="skip", **on_panel((r - 1) * cols + c)) for (l, k), (r, c) in spots.items()]
    tx, ty = click_targets(t)
    data += [dict(type="scatter", x=tx, y=ty, mode="markers", marker=dict(size=30, opacity=0),
                  customdata=[[l, k]] * len(tx), showlegend=False,
                  hovertemplate=f"layer {l + 1} · head {k + 1}<br>click to open it above<extra></extra>",
                  **on_panel((r - 1) * cols + c)) for (l, k), (r, c) in spots.items()]
    for y in panel_axes(layout, "y"):
        y.update(range=[t - 0.5, -0.5], showticklabels=False, ticks="", showgrid=False, zeroline=False)
    for x in panel_axes(layout, "x"):
        x.update(range=[-0.5, t - 0.5], showticklabels=False, ticks="", showgrid=False, zeroline=False)
    for i, (l, k) in enumerate(cells):  # empty places of a last row: no axes at all
        if k >= h:
            panel_axis(layout, "x", i + 1)["visible"] = panel_axis(layout, "y", i + 1)["visible"] = False
    if selected is not None and tuple(selected) in spots:
        r, c = spots[tuple(selected)]
        idx = (r - 1) * cols + c
        xd, yd = panel_axis(layout, "x", idx)["domain"], panel_axis(layout, "y", idx)["domain"]
        layout["shapes"] = [dict(type="rect", xref="paper", yref="paper", x0=xd[0] - 0.004, x1=xd[1] + 0.004,
                                 y0=yd[0] - 3 / plot_px, y1=yd[1] + 3 / plot_px, line=dict(color="#d62728", width=3))]
    title = "weight" if block == 1 else f"weight<br>(mean over<br>{block}×{block} cells)"
    layout.update(coloraxis=dict(colorscale="Blues", cmin=0, cmax=1, colorbar=dict(title=dict(text=title), thickness=12)),
                  height=plot_px + 60, plot_bgcolor=MASKED_GREY, margin=dict(l=20, r=20, t=40, b=20),
                  hovermode="closest", hoverdistance=60, clickmode="event+select", dragmode=False)
    return dict_figure(data, layout)


OVERVIEW_PX_PER_LAYER = 34


def head_overview_figure(roles: dict[str, np.ndarray], key: str, selected: tuple[int, int] | None = None) -> go.Figure:
    """Every head as one cell of a layer x head table, coloured by the measure ``key`` of ``roles`` ((L, h) arrays,
    as core.analysis.attention.head_roles gives), its value printed in the cell; hovering a cell lists every measure of
    that head. Clickable like the small multiples: one invisible scatter point per cell (after the heatmap, with
    customdata [layer, head, measures...]). The red frame is the ``selected`` head."""
    keys = [k for k in ROLE_TITLES if k in roles]
    z = np.asarray(roles[key], dtype=float)
    L, h = z.shape
    zmax = max(float(np.nanmax(z)), 1e-9) if key == "entropy" else 1.0
    fig = go.Figure(go.Heatmap(z=z, colorscale="Purples" if key == "entropy" else "Greens", zmin=0, zmax=zmax,
                               text=np.round(z, 2), texttemplate="%{text}", textfont=dict(size=11), hoverinfo="skip",
                               colorbar=dict(title=dict(text=ROLE_TITLES[key], side="right"), thickness=12)))
    layer, head = np.meshgrid(np.arange(L), np.arange(h), indexing="ij")
    # a plain list, not an array: Plotly would send an array as binary, and a clicked point's customdata would then
    # reach the selection callback as an object instead of [layer, head, ...]
    custom = np.stack([layer.ravel(), head.ravel()] + [np.asarray(roles[k], dtype=float).ravel() for k in keys],
                      -1).tolist()
    lines = "".join(f"<br>{ROLE_TITLES[k]}: %{{customdata[{2 + i}]:.3f}}" for i, k in enumerate(keys))
    names = [f"layer {l + 1} · head {k + 1}" for l, k in zip(layer.ravel(), head.ravel())]  # from 1, as on screen
    fig.add_trace(go.Scatter(x=head.ravel(), y=layer.ravel(), mode="markers", customdata=custom, text=names,
                             showlegend=False, marker=dict(size=24, symbol="square", opacity=0),
                             hovertemplate="%{text}" + lines + "<br>click to open it above<extra></extra>"))
    fig.update_xaxes(tickmode="array", tickvals=list(range(h)), ticktext=[f"H{k + 1}" for k in range(h)],
                     title_text="head", range=[-0.5, h - 0.5], showgrid=False, zeroline=False, side="top")
    fig.update_yaxes(tickmode="array", tickvals=list(range(L)), ticktext=[f"L{l + 1}" for l in range(L)],
                     title_text="layer", range=[L - 0.5, -0.5], showgrid=False, zeroline=False)
    if selected is not None:
        l, k = selected
        fig.add_shape(type="rect", x0=k - 0.5, x1=k + 0.5, y0=l - 0.5, y1=l + 0.5, line=dict(color="#d62728", width=3))
    fig.update_layout(height=110 + OVERVIEW_PX_PER_LAYER * L, margin=dict(l=60, r=20, t=60, b=20), plot_bgcolor="white",
                      hovermode="closest", hoverdistance=40, clickmode="event+select", dragmode=False)
    return fig


ROLE_TITLES = {"previous_token": "previous-token score", "first_token": "first-token score",
               "entropy": "mean entropy (nats)", "induction": "induction score"}


def head_roles_figure(roles: dict[str, np.ndarray]) -> go.Figure:
    """One layer x head heatmap per measure, values printed in the cells."""
    keys = [k for k in ROLE_TITLES if k in roles]
    L, h = roles[keys[0]].shape
    # four tables side by side while a row of values fits (h <= 6); two by two for many heads, so that a
    # printed value keeps a cell about 50 px wide
    per_row = len(keys) if h <= 6 else 2
    n_rows = math.ceil(len(keys) / per_row)
    panel_px = 40 + (70 if h <= 6 else 30) * L
    titles = [ROLE_TITLES[k] for k in keys] + [""] * (n_rows * per_row - len(keys))
    layout = grid_of_panels(n_rows, per_row, 0.05, 70 / (n_rows * panel_px + 70) if n_rows > 1 else 0, titles)
    data = []
    for i, key in enumerate(keys):
        row, col = i // per_row + 1, i % per_row + 1
        z = roles[key]
        zmax = max(float(np.nanmax(z)), 1e-9) if key == "entropy" else 1.0
        data.append(dict(type="heatmap", z=z, x=[f"H{k + 1}" for k in range(h)], y=[f"L{l + 1}" for l in range(L)],
                         colorscale="Purples" if key == "entropy" else "Greens", zmin=0, zmax=zmax, showscale=False,
                         text=np.round(z, 3 if key == "induction" else 2), texttemplate="%{text}",
                         textfont=dict(size=13 if h <= 6 else 11),
                         hovertemplate=f"{ROLE_TITLES[key]}<br>%{{y}} %{{x}}: %{{z:.3f}}<extra></extra>",
                         **on_panel(i + 1)))
        if row == n_rows:
            panel_axis(layout, "x", i + 1)["title"] = dict(text="head")
        if col == 1:
            panel_axis(layout, "y", i + 1)["title"] = dict(text="layer")
    for axis in panel_axes(layout, "y"):
        axis["autorange"] = "reversed"
    layout.update(height=n_rows * panel_px + (n_rows - 1) * 70 + 100, margin=dict(l=60, r=20, t=50, b=50))
    return dict_figure(data, layout)


def role_explanations() -> dict[str, str]:
    return {ROLE_TITLES[k]: v for k, v in ROLE_INFO.items()}
