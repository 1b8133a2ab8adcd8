"""Plotly figure builders. Pure functions: data in, figure out; tested on the figure's data."""
from __future__ import annotations

import functools

import numpy as np
import plotly.graph_objects as go


@functools.lru_cache(maxsize=64)
def _named_scale(name: str) -> tuple:
    """A named colour scale ("Blues", "RdBu_r") as Plotly's validator writes it: ((0.0, "rgb(...)"), ...)."""
    return tuple(tuple(stop) for stop in go.Heatmap(colorscale=name).colorscale)


# the only Plotly attributes whose names hold an underscore (plotly/validators/_validators.json); any other
# underscore in a key is a path
_UNDERSCORED = frozenset({"paper_bgcolor", "plot_bgcolor", "error_x", "error_y", "error_z", "copy_ystyle",
                          "copy_zstyle"})


def _canonical(obj):
    """Trace or layout dicts in the form Plotly's validation would give them: magic underscores spelled out
    ({"marker_color": c} -> {"marker": {"color": c}}, merged with a "marker" dict already there) and named colour
    scales written out (plotly.js knows other scales by some of the same names). Containers are new; values
    (arrays included) are shared."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            value = _canonical(value)
            if key.endswith("colorscale") and isinstance(value, str):
                value = [list(stop) for stop in _named_scale(value)]
            parts = [key] if key in _UNDERSCORED else key.split("_")
            node = out
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            last = parts[-1]
            if isinstance(value, dict) and isinstance(node.get(last), dict):
                node[last].update(value)
            else:
                node[last] = value
        return out
    if isinstance(obj, (list, tuple)):
        return [_canonical(v) for v in obj]
    return obj


def axis_suffix(i: int) -> str:
    """The suffix of panel i's axes (from 1) in a figure's layout: "" for the first ("xaxis", "x"), then "2", ..."""
    return "" if i == 1 else str(i)


def dict_figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure from plain trace and layout dicts, not validated property by property again. Validation cost
    more than building the figure (the attention panels: 55 ms against 10) and pages redraw their figures on
    every prompt a student types; what validation would change (magic underscores, named colour scales) is done
    by ``_canonical``, and tests/test_figure_dicts.py checks that every figure the pages draw this way encodes to
    the same JSON as its validated twin (which also catches a misspelt property)."""
    return go.Figure(data=_canonical(data), layout=_canonical(layout), _validate=False)


# ----------------------------------------------------------------------------- panels side by side, as plain dicts

MASKED_GREY = "#c8c8c8"  # background showing through cells that have no weight at all (masked)


def row_of_panels(widths: list[float], spacing: float, titles: list[str], shared_y: bool = False) -> dict:
    """Layout of panels side by side, as make_subplots(rows=1, cols=len(widths), column_widths=widths,
    horizontal_spacing=spacing, subplot_titles=titles, shared_yaxes=shared_y) lays them out, as plain dicts:
    axes "xaxis", "xaxis2", ... anchored to their y axes, and the titles as annotations above the panels.
    Figures built from plain dicts (``dict_figure``) cost a fraction of make_subplots and update_*
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


def panel_axes(layout: dict, kind: str) -> list[dict]:
    """The panel layout's x (kind "x") or y axes, first panel first."""
    return [v for k, v in layout.items() if k.startswith(f"{kind}axis")]


def panel_axis(layout: dict, kind: str, col: int) -> dict:
    """Panel ``col``'s (from 1) x (kind "x") or y axis in a panel layout."""
    return layout[f"{kind}axis{axis_suffix(col)}"]


def on_panel(col: int) -> dict:
    """A trace's axes in panel ``col`` (from 1)."""
    sfx = axis_suffix(col)
    return dict(xaxis=f"x{sfx}", yaxis=f"y{sfx}")


def panel_refs(col: int) -> dict:
    """A shape's coordinates in panel ``col``'s data."""
    sfx = axis_suffix(col)
    return dict(xref=f"x{sfx}", yref=f"y{sfx}")


def f32(a) -> np.ndarray:
    """A heatmap's values as float32: Plotly sends numpy arrays as binary typed arrays, and float32 halves the
    bytes every rerun ships to the browser (7 significant digits, far below what a colour can show)."""
    return np.asarray(a, dtype=np.float32)


def _bucket_means(values: list[float], max_points: int) -> tuple[list[float], list[float]]:
    """(x, y): the mean of each run of consecutive values, at most max_points of them; x is the step
    (1-based) at the middle of each run. Keeps a 12,000-step curve light enough to redraw every second."""
    n = len(values)
    size = max(1, -(-n // max_points))  # ceil(n / max_points)
    xs, ys = [], []
    for i in range(0, n, size):
        chunk = values[i:i + size]
        xs.append(i + (len(chunk) + 1) / 2)
        ys.append(sum(chunk) / len(chunk))
    return xs, ys


def loss_curve(rows: list[dict], title: str = "Training loss", step_losses: list[float] | None = None,
               total_steps: int | None = None, baseline: float | None = None,
               marks: dict[int, str] | None = None, unit: str = "character") -> go.Figure:
    """Train and validation loss against step from a checkpoint's log rows.

    step_losses: the batch loss of every step (a noisy light trace, averaged down to 400 points);
    total_steps: fixes the x axis to the whole planned run, so a live curve grows into place;
    baseline: a horizontal reference line, e.g. ln m, the loss of guessing uniformly;
    marks: step -> label, vertical lines at events such as the step where an induction head formed;
    unit: what the loss is averaged over, the model's token ("character" for a character model)."""
    fig = go.Figure()
    if step_losses:
        xs, ys = _bucket_means(step_losses, 400)
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name="batch loss", line=dict(width=1, color="#bbbbbb"),
                                 hovertemplate="step %{x:,.0f}<br>batch loss %{y:.3f}<extra></extra>"))
    for key, name, dash in (("train_loss", "training", "solid"), ("val_loss", "validation", "dash")):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if pts:
            fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=name,
                                     line=dict(dash=dash),
                                     hovertemplate="step %{x:,}<br>" + name + " loss %{y:.3f}<extra></extra>"))
    if baseline is not None:
        fig.add_hline(y=baseline, line=dict(color="gray", dash="dot", width=1),
                      annotation_text=f"uniform guess ln m = {baseline:.2f}", annotation_position="top right")
    for step, text in (marks or {}).items():
        fig.add_vline(x=step, line=dict(color="crimson", width=1),
                      annotation_text=text, annotation_position="top left", annotation_font_color="crimson")
    fig.update_layout(title=title, xaxis_title="optimisation step", yaxis_title=f"cross-entropy (nats per {unit})",
                      height=360, margin=dict(l=60, r=20, t=50, b=50), legend=dict(orientation="h", y=1.02, x=1,
                                                                                    xanchor="right", yanchor="bottom"))
    if total_steps:
        fig.update_xaxes(range=[0, total_steps])
    return fig
