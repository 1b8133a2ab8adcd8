"""Figures and HTML for the Generation page: the temperature sweep, p(T) at one temperature, the sweep's
curves, the repetition bars, and the generated text shaded by probability (every piece of text escaped).
Pure functions: data in, figure or markup out.

As in core.figures.trace_figures, each figure is assembled as plain data and layout dicts and handed to
``core.figures.common.dict_figure`` (several times faster than make_subplots, add_trace, add_hline and update_* calls,
which validate property by property; the page redraws four of these on every prompt change). The layout is the one those
calls built: panels at make_subplots' domains, its subplot titles as annotations, and each reference line as
the shape and label add_hline / add_vline would add. Long numeric arrays go in as numpy arrays (float32 where
a value is only drawn), which Plotly neither walks element by element nor writes out digit by digit."""
from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import torch

from core.serve.fmt import visible
from core.analysis.generation import format_t
from core.analysis.sampling import temperature_softmax
from core.figures.ticks import FIGURE_PX, fitted_ticks
from core.figures.common import axis_suffix, dict_figure
from core.figures.trace_figures import _domains, _from_top, _panel_title

SUBPLOT_TITLE_FONT = dict(size=16)  # the size make_subplots gives its subplot titles
LABEL_PX = 12  # small print (the panels' second lines, bar values, a vocabulary's tick labels): 11 px at the least
TOKEN_PX = 15  # a token as a tick label: punctuation and the ␣ and ⏎ marks are thin glyphs, unreadable smaller
TITLE_PX = 17  # the figure title's font
LIMIT = "#d62728"  # the dotted lines at the values a limit predicts
CONTEXT_CHARS = 40  # characters of the prompt shown in grey above each continuation (the page says how many)


def _labels(chars) -> list[str]:
    return [visible(c) for c in chars]


def _drawn(values) -> np.ndarray:
    """A numeric array that is only drawn (and read in a hover at 3 to 4 digits): float32 is plenty."""
    return np.asarray(values, dtype=np.float32)


def _subplot_title(text: str, x: float, y: float) -> dict:
    """A subplot title as make_subplots writes it: centred at paper x, sitting on paper y."""
    title = {**_panel_title(text, x, y), "font": SUBPLOT_TITLE_FONT}
    del title["yshift"]  # make_subplots sets it right on the panel's top
    return title


def _spaced(n: int, spacing: float) -> list[list[float]]:
    """Domains of n equal panels with ``spacing`` (a fraction of the plot area) between them, as make_subplots
    lays them out; the last one ends at 1 exactly (rounding must not push it past, which Plotly refuses)."""
    domains = _domains([(1 - spacing * (n - 1)) / n] * n, spacing)
    domains[-1][1] = 1.0
    return domains


def _hline(y: float, text: str, position: str, axis: int = 1, **line) -> tuple[dict, dict]:
    """The shape and label ``fig.add_hline(y, annotation_text=text, annotation_position=position, row=...)``
    adds: a line across panel ``axis`` at data y, its label at the panel's left or right end, above or below."""
    a = axis_suffix(axis)
    shape = dict(type="line", xref=f"x{a} domain", yref=f"y{a}", x0=0, x1=1, y0=y, y1=y, line=line)
    vertical, side = position.split()
    label = dict(text=text, showarrow=False, xref=f"x{a} domain", yref=f"y{a}", x=1 if side == "right" else 0,
                 xanchor=side, y=y, yanchor="bottom" if vertical == "top" else "top")
    return shape, label


def _vline(x: float, axis: int = 1, **line) -> dict:
    """The shape ``fig.add_vline(x)`` adds to panel ``axis``: a line at data x from the panel's bottom to its top."""
    a = axis_suffix(axis)
    return dict(type="line", xref=f"x{a}", yref=f"y{a} domain", x0=x, x1=x, y0=0, y1=1, line=line)


SWEEP_TOP = 100  # px above the sweep's panels: the title (from TITLE_TOP) and the panels' titles (about 40 px)
TITLE_TOP = 8  # px from the figure's top edge to its title's


