"""Figures of the Over training page: one prompt at every snapshot of a model's training
(core.analysis.over_training). Snapshot steps are log-spaced, so the charts over snapshots put them at equal
distances (a category axis labelled with the steps) rather than on a linear axis that would crowd the first
hundred steps into a sliver."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.analysis.over_training import OverTraining
from core.figures.ticks import axis_ticks
from core.figures.common import loss_curve
from core.serve.fmt import head_label, shown_pos

_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]


def step_labels(steps: list[int]) -> list[str]:
    return [f"{s:,}" for s in steps]


def _step_axis(title: str = "training step (snapshots, log-spaced)") -> dict:
    return dict(title=title, type="category", tickangle=-45)


def first_snapshot_from(steps: list[int], step: int | None) -> int | None:
    """The first snapshot at or after ``step`` (where a mark at ``step`` goes on a snapshot axis); None if none."""
    if step is None:
        return None
    later = [s for s in steps if s >= step]
    return later[0] if later else None


def prompt_loss_figure(ot: OverTraining, log_rows: list[dict], unit: str, marks: dict[int, str] | None = None) -> go.Figure:
    """The run's training and validation curve (log step axis) with the prompt's own mean loss at each snapshot."""
    # a log axis has no 0: the run's first evaluation (the untrained model) is drawn at step 1, as the prompt's is
    rows = [{**r, "step": max(r["step"], 1)} for r in log_rows if isinstance(r.get("step"), (int, float))]
    fig = loss_curve(rows, title="Loss while training, and on your prompt", marks=marks, unit=unit)
    xs = [max(s, 1) for s in ot.steps]  # a log axis has no 0: the untrained model is drawn at step 1
    fig.add_trace(go.Scatter(x=xs, y=ot.mean_loss, mode="markers+lines", name="your prompt",
                             marker=dict(size=8, color="#d62728"), line=dict(width=1, color="#d62728"),
                             customdata=ot.steps,
                             hovertemplate="snapshot at step %{customdata:,}<br>mean loss on your prompt "
                                           "%{y:.3f}<extra></extra>"))
    fig.update_xaxes(type="log", title_text="optimisation step (log scale; step 0 drawn at 1)")
    return fig


def token_loss_heatmap(ot: OverTraining, tokens: list[str]) -> go.Figure:
    """Steps down, positions across: the loss of predicting each token of the prompt (its first token is given,
    so the columns are tokens 2..n), darker where the model finds the token easy."""
    shown = tokens[1:]
    z = ot.token_loss  # (S, n-1)
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(len(shown))), y=step_labels(ot.steps), colorscale="Viridis", reversescale=True,
        zmin=0, zmax=max(1.0, float(np.nanpercentile(z, 98))), colorbar=dict(title="nats"),
        customdata=np.broadcast_to(np.array([f"'{t}' (position {shown_pos(i + 1)})" for i, t in enumerate(shown)],
                                            dtype=object), z.shape),
        hovertemplate="step %{y}<br>predicting %{customdata}<br>loss %{z:.2f} nats<extra></extra>"))
    fig.update_xaxes(title_text="the token predicted (position in your prompt)", **axis_ticks(shown, offset=1))
    fig.update_yaxes(title_text="training step", type="category", autorange="reversed")
    fig.update_layout(title="Which tokens become easy first: loss per token at every snapshot",
                      height=max(360, 24 * len(ot.steps) + 140), margin=dict(l=70, r=20, t=50, b=70))
    return fig


def live_heads_figure(ot: OverTraining, formed: int | None = None) -> go.Figure:
    """Every head's induction score (top) and previous-token score (bottom) on the prompt, at each snapshot."""
    what = ("second copy's weight on the token after its first occurrence" if ot.period
            else "weight on tokens that followed earlier copies of the current token")
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=(f"induction score on your prompt ({what})", "previous-token score on your prompt"))
    x = step_labels(ot.steps)
    S, L, h = ot.induction.shape
    for row, values, key in ((1, ot.induction, "induction"), (2, ot.previous_token, "previous-token")):
        for layer in range(L):
            for head in range(h):
                color = _COLORS[(layer * h + head) % len(_COLORS)]
                fig.add_trace(go.Scatter(x=x, y=values[:, layer, head], mode="lines+markers", name=head_label(layer, head),
                                         legendgroup=f"{layer}-{head}", showlegend=row == 1,
                                         line=dict(color=color, width=2, dash="dot" if layer == 0 else "solid"),
                                         hovertemplate=f"{head_label(layer, head)}<br>step %{{x}}<br>{key} score "
                                                       "%{y:.3f}<extra></extra>"), row=row, col=1)
    mark = first_snapshot_from(ot.steps, formed)
    if mark is not None:
        fig.add_vline(x=x[ot.steps.index(mark)], line=dict(color="crimson", width=1))
        fig.add_annotation(x=x[ot.steps.index(mark)], y=1.0, yref="y domain", showarrow=False, xanchor="left",
                           text=f" probe head formed at step {formed:,}", font=dict(color="crimson"),
                           bgcolor="rgba(255,255,255,0.8)", row=1, col=1)
    fig.update_yaxes(range=[0, 1], title_text="mean weight")
    fig.update_xaxes(**_step_axis(), row=2, col=1)
    fig.update_xaxes(type="category", row=1, col=1)
    fig.update_layout(height=600, margin=dict(l=60, r=20, t=60, b=80),
                      legend=dict(orientation="h", y=-0.22, x=0.5, xanchor="center", yanchor="top"))
    return fig


