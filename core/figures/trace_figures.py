"""Figures for the "Inside the model" page. Pure functions: arrays from core.analysis.trace in, Plotly figures out.

Every figure that lists positions or keys reads from the top down, as the attention page's matrices do;
characters go through core.serve.fmt.visible (␣ for a space, ⏎ for a newline). Layers and heads arrive counted
from 0 and are shown from 1.

Each figure is assembled as plain data and layout dicts and handed to ``core.figures.common.dict_figure``, several
times faster than make_subplots and update_* calls, which validate property by property; the page draws nine
of these on every rerun (its target is 300 ms). Panels side by side or stacked get their axis
domains from ``_domains``.
"""
from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import torch

from core.figures.attention_panels import PANELS_PX
from core.figures.ticks import axis_ticks, fitted_ticks
from core.figures.common import dict_figure
from core.serve.fmt import head_label, pos_label, shown_pos, visible
from core.analysis.generation import format_t
from core.nn.config import ACTIVATION_NAMES, SILENT_WORDS, silent_units
from core.analysis.sampling import temperature_softmax
from core.analysis.trace import Attribution, StreamStep

ADDED = "#e6550d"     # orange: what a step adds
STREAM = "#3b5bdb"    # blue: the stream itself
POSITIVE, NEGATIVE = "#d6604d", "#4393c3"  # bars of signed numbers, as the RdBu heatmaps colour them
KIND_COLORS = {"embedding": "#7f7f7f", "head": "#3b5bdb", "mlp": "#e6550d", "others": "#bdbdbd"}
ATTRIBUTION_BARS = 40  # writers drawn one by one at most; the rest share one bar (GPT-2 small has 169 writers)
CHOSEN = "#d62728"    # the frame around what the page has picked
LENS_SCALE = [[0.0, "#ffffff"], [1.0, "#5fb86a"]]  # light enough that a black character stays readable
BAND = "#f1f3f8"      # background band behind a block's two rows
TITLE_FONT = dict(size=14)
NO_GRID = dict(showgrid=False, zeroline=False, ticks="")  # heatmap axes: lines would show through the cell gaps


def _text(s: str) -> str:
    """Text for a Plotly title or hover: <, > and & escaped; quotes left alone, since Plotly shows '&quot;' as is."""
    return html.escape(s, quote=False)


def char_label(pos: int, ch: str) -> str:
    """11, 'e' -> "12 'e'": a position as the screen counts it (from 1) and the token there (a character, or a piece of
    a word), readable (␣, ⏎)."""
    return pos_label(pos, ch)


def _lim(*arrays) -> float:
    """Half-width of a colour scale centred on 0 that holds every value."""
    return max((float(np.max(np.abs(a))) for a in arrays if np.size(a)), default=1.0) or 1.0


def _signed(values: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(values) >= 0, POSITIVE, NEGATIVE)


def _domains(sizes: list[float], gap: float) -> list[list[float]]:
    """Domains in [0, 1] of panels of the given ``sizes`` (pixels), one after the other with ``gap`` pixels
    between them, measured from the start of the plot area."""
    total = sum(sizes) + gap * (len(sizes) - 1)
    out, start = [], 0.0
    for s in sizes:
        out.append([start / total, (start + s) / total])
        start += s + gap
    return out


def _from_top(domain: list[float]) -> list[float]:
    """A domain measured from the top of the plot area, as paper y (measured from the bottom)."""
    return [max(0.0, 1 - domain[1]), min(1.0, 1 - domain[0])]


def _panel_title(text: str, x: float, y: float) -> dict:
    """A subplot title above a panel: centred at paper x, just above paper y."""
    return dict(text=text, x=x, y=y, xref="paper", yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                font=TITLE_FONT, yshift=4)


def _sub(text: str) -> str:
    """A second title line, smaller than the title but readable (Plotly's <sup> is too small for a sentence)."""
    return f'<span style="font-size: 12.5px; color: #444">{text}</span>'


def _heat(z, lim: float, **kw) -> dict:
    """A heatmap trace on a colour scale centred on 0: red positive, blue negative, white 0."""
    return {**dict(type="heatmap", z=z, colorscale="RdBu_r", zmid=0, zmin=-lim, zmax=lim, xgap=1, ygap=1), **kw}


