"""Figures, tables and HTML for the "Switch heads off" page. Pure functions: arrays in, figure or markup out.

Heads are (layer, head) pairs counted from 0 in code; on screen they count from 1 ("L1 H1" is the first head
of the first layer), as on the Attention page. ``head_label`` is the one place that converts. Every piece
of text that reaches HTML is escaped, so nothing typed into the prompt can become markup.
"""
from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from core.analysis.attention import future_mask, pool_pattern
from core.figures.common import MASKED_GREY
from core.figures.ticks import axis_ticks
from core.serve.fmt import head_label, shown_pos, visible

WORSE = (214, 39, 40)    # red: the loss rose when the heads were switched off
BETTER = (31, 119, 180)  # blue: the loss fell
MIN_SCALE = 0.5          # nats of change that shade a character fully, at the least
STRIPE_X_TICKS = 24      # labels on the key axis: more run into each other
MONO = "font-family: ui-monospace, monospace; line-height: 1.7; white-space: pre-wrap; word-break: break-all;"


def _chars(text: str) -> str:
    """Escaped text for HTML, a newline shown as ⏎ before the line break."""
    return html.escape(text).replace("\n", "⏎<br>")


# ---------------------------------------------------------------- loss change, character by character

def change_scale(delta: np.ndarray) -> float:
    """Nats of change that shade a character fully: the largest change shown, at least MIN_SCALE (so that
    tiny changes stay pale instead of being stretched to full colour)."""
    delta = np.asarray(delta, dtype=float)
    return max(MIN_SCALE, float(np.max(np.abs(delta)))) if delta.size else MIN_SCALE


def change_color(d: float, scale: float) -> str:
    """Background for a change of d nats: red when worse (d > 0), blue when better, clear at 0."""
    alpha = 0.8 * min(abs(float(d)) / scale, 1.0)
    r, g, b = WORSE if d > 0 else BETTER
    return f"rgba({r}, {g}, {b}, {alpha:.3f})"


