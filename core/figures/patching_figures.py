"""Figures of the Cause and effect page: patching heatmaps (0 = the corrupted run, 1 = the clean run) and the
score-sources table of one attention score."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from core.figures.ticks import axis_ticks
from core.serve.fmt import head_label

# red: putting this activation back restores the clean answer; blue: it pushes further away from it
RESTORE_SCALE = [[0.0, "#2b6cb0"], [0.5, "#f7f7f7"], [1.0, "#c0392b"]]
PATCH_X_TICKS = 40  # token labels on a position axis; more run into each other
CELL_TEXT_MAX = 24  # a heatmap with at most this many columns shows its values in the cells


def _click_targets(values: np.ndarray, x, y, text: list[list[str]]) -> go.Scatter:
    """Invisible markers on every cell's centre, carrying customdata [row, column] as plain lists: Streamlit reports
    no click on a heatmap (see attention_figures.all_heads_figure), and a numpy customdata arrives garbled. They
    carry the hover text too (the heatmap's own hover is off, or two labels would show)."""
    rows, cols = values.shape
    return go.Scatter(x=[x[c] for r in range(rows) for c in range(cols)], y=[y[r] for r in range(rows) for c in range(cols)],
                      mode="markers", marker=dict(size=18, opacity=0), showlegend=False,
                      customdata=[[r, c] for r in range(rows) for c in range(cols)],
                      text=[text[r][c] for r in range(rows) for c in range(cols)],
                      hovertemplate="%{text}<extra></extra>")


def _limit(values: np.ndarray) -> float:
    """The colour range, symmetric around 0: at least [-1, 1], wider when a patch overshoots the clean run."""
    finite = np.abs(values[np.isfinite(values)])
    return max(1.0, float(finite.max()) if finite.size else 1.0)


def patch_heatmap(values: np.ndarray, tokens: list[str], row_labels: list[str], title: str,
                  changed: int | None = None, height: int | None = None) -> go.Figure:
    """(rows, n) restored shares, rows labelled by ``row_labels``, positions by ``tokens``. ``changed``: the
    position where the two prompts differ, framed. A click on a cell selects (row, position) (customdata)."""
    rows, n = values.shape
    if len(tokens) != n or len(row_labels) != rows:
        raise ValueError(f"{rows} x {n} values need {rows} row labels and {n} tokens")
    lim = _limit(values)
    pos = np.array([f"{i + 1} '{t}'" for i, t in enumerate(tokens)], dtype=object)
    heat = go.Heatmap(z=values, zmin=-lim, zmax=lim, colorscale=RESTORE_SCALE,
                      colorbar=dict(title="restored", thickness=12, tickvals=[-1, 0, 1],
                                    ticktext=["−1", "0 corrupted", "1 clean"]),
                      hoverinfo="skip", y=list(row_labels), xgap=1, ygap=1)
    if n <= CELL_TEXT_MAX:
        heat.update(text=cell_text(values), texttemplate="%{text}", textfont=dict(size=11))
    hover = [[f"{row_labels[r]}<br>position {pos[p]}<br>restored {values[r, p]:.3f}" for p in range(n)]
             for r in range(rows)]
    fig = go.Figure([heat, _click_targets(values, list(range(n)), list(row_labels), hover)])
    if changed is not None and 0 <= changed < n:
        fig.add_shape(type="rect", x0=changed - 0.5, x1=changed + 0.5, y0=-0.5, y1=rows - 0.5,
                      line=dict(color="#111", width=2))
    fig.update_xaxes(**axis_ticks(tokens, max_ticks=PATCH_X_TICKS), title_text="position (its token)",
                     range=[-0.5, n - 0.5])
    fig.update_yaxes(autorange="reversed", automargin=True, type="category")
    fig.update_layout(title=title, height=height or max(220, 70 + 34 * rows), margin=dict(l=90, r=20, t=50, b=60),
                      clickmode="event+select", hovermode="closest", dragmode=False)
    return fig


def head_table_figure(values: np.ndarray, title: str, selected: tuple[int, int] | None = None) -> go.Figure:
    """(L, h) restored shares of each head, layers down, heads across, values in the cells; a click selects
    (layer, head) (customdata, counted from 0)."""
    L, h = values.shape
    lim = _limit(values)
    xs, ys = [f"H{r + 1}" for r in range(h)], [f"L{l + 1}" for l in range(L)]
    heat = go.Heatmap(z=values, zmin=-lim, zmax=lim, colorscale=RESTORE_SCALE, x=xs, y=ys, xgap=2, ygap=2,
                      colorbar=dict(title="restored", thickness=12, tickvals=[-1, 0, 1],
                                    ticktext=["−1", "0 corrupted", "1 clean"]), hoverinfo="skip")
    if h <= CELL_TEXT_MAX:
        heat.update(text=cell_text(values), texttemplate="%{text}", textfont=dict(size=13))
    hover = [[f"{head_label(l, r)}<br>restored {values[l, r]:.3f}<br>click to open it below" for r in range(h)]
             for l in range(L)]
    fig = go.Figure([heat, _click_targets(values, xs, ys, hover)])
    if selected is not None:
        l, r = selected
        fig.add_shape(type="rect", x0=r - 0.5, x1=r + 0.5, y0=l - 0.5, y1=l + 0.5, line=dict(color="#111", width=3))
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(type="category", side="top")
    fig.update_layout(title=title, height=max(200, 90 + 46 * L), margin=dict(l=50, r=20, t=80, b=20),
                      clickmode="event+select", hovermode="closest", hoverdistance=60, dragmode=False)
    return fig


def cell_text(values: np.ndarray) -> list[list[str]]:
    """Two decimals per cell, as text: a value that rounds to zero reads "0.00", never "-0.00" (Plotly's own format
    keeps the sign of -0.001), and a NaN cell is left blank."""
    return [["" if not np.isfinite(v) else f"{v:.2f}".replace("-0.00", "0.00") for v in row]
            for row in np.asarray(values, dtype=float)]


def sources_figure(table: np.ndarray, rows: list[str], cols: list[str], title: str) -> go.Figure:
    """The score-sources table: query-side sources down, key-side across, each entry its part of the score
    (red adds to the score, blue takes away), the values written in the cells."""
    lim = max(float(np.abs(table).max()), 1e-9)
    heat = go.Heatmap(z=table, x=cols, y=rows, zmin=-lim, zmax=lim, colorscale=RESTORE_SCALE, xgap=1, ygap=1,
                      colorbar=dict(title="part of<br>the score", thickness=12),
                      text=cell_text(table), texttemplate="%{text}", textfont=dict(size=11),
                      hovertemplate="query side: %{y}<br>key side: %{x}<br>%{z:.4f}<extra></extra>")
    fig = go.Figure(heat)
    fig.update_yaxes(autorange="reversed", type="category", automargin=True,
                     title_text="wrote the query's stream")
    fig.update_xaxes(type="category", side="top", tickangle=-35, automargin=True,
                     title_text="wrote the key's stream")
    fig.update_layout(title=dict(text=title, y=0.99, yanchor="top"), height=max(320, 160 + 34 * len(rows)),
                      margin=dict(l=140, r=20, t=150, b=20))
    return fig