def _key_ticks(labels: list[str], row_px: float, chosen: int | None = None) -> dict:
    """Ticks for an axis of keys labelled "12 'e'", one row each ``row_px`` high: every one when they fit, else
    every k-th, and the ``chosen`` key always (its neighbours that its label would touch left out)."""
    ticks, _ = fitted_ticks(labels, row_px, across=False, keep=chosen)
    ticks.update(NO_GRID, ticktext=[labels[v] for v in ticks["tickvals"]])  # the labels whole: they hold positions
    return ticks


# ---------------------------------------------------------------- 1. the residual stream

def stream_figure(steps: list[StreamStep], selected: int | None = None) -> go.Figure:
    """The stream as a column, first step at the top: for each step the norm of what it adds (orange) and the
    norm of the stream after it (blue). Bars carry customdata [step index] so a click can open a step."""
    names = [s.name for s in steps]
    added = np.array([np.linalg.norm(s.added) for s in steps])
    after = np.array([np.linalg.norm(s.after) for s in steps])
    y = np.arange(len(steps))
    # customdata as plain lists: a numpy array would travel as a typed array, which a click reports garbled
    data = [dict(type="bar", x=values, y=y, orientation="h", name=label, marker_color=color,
                 customdata=[[i] for i in range(len(steps))],
                 hovertext=names, text=[f"{v:.2f}" for v in values], textposition="outside", cliponaxis=False,
                 hovertemplate="%{hovertext}<br>" + label + " = %{x:.3f}<br>click to open its numbers<extra></extra>")
            for label, values, color in (("‖what this step adds‖", added, ADDED),
                                         ("‖stream after this step‖", after, STREAM))]
    shapes = [dict(type="rect", xref="paper", yref="y", x0=0, x1=1, y0=i - 0.5, y1=i + 1.5, fillcolor=BAND,
                   line_width=0, layer="below") for i, s in enumerate(steps) if s.kind == "attn"]  # one band a block
    if selected is not None:
        shapes.append(dict(type="rect", xref="paper", yref="y", x0=-0.005, x1=1.005, y0=selected - 0.5,
                           y1=selected + 0.5, line=dict(color=CHOSEN, width=2)))
    xmax = float(max(added.max(), after.max())) * 1.18 or 1.0
    return dict_figure(data, dict(
        barmode="group", bargap=0.25, height=90 + 56 * len(steps), margin=dict(l=110, r=20, t=40, b=50),
        legend=dict(orientation="h", x=0, y=1.0, yanchor="bottom"), clickmode="event+select", dragmode=False,
        shapes=shapes, plot_bgcolor="white",
        yaxis=dict(tickvals=y, ticktext=names, range=[len(steps) - 0.5, -0.5], tickfont=dict(size=14)),
        xaxis=dict(title=dict(text="Euclidean norm at this position"), range=[0, xmax], gridcolor="#e5e5e5")))


def clicked_step(points, n_steps: int) -> int | None:
    """The step a click on ``stream_figure`` chose (Streamlit's selection ``points``), from the bar's customdata
    [step index]; None when nothing usable was clicked (no point, another trace's data, an index out of range)."""
    data = points[0].get("customdata") if points else None
    if isinstance(data, list) and data and 0 <= int(data[0]) < n_steps:
        return int(data[0])
    return None


def vector_rows(rows, labels: list[str], title: str) -> go.Figure:
    """A small heatmap of vectors stacked as rows (first at the top), one column per component, on one colour
    scale centred on 0 (red positive, blue negative), so that a sum of rows can be read column by column."""
    z = np.asarray(rows, dtype=float)
    r, d = z.shape
    if len(labels) != r:
        raise ValueError(f"{r} rows need {r} labels, got {len(labels)}")
    cd = np.broadcast_to(np.array(labels, dtype=object)[:, None], (r, d))
    data = [_heat(z, _lim(z), ygap=3, customdata=cd, colorbar=dict(thickness=12, title=dict(text="value")),
                  hovertemplate="%{customdata}<br>component %{x}: %{z:.4f}<extra></extra>")]
    return dict_figure(data, dict(
        title=dict(text=title, font=TITLE_FONT), height=120 + 34 * r, margin=dict(l=190, r=20, t=50, b=50),
        plot_bgcolor="white",
        yaxis=dict(tickvals=list(range(r)), ticktext=labels, range=[r - 0.5, -0.5], tickfont=dict(size=13), **NO_GRID),
        xaxis=dict(title=dict(text=f"component (0 … {d - 1})"), **NO_GRID)))


