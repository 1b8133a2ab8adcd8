"""Plotly figures of one head on the Attention page: the lecture's panels (scores, mask, weights), the mask's
order (on the scores or after the softmax) and the weight the unmasked softmax would put on the future.

Every heatmap reads like the matrix on the board: query i down the rows from the top, key j across
the columns, token text on both axes. Masked cells are grey (no value at all), never a pale 0.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from core.analysis.attention import future_mask, masked_softmax, mask_after_softmax
from core.figures.common import MASKED_GREY, dict_figure, f32, on_panel, panel_axes, panel_axis, panel_refs, row_of_panels
from core.figures.ticks import FIGURE_PX, fitted_ticks
from core.serve.fmt import shown_pos

MASK_COLORS = [[0.0, "#eef3fb"], [0.5, "#eef3fb"], [0.5, "#2b2b2b"], [1.0, "#2b2b2b"]]
MAX_WINDOW = 128     # positions one head's panels show at most: more, and a row of cells is thinner than text
OPEN_WINDOW = 96     # positions the panels open on: a prompt up to this long is shown whole, a longer one its last 96
ROW_PX = 14          # a query row's height in the head's panels, room for one line of label ...
PANELS_PX = 1120     # ... up to this height of the panels (80 rows); more rows share it, with smaller or fewer labels


def _staircase(n: int) -> str:
    """SVG path of the boundary between the visible past (j <= i) and the masked future (j > i)."""
    pts = ["M -0.5 -0.5"]
    for i in range(n):
        pts.append(f"L {i + 0.5} {i - 0.5}")
        pts.append(f"L {i + 0.5} {i + 0.5}")
    return " ".join(pts)


def _hover_data(tokens, scores, weights, offset):
    n = len(tokens)
    q = np.array([f"{shown_pos(offset + i)} '{t}'" for i, t in enumerate(tokens)], dtype=object)  # from 1
    cd = np.empty((n, n, 4), dtype=object)
    cd[:, :, 0] = q[:, None]
    cd[:, :, 1] = q[None, :]
    # text, not numbers: a float32 rounded and sent as a float reads 6.636000156402588 in the hover
    cd[:, :, 2] = np.vectorize(lambda v: f"{v:.3f}", otypes=[object])(scores)
    cd[:, :, 3] = np.where(np.isnan(weights), "masked (exactly 0)",
                           np.vectorize(lambda v: f"{v:.4f}", otypes=[object])(np.nan_to_num(weights)))
    return cd


HOVER = ("query i=%{customdata[0]}<br>key j=%{customdata[1]}<br>score s_ij = %{customdata[2]}"
         "<br>weight a_ij = %{customdata[3]}<extra></extra>")


def head_panels(scores: np.ndarray, pattern: np.ndarray, tokens: list[str], offset: int = 0,
                unmasked: np.ndarray | None = None, title: str = "") -> go.Figure:
    """The lecture's plot for one head: scores before the mask, the causal mask, the masked softmax,
    and optionally (``unmasked``) the softmax without any mask. All matrices are (n, n) for the tokens
    shown; ``offset`` is the position of the first of them in the prompt. Every softmax must be taken
    over whole rows before the window is cut out (``unmasked_softmax(all_scores)[win, win]``): a softmax
    over the window's columns alone would show weights the model never computes."""
    n = len(tokens)
    if scores.shape != (n, n) or pattern.shape != (n, n):
        raise ValueError(f"expected ({n}, {n}) matrices for {n} tokens, got {scores.shape} and {pattern.shape}")
    if unmasked is not None and unmasked.shape != (n, n):
        raise ValueError(f"expected a ({n}, {n}) unmasked softmax for {n} tokens, got {unmasked.shape}")
    show_unmasked = unmasked is not None
    future = future_mask(n)
    weights = np.where(future, np.nan, pattern)  # masked cells carry no value: the grey shows through
    titles = ["scores s_ij before the mask", "causal mask", "weights a_ij after the masked softmax"]
    if show_unmasked:  # four panels: two-line titles, or neighbours' titles run into each other
        titles = ["scores s_ij<br>before the mask", "causal<br>mask", "weights a_ij after<br>the masked softmax",
                  "softmax WITHOUT the mask<br>(cheating)"]
    cols = len(titles)
    # the mask panel carries no numbers, so it gets less room than the panels that do
    widths = [0.42, 0.16, 0.42] if cols == 3 else [0.3, 0.1, 0.3, 0.3]
    layout = row_of_panels(widths, 0.02, titles, shared_y=True)
    hover = _hover_data(tokens, scores, weights, offset)
    lim = float(np.max(np.abs(scores))) or 1.0

    # ROW_PX per query row up to PANELS_PX, so that every row keeps a label; more rows get smaller labels, then fewer
    rows_px = min(max(420, ROW_PX * n), PANELS_PX)
    y_ticks, y_reach = fitted_ticks(tokens, rows_px / n, across=False, offset=offset)
    left = max(70, round(y_reach) + 40)  # the labels and the axis title beside them
    plot_px = FIGURE_PX - left - 20
    dom = panel_axis(layout, "x", 1)["domain"]
    x_ticks, x_reach = fitted_ticks(tokens, plot_px * (dom[1] - dom[0]) / n, across=True, offset=offset)
    below = round(x_reach) + 50  # under the plot's bottom edge: the key labels, the axis title, then the colour bars
    bottom = below + 75

    def colorbar(col, title, **kw):
        dom = panel_axis(layout, "x", col)["domain"]
        return dict(orientation="h", x=(dom[0] + dom[1]) / 2, xanchor="center", y=-below / rows_px, yanchor="top",
                    len=(dom[1] - dom[0]) * 0.9, thickness=12, title=dict(text=title, side="top"), **kw)

    mask_text = np.where(future, "−∞", "")
    data = [
        dict(type="heatmap", z=f32(scores), colorscale="RdBu_r", zmid=0, zmin=-lim, zmax=lim, customdata=hover,
             hovertemplate=HOVER, colorbar=colorbar(1, "score (0 = white)"), **on_panel(1)),
        dict(type="heatmap", z=future.astype(np.float32), colorscale=MASK_COLORS, zmin=0, zmax=1, customdata=hover,
             text=mask_text, texttemplate="%{text}" if n <= 24 else None, textfont=dict(color="white", size=11),
             hovertemplate="query i=%{customdata[0]}<br>key j=%{customdata[1]}<br>"
                           "%{z:.0f} = 1 means s_ij ← −∞ (a future key)<extra></extra>",
             colorbar=colorbar(2, "dark: s_ij ← −∞ (j > i)", tickvals=[0, 1], ticktext=["kept", "−∞"]), **on_panel(2)),
        dict(type="heatmap", z=f32(weights), colorscale="Blues", zmin=0, zmax=1, hoverinfo="skip",
             colorbar=colorbar(3, "weight (grey = masked, exactly 0)"), **on_panel(3)),
    ]
    if show_unmasked:
        cd = hover.copy()
        cd[:, :, 3] = np.round(unmasked, 4).astype(str)
        data.append(dict(type="heatmap", z=f32(unmasked), colorscale="Oranges", zmin=0, zmax=1, customdata=cd,
                         hovertemplate=HOVER, colorbar=colorbar(4, "weight if the future were visible"), **on_panel(4)))
    # the weights' cells clickable: Streamlit reports no click on a heatmap, so invisible markers on every visible
    # cell (j <= i) carry [i, j] in prompt positions (plain lists: a numpy customdata arrives garbled) and the hover
    past = [(i, j) for i in range(n) for j in range(i + 1)]
    data.append(dict(type="scatter", x=[j for _, j in past], y=[i for i, _ in past], mode="markers",
                     marker=dict(size=max(4, min(16, round(rows_px / n))), opacity=0), showlegend=False,
                     customdata=[[offset + i, offset + j] for i, j in past],
                     text=[f"query i={hover[i, j, 0]}<br>key j={hover[i, j, 1]}<br>score s_ij = {hover[i, j, 2]}<br>"
                           f"weight a_ij = {hover[i, j, 3]}<br>click: why this weight?" for i, j in past],
                     hovertemplate="%{text}<extra></extra>", **on_panel(3)))
    path = _staircase(n)
    for x in panel_axes(layout, "x"):
        x.update(title=dict(text="key j"), range=[-0.5, n - 0.5], **x_ticks)
    layout["xaxis2"]["showticklabels"] = False  # too narrow for labels; its neighbours carry them
    for y in panel_axes(layout, "y"):
        y.update(range=[n - 0.5, -0.5], **y_ticks)  # query 0 at the top, as the matrix is written
    layout["yaxis"]["title"] = dict(text="query i")
    layout["shapes"] = [dict(type="path", path=path, line=dict(color="#d62728", width=1.2), **panel_refs(col))
                        for col in range(1, cols + 1)]
    top = 100 if show_unmasked else 70  # room for the two-line panel titles under the figure's title
    height = rows_px + top + bottom
    layout.update(title=dict(text=title, y=1 - 12 / height, yanchor="top"), height=height, plot_bgcolor=MASKED_GREY,
                  margin=dict(l=left, r=20, t=top, b=bottom), hovermode="closest", clickmode="event+select",
                  dragmode=False)
    return dict_figure(data, layout)