def sweep_bars(chars, logits: torch.Tensor, temperatures, n_top: int = 10, unit: str = "character") -> go.Figure:
    """One horizontal bar chart per temperature, side by side, over the same tokens in the same order
    (the model's top tokens at T = 1) and the same probability axis [0, 1]."""
    z = logits.double()
    order = torch.argsort(temperature_softmax(z, 1.0), descending=True)[:n_top].tolist()
    labels = _labels([chars[i] for i in order])
    cols = max(1, len(temperatures))
    dists = [temperature_softmax(z, float(t)).numpy() for t in temperatures]
    domains = _spaced(cols, 0.02)  # make_subplots' horizontal_spacing=0.02
    data, annotations = [], []
    for c, (t, d) in enumerate(zip(temperatures, dists), start=1):
        p = d[order]
        data.append(dict(type="bar", x=p.tolist(), y=labels, orientation="h", name=f"T = {format_t(t)}",  # n_top: short
                         showlegend=False, marker=dict(color="#1f77b4"), text=[f"{v:.2f}" for v in p],
                         textposition="auto", textfont=dict(size=LABEL_PX), constraintext="none", cliponaxis=False,
                         hovertemplate="'%{y}' p = %{x:.4f}<extra>T = " + format_t(t) + "</extra>",
                         xaxis=f"x{axis_suffix(c)}", yaxis=f"y{axis_suffix(c)}"))
        annotations.append(_subplot_title(f"T = {format_t(t)}<br><span style='font-size:{LABEL_PX}px'>top "
                                          f"{len(order)} hold {p.sum():.0%}</span>", sum(domains[c - 1]) / 2, 1.0))
    # the title at the top of the figure, the panels' two-line titles under it with room between
    height = SWEEP_TOP + 28 * len(order) + 60
    layout = dict(height=height, margin=dict(l=70, r=10, t=SWEEP_TOP, b=50), annotations=annotations,
                  title=dict(text=f"Next-{unit} distribution after the prompt, one panel per temperature",
                             font=dict(size=TITLE_PX), yref="container", y=1 - TITLE_TOP / height, yanchor="top"))
    for c in range(1, cols + 1):
        a = axis_suffix(c)
        layout[f"xaxis{a}"] = dict(anchor=f"y{a}", domain=domains[c - 1], range=[0, 1], tickvals=[0, 0.5, 1],
                                   title=dict(text="probability"))
        layout[f"yaxis{a}"] = (dict(anchor="x", domain=[0.0, 1.0], autorange="reversed", type="category",
                                    tickfont=dict(size=TOKEN_PX), title=dict(text=f"next {unit}")) if c == 1 else
                               dict(anchor=f"x{a}", domain=[0.0, 1.0], matches="y", showticklabels=False))
    return dict_figure(data, layout)


MAX_BARS = 200  # a GPT-2 vocabulary has 50,257 entries: one bar each would be unreadable and heavy


def distribution_bars(chars, logits: torch.Tensor, temperature: float, unit: str = "character",
                      max_bars: int = MAX_BARS) -> go.Figure:
    """All m probabilities at one temperature (the ``max_bars`` most likely at T = 1 when m is larger), in
    the model's T = 1 order, with the uniform level 1/m."""
    z = logits.double()
    m = z.shape[-1]
    order = torch.argsort(temperature_softmax(z, 1.0), descending=True)[:max_bars].tolist()
    shown = len(order)
    p = temperature_softmax(z, float(temperature)).numpy()[order]
    labels = _labels([chars[i] for i in order])
    x = np.arange(shown)
    data = [dict(type="bar", x=x, y=_drawn(p), name=f"p(T = {format_t(temperature)})", marker=dict(color="#1f77b4"),
                 customdata=labels, hovertemplate="'%{customdata}' p = %{y:.4f}<extra></extra>")]
    shape, label = _hline(1 / m, f"uniform 1/m = {1 / m:.4f}", "top right", color=LIMIT, dash="dot")
    # every token labelled while the labels fit side by side (upright, or turned for longer tokens); 200 BPE tokens
    # do not: then every k-th, with its rank (1 = most likely), and the hover names each bar's token
    ticks, reach = fitted_ticks(labels, (FIGURE_PX - 80) / shown, across=True, offset=1, fonts=(13, LABEL_PX))
    every = len(ticks["tickvals"]) < shown
    title = (f"every {unit} of the vocabulary, most likely at T = 1 first" if shown == m else
             f"the {shown} {unit}s most likely at T = 1 (of m = {m:,}), most likely first")
    k = ticks["tickvals"][1] - ticks["tickvals"][0] if every else 1  # at most 4: 200 bars are 4 px apart or more
    title += f"; every {k}{ {2: 'nd', 3: 'rd'}.get(k, 'th')} labelled with its rank, hover a bar for its {unit}" if every else ""
    return dict_figure(data, dict(
        height=320 + round(reach), margin=dict(l=60, r=20, t=50, b=40 + round(reach)), showlegend=False,
        title=dict(text=f"p(T) at T = {format_t(temperature)}"), shapes=[shape], annotations=[label],
        xaxis=dict(**ticks, title=dict(text=title)), yaxis=dict(range=[0, 1.02], title=dict(text="probability"))))