def step_rows_text(step: StreamStep, n_heads: int, token: str, pos: int, unit: str = "character") -> tuple:
    """(row labels, title, what adds up to what) for ``vector_rows`` of ``pages.inside.view.step_rows``: the
    words that go with each kind of step. ``token``: the text of the token at ``pos``, readable (core.serve.fmt.visible)."""
    if step.kind == "embed":
        return ([f"token '{token}'", f"position {shown_pos(pos)}", "= start of the stream"],
                f"The embedding: a vector for the {unit} plus a vector for its position",
                "the first two rows add up to the third")
    if step.kind == "attn":
        return (["stream before"] + [f"+ {head_label(step.layer, h)} adds" for h in range(n_heads)]
                + ["= attention adds (sum)", "stream after"],
                f"Block {step.layer + 1}, attention: each head's share, their sum, and the stream after",
                f"the {n_heads} head rows add up to the sum row, and the stream before plus that sum is the stream "
                "after")
    return (["stream before", "+ MLP adds", "= stream after"],
            f"Block {step.layer + 1}, MLP: what it adds to the stream", "the first two rows add up to the third")


# ---------------------------------------------------------------- 2. attention at one position

def neuron_view(q: np.ndarray, keys: np.ndarray, weights: np.ndarray, key_labels: list[str], chosen: int,
                query_label: str) -> go.Figure:
    """BertViz's neuron view, live: the query (top), every key it may see (one row each, first key at the
    top) and, beside each key, the weight the softmax gives it. The chosen key's row is framed and its bar red.
    q: (d_h,); keys: (i+1, d_h); weights: (i+1,)."""
    q, keys, weights = (np.asarray(a, dtype=float) for a in (q, keys, weights))
    nk, dh = keys.shape
    if q.shape != (dh,) or weights.shape != (nk,) or len(key_labels) != nk:
        raise ValueError(f"shapes do not match: q {q.shape}, keys {keys.shape}, weights {weights.shape}, "
                         f"{len(key_labels)} labels")
    if not 0 <= chosen < nk:
        raise ValueError(f"key {chosen} is not among the {nk} keys")
    rows_px, top, bottom = min(max(14 * nk, 160), PANELS_PX), 40, 50  # 14 px a key up to 80, each with its label
    q_dom, k_dom = (_from_top(d) for d in _domains([40, rows_px], 60))
    left, right = [0.0, 0.68], [0.76, 1.0]
    lim = _lim(q, keys)
    cd = np.broadcast_to(np.array(key_labels, dtype=object)[:, None], (nk, dh))
    data = [
        _heat(q[None], lim, showscale=False, xaxis="x", yaxis="y",
              hovertemplate="q_i, component %{x}: %{z:.4f}<extra></extra>"),
        _heat(keys, lim, customdata=cd, xaxis="x2", yaxis="y2",
              colorbar=dict(thickness=10, len=0.5, x=0.70, xanchor="left", y=k_dom[1], yanchor="top"),
              hovertemplate="key %{customdata}, component %{x}: %{z:.4f}<extra></extra>"),
        dict(type="bar", x=weights, y=np.arange(nk), orientation="h", customdata=key_labels, xaxis="x3", yaxis="y3",
             marker_color=np.where(np.arange(nk) == chosen, CHOSEN, STREAM), showlegend=False,
             hovertemplate="key %{customdata}: a_ij = %{x:.4f}<extra></extra>"),
    ]
    key_axis = dict(range=[nk - 0.5, -0.5], domain=k_dom)
    layout = dict(
        height=rows_px + 100 + top + bottom, margin=dict(l=90, r=20, t=top, b=bottom), plot_bgcolor="white",
        xaxis=dict(domain=left, anchor="y", matches="x2", showticklabels=False, **NO_GRID),
        yaxis=dict(domain=q_dom, anchor="x", showticklabels=False, **NO_GRID),
        xaxis2=dict(domain=left, anchor="y2", title=dict(text=f"component (0 … {dh - 1})"), **NO_GRID),
        yaxis2=dict(anchor="x2", **key_axis, **_key_ticks(key_labels, rows_px / nk, chosen)),
        xaxis3=dict(domain=right, anchor="y3", range=[0, 1.05], title=dict(text="weight a_ij"), gridcolor="#e5e5e5"),
        yaxis3=dict(anchor="x3", showticklabels=False, **NO_GRID, **key_axis),
        shapes=[dict(type="rect", xref="x2", yref="y2", x0=-0.5, x1=dh - 0.5, y0=chosen - 0.5, y1=chosen + 0.5,
                     line=dict(color=CHOSEN, width=2))],
        annotations=[_panel_title(f"query q_i at {_text(query_label)}", sum(left) / 2, q_dom[1]),
                     _panel_title("keys k_j it may see, one row each", sum(left) / 2, k_dom[1]),
                     _panel_title("weight after the softmax", sum(right) / 2, k_dom[1])])
    return dict_figure(data, layout)