def loss_change_html(tokens, before: np.ndarray, after: np.ndarray, font_px: int = 16, boundaries: bool = False) -> str:
    """The prompt's tokens (a string of characters, or a list of token strings) with token i + 1 on a
    background shaded by after[i] - before[i], the change in its loss (``before``/``after``: token_losses,
    entry i predicting token i + 1). The first token has no loss (nothing before it predicts it) and stays
    grey. Hover a token for its two losses. ``boundaries``: a thin line after every token, for tokens of several
    characters (an unchanged token has no background to show where it ends)."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    tokens = list(tokens)
    if not (len(before) == len(after) == len(tokens) - 1):
        raise ValueError(f"{len(tokens)} tokens need {len(tokens) - 1} losses, got {len(before)} and {len(after)}")
    scale = change_scale(after - before)
    out = [f'<div style="{MONO} font-size: {font_px}px;">',
           f'<span style="color: #7f7f7f;" title="the first token: nothing before it predicts it">'
           f'{_chars("".join(tokens[:1]))}</span>']
    for i, ch in enumerate(tokens[1:]):
        d = after[i] - before[i]
        title = html.escape(f"'{visible(ch)}' at position {i + 1}: loss {before[i]:.3f} → {after[i]:.3f} nats "
                            f"({d:+.3f})", quote=True)
        edge = " box-shadow: inset -1px 0 0 #b0b0b0;" if boundaries else ""
        out.append(f'<span title="{title}" style="background: {change_color(d, scale)}; border-radius: 2px;{edge}">'
                   f'{_chars(ch)}</span>')
    out.append("</div>")
    return "".join(out)


def loss_change_legend(scale: float, unit: str = "character") -> str:
    cells = "".join(f'<span style="background: {change_color(d, scale)}; padding: 0 6px; font-family: monospace;">'
                    f'{html.escape(format(d, "+.2f"))}</span>' for d in (-scale, -scale / 2, 0.0, scale / 2, scale))
    unit = html.escape(unit)
    return (f'<div style="font-size: 13px; color: #555;">change in a {unit}\'s loss (nats), after − before: '
            f'{cells} &nbsp; red: predicted worse with the heads off, blue: better; '
            f'hover a {unit} for its losses</div>')


# ---------------------------------------------------------------- next character, before and after

def next_token_bars(chars, before: np.ndarray, after: np.ndarray, after_name: str, actual: int | None = None,
                    n_top: int = 10, unit: str = "character") -> go.Figure:
    """Grouped bars of two next-character distributions (m,) over the ``n_top`` characters most likely in
    either, most likely first. ``actual``: the id of the character that really comes next, marked."""
    before, after = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if before.shape != after.shape or before.shape != (len(chars),):
        raise ValueError(f"expected two distributions over {len(chars)} characters, got {before.shape} and {after.shape}")
    order = np.argsort(-np.maximum(before, after), kind="stable")[:n_top]
    labels = [visible(chars[i]) for i in order]
    x = np.arange(len(order))
    fig = go.Figure()
    for name, p, color in (("all heads on", before, "#7f7f7f"), (after_name, after, "#d62728")):
        fig.add_trace(go.Bar(x=x, y=p[order], name=name, marker_color=color, customdata=labels,
                             text=[f"{v:.2f}" for v in p[order]], textposition="outside",
                             hovertemplate="'%{customdata}' p = %{y:.4f}<extra>" + html.escape(name, quote=False) + "</extra>"))
    title = f"Next {unit}: the most likely ones, with and without the heads"
    if actual is not None:
        title += (f"<br><sup>the {unit} that really comes next, '{html.escape(visible(chars[actual]), quote=False)}', gets "
                  f"p = {before[actual]:.3f} with all heads on and {after[actual]:.3f} without them</sup>")
        hits = np.flatnonzero(order == actual)
        if hits.size:
            fig.add_annotation(x=int(hits[0]), y=float(max(before[actual], after[actual])), text="really next",
                               showarrow=True, arrowhead=2, ay=-40, yshift=14)
    fig.update_xaxes(tickvals=x, ticktext=labels, tickfont=dict(size=16), title_text=f"next {unit} (␣ space, ⏎ newline)")
    fig.update_yaxes(range=[0, 1.15], title_text="probability")
    fig.update_layout(barmode="group", height=380, margin=dict(l=60, r=20, t=80, b=60), title=title,
                      legend=dict(orientation="h", y=1.0, x=1.0, xanchor="right", yanchor="bottom"))
    return fig


# ---------------------------------------------------------------- greedy continuation

def continuation_html(context: str, text: str, reference: str | None = None, font_px: int = 15) -> str:
    """The end of the prompt (grey), then a continuation; characters that differ from ``reference`` at the
    same place are marked (yellow), so two continuations side by side show where they part."""
    def chars(t: str) -> str:  # escaped here, in the function the page renders (tests/test_security.py)
        return html.escape(t).replace("\n", "⏎<br>")

    out = [f'<div style="{MONO} font-size: {font_px}px;">', f'<span style="color: #9a9a9a;">{chars(context)}</span>']
    for i, ch in enumerate(text):
        differs = reference is not None and (i >= len(reference) or reference[i] != ch)
        style = ' style="background: #ffe08a; border-radius: 2px;"' if differs else ""
        out.append(f"<span{style}>{chars(ch)}</span>")
    out.append("</div>")
    return "".join(out)


# ---------------------------------------------------------------- tables

def ranking_frame(effects, second=None, induction: np.ndarray | None = None) -> pd.DataFrame:
    """One row per head, in the order of ``effects`` (rank_heads: largest rise first): the mean loss on the
    prompt with that head off and the rise over the intact model; with ``second`` (rank_heads on the second
    copy) the same there; with ``induction`` ((L, h) scores) each head's induction score."""
    rows = []
    by_head = {(e.layer, e.head): e for e in (second or [])}
    for e in effects:
        row = {"head": head_label(e.layer, e.head), "loss with it off": e.loss, "rise": e.increase}
        if second is not None:
            s = by_head[(e.layer, e.head)]
            row["second copy: loss with it off"] = s.loss
            row["second copy: rise"] = s.increase
        if induction is not None:
            row["induction score"] = float(induction[e.layer, e.head])
        rows.append(row)
    return pd.DataFrame(rows)


def induction_frame(scores: np.ndarray) -> pd.DataFrame:
    """(L, h) induction scores as a table: rows 'layer 1'.., columns 'head 1'.. (counted from 1)."""
    L, h = scores.shape
    return pd.DataFrame(np.asarray(scores, dtype=float), index=[f"layer {l + 1}" for l in range(L)],
                        columns=[f"head {k + 1}" for k in range(h)])


RISE_COLOR = "#ffd6d6"    # the ranking's largest rise
INDUCTION_COLOR = "#c7ecc7"  # an induction score at or above the threshold


def ranking_table(effects, second=None, induction: np.ndarray | None = None):
    """``ranking_frame`` as the page shows it (a pandas Styler): three decimals, each rise column's largest
    value highlighted."""
    frame = ranking_frame(effects, second, induction)
    rises = [col for col in frame.columns if col.endswith("rise")]
    return frame.style.format({col: "{:.3f}" for col in frame.columns if col != "head"}).highlight_max(
        subset=rises, color=RISE_COLOR)