def future_mass_figure(mass: np.ndarray, tokens: list[str], offset: int = 0) -> go.Figure:
    """Bar per query row of the window: the weight the unmasked softmax puts on future keys, computed over
    the query's whole row (``core.analysis.attention.future_mass``), so zooming changes nothing."""
    if len(mass) != len(tokens):
        raise ValueError(f"{len(mass)} values for {len(tokens)} tokens")
    labels = [f"{shown_pos(offset + i)} '{t}'" for i, t in enumerate(tokens)]
    data = [dict(type="bar", x=np.arange(len(tokens)), y=f32(mass), customdata=labels, marker_color="#e6550d",
                 hovertemplate="query %{customdata}<br>weight on the future: %{y:.3f}<extra></extra>")]
    ticks, reach = fitted_ticks(tokens, (FIGURE_PX - 90) / max(len(tokens), 1), across=True, offset=offset)
    layout = dict(xaxis=dict(title=dict(text="query i"), range=[-0.5, len(tokens) - 0.5], **ticks),
                  yaxis=dict(title=dict(text="weight on keys j > i"), range=[0, 1]),
                  title=dict(text="Without the mask, how much each query would read from the future"),
                  height=250 + round(reach), margin=dict(l=70, r=20, t=50, b=round(reach) + 50))
    return dict_figure(data, layout)