def qk_terms(q: np.ndarray, k: np.ndarray, query_label: str, key_label: str) -> go.Figure:
    """The score of one (query, key) pair term by term: a bar per component c of q_c k_c (red positive, blue
    negative), with the running total as a line that ends at q . k."""
    q, k = np.asarray(q, dtype=float), np.asarray(k, dtype=float)
    if q.shape != k.shape or q.ndim != 1:
        raise ValueError(f"q and k must be vectors of one length, got {q.shape} and {k.shape}")
    terms = q * k
    dh = len(terms)
    dot = float(terms.sum())
    c = np.arange(dh)
    data = [dict(type="bar", x=c, y=terms, name="q_c · k_c", marker_color=_signed(terms),
                 customdata=np.stack([q, k], axis=1),
                 hovertemplate="component %{x}: q_c = %{customdata[0]:.3f}, k_c = %{customdata[1]:.3f}"
                               "<br>q_c · k_c = %{y:.4f}<extra></extra>"),
            dict(type="scatter", x=c, y=np.cumsum(terms), name="running total", mode="lines+markers",
                 line=dict(color="#333333", width=1.5), marker=dict(size=4),
                 hovertemplate="sum up to component %{x}: %{y:.4f}<extra></extra>")]
    sub = (f"the {dh} terms add up to q_i · k_j = {dot:.3f}; divided by √{dh} = {math.sqrt(dh):.3f}, that is the "
           f"score s_ij = {dot / math.sqrt(dh):.3f}")
    title = f"q_i · k_j term by term: query {_text(query_label)}, key {_text(key_label)}<br>{_sub(sub)}"
    return dict_figure(data, dict(
        title=dict(text=title, font=TITLE_FONT), height=360, margin=dict(l=60, r=20, t=80, b=50),
        plot_bgcolor="white",
        legend=dict(x=0.01, xanchor="left", y=0.99, yanchor="top", bgcolor="rgba(255,255,255,0.8)"),
        xaxis=dict(title=dict(text=f"component c (0 … {dh - 1})")),
        yaxis=dict(title=dict(text="q_c · k_c"), zeroline=True, zerolinecolor="#888", gridcolor="#e5e5e5")))


def weighted_values(weights: np.ndarray, values: np.ndarray, key_labels: list[str], max_rows: int = 12) -> go.Figure:
    """The head's output at one query: each key's value scaled by its weight, one row per key in position order
    (the ``max_rows`` keys with the largest weights; all the others summed in one last row, since a softmax
    usually leaves them little), and below, their sum z_i, column by column."""
    weights, values = np.asarray(weights, dtype=float), np.asarray(values, dtype=float)
    nk, dh = values.shape
    if weights.shape != (nk,) or len(key_labels) != nk:
        raise ValueError(f"{nk} values need {nk} weights and labels, got {weights.shape} and {len(key_labels)}")
    parts = weights[:, None] * values  # (i+1, d_h): a_ij v_j
    z = parts.sum(0)
    shown = np.sort(np.argsort(-weights, kind="stable")[:max_rows])  # the heaviest keys, in position order
    rest = np.setdiff1d(np.arange(nk), shown)
    rows = [parts[j] for j in shown]
    labels = [f"{key_labels[j]} · a = {weights[j]:.3f}" for j in shown]
    if rest.size:
        rows.append(parts[rest].sum(0))
        labels.append(f"other {rest.size} keys · a = {weights[rest].sum():.3f}")
    rows = np.stack(rows)
    r = len(rows)
    rows_px, top, bottom = max(26 * r, 52), 40, 50
    p_dom, z_dom = (_from_top(d) for d in _domains([rows_px, 30], 50))
    lim = _lim(rows, z)
    cd = np.broadcast_to(np.array(labels, dtype=object)[:, None], (r, dh))
    data = [_heat(rows, lim, customdata=cd, xaxis="x", yaxis="y", ygap=2, colorbar=dict(thickness=10, len=0.8),
                  hovertemplate="%{customdata}<br>component %{x}: %{z:.4f}<extra></extra>"),
            _heat(z[None], lim, showscale=False, xaxis="x2", yaxis="y2",
                  hovertemplate="z_i, component %{x}: %{z:.4f}<extra></extra>")]
    return dict_figure(data, dict(
        height=rows_px + 80 + top + bottom, margin=dict(l=200, r=20, t=top, b=bottom), plot_bgcolor="white",
        xaxis=dict(anchor="y", matches="x2", showticklabels=False, **NO_GRID),
        yaxis=dict(domain=p_dom, range=[r - 0.5, -0.5], tickvals=list(range(r)), ticktext=labels, **NO_GRID),
        xaxis2=dict(anchor="y2", title=dict(text=f"component (0 … {dh - 1})"), **NO_GRID),
        yaxis2=dict(domain=z_dom, tickvals=[0], ticktext=["sum z_i"], **NO_GRID),
        annotations=[_panel_title("a_ij · v_j: each key's value times its weight", 0.5, p_dom[1]),
                     _panel_title("their sum z_i = Σ_j a_ij v_j (add up each column above)", 0.5, z_dom[1])]))


