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
from core.serve.fmt import visible

MASKED_GREY = "#c8c8c8"  # background showing through cells that have no weight at all (masked)
MASK_COLORS = [[0.0, "#eef3fb"], [0.5, "#eef3fb"], [0.5, "#2b2b2b"], [1.0, "#2b2b2b"]]
MAX_TICKS = 48
MAX_WINDOW = 128     # positions one head's panels show at most: more, and a row of cells is thinner than text
OPEN_WINDOW = 96     # positions the panels open on: a prompt up to this long is shown whole, a longer one its last 96
ROW_PX = 14          # a query row's height in the head's panels, room for one line of label ...
PANELS_PX = 1120     # ... up to this height of the panels (80 rows); more rows share it, with smaller or fewer labels
# Token axes are labelled for a chart this wide: what a stretched chart gets on a 1,366-px laptop screen with the
# sidebar open (1,400 px: 940). A wider screen leaves the labels more room than they need, never less
FIGURE_PX = 900
AXIS_CHARS = 8       # a token's label is cut to this many characters on an axis (its hover shows it whole)
TICK_FONT = 11
CHAR_W = 0.55        # a label character's width, in font sizes (Plotly's sans serif, on average)
LINE_H = 1.25        # a label line's height, in font sizes: labels closer than this overlap
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


def _short(token: str) -> str:
    """A token's label on an axis: cut to AXIS_CHARS characters (the hover shows it whole)."""
    return token if len(token) <= AXIS_CHARS else token[:AXIS_CHARS - 1] + "…"


def fitted_ticks(tokens: list[str], cell_px: float, across: bool, offset: int = 0, keep: int | None = None,
                 fonts: tuple[int, ...] = (TICK_FONT, 10, 9)) -> tuple[dict, float]:
    """Tick labels for a token axis whose cells are ``cell_px`` pixels apart, none overlapping its neighbour:
    every token when they fit, else every k-th one with its position ("␣the 12"), k as small as keeps them apart
    (the hover of every cell names its tokens whole). ``across``: an x axis, whose labels stand side by side
    (upright when every one fits its cell, else turned a quarter, so that a label needs a line's height, not its
    width); else a y axis, whose labels are stacked. ``keep``: a position (an index into ``tokens``) that is always
    labelled, the neighbours its label would touch left out. The first of ``fonts`` (sizes) with which every token
    gets a label is used; if none, the last, on every k-th.
    Returns the axis's properties and how far its labels reach out from the axis, in pixels (for the margins)."""
    n = len(tokens)
    short = [_short(t) for t in tokens]
    chars = max((len(t) for t in short), default=1)
    for font in fonts:
        line = LINE_H * font
        upright = across and chars * CHAR_W * font + (1 if chars <= 2 else 4) <= cell_px
        if upright or line <= cell_px:  # side by side upright, else turned or stacked: a line's height each
            step = 1
            break
    else:
        step = max(1, math.ceil(line / max(cell_px, 1e-9)))
    vals = list(range(0, n, step))
    if keep is not None and 0 <= keep < n and keep not in vals:
        vals = sorted([v for v in vals if abs(v - keep) >= step] + [keep])
    text = [short[i] if step == 1 else f"{short[i]} {offset + i}" for i in vals]
    reach = max((len(t) for t in text), default=1) * CHAR_W * font
    ticks = dict(tickmode="array", tickvals=vals, ticktext=text, tickfont=dict(size=font), showgrid=False,
                 zeroline=False)
    if across:
        ticks["tickangle"] = 0 if upright else -90
        reach = line if upright else reach
    return ticks, reach


