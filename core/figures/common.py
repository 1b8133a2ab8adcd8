"""Plotly figure builders. Pure functions: data in, figure out; tested on the figure's data."""
from __future__ import annotations

import functools

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