# ---------------------------------------------------------------- 3. the MLP at one position

def mlp_figure(hidden: np.ndarray, out: np.ndarray, activation: str = "relu") -> go.Figure:
    """Left: the d_ff hidden activations after the nonlinearity, sorted from the largest (hover: the neuron's
    index); the silent ones (core.nn.model.silent_units: exactly 0 after a ReLU, 0 or below after a GELU) are counted
    in the title. Right: the vector the MLP adds to the stream."""
    hidden, out = np.asarray(hidden, dtype=float), np.asarray(out, dtype=float)
    order = np.argsort(-hidden, kind="stable")
    silent = silent_units(hidden, activation)
    d_ff = len(hidden)
    left, right = [0.0, 0.56], [0.64, 1.0]
    data = [dict(type="bar", x=np.arange(d_ff), y=hidden[order], customdata=order, marker_color=ADDED,
                 showlegend=False, xaxis="x", yaxis="y", hovertemplate="neuron %{customdata}: %{y:.4f}<extra></extra>"),
            dict(type="bar", x=np.arange(len(out)), y=out, marker_color=_signed(out), showlegend=False, xaxis="x2",
                 yaxis="y2", hovertemplate="component %{x}: %{y:.4f}<extra></extra>")]
    return dict_figure(data, dict(
        height=360, margin=dict(l=60, r=20, t=60, b=50), bargap=0.05, plot_bgcolor="white",
        xaxis=dict(domain=left, anchor="y", title=dict(text="hidden units, most active first")),
        yaxis=dict(anchor="x", title=dict(text="activation"), gridcolor="#e5e5e5"),
        xaxis2=dict(domain=right, anchor="y2", title=dict(text=f"component (0 … {len(out) - 1})")),
        yaxis2=dict(anchor="x2", gridcolor="#e5e5e5", zeroline=True, zerolinecolor="#888"),
        annotations=[_panel_title(f"after the {ACTIVATION_NAMES[activation]}, sorted: {d_ff - silent} of {d_ff} "
                                  f"units fire, {silent} ({silent / d_ff:.0%}) are {SILENT_WORDS[activation]}",
                                  sum(left) / 2, 1.0),
                     _panel_title("what the MLP adds to the stream", sum(right) / 2, 1.0)]))


# ---------------------------------------------------------------- 4. the logit lens

