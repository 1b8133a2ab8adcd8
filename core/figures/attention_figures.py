"""Plotly figures for the attention page. Pure functions: arrays and token strings in, figures out.

Every heatmap reads like the matrix on the board: query i down the rows from the top, key j across
the columns, token text on both axes. Masked cells are grey (no value at all), never a pale 0.
"""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from core.analysis.attention import ROLE_INFO, future_mask, masked_softmax, mask_after_softmax
from core.figures.common import axis_suffix, dict_figure

MASKED_GREY = "#c8c8c8"  # background showing through cells that have no weight at all (masked)
MASK_COLORS = [[0.0, "#eef3fb"], [0.5, "#eef3fb"], [0.5, "#2b2b2b"], [1.0, "#2b2b2b"]]
MAX_TICKS = 48
MAX_WINDOW = 128     # positions one head's panels show at most: more, and a row of cells is thinner than text
GRID_ALL_HEADS = 16  # up to this many heads in all, every head is drawn; more, and a table plus a few layers
GRID_MAX_LAYERS = 3  # layers drawn head by head at once when not every head is



def row_of_panels(widths: list[float], spacing: float, titles: list[str], shared_y: bool = False) -> dict:
    """Layout of panels side by side, as make_subplots(rows=1, cols=len(widths), column_widths=widths,
    horizontal_spacing=spacing, subplot_titles=titles, shared_yaxes=shared_y) lays them out, as plain dicts:
    axes "xaxis", "xaxis2", ... anchored to their y axes, and the titles as annotations above the panels.
    Figures built from plain dicts (``core.figures.common.dict_figure``) cost a fraction of make_subplots and update_*
    calls, which validate property by property (a page redraws them on every prompt a student types)."""
    free = 1 - spacing * (len(widths) - 1)
    layout, start, notes = {}, 0.0, []
    for i, w in enumerate(widths, start=1):
        end = min(1.0, start + free * w / sum(widths))  # rounding must not push the last past 1 (Plotly refuses)
        sfx = axis_suffix(i)
        layout[f"xaxis{sfx}"] = dict(domain=[start, end], anchor=f"y{sfx}")
        layout[f"yaxis{sfx}"] = dict(domain=[0.0, 1.0], anchor=f"x{sfx}")
        if shared_y and i > 1:
            layout[f"yaxis{sfx}"].update(matches="y", showticklabels=False)
        notes.append(dict(text=titles[i - 1], x=(start + end) / 2, y=1.0, xref="paper", yref="paper",
                          xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=16)))
        start = end + spacing
    layout["annotations"] = notes
    return layout


def grid_of_panels(rows: int, cols: int, h_spacing: float, v_spacing: float, titles: list[str]) -> dict:
    """Layout of a rows x cols grid of panels, as make_subplots(rows, cols, horizontal_spacing=h_spacing,
    vertical_spacing=v_spacing, subplot_titles=titles) lays it out, as plain dicts (see ``row_of_panels``):
    panel i (from 1, row by row from the top) has axes "xaxis{i}" and "yaxis{i}"; empty titles are left out."""
    w = (1 - h_spacing * (cols - 1)) / cols
    ht = (1 - v_spacing * (rows - 1)) / rows
    layout, notes = {}, []
    for r in range(rows):
        top = 1 - r * (ht + v_spacing)
        for c in range(cols):
            i = r * cols + c + 1
            sfx = axis_suffix(i)
            x0 = c * (w + h_spacing)
            layout[f"xaxis{sfx}"] = dict(domain=[x0, min(1.0, x0 + w)], anchor=f"y{sfx}")
            layout[f"yaxis{sfx}"] = dict(domain=[max(0.0, top - ht), top], anchor=f"x{sfx}")
            if titles[i - 1]:
                notes.append(dict(text=titles[i - 1], x=x0 + w / 2, y=top, xref="paper", yref="paper",
                                  xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=16)))
    layout["annotations"] = notes
    return layout


def _axes(layout: dict, kind: str) -> list[dict]:
    """The panel layout's x (kind "x") or y axes, first panel first."""
    return [v for k, v in layout.items() if k.startswith(f"{kind}axis")]


def _axis(layout: dict, kind: str, col: int) -> dict:
    """Panel ``col``'s (from 1) x (kind "x") or y axis in a panel layout."""
    return layout[f"{kind}axis{axis_suffix(col)}"]


def _on(col: int) -> dict:
    """A trace's axes in panel ``col`` (from 1)."""
    sfx = axis_suffix(col)
    return dict(xaxis=f"x{sfx}", yaxis=f"y{sfx}")


def _refs(col: int) -> dict:
    """A shape's coordinates in panel ``col``'s data."""
    sfx = axis_suffix(col)
    return dict(xref=f"x{sfx}", yref=f"y{sfx}")


def _f32(a) -> np.ndarray:
    """A heatmap's values as float32: Plotly sends numpy arrays as binary typed arrays, and float32 halves the
    bytes every rerun ships to the browser (7 significant digits, far below what a colour can show)."""
    return np.asarray(a, dtype=np.float32)

