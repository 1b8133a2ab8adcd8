"""Tick labels for a token axis: which tokens get a label, in what font and turned how, so that none overlaps
its neighbour (the attention panels, the trace, generation and the lesson's charts all label tokens this way); and
for a log axis, whole numbers written by core.serve.fmt (``log_ticks``, ``log_axes``: the scaling pages' figures)."""
from __future__ import annotations

import math

from core.serve.fmt import human, shown_pos

MAX_TICKS = 48
# Token axes are labelled for a chart this wide: what a stretched chart gets on a 1,366-px laptop screen with the
# sidebar open (1,400 px: 940). A wider screen leaves the labels more room than they need, never less
FIGURE_PX = 900
AXIS_CHARS = 8       # a token's label is cut to this many characters on an axis (its hover shows it whole)
TICK_FONT = 11
CHAR_W = 0.55        # a label character's width, in font sizes (Plotly's sans serif, on average)
LINE_H = 1.25        # a label line's height, in font sizes: labels closer than this overlap


def axis_ticks(tokens: list[str], offset: int = 0, max_ticks: int = MAX_TICKS) -> dict:
    """Tick positions and labels for a token axis; thinned when there are too many to read. Labels of one or two
    characters stay upright; longer ones (sub-word tokens) let Plotly turn an x axis's labels when they overlap."""
    n = len(tokens)
    step = max(1, math.ceil(n / max_ticks))
    vals = list(range(0, n, step))
    text = [tokens[i] if step == 1 else f"{tokens[i]} {shown_pos(offset + i)}" for i in vals]  # from 1, as on screen
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
    text = [short[i] if step == 1 else f"{short[i]} {shown_pos(offset + i)}" for i in vals]
    reach = max((len(t) for t in text), default=1) * CHAR_W * font
    ticks = dict(tickmode="array", tickvals=vals, ticktext=text, tickfont=dict(size=font), showgrid=False,
                 zeroline=False)
    if across:
        ticks["tickangle"] = 0 if upright else -90
        reach = line if upright else reach
    return ticks, reach


def log_ticks(lo: float, hi: float, label=None, most: int = 10) -> dict:
    """Ticks of a log axis from ``lo`` to ``hi`` (values, not logs): 1, 2, 3 and 5 of each decade within about one
    decade, 1, 2 and 5 within two, else whole powers of ten (every k-th, at most ``most``), each labelled whole by
    ``label`` (default core.serve.fmt.human: 20, 500k, 3.25 × 10¹⁷). Plotly's own labels between decades are single
    digits ("9 10 2 3" for 9, 10, 20, 30), which read as the wrong numbers."""
    label = label or human
    a, b = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)
    steps = (1, 2, 3, 5) if b - a <= 1 else (1, 2, 5) if b - a <= 2 else (1,)
    every = max(1, math.ceil((b - a + 1) / most))
    vals = [m * 10.0 ** e for e in range(a, b + 1) if (e - a) % every == 0 for m in steps]
    vals = [v for v in vals if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)] or [lo, hi]
    return dict(tickvals=vals, ticktext=[label(v) for v in vals])


def _axis_data(fig, name: str) -> list[float]:
    """The positive finite values the traces on layout axis ``name`` ('xaxis', 'yaxis2', ...) put on it."""
    letter, ref = name[0], name[0] + name[5:]  # 'yaxis2' -> 'y', 'y2'
    out = []
    for t in fig.data:
        if (getattr(t, f"{letter}axis", None) or letter) != ref:
            continue
        for v in getattr(t, letter, None) if getattr(t, letter, None) is not None else ():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0:
                out.append(float(v))
    return out


def log_axes(fig, **labels):
    """Every log axis of ``fig`` that has no ticks of its own gets ``log_ticks`` over its range (its own, else its
    traces' data); ``labels``: a label function for some axes by name (xaxis=pretty_sci for FLOPs). Returns fig."""
    for name in [k for k in fig.layout.to_plotly_json() if k.startswith(("xaxis", "yaxis"))]:
        axis = fig.layout[name]
        if axis.type != "log" or axis.tickvals is not None:
            continue
        if axis.range is not None:
            lo, hi = (10.0 ** r for r in axis.range)
        else:
            data = _axis_data(fig, name)
            if not data:
                continue
            lo, hi = min(data), max(data)
        if hi > lo:
            axis.update(log_ticks(lo, hi, labels.get(name)))
    return fig