def mask_order_figure(scores: np.ndarray, tokens: list[str], offset: int = 0) -> go.Figure:
    """Mask on the scores (right) against mask on the weights after the softmax (wrong), plus row sums.
    ``scores`` is one head's full (N, N) matrix; ``tokens`` the window shown, starting at ``offset``. Both
    softmaxes and the row sums use whole rows, so a zoomed window shows the model's real weights."""
    n = len(tokens)
    win = slice(offset, offset + n)
    right, wrong = masked_softmax(scores)[win, win], mask_after_softmax(scores)[win, win]
    sums_right, sums_wrong = masked_softmax(scores).sum(-1)[win], mask_after_softmax(scores).sum(-1)[win]
    future = future_mask(n)
    # the three panels share the query rows: only the first carries their labels, which would otherwise run into
    # the panel on their left
    layout = row_of_panels([0.39, 0.39, 0.22], 0.04, ["mask on the scores, then softmax",
                                                       "softmax, then zero the future", "row sums Σ_j a_ij"],
                           shared_y=True)
    rows_px = min(max(320, ROW_PX * n), PANELS_PX)
    y_ticks, y_reach = fitted_ticks(tokens, rows_px / n, across=False, offset=offset)
    left = max(70, round(y_reach) + 40)
    dom = panel_axis(layout, "x", 1)["domain"]
    x_ticks, x_reach = fitted_ticks(tokens, (FIGURE_PX - left - 20) * (dom[1] - dom[0]) / n, across=True,
                                    offset=offset)
    below = round(x_reach) + 50  # under the plot: the key labels, the axis title, then the colour bar and legend
    names = np.array([f"{shown_pos(offset + i)} '{t}'" for i, t in enumerate(tokens)], dtype=object)
    cells = np.empty((n, n, 2), dtype=object)  # every cell's query and key, named by position and token whole
    cells[:, :, 0], cells[:, :, 1] = names[:, None], names[None, :]
    data = []
    for col, w in ((1, right), (2, wrong)):
        data.append(dict(type="heatmap", z=f32(np.where(future, np.nan, w)), colorscale="Blues", zmin=0, zmax=1,
                         showscale=col == 2, customdata=cells,
                         colorbar=dict(orientation="h", x=(dom[0] + panel_axis(layout, "x", 2)["domain"][1]) / 2,
                                       xanchor="center", y=-below / rows_px, yanchor="top", len=0.5, thickness=12,
                                       title=dict(text="weight (grey = masked)", side="top")),
                         hovertemplate="query i=%{customdata[0]}<br>key j=%{customdata[1]}<br>weight %{z:.4f}"
                                       "<extra></extra>", **on_panel(col)))
        panel_axis(layout, "x", col).update(title=dict(text="key j"), range=[-0.5, n - 0.5], **x_ticks)
        panel_axis(layout, "y", col).update(range=[n - 0.5, -0.5], **y_ticks)
    layout["yaxis"]["title"] = dict(text="query i")
    rows = np.arange(n)
    for name, sums in (("mask on the scores", sums_right), ("mask after the softmax", sums_wrong)):
        data.append(dict(type="scatter", x=sums, y=rows, mode="lines+markers", name=name, marker=dict(size=5),
                         customdata=names, hovertemplate="query %{customdata}: row sum %{x:.4f}<extra></extra>",
                         **on_panel(3)))
    layout["xaxis3"].update(title=dict(text="row sum"), range=[0, 1.05], showgrid=True, gridcolor="#e5e5e5")
    layout["yaxis3"].update(range=[n - 0.5, -0.5], showgrid=False, zeroline=False)
    # the grey background marks masked cells in the heatmaps; the line chart gets a white one
    layout["shapes"] = [dict(type="rect", xref="x3 domain", yref="y3 domain", x0=0, x1=1, y0=0, y1=1,
                             fillcolor="white", line_width=0, layer="below")]
    bottom = below + 75
    layout.update(height=rows_px + 60 + bottom, plot_bgcolor=MASKED_GREY, margin=dict(l=left, r=20, t=60, b=bottom),
                  legend=dict(orientation="h", x=1, xanchor="right", y=-(below + 20) / rows_px, yanchor="top"))
    return dict_figure(data, layout)