def axis_ticks(tokens: list[str], offset: int = 0, max_ticks: int = MAX_TICKS) -> dict:
    """Tick positions and labels for a token axis; thinned when there are too many to read. Labels of one or two
    characters stay upright; longer ones (sub-word tokens) let Plotly turn an x axis's labels when they overlap."""
    n = len(tokens)
    step = max(1, math.ceil(n / max_ticks))
    vals = list(range(0, n, step))
    text = [tokens[i] if step == 1 else f"{tokens[i]} {offset + i}" for i in vals]
    ticks = dict(tickmode="array", tickvals=vals, ticktext=text, tickfont=dict(size=13 if n <= 40 else 10),
                 showgrid=False, zeroline=False)
    if max((len(t) for t in text), default=0) <= 2:
        ticks["tickangle"] = 0  # else Plotly's default, which turns an x axis's labels when they overlap
    return ticks


def _staircase(n: int) -> str:
    """SVG path of the boundary between the visible past (j <= i) and the masked future (j > i)."""
    pts = ["M -0.5 -0.5"]
    for i in range(n):
        pts.append(f"L {i + 0.5} {i - 0.5}")
        pts.append(f"L {i + 0.5} {i + 0.5}")
    return " ".join(pts)


def _hover_data(tokens, scores, weights, offset):
    n = len(tokens)
    q = np.array([f"{offset + i} '{t}'" for i, t in enumerate(tokens)], dtype=object)
    cd = np.empty((n, n, 4), dtype=object)
    cd[:, :, 0] = q[:, None]
    cd[:, :, 1] = q[None, :]
    cd[:, :, 2] = np.round(scores, 3)
    cd[:, :, 3] = np.where(np.isnan(weights), "masked (exactly 0)", np.round(np.nan_to_num(weights), 4).astype(str))
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

    rows_px = min(max(420, 14 * n), 900)  # about 14 px per query row, so row labels stay readable

    def colorbar(col, title, **kw):
        dom = _axis(layout, "x", col)["domain"]
        return dict(orientation="h", x=(dom[0] + dom[1]) / 2, xanchor="center", y=-95 / rows_px, yanchor="top",
                    len=(dom[1] - dom[0]) * 0.9, thickness=12, title=dict(text=title, side="top"), **kw)

    mask_text = np.where(future, "−∞", "")
    data = [
        dict(type="heatmap", z=_f32(scores), colorscale="RdBu_r", zmid=0, zmin=-lim, zmax=lim, customdata=hover,
             hovertemplate=HOVER, colorbar=colorbar(1, "score (0 = white)"), **_on(1)),
        dict(type="heatmap", z=future.astype(np.float32), colorscale=MASK_COLORS, zmin=0, zmax=1, customdata=hover,
             text=mask_text, texttemplate="%{text}" if n <= 24 else None, textfont=dict(color="white", size=11),
             hovertemplate="query i=%{customdata[0]}<br>key j=%{customdata[1]}<br>"
                           "%{z:.0f} = 1 means s_ij ← −∞ (a future key)<extra></extra>",
             colorbar=colorbar(2, "dark: s_ij ← −∞ (j > i)", tickvals=[0, 1], ticktext=["kept", "−∞"]), **_on(2)),
        dict(type="heatmap", z=_f32(weights), colorscale="Blues", zmin=0, zmax=1, customdata=hover,
             hovertemplate=HOVER, colorbar=colorbar(3, "weight (grey = masked, exactly 0)"), **_on(3)),
    ]
    if show_unmasked:
        cd = hover.copy()
        cd[:, :, 3] = np.round(unmasked, 4).astype(str)
        data.append(dict(type="heatmap", z=_f32(unmasked), colorscale="Oranges", zmin=0, zmax=1, customdata=cd,
                         hovertemplate=HOVER, colorbar=colorbar(4, "weight if the future were visible"), **_on(4)))
    ticks = axis_ticks(tokens, offset)
    path = _staircase(n)
    for x in _axes(layout, "x"):
        x.update(title=dict(text="key j"), range=[-0.5, n - 0.5], **ticks)
    layout["xaxis2"]["showticklabels"] = False  # too narrow for labels; its neighbours carry them
    for y in _axes(layout, "y"):
        y.update(range=[n - 0.5, -0.5], **ticks)  # query 0 at the top, as the matrix is written
    layout["yaxis"]["title"] = dict(text="query i")
    layout["shapes"] = [dict(type="path", path=path, line=dict(color="#d62728", width=1.2), **_refs(col))
                        for col in range(1, cols + 1)]
    top = 100 if show_unmasked else 70  # room for the two-line panel titles under the figure's title
    layout.update(title=dict(text=title, y=1 - 12 / (rows_px + 240 + top - 70), yanchor="top"),
                  height=rows_px + 240 + top - 70, plot_bgcolor=MASKED_GREY, margin=dict(l=70, r=20, t=top, b=170))
    return dict_figure(data, layout)