def lens_figure(top_ids: np.ndarray, top_probs: np.ndarray, chars, ids, stage_names: list[str], offset: int = 0,
                chosen: int | None = None, unit: str = "character") -> go.Figure:
    """Stage x position table: in each cell the lens's most likely next character, shaded by its probability,
    with a small triangle where it is the character that really comes next; hover lists the top k. Rows: the
    stream after the embedding at the top, after the last block at the bottom (that row is the model's own
    prediction); below them a row with the character that really comes next, where the prompt has one.
    top_ids, top_probs: (L+1, w, k) for positions offset .. offset+w-1 of the prompt ``ids``; ``chosen``:
    a position to frame; ``unit``: what a token is, in the axis title ("character" or "token")."""
    S, w, k = top_ids.shape
    if len(stage_names) != S or offset + w > len(ids):
        raise ValueError(f"{S} stages and positions {offset}..{offset + w - 1} need {S} names and that many ids")
    read = [visible(chars[t]) for t in ids[offset:offset + w]]
    after = list(ids[offset + 1:offset + w + 1]) + [None] * (offset + w + 1 - len(ids))  # the id at i+1, if any
    cell = np.array([[visible(chars[t]) for t in row] for row in top_ids[:, :, 0]], dtype=object)
    hover = np.empty((S, w), dtype=object)
    for s in range(S):
        for i in range(w):
            lines = "<br>".join(f"'{_text(visible(chars[top_ids[s, i, r]]))}' {top_probs[s, i, r]:.3f}"
                                for r in range(k))
            hover[s, i] = (f"{_text(stage_names[s])}, position {shown_pos(offset + i)} ('{_text(read[i])}')"
                           f"<br>top {k}:<br>{lines}")
    hit_s, hit_i = np.nonzero([[a is not None and top_ids[s, i, 0] == a for i, a in enumerate(after)]
                               for s in range(S)])
    nxt = np.array([["" if a is None else visible(chars[a]) for a in after]], dtype=object)
    cell_px = 46
    s_dom, n_dom = (_from_top(d) for d in _domains([cell_px * S, cell_px], 8))
    data = [dict(type="heatmap", z=top_probs[:, :, 0], text=cell, texttemplate="%{text}", textfont=dict(size=15),
                 customdata=hover, colorscale=LENS_SCALE, zmin=0, zmax=1, xgap=1, ygap=1, xaxis="x", yaxis="y",
                 colorbar=dict(thickness=12, len=0.9, y=s_dom[1], yanchor="top",
                               title=dict(text="p of the<br>favourite")),
                 hovertemplate="%{customdata}<extra></extra>"),
            dict(type="scatter", x=hit_i, y=hit_s + 0.33, mode="markers", hoverinfo="skip", showlegend=False,
                 xaxis="x", yaxis="y", marker=dict(symbol="triangle-up", size=7, color="#1f2330")),
            dict(type="heatmap", z=np.zeros((1, w)), text=nxt, texttemplate="%{text}", textfont=dict(size=15),
                 colorscale=[[0, "#fff4d6"], [1, "#fff4d6"]], showscale=False, xgap=1, xaxis="x2", yaxis="y2",
                 hovertemplate="really comes next: '%{text}'<extra></extra>")]
    shapes = []
    if chosen is not None and 0 <= chosen - offset < w:
        x = chosen - offset
        shapes.append(dict(type="rect", xref="x", yref="y", x0=x - 0.5, x1=x + 0.5, y0=-0.5, y1=S - 0.5,
                           line=dict(color=CHOSEN, width=2)))
    return dict_figure(data, dict(
        height=cell_px * (S + 1) + 8 + 90, margin=dict(l=150, r=20, t=20, b=70), plot_bgcolor="white",
        shapes=shapes,
        xaxis=dict(anchor="y", matches="x2", showticklabels=False, range=[-0.5, w - 0.5], **NO_GRID),
        yaxis=dict(domain=s_dom, tickvals=list(range(S)), ticktext=stage_names, range=[S - 0.5, -0.5],
                   tickfont=dict(size=13), **NO_GRID),
        xaxis2=dict(anchor="y2", range=[-0.5, w - 0.5], title=dict(text=f"the {unit} read at each position"),
                    **{**axis_ticks(read, offset, max_ticks=64), **NO_GRID, "tickfont": dict(size=14)}),
        yaxis2=dict(domain=n_dom, tickvals=[0], ticktext=["really next"], tickfont=dict(size=13), **NO_GRID)))


# ---------------------------------------------------------------- 5. who wrote the prediction