def pattern_strip(patterns: np.ndarray, steps: list[int], tokens: list[str], title: str, cols: int = 6) -> go.Figure:
    """Small multiples: one head's (n, n) pattern at each of ``steps`` (S <= 12 or so), one panel per step."""
    S, n, _ = patterns.shape
    cols = min(cols, S)
    rows = math.ceil(S / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[f"step {s:,}" for s in steps],
                        horizontal_spacing=0.02, vertical_spacing=0.08 if rows > 1 else 0.0)
    for i in range(S):
        fig.add_trace(go.Heatmap(z=patterns[i], zmin=0, zmax=1, colorscale="Blues", showscale=i == 0,
                                 colorbar=dict(title="weight", len=0.8),
                                 hovertemplate=f"step {steps[i]:,}<br>query %{{y}} · key %{{x}}<br>weight %{{z:.2f}}"
                                               "<extra></extra>"),
                      row=i // cols + 1, col=i % cols + 1)
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, constrain="domain")
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, autorange="reversed", scaleanchor="x",
                     constrain="domain")
    # scaleanchor per panel: each square
    for i in range(2, S + 1):
        fig.update_yaxes(scaleanchor=f"x{i}", row=(i - 1) // cols + 1, col=(i - 1) % cols + 1)
    fig.update_layout(title=title, height=260 * rows + 90, margin=dict(l=20, r=20, t=80, b=20))
    return fig


def lens_over_steps(ot: OverTraining, stage_names: list[str]) -> go.Figure:
    """The share of the prompt's positions whose logit-lens favourite is right, per stage, over the snapshots."""
    fig = go.Figure()
    x = step_labels(ot.steps)
    for stage, name in enumerate(stage_names):
        fig.add_trace(go.Scatter(x=x, y=ot.lens_accuracy[:, stage], mode="lines+markers", name=name,
                                 hovertemplate=f"{name}<br>step %{{x}}<br>right on %{{y:.0%}} of positions<extra></extra>"))
    fig.update_layout(title="Logit lens: how often each stage's favourite is the true next token", height=380,
                      xaxis=_step_axis(), yaxis=dict(title="share of positions right", range=[0, 1], tickformat=".0%"),
                      margin=dict(l=60, r=20, t=50, b=80),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))
    return fig


def attribution_over_steps(ot: OverTraining, target_text: str) -> go.Figure:
    """Each writer's direct share of the logit of the final favourite at the last position, over the snapshots."""
    fig = go.Figure()
    x = step_labels(ot.steps)
    for w, name in enumerate(ot.writers):
        dash = "dot" if name.startswith("L1 ") else ("dash" if "MLP" in name else "solid")
        fig.add_trace(go.Scatter(x=x, y=ot.attribution[:, w], mode="lines+markers", name=name,
                                 line=dict(dash=dash if name != "embedding" else "solid", width=2),
                                 hovertemplate=f"{name}<br>step %{{x}}<br>adds %{{y:+.2f}} to the logit<extra></extra>"))
    fig.add_hline(y=0, line=dict(color="gray", width=1))
    fig.update_layout(title=f"Who writes the last prediction ({target_text}): direct logit attribution at each snapshot",
                      height=420, xaxis=_step_axis(), yaxis=dict(title="share of the logit"),
                      margin=dict(l=60, r=20, t=50, b=80),
                      legend=dict(orientation="v", x=1.01, y=1, xanchor="left"))
    return fig