def sweep_curves(data: dict, m: int, mark: float | None = None, points: dict | None = None) -> go.Figure:
    """Entropy, largest probability and the distances to both limits as curves over a log T axis, with
    the values each limit predicts drawn as dotted lines. ``points``: a sweep at the user's temperatures
    (T > 0), drawn as markers; ``mark``: the slider's T, drawn as a vertical line. Three panels stacked
    (rows 1-3: axes x/y, x2/y2, x3/y3) on one shared log T axis, labelled under the bottom one."""
    log_m = math.log(m)
    rows = [_from_top(d) for d in _spaced(3, 0.07)]  # make_subplots' vertical_spacing=0.07, row 1 at the top
    titles = ("entropy H(p(T)) in nats", "largest probability max_i p_i(T)", "total variation distance to each limit")
    T = _drawn(data["T"])
    traces = []
    for row, key, name, color, hover in (
            (1, "entropy", "entropy", "#1f77b4", "T = %{x:.3g}<br>H = %{y:.4f} nats<extra></extra>"),
            (2, "max_prob", "max probability", "#9467bd", "T = %{x:.3g}<br>max p = %{y:.4f}<extra></extra>"),
            (3, "to_one_hot", "distance to one-hot (T → 0 limit)", "#2ca02c",
             "T = %{x:.3g}<br>%{y:.4f}<extra>to one-hot</extra>"),
            (3, "to_uniform", "distance to uniform (T → ∞ limit)", "#ff7f0e",
             "T = %{x:.3g}<br>%{y:.4f}<extra>to uniform</extra>")):
        traces.append(dict(type="scatter", x=T, y=_drawn(data[key]), name=name, line=dict(color=color),
                           hovertemplate=hover, xaxis=f"x{axis_suffix(row)}", yaxis=f"y{axis_suffix(row)}"))
    if points is not None and len(points["T"]):
        pts_T = _drawn(points["T"])
        for row, key in ((1, "entropy"), (2, "max_prob"), (3, "to_one_hot"), (3, "to_uniform")):
            traces.append(dict(type="scatter", x=pts_T, y=_drawn(points[key]), mode="markers",
                               marker=dict(size=8, color="black"), name="your temperatures",
                               showlegend=key == "entropy", hovertemplate="T = %{x:.3g}<br>%{y:.4f}<extra></extra>",
                               xaxis=f"x{axis_suffix(row)}", yaxis=f"y{axis_suffix(row)}"))
    shapes, annotations = [], [_subplot_title(t, 0.5, r[1]) for t, r in zip(titles, rows)]
    for row, y, text in ((1, 0.0, "0 (one-hot)"), (1, log_m, f"log m = {log_m:.3f} (uniform)"),
                         (2, 1.0, "1 (one-hot)"), (2, 1 / m, f"1/m = {1 / m:.4f} (uniform)"), (3, 0.0, "0")):
        shape, label = _hline(y, text, "bottom right" if y else "top left", axis=row, color=LIMIT, dash="dot")
        shapes.append(shape)
        annotations.append(label)
    if mark is not None and mark > 0:
        shapes += [_vline(mark, axis=row, color="#7f7f7f", dash="dash") for row in (1, 2, 3)]
    layout = dict(height=760, margin=dict(l=70, r=20, t=60, b=60), shapes=shapes, annotations=annotations,
                  legend=dict(orientation="h", y=-0.12, x=0.5, xanchor="center"))
    for row, (y_title, y_range) in enumerate((("nats", [-0.05 * log_m, 1.08 * log_m]), ("probability", [0, 1.05]),
                                              ("distance", [0, 1.05])), start=1):
        a = axis_suffix(row)
        layout[f"xaxis{a}"] = (dict(anchor=f"y{a}", domain=[0.0, 1.0], type="log",
                                    title=dict(text="temperature T (log scale)")) if row == 3 else
                               dict(anchor=f"y{a}", domain=[0.0, 1.0], type="log", matches="x3", showticklabels=False))
        layout[f"yaxis{a}"] = dict(anchor=f"x{a}", domain=rows[row - 1], range=y_range, title=dict(text=y_title))
    return dict_figure(traces, layout)