def induction_table(scores: np.ndarray, threshold: float):
    """``induction_frame`` as the page shows it: three decimals, the scores at or above ``threshold`` highlighted."""
    return induction_frame(scores).style.format("{:.3f}").highlight_between(left=threshold, right=None,
                                                                            color=INDUCTION_COLOR)


# ---------------------------------------------------------------- the induction stripe

STRIPE_MAX_CELLS = 256  # cells a side the stripe's heatmap sends at most; a longer sequence is pooled to fit


def stripe_figure(pattern: np.ndarray, tokens: list[str], period: int, title: str = "",
                  unit: str = "character", max_cells: int = STRIPE_MAX_CELLS) -> go.Figure:
    """One head's (n, n) attention pattern on a sequence written twice (period T), query i down the rows,
    key j across, masked cells grey. The dotted line marks the induction keys j = i − T + 1 of the second
    copy's queries i >= T: the character right after the earlier occurrence of query i's character.
    Longer than ``max_cells`` positions, the heatmap is pooled into blocks of b positions
    (core.analysis.attention.pool_pattern: a cell is the weight its queries put on its keys, on average, so a stripe keeps
    its strength) drawn at the positions they cover; axes, ticks and the line stay in positions."""
    n = len(tokens)
    if pattern.shape != (n, n):
        raise ValueError(f"expected an ({n}, {n}) pattern for {n} tokens, got {pattern.shape}")
    # the figure's coordinates are positions as the screen counts them, from 1 (shown_pos): the hover, the line and
    # the ticks all read them so
    if n <= max_cells:
        z = np.where(future_mask(n), np.nan, pattern)
        q = np.array([f"{shown_pos(i)} '{t}'" for i, t in enumerate(tokens)], dtype=object)
        at = np.arange(n) + 1
        heat = go.Heatmap(z=z, x=at, y=at, colorscale="Blues", zmin=0, zmax=1,
                          colorbar=dict(title="weight", thickness=12),
                          customdata=np.stack(np.broadcast_arrays(q[:, None], q[None, :]), axis=-1),
                          hovertemplate="query %{customdata[0]}<br>key %{customdata[1]}<br>weight %{z:.3f}"
                                        "<extra></extra>")
    else:  # per-cell hover text for n^2 cells would be tens of MB: pooled blocks, labelled by their positions
        z, b = pool_pattern(pattern, max_cells)
        centres = np.arange(z.shape[-1]) * b + (b - 1) / 2 + 1
        heat = go.Heatmap(z=z.astype(np.float32), x=centres, y=centres, colorscale="Blues", zmin=0, zmax=1,
                          colorbar=dict(title=f"weight<br>({b}×{b} blocks)", thickness=12),
                          hovertemplate=f"queries around %{{y:.0f}}, keys around %{{x:.0f}}<br>blocks of {b} "
                                        "positions: weight %{z:.3f}<extra></extra>")
    fig = go.Figure(heat)
    rows = np.arange(period, n)
    # dotted and thin, so that a real stripe under it stays visible
    fig.add_trace(go.Scatter(x=rows - period + 2, y=rows + 1, mode="lines",
                             name=f"induction keys: j = i − {period} + 1",
                             line=dict(color="#d62728", width=1.5, dash="dot"), opacity=0.7, hoverinfo="skip"))

    def shifted(ticks: dict) -> dict:  # tick positions from 1, as the coordinates
        return {**ticks, "tickvals": [v + 1 for v in ticks["tickvals"]]}

    fig.update_xaxes(**shifted(axis_ticks(tokens, max_ticks=STRIPE_X_TICKS)), range=[0.5, n + 0.5],
                     title_text=f"key j (the {unit}s looked at)")
    # a long sequence of sub-word tokens: fewer query labels, and room for them left of the axis title
    y_ticks = axis_ticks(tokens) if n <= max_cells else axis_ticks(tokens, max_ticks=STRIPE_X_TICKS)
    fig.update_yaxes(**shifted(y_ticks), range=[n + 0.5, 0.5], title_text=f"query i (the {unit} predicting the next)",
                     automargin=True)
    fig.update_layout(title=title, height=620, width=None, plot_bgcolor=MASKED_GREY, margin=dict(l=70, r=20, t=60, b=60),
                      legend=dict(orientation="h", y=1.0, x=1.0, xanchor="right", yanchor="bottom"))
    return fig
