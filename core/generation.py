"""Measures and figures for the Generation page: how temperature moves p(T) between its two limits,
how repetitive a continuation is, and the generated text shaded by probability."""
from __future__ import annotations

import html
import math
import re

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from core.sampling import stream, temperature_softmax
from core.tokenizer import md_escape, visible  # noqa: F401  md_escape: pages call G.md_escape

DEFAULT_TEMPERATURES = (0.0, 0.25, 0.5, 1.0, 2.0, 5.0)
MAX_TEMPERATURES = 8


# ---------------------------------------------------------------- measures

def entropy(p) -> float:
    """H(p) = -sum p_i log p_i in nats, with 0 log 0 = 0."""
    p = np.asarray(p, dtype=np.float64)
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


def tv_distance(p, q) -> float:
    """Total variation distance 1/2 sum |p_i - q_i|: 0 for equal distributions, 1 for disjoint ones."""
    return float(0.5 * np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def limits(logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The claim's two limits for one logit vector (m,): T -> 0 (one-hot on the argmax, uniform over
    tied maxima) and T -> inf (uniform 1/m)."""
    z = logits.double()
    return temperature_softmax(z, 0.0).numpy(), temperature_softmax(z, math.inf).numpy()


def log_grid(lo: float = 1e-3, hi: float = 1e3, n: int = 121) -> np.ndarray:
    """Temperatures evenly spaced on a log scale."""
    return np.logspace(math.log10(lo), math.log10(hi), n)


def sweep(logits: torch.Tensor, temperatures) -> dict:
    """For each T: entropy, largest probability, and the distance to each limit of p(T)."""
    z = logits.double()
    zero, inf = limits(logits)
    rows = {"T": [], "entropy": [], "max_prob": [], "to_one_hot": [], "to_uniform": []}
    for t in temperatures:
        p = temperature_softmax(z, float(t)).numpy()
        rows["T"].append(float(t))
        rows["entropy"].append(entropy(p))
        rows["max_prob"].append(float(p.max()))
        rows["to_one_hot"].append(tv_distance(p, zero))
        rows["to_uniform"].append(tv_distance(p, inf))
    return {k: np.array(v) for k, v in rows.items()}


def distinct_n(ids, n: int = 3) -> float | None:
    """Distinct n-grams / all n-grams of a token sequence: 1 when nothing repeats, near 0 for a loop.
    None when the sequence is shorter than n."""
    ids = list(ids)
    grams = [tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def parse_temperatures(text: str, max_count: int = MAX_TEMPERATURES) -> tuple[list[float], list[str]]:
    """Temperatures from a comma- or space-separated list, sorted; plus messages about what was left out."""
    values, bad, negative, messages = [], [], [], []
    for part in (p for p in re.split(r"[,;\s]+", text or "") if p):
        try:
            t = float(part)
        except ValueError:
            bad.append(part)
            continue
        if not math.isfinite(t):
            bad.append(part)
        elif t < 0:
            negative.append(part)
        else:
            values.append(t)
    if bad:
        messages.append("Not a finite number, left out: " + ", ".join(f"'{b[:20]}'" for b in bad[:10])
                        + ". Write temperatures like 0, 0.5, 2 (a very large T like 1000 stands in for infinity).")
    if negative:
        messages.append("A temperature must be 0 or positive, left out: " + ", ".join(negative[:10]) + ".")
    unique = sorted(set(values))
    if len(unique) < len(values):
        messages.append("Repeated temperatures are shown once.")
    if len(unique) > max_count:
        messages.append(f"At most {max_count} temperatures fit side by side; the first {max_count} (smallest) are used.")
        unique = unique[:max_count]
    return unique, messages


def format_t(t: float) -> str:
    return "0" if t == 0 else f"{t:.3g}"


def step_record(step, chars, row: int = 0) -> dict:
    """One row of a sampling.Step as plain data (for the page, its session memo and the HTML)."""
    tid = int(step.token[row])
    return {"id": tid, "ch": chars[tid], "prob": float(step.prob[row]), "sample_prob": float(step.sample_prob[row]),
            "alternatives": [(chars[int(i)], float(q)) for i, q in zip(step.top_ids[row], step.top_probs[row])],
            "slid": step.slid}


def continuations(model, ids, temperatures, n: int, seed: int, chars) -> list[list[dict]]:
    """One continuation of ``ids`` per temperature, each drawn with a fresh generator seeded with ``seed``
    (so each equals a one-sequence run at that T and seed). All temperatures share one batched forward
    pass per step, which is several times faster than running them one after another."""
    temps = [float(t) for t in temperatures]
    if not temps:
        return []
    idx = torch.tensor([list(ids)] * len(temps), dtype=torch.long)  # (T, n): the prompt once per temperature
    gens = [torch.Generator().manual_seed(int(seed)) for _ in temps]
    runs = [[] for _ in temps]
    for s in stream(model, idx, n, temps, generator=gens):
        for r, run in enumerate(runs):
            run.append(step_record(s, chars, r))
    return runs


# ---------------------------------------------------------------- figures

def _labels(chars) -> list[str]:
    return [visible(c) for c in chars]


def sweep_bars(chars, logits: torch.Tensor, temperatures, n_top: int = 10) -> go.Figure:
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
    fig.update_yaxes(autorange="reversed", type="category", row=1, col=1, title_text="next character")
    fig.update_layout(height=80 + 28 * len(order) + 60, margin=dict(l=70, r=10, t=70, b=50),
                      title="Next-character distribution after the prompt, one panel per temperature")
    return fig


def distribution_bars(chars, logits: torch.Tensor, temperature: float) -> go.Figure:
    """All m probabilities at one temperature, in the model's T = 1 order, with the uniform level 1/m."""
    z = logits.double()
    m = z.shape[-1]
    order = torch.argsort(temperature_softmax(z, 1.0), descending=True).tolist()
    p = temperature_softmax(z, float(temperature)).numpy()[order]
    labels = _labels([chars[i] for i in order])
    fig = go.Figure(go.Bar(x=list(range(m)), y=p.tolist(), name=f"p(T = {format_t(temperature)})", marker_color="#1f77b4",
                           customdata=labels, hovertemplate="'%{customdata}' p = %{y:.4f}<extra></extra>"))
    fig.add_hline(y=1 / m, line_dash="dot", line_color="#d62728", annotation_text=f"uniform 1/m = {1 / m:.4f}",
                  annotation_position="top right")
    fig.update_xaxes(tickvals=list(range(m)), ticktext=labels, tickangle=0, tickfont=dict(size=10),
                     title_text="every character of the vocabulary, most likely at T = 1 first")
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
    T = data["T"]
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


def distinct_bars(temperatures, ratios, n: int = 3) -> go.Figure:
    """Distinct-n ratio of each continuation, one bar per temperature."""
    labels = [f"T = {format_t(t)}" for t in temperatures]
    y = [np.nan if r is None else r for r in ratios]
    fig = go.Figure(go.Bar(x=labels, y=y, marker_color="#8c564b", text=[f"{v:.2f}" if v == v else "–" for v in y],
                           textposition="auto", hovertemplate="%{x}<br>distinct " + str(n) + "-grams %{y:.3f}<extra></extra>"))
    fig.update_yaxes(range=[0, 1.05], title_text=f"distinct {n}-grams / all {n}-grams")
    fig.update_xaxes(type="category", title_text="temperature of the continuation")
    fig.update_layout(height=300, margin=dict(l=60, r=20, t=50, b=50),
                      title=f"Repetition: 1 means no {n}-character sequence repeats, near 0 means a loop")
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


def shaded_html(prompt: str, steps: list[dict], font_px: int = 15) -> str:
    """HTML of the prompt (plain) followed by the generated characters, each on a background shaded by its
    probability, with the top alternatives in its hover title. Every piece of text is escaped, so nothing
    the user typed or the model produced can become markup. ``steps``: dicts with keys ch, prob,
    sample_prob, alternatives [(ch, prob), ...]."""
    def chars(text: str) -> str:
        return html.escape(text).replace("\n", "⏎<br>")

    out = [f'<div style="font-family: ui-monospace, monospace; font-size: {font_px}px; line-height: 1.6; '
           'white-space: pre-wrap; word-break: break-all;">',
           f'<span style="color: #7f7f7f;">{chars(prompt)}</span>']
    for s in steps:
        title = html.escape(hover_text(s["ch"], s["prob"], s.get("sample_prob"), s["alternatives"]), quote=True)
        out.append(f'<span title="{title}" style="background: {shade(s["prob"])}; border-radius: 2px;">'
                   f'{chars(s["ch"])}</span>')
    out.append("</div>")
    return "".join(out)


def legend_html() -> str:
    cells = "".join(f'<span style="background: {shade(p)}; padding: 0 6px; font-family: monospace;">{p:g}</span>'
                    for p in (1.0, 0.75, 0.5, 0.25, 0.05))
    return f'<div style="font-size: 13px; color: #555;">probability the model gave the character: {cells}</div>'
