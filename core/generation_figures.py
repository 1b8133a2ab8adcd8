"""Figures and HTML for the Generation page: the temperature sweep, p(T) at one temperature, the sweep's
curves, the repetition bars, and the generated text shaded by probability (every piece of text escaped).
Pure functions: data in, figure or markup out."""
from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from core.fmt import visible
from core.generation import format_t
from core.sampling import temperature_softmax


def _labels(chars) -> list[str]:
    return [visible(c) for c in chars]


def sweep_bars(chars, logits: torch.Tensor, temperatures, n_top: int = 10, unit: str = "character") -> go.Figure:
    """One horizontal bar chart per temperature, side by side, over the same tokens in the same order
    (the model's top tokens at T = 1) and the same probability axis [0, 1]."""
    z = logits.double()
    order = torch.argsort(temperature_softmax(z, 1.0), descending=True)[:n_top].tolist()
    labels = _labels([chars[i] for i in order])
    cols = max(1, len(temperatures))
    dists = [temperature_softmax(z, float(t)).numpy() for t in temperatures]
    titles = [f"T = {format_t(t)}<br><sup>top {len(order)} hold {d[order].sum():.0%}</sup>"
              for t, d in zip(temperatures, dists)]
    fig = make_subplots(rows=1, cols=cols, shared_yaxes=True, subplot_titles=titles, horizontal_spacing=0.02)
    for c, (t, d) in enumerate(zip(temperatures, dists), start=1):
        fig.add_trace(go.Bar(x=d[order].tolist(), y=labels, orientation="h", name=f"T = {format_t(t)}", showlegend=False,
                             marker_color="#1f77b4", text=[f"{v:.2f}" for v in d[order]], textposition="auto",
                             hovertemplate="'%{y}' p = %{x:.4f}<extra>T = " + format_t(t) + "</extra>"),
                      row=1, col=c)
        fig.update_xaxes(range=[0, 1], tickvals=[0, 0.5, 1], title_text="probability", row=1, col=c)
    fig.update_yaxes(autorange="reversed", type="category", row=1, col=1, title_text=f"next {unit}")
    fig.update_layout(height=80 + 28 * len(order) + 60, margin=dict(l=70, r=10, t=70, b=50),
                      title=f"Next-{unit} distribution after the prompt, one panel per temperature")
    return fig


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
    fig = go.Figure(go.Bar(x=list(range(shown)), y=p.tolist(), name=f"p(T = {format_t(temperature)})", marker_color="#1f77b4",
                           customdata=labels, hovertemplate="'%{customdata}' p = %{y:.4f}<extra></extra>"))
    fig.add_hline(y=1 / m, line_dash="dot", line_color="#d62728", annotation_text=f"uniform 1/m = {1 / m:.4f}",
                  annotation_position="top right")
    fig.update_xaxes(tickvals=list(range(shown)), ticktext=labels, tickangle=0, tickfont=dict(size=10),
                     title_text=f"every {unit} of the vocabulary, most likely at T = 1 first" if shown == m else
                     f"the {shown} {unit}s most likely at T = 1 (of m = {m:,}), most likely first")
    fig.update_yaxes(range=[0, 1.02], title_text="probability")
    fig.update_layout(height=340, margin=dict(l=60, r=20, t=50, b=60), showlegend=False,
                      title=f"p(T) at T = {format_t(temperature)}")
    return fig