def future_mass_figure(mass: np.ndarray, tokens: list[str], offset: int = 0) -> go.Figure:
    """Bar per query row of the window: the weight the unmasked softmax puts on future keys, computed over
    the query's whole row (``core.analysis.attention.future_mass``), so zooming changes nothing."""
    if len(mass) != len(tokens):
        raise ValueError(f"{len(mass)} values for {len(tokens)} tokens")
    labels = [f"{offset + i} '{t}'" for i, t in enumerate(tokens)]
    data = [dict(type="bar", x=np.arange(len(tokens)), y=_f32(mass), customdata=labels, marker_color="#e6550d",
                 hovertemplate="query %{customdata}<br>weight on the future: %{y:.3f}<extra></extra>")]
    layout = dict(xaxis=dict(title=dict(text="query i"), **axis_ticks(tokens, offset)),
                  yaxis=dict(title=dict(text="weight on keys j > i"), range=[0, 1]),
                  title=dict(text="Without the mask, how much each query would read from the future"), height=300,
                  margin=dict(l=70, r=20, t=50, b=50))
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
    layout = row_of_panels([0.36, 0.36, 0.28], 0.06, ["mask on the scores, then softmax",
                                                       "softmax, then zero the future", "row sums Σ_j a_ij"])
    data = []
    ticks = axis_ticks(tokens, offset)
    for col, w in ((1, right), (2, wrong)):
        data.append(dict(type="heatmap", z=_f32(np.where(future, np.nan, w)), colorscale="Blues", zmin=0, zmax=1,
                         showscale=col == 2,
                         colorbar=dict(orientation="h", x=0.36, xanchor="center", y=-0.3, len=0.5, thickness=12,
                                       title=dict(text="weight (grey = masked)", side="top")),
                         hovertemplate="query %{y} · key %{x}<br>weight %{z:.4f}<extra></extra>", **_on(col)))
        _axis(layout, "x", col).update(title=dict(text="key j"), range=[-0.5, n - 0.5], **ticks)
        _axis(layout, "y", col).update(range=[n - 0.5, -0.5], **ticks)
    layout["yaxis"]["title"] = dict(text="query i")
    rows = np.arange(n)
    for name, sums in (("mask on the scores", sums_right), ("mask after the softmax", sums_wrong)):
        data.append(dict(type="scatter", x=sums, y=rows, mode="lines+markers", name=name, marker=dict(size=5),
                         hovertemplate="query %{y}: row sum %{x:.4f}<extra></extra>", **_on(3)))
    layout["xaxis3"].update(title=dict(text="row sum"), range=[0, 1.05], showgrid=True, gridcolor="#e5e5e5")
    layout["yaxis3"].update(range=[n - 0.5, -0.5], **ticks)
    # the grey background marks masked cells in the heatmaps; the line chart gets a white one
    layout["shapes"] = [dict(type="rect", xref="x3 domain", yref="y3 domain", x0=0, x1=1, y0=0, y1=1,
                             fillcolor="white", line_width=0, layer="below")]
    layout.update(height=600, plot_bgcolor=MASKED_GREY, margin=dict(l=70, r=20, t=60, b=170),
                  legend=dict(orientation="h", x=1, xanchor="right", y=-0.16))
    return dict_figure(data, layout)


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
    data = [dict(type="heatmap", z=_f32(np.where(future, np.nan, patterns[l][k])), coloraxis="coloraxis",
                 hoverinfo="skip", **_on((r - 1) * cols + c)) for (l, k), (r, c) in spots.items()]
    tx, ty = click_targets(t)
    data += [dict(type="scatter", x=tx, y=ty, mode="markers", marker=dict(size=30, opacity=0),
                  customdata=[[l, k]] * len(tx), showlegend=False,
                  hovertemplate=f"layer {l + 1} · head {k + 1}<br>click to open it above<extra></extra>",
                  **_on((r - 1) * cols + c)) for (l, k), (r, c) in spots.items()]
    for y in _axes(layout, "y"):
        y.update(range=[t - 0.5, -0.5], showticklabels=False, ticks="", showgrid=False, zeroline=False)
    for x in _axes(layout, "x"):
        x.update(range=[-0.5, t - 0.5], showticklabels=False, ticks="", showgrid=False, zeroline=False)
    for i, (l, k) in enumerate(cells):  # empty places of a last row: no axes at all
        if k >= h:
            _axis(layout, "x", i + 1)["visible"] = _axis(layout, "y", i + 1)["visible"] = False
    if selected is not None and tuple(selected) in spots:
        r, c = spots[tuple(selected)]
        idx = (r - 1) * cols + c
        xd, yd = _axis(layout, "x", idx)["domain"], _axis(layout, "y", idx)["domain"]
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
                         **_on(i + 1)))
        if row == n_rows:
            _axis(layout, "x", i + 1)["title"] = dict(text="head")
        if col == 1:
            _axis(layout, "y", i + 1)["title"] = dict(text="layer")
    for axis in _axes(layout, "y"):
        axis["autorange"] = "reversed"
    layout.update(height=n_rows * panel_px + (n_rows - 1) * 70 + 100, margin=dict(l=60, r=20, t=50, b=50))
    return dict_figure(data, layout)


def role_explanations() -> dict[str, str]:
    return {ROLE_TITLES[k]: v for k, v in ROLE_INFO.items()}