def attribution_figure(att: Attribution, token_label: str, max_bars: int = ATTRIBUTION_BARS) -> go.Figure:
    """Direct logit attribution as horizontal bars sorted from the largest push up (top) to the largest push
    down (bottom). Grey: the embedding; blue: heads; orange: MLPs. The title states the sum. With more than
    ``max_bars`` writers, the max_bars - 1 largest (by size, up or down) have bars of their own and one light grey
    bar, placed by its value, holds the sum of all the others, so the bars still add up to the same total."""
    names, values = list(att.names), np.asarray(att.values, dtype=float)
    if len(values) > max_bars:
        keep = np.sort(np.argsort(-np.abs(values), kind="stable")[:max_bars - 1])
        rest = np.setdiff1d(np.arange(len(values)), keep)
        names = [names[i] for i in keep] + [f"the other {len(rest)} writers"]
        values = np.append(values[keep], values[rest].sum())
    order = np.argsort(-values, kind="stable")
    names = [names[i] for i in order]
    values = values[order]
    kinds = ["embedding" if n == "embedding" else "mlp" if n.endswith("MLP") else "others" if n.startswith("the other")
             else "head" for n in names]
    y = np.arange(len(order))
    data = [dict(type="bar", x=values, y=y, orientation="h", marker_color=[KIND_COLORS[k] for k in kinds],
                 customdata=names, text=[f"{v:+.2f}" for v in values], textposition="outside", cliponaxis=False,
                 hovertemplate="%{customdata}: %{x:+.4f}<extra></extra>")]
    lim = float(np.max(np.abs(values))) * 1.3 or 1.0
    label = _text(token_label)
    title = (f"Who wrote the logit of '{label}' at position {shown_pos(att.pos)}<br>"
             + _sub(f"the bars add up to {float(att.values.sum()):.3f}; with the constant {att.constant:+.3f}, that "
                    f"is the logit {att.logit:.3f}"))
    return dict_figure(data, dict(
        title=dict(text=title, font=TITLE_FONT), height=130 + 26 * len(order), margin=dict(l=100, r=30, t=70, b=50),
        showlegend=False, plot_bgcolor="white",
        yaxis=dict(tickvals=y, ticktext=names, range=[len(order) - 0.5, -0.5], tickfont=dict(size=13), automargin=True),
        xaxis=dict(title=dict(text=f"contribution to the logit of '{label}'"), range=[-lim, lim], zeroline=True,
                   zerolinecolor="#555", zerolinewidth=1.5, gridcolor="#e5e5e5")))


# ---------------------------------------------------------------- 6. the output

OUTPUT_TOP = 10  # bars of the output figure: the tokens with the largest logits


def output_figure(logits: np.ndarray, chars, temperature: float, n_top: int = OUTPUT_TOP,
                  unit: str = "character") -> go.Figure:
    """The n_top characters with the largest logits (the order does not depend on T): their logits z_i and
    their probabilities p_i(T) = softmax(z/T)_i, the generation page's convention (T = 0: greedy)."""
    z = np.asarray(logits, dtype=float)
    p = temperature_softmax(torch.from_numpy(z), float(temperature)).numpy()
    order = np.argsort(-z, kind="stable")[:n_top]
    labels = [visible(chars[i]) for i in order]
    x = np.arange(len(order))
    left, right = [0.0, 0.46], [0.54, 1.0]
    ticks = dict(tickvals=x, ticktext=labels, tickfont=dict(size=16), title=dict(text=f"next {unit}"))
    data = [dict(type="bar", x=x, y=z[order], marker_color="#7f7f7f", customdata=labels, showlegend=False,
                 text=[f"{v:.2f}" for v in z[order]], textposition="outside", cliponaxis=False, xaxis="x", yaxis="y",
                 hovertemplate="'%{customdata}' z = %{y:.3f}<extra></extra>"),
            dict(type="bar", x=x, y=p[order], marker_color=STREAM, customdata=labels, showlegend=False,
                 text=[f"{v:.2f}" for v in p[order]], textposition="outside", cliponaxis=False, xaxis="x2", yaxis="y2",
                 hovertemplate="'%{customdata}' p = %{y:.4f}<extra></extra>")]
    return dict_figure(data, dict(
        height=380, margin=dict(l=60, r=20, t=60, b=60), plot_bgcolor="white",
        xaxis=dict(domain=left, anchor="y", **ticks),
        yaxis=dict(anchor="x", title=dict(text="logit"), gridcolor="#e5e5e5", zeroline=True, zerolinecolor="#888"),
        xaxis2=dict(domain=right, anchor="y2", **ticks),
        yaxis2=dict(anchor="x2", range=[0, 1.12], title=dict(text="probability"), gridcolor="#e5e5e5"),
        annotations=[_panel_title("logits z_i", sum(left) / 2, 1.0),
                     _panel_title(f"probabilities p_i(T) at T = {format_t(temperature)}", sum(right) / 2, 1.0)]))