def sweep_curves(data: dict, m: int, mark: float | None = None, points: dict | None = None) -> go.Figure:
    """Entropy, largest probability and the distances to both limits as curves over a log T axis, with
    the values each limit predicts drawn as dotted lines. ``points``: a sweep at the user's temperatures
    (T > 0), drawn as markers; ``mark``: the slider's T, drawn as a vertical line."""
    log_m = math.log(m)
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, subplot_titles=(
        "entropy H(p(T)) in nats", "largest probability max_i p_i(T)", "total variation distance to each limit"))
    col = {k: np.asarray(v).tolist() for k, v in data.items()}  # plain lists: readable JSON specs
    fig.add_trace(go.Scatter(x=col["T"], y=col["entropy"], name="entropy", line_color="#1f77b4",
                             hovertemplate="T = %{x:.3g}<br>H = %{y:.4f} nats<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=col["T"], y=col["max_prob"], name="max probability", line_color="#9467bd",
                             hovertemplate="T = %{x:.3g}<br>max p = %{y:.4f}<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Scatter(x=col["T"], y=col["to_one_hot"], name="distance to one-hot (T → 0 limit)",
                             line_color="#2ca02c", hovertemplate="T = %{x:.3g}<br>%{y:.4f}<extra>to one-hot</extra>"),
                  row=3, col=1)
    fig.add_trace(go.Scatter(x=col["T"], y=col["to_uniform"], name="distance to uniform (T → ∞ limit)",
                             line_color="#ff7f0e", hovertemplate="T = %{x:.3g}<br>%{y:.4f}<extra>to uniform</extra>"),
                  row=3, col=1)
    for row, y, text in ((1, 0.0, "0 (one-hot)"), (1, log_m, f"log m = {log_m:.3f} (uniform)"),
                         (2, 1.0, "1 (one-hot)"), (2, 1 / m, f"1/m = {1 / m:.4f} (uniform)"), (3, 0.0, "0")):
        fig.add_hline(y=y, line_dash="dot", line_color="#d62728", annotation_text=text,
                      annotation_position="bottom right" if y else "top left", row=row, col=1)
    if points is not None and len(points["T"]):
        pts = {k: np.asarray(v).tolist() for k, v in points.items()}
        for row, key in ((1, "entropy"), (2, "max_prob"), (3, "to_one_hot"), (3, "to_uniform")):
            fig.add_trace(go.Scatter(x=pts["T"], y=pts[key], mode="markers", marker=dict(size=8, color="black"),
                                     name="your temperatures", showlegend=key == "entropy",
                                     hovertemplate="T = %{x:.3g}<br>%{y:.4f}<extra></extra>"), row=row, col=1)
    if mark is not None and mark > 0:
        fig.add_vline(x=mark, line_color="#7f7f7f", line_dash="dash")
    fig.update_xaxes(type="log", row=3, col=1, title_text="temperature T (log scale)")
    fig.update_xaxes(type="log")
    fig.update_yaxes(range=[-0.05 * log_m, 1.08 * log_m], row=1, col=1, title_text="nats")
    fig.update_yaxes(range=[0, 1.05], row=2, col=1, title_text="probability")
    fig.update_yaxes(range=[0, 1.05], row=3, col=1, title_text="distance")
    fig.update_layout(height=760, margin=dict(l=70, r=20, t=60, b=60),
                      legend=dict(orientation="h", y=-0.12, x=0.5, xanchor="center"))
    return fig


def distinct_bars(temperatures, ratios, n: int = 3, unit: str = "character") -> go.Figure:
    """Distinct-n ratio of each continuation, one bar per temperature."""
    labels = [f"T = {format_t(t)}" for t in temperatures]
    y = [np.nan if r is None else r for r in ratios]
    fig = go.Figure(go.Bar(x=labels, y=y, marker_color="#8c564b", text=[f"{v:.2f}" if v == v else "–" for v in y],
                           textposition="auto", hovertemplate="%{x}<br>distinct " + str(n) + "-grams %{y:.3f}<extra></extra>"))
    fig.update_yaxes(range=[0, 1.05], title_text=f"distinct {n}-grams / all {n}-grams")
    fig.update_xaxes(type="category", title_text="temperature of the continuation")
    fig.update_layout(height=300, margin=dict(l=60, r=20, t=50, b=50),
                      title=f"Repetition: 1 means no {n}-{unit} sequence repeats, near 0 means a loop")
    return fig


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