def distinct_bars(temperatures, ratios, n: int = 3, unit: str = "character") -> go.Figure:
    """Distinct-n ratio of each continuation, one bar per temperature."""
    labels = [f"T = {format_t(t)}" for t in temperatures]
    y = [np.nan if r is None else r for r in ratios]
    data = [dict(type="bar", x=labels, y=y, marker=dict(color="#8c564b"),
                 text=[f"{v:.2f}" if v == v else "–" for v in y], textposition="auto",
                 hovertemplate="%{x}<br>distinct " + str(n) + "-grams %{y:.3f}<extra></extra>")]
    return dict_figure(data, dict(
        height=300, margin=dict(l=60, r=20, t=50, b=50),
        title=dict(text=f"Repetition: 1 means no {n}-{unit} sequence repeats, near 0 means a loop"),
        xaxis=dict(type="category", title=dict(text="temperature of the continuation")),
        yaxis=dict(range=[0, 1.05], title=dict(text=f"distinct {n}-grams / all {n}-grams"))))


# ---------------------------------------------------------------- shaded text

def shade(p: float) -> str:
    """Background for a character the model gave probability p: clear when sure, deep orange when surprised."""
    alpha = 0.85 * (1.0 - min(max(float(p), 0.0), 1.0))
    return f"rgba(255, 127, 14, {alpha:.3f})"


def hover_text(ch: str, prob: float, sample_prob: float | None, alternatives) -> str:
    head = f"'{visible(ch)}' p = {prob:.3f}"
    if sample_prob is not None and not math.isclose(sample_prob, prob, abs_tol=5e-4):
        head += f" (drawn with {sample_prob:.3f})"
    alts = ", ".join(f"'{visible(c)}' {q:.3f}" for c, q in alternatives)
    return f"{head}\ntop alternatives: {alts}"


def shaded_html(prompt: str, steps: list[dict], font_px: int = 15, boundaries: bool = False) -> str:
    """HTML of the prompt (plain) followed by the generated tokens, each on a background shaded by its
    probability, with the top alternatives in its hover title. Every piece of text is escaped, so nothing
    the user typed or the model produced can become markup. ``steps``: dicts with keys ch, prob,
    sample_prob, alternatives [(ch, prob), ...]. ``boundaries``: a thin line after every token, for tokens of
    several characters (a sure token has no background to show where it ends)."""
    def chars(text: str) -> str:
        return html.escape(text).replace("\n", "⏎<br>")

    out = [f'<div style="font-family: ui-monospace, monospace; font-size: {font_px}px; line-height: 1.6; '
           'white-space: pre-wrap; word-break: break-all;">',
           f'<span style="color: #7f7f7f;">{chars(prompt)}</span>']
    for s in steps:
        title = html.escape(hover_text(s["ch"], s["prob"], s.get("sample_prob"), s["alternatives"]), quote=True)
        edge = " box-shadow: inset -1px 0 0 #b0b0b0;" if boundaries else ""
        out.append(f'<span title="{title}" style="background: {shade(s["prob"])}; border-radius: 2px;{edge}">'
                   f'{chars(s["ch"])}</span>')
    out.append("</div>")
    return "".join(out)


def legend_html(unit: str = "character") -> str:
    cells = "".join(f'<span style="background: {shade(p)}; padding: 0 6px; font-family: monospace;">{p:g}</span>'
                    for p in (1.0, 0.75, 0.5, 0.25, 0.05))
    return f'<div style="font-size: 13px; color: #555;">probability the model gave the {html.escape(unit)}: {cells}</div>'