def byte_pieces_note(tok, ids, examples: int = 3) -> str | None:
    """One sentence on the pieces of characters among ``ids`` (a byte-level BPE writes a character it has no
    token for as its UTF-8 bytes, one token each, shown ⟨f0⟩ ⟨9f⟩ ...), with up to ``examples`` runs of them and
    the character(s) they spell; None when the prompt has none (any character tokenizer, most English text)."""
    partial = tok.partial_ids()
    runs, run = [], []
    for i in list(ids) + [None]:  # a None at the end closes the last run
        if i is not None and int(i) in partial:
            run.append(int(i))
        elif run:
            runs.append(run)
            run = []
    if not runs:
        return None
    shown = []
    for r in runs[:examples]:
        pieces, text = " ".join(tok.visible_tokens(r)), tok.decode(r)
        # a run cut at the start of the window (n_ctx) may not spell a whole character: then no "= ..."
        shown.append(pieces if not text or "\ufffd" in text else f"{pieces} = {visible(text)}")
    more = f" and {len(runs) - examples} more" if len(runs) > examples else ""
    return (f"Labels such as {'; '.join(shown)}{more} are bytes in hexadecimal: a character the tokenizer splits "
            "into bytes, because it has no token for it (an emoji, an accented or non-Latin letter). Its UTF-8 code "
            "takes 2 to 4 bytes, and the model reads each byte as a token of its own.")


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

    # ROW_PX per query row up to PANELS_PX, so that every row keeps a label; more rows get smaller labels, then fewer
    rows_px = min(max(420, ROW_PX * n), PANELS_PX)
    y_ticks, y_reach = fitted_ticks(tokens, rows_px / n, across=False, offset=offset)
    left = max(70, round(y_reach) + 40)  # the labels and the axis title beside them
    plot_px = FIGURE_PX - left - 20
    dom = _axis(layout, "x", 1)["domain"]
    x_ticks, x_reach = fitted_ticks(tokens, plot_px * (dom[1] - dom[0]) / n, across=True, offset=offset)
    below = round(x_reach) + 50  # under the plot's bottom edge: the key labels, the axis title, then the colour bars
    bottom = below + 75

    def colorbar(col, title, **kw):
        dom = _axis(layout, "x", col)["domain"]
        return dict(orientation="h", x=(dom[0] + dom[1]) / 2, xanchor="center", y=-below / rows_px, yanchor="top",
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
        dict(type="heatmap", z=_f32(weights), colorscale="Blues", zmin=0, zmax=1, hoverinfo="skip",
             colorbar=colorbar(3, "weight (grey = masked, exactly 0)"), **_on(3)),
    ]
    if show_unmasked:
        cd = hover.copy()
        cd[:, :, 3] = np.round(unmasked, 4).astype(str)
        data.append(dict(type="heatmap", z=_f32(unmasked), colorscale="Oranges", zmin=0, zmax=1, customdata=cd,
                         hovertemplate=HOVER, colorbar=colorbar(4, "weight if the future were visible"), **_on(4)))
    # the weights' cells clickable: Streamlit reports no click on a heatmap, so invisible markers on every visible
    # cell (j <= i) carry [i, j] in prompt positions (plain lists: a numpy customdata arrives garbled) and the hover
    past = [(i, j) for i in range(n) for j in range(i + 1)]
    data.append(dict(type="scatter", x=[j for _, j in past], y=[i for i, _ in past], mode="markers",
                     marker=dict(size=max(4, min(16, round(rows_px / n))), opacity=0), showlegend=False,
                     customdata=[[offset + i, offset + j] for i, j in past],
                     text=[f"query i={hover[i, j, 0]}<br>key j={hover[i, j, 1]}<br>score s_ij = {hover[i, j, 2]}<br>"
                           f"weight a_ij = {hover[i, j, 3]}<br>click: why this weight?" for i, j in past],
                     hovertemplate="%{text}<extra></extra>", **_on(3)))
    path = _staircase(n)
    for x in _axes(layout, "x"):
        x.update(title=dict(text="key j"), range=[-0.5, n - 0.5], **x_ticks)
    layout["xaxis2"]["showticklabels"] = False  # too narrow for labels; its neighbours carry them
    for y in _axes(layout, "y"):
        y.update(range=[n - 0.5, -0.5], **y_ticks)  # query 0 at the top, as the matrix is written
    layout["yaxis"]["title"] = dict(text="query i")
    layout["shapes"] = [dict(type="path", path=path, line=dict(color="#d62728", width=1.2), **_refs(col))
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
    labels = [f"{offset + i} '{t}'" for i, t in enumerate(tokens)]
    data = [dict(type="bar", x=np.arange(len(tokens)), y=_f32(mass), customdata=labels, marker_color="#e6550d",
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
    dom = _axis(layout, "x", 1)["domain"]
    x_ticks, x_reach = fitted_ticks(tokens, (FIGURE_PX - left - 20) * (dom[1] - dom[0]) / n, across=True,
                                    offset=offset)
    below = round(x_reach) + 50  # under the plot: the key labels, the axis title, then the colour bar and legend
    names = np.array([f"{offset + i} '{t}'" for i, t in enumerate(tokens)], dtype=object)
    cells = np.empty((n, n, 2), dtype=object)  # every cell's query and key, named by position and token whole
    cells[:, :, 0], cells[:, :, 1] = names[:, None], names[None, :]
    data = []
    for col, w in ((1, right), (2, wrong)):
        data.append(dict(type="heatmap", z=_f32(np.where(future, np.nan, w)), colorscale="Blues", zmin=0, zmax=1,
                         showscale=col == 2, customdata=cells,
                         colorbar=dict(orientation="h", x=(dom[0] + _axis(layout, "x", 2)["domain"][1]) / 2,
                                       xanchor="center", y=-below / rows_px, yanchor="top", len=0.5, thickness=12,
                                       title=dict(text="weight (grey = masked)", side="top")),
                         hovertemplate="query i=%{customdata[0]}<br>key j=%{customdata[1]}<br>weight %{z:.4f}"
                                       "<extra></extra>", **_on(col)))
        _axis(layout, "x", col).update(title=dict(text="key j"), range=[-0.5, n - 0.5], **x_ticks)
        _axis(layout, "y", col).update(range=[n - 0.5, -0.5], **y_ticks)
    layout["yaxis"]["title"] = dict(text="query i")
    rows = np.arange(n)
    for name, sums in (("mask on the scores", sums_right), ("mask after the softmax", sums_wrong)):
        data.append(dict(type="scatter", x=sums, y=rows, mode="lines+markers", name=name, marker=dict(size=5),
                         customdata=names, hovertemplate="query %{customdata}: row sum %{x:.4f}<extra></extra>",
                         **_on(3)))
    layout["xaxis3"].update(title=dict(text="row sum"), range=[0, 1.05], showgrid=True, gridcolor="#e5e5e5")
    layout["yaxis3"].update(range=[n - 0.5, -0.5], showgrid=False, zeroline=False)
    # the grey background marks masked cells in the heatmaps; the line chart gets a white one
    layout["shapes"] = [dict(type="rect", xref="x3 domain", yref="y3 domain", x0=0, x1=1, y0=0, y1=1,
                             fillcolor="white", line_width=0, layer="below")]
    bottom = below + 75
    layout.update(height=rows_px + 60 + bottom, plot_bgcolor=MASKED_GREY, margin=dict(l=left, r=20, t=60, b=bottom),
                  legend=dict(orientation="h", x=1, xanchor="right", y=-(below + 20) / rows_px, yanchor="top"))
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
