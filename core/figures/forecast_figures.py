"""Plotly figures of issue 45: a forecast against the runs it comes from, the shipped calibration, the two forms'
residuals on repeated data, loss against passes, the unique-data control, the famous models against the text they
could have had, and inference-aware sizing. Pure functions of laws, rows and numbers."""
from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from core.analysis.cost import FLOPS_PER_PARAM_TOKEN
from core.analysis.scaling import FAMOUS_MODELS, R_STAR_D, ScalingLaw
from core.analysis.scaling_inference import data_for_loss, lifetime_flops, smallest_model
from core.analysis.scaling_repeat import epoch_worth, epochs_curve, repeated_optima
from core.figures.scaling_figures import HALO, LAYOUT
from core.figures.study_figures import OURS, _palette
from core.figures.ticks import log_axes
from core.serve.fmt import human, pretty_sci

LAW_C = "#1c7ed6"     # the law's prediction and its intervals
YOURS_C = "#7048e8"   # the learner's
RUN_C = "#e8590c"     # a run trained for a forecast
GREY = "#868e96"
HIT_C, MISS_C = "#2f9e44", "#e03131"  # a run inside its interval, outside it
PASS_TICKS = [0.3, 0.6, 1, 2, 3, 6, 12, 24, 50, 100]  # passes over the corpus, as the studies' budgets give them
MAX_PASSES = 64.0  # where the chart of loss against passes over a stock ends (core.views.scaling_use says so past it)


def _pass_axis(lo: float, hi: float, **kw) -> dict:
    """A log axis of passes with ticks at the studies' own numbers, not the 2-3-5 minor ticks of a log axis."""
    ticks = [t for t in PASS_TICKS if lo <= t <= hi]
    return dict(type="log", range=[math.log10(lo), math.log10(hi)], tickvals=ticks, ticktext=[f"{t:g}" for t in ticks],
                **kw)


def _band(x, lo, hi, color, name, width, dash=None, legend=True, **axes):
    """A vertical interval at x, drawn as a line with end caps."""
    return go.Scatter(x=[x, x], y=[lo, hi], mode="lines+markers", name=name, showlegend=legend, **axes,
                      line=dict(color=color, width=width, dash=dash), marker=dict(symbol="line-ew-open", size=14,
                                                                                    color=color, line=dict(width=2)),
                      hovertemplate=f"{name}: {lo:.4f} to {hi:.4f}<extra></extra>")


def forecast_figure(rows: list[dict], joined: list[dict], law: ScalingLaw, fc, yours: tuple | None = None,
                    actual: float | None = None) -> go.Figure:
    """Left: loss against compute, the runs the law was fitted to (grey; runs trained for earlier forecasts orange),
    the law's compute-optimal frontier and the proposed run's point. Right, zoomed on the forecast: the law's point
    with its two intervals (thick: the law alone; thin: with the runs' scatter), the learner's, the run's loss."""
    C = np.array([FLOPS_PER_PARAM_TOKEN * r["N"] * r["D"] for r in rows])
    L = np.array([r["loss"] for r in rows])
    Cs = np.geomspace(min(C.min(), fc.compute) / 1.6, max(C.max(), fc.compute) * 1.6, 80)
    traces = [go.Scatter(x=C, y=L, mode="markers", name="runs fitted", marker=dict(color=GREY, size=8),
                         customdata=np.array([[r["N"], r["D"]] for r in rows]),
                         hovertemplate="N = %{customdata[0]:,.0f}, D = %{customdata[1]:,.0f}<br>C = %{x:.3g}<br>"
                                       "loss %{y:.4f}<extra></extra>"),
              go.Scatter(x=Cs, y=law.optimal_loss(Cs), mode="lines", name="the law's best loss for each compute",
                         line=dict(color=LAW_C, width=1.5, dash="dot"), hoverinfo="skip")]
    if joined:
        traces.append(go.Scatter(x=[FLOPS_PER_PARAM_TOKEN * r["N"] * r["D"] for r in joined],
                                 y=[r["loss"] for r in joined], mode="markers", name="runs trained for forecasts",
                                 marker=dict(color=RUN_C, size=10, symbol="diamond"),
                                 hovertemplate="C = %{x:.3g}<br>loss %{y:.4f}<extra>forecast run</extra>"))
    traces.append(go.Scatter(x=[fc.compute], y=[fc.point], mode="markers", name="the run to forecast",
                             marker=dict(color=LAW_C, size=13, symbol="circle-open", line=dict(width=3)),
                             hovertemplate="the run to forecast: C = %{x:.3g}, law %{y:.4f}<extra></extra>"))
    # the zoom: one column each for the law, the learner and the run, on a y range fitted to the intervals
    z = dict(xaxis="x2", yaxis="y2")
    traces += [_band("the law", fc.lower, fc.upper, LAW_C, f"law + run scatter, {fc.level:.0%}", 2, **z),
               _band("the law", fc.law_lower, fc.law_upper, LAW_C, f"the law alone, {fc.level:.0%}", 8, **z),
               go.Scatter(x=["the law"], y=[fc.point], mode="markers", name="the law's point", **z,
                          marker=dict(color=LAW_C, size=12, line=dict(color="white", width=1)),
                          hovertemplate="the law's point %{y:.4f}<extra></extra>")]
    ys = [fc.lower, fc.upper]
    if yours is not None:
        p, a, b = yours
        ys += [a, b]
        traces += [_band("you", a, b, YOURS_C, "your interval", 3, **z),
                   go.Scatter(x=["you"], y=[p], mode="markers", name="your point", **z,
                              marker=dict(color=YOURS_C, size=12, symbol="x"),
                              hovertemplate="your point %{y:.4f}<extra></extra>")]
    if actual is not None:
        ys.append(actual)
        traces.append(go.Scatter(x=["the run"], y=[actual], mode="markers", name="the run's loss", **z,
                                 marker=dict(color=RUN_C, size=16, symbol="star", line=dict(color="black", width=1)),
                                 hovertemplate="the run's loss %{y:.4f}<extra></extra>"))
    pad = 0.15 * (max(ys) - min(ys)) + 1e-3
    cats = ["the law", "you", "the run"]
    fig = go.Figure(traces, dict(
        **{**LAYOUT, "height": 500},
        title=f"The study's next run: N = {human(fc.N)}, D = {human(fc.D)}, C = {pretty_sci(fc.compute)} FLOPs",
        xaxis=dict(type="log", title="training compute C = 6ND (FLOPs)", domain=[0, 0.6]),
        yaxis=dict(title="validation loss (nats per character)"),
        xaxis2=dict(domain=[0.7, 1], type="category", categoryorder="array", categoryarray=cats, range=[-0.5, 2.5],
                    title="zoomed on the forecast"),
        yaxis2=dict(anchor="x2", range=[min(ys) - pad, max(ys) + pad], tickformat=".3f")))
    return log_axes(fig, xaxis=pretty_sci)


def _run_label(r: dict) -> str:
    """d64-D3000320 -> "d64, 3.00M": short enough to stand upright under a column."""
    if "run_id" not in r:
        return f"N {human(r['N'])}, D {human(r['D'])}"
    return f"{r['run_id'].split('-')[0]}, {human(r['D'])}"


def calibration_figure(rows: list[dict]) -> go.Figure:
    """Each held-out run: the law's interval (thick), the forecast interval (thin), the point, the run's loss
    (a star: green inside the forecast interval, red outside)."""
    labels = [_run_label(r) for r in rows]
    traces = []
    for i, (label, r) in enumerate(zip(labels, rows)):
        traces += [_band(label, r["lower"], r["upper"], LAW_C, "law + run scatter, 80 %", 2, legend=i == 0),
                   _band(label, r["law_lower"], r["law_upper"], LAW_C, "the law alone, 80 %", 8, legend=i == 0)]
    traces.append(go.Scatter(x=labels, y=[r["point"] for r in rows], mode="markers", name="the law's point",
                             marker=dict(color=LAW_C, size=9, line=dict(color="white", width=1)),
                             hovertemplate="%{x}: predicted %{y:.4f}<extra></extra>"))
    for hit, color, name in ((True, HIT_C, "the run's loss, inside"), (False, MISS_C, "the run's loss, outside")):
        sel = [(lab, r) for lab, r in zip(labels, rows) if bool(r["hit"]) == hit]
        traces.append(go.Scatter(x=[lab for lab, _ in sel], y=[r["loss"] for _, r in sel], mode="markers", name=name,
                                 marker=dict(color=color, size=15, symbol="star", line=dict(color="black", width=1)),
                                 hovertemplate="%{x}: measured %{y:.4f}<extra></extra>"))
    return go.Figure(traces, dict(**{**LAYOUT, "height": 460},
                                  title="The study fitted on its smaller runs, forecasting the larger",
                                  xaxis=dict(title="held-out run (width, tokens)", type="category",
                                             categoryorder="array", categoryarray=labels),
                                  yaxis=dict(title="validation loss (nats per character)")))


def forms_figure(rows: list[dict], r_star: float = R_STAR_D) -> go.Figure:
    """Residuals of the two forms side by side against passes over the corpus: fitted runs as circles, held-out as
    diamonds; a form that describes repetition keeps the diamonds near zero."""
    traces, ep = [], np.array([r["epochs"] for r in rows])
    forms = (("x", "plain_resid", "plain L(N, D)"), ("x2", "effective_resid", f"L(N, D′), R* = {r_star:g}"))
    for xa, key, name in forms:
        for held, symbol, label in ((False, "circle", "fitted"), (True, "diamond", "held out")):
            sel = [r for r in rows if r["held_out"] == held]
            traces.append(go.Scatter(
                x=[r["epochs"] for r in sel], y=[100 * r[key] for r in sel], mode="markers", xaxis=xa,
                yaxis="y" if xa == "x" else "y2", name=f"{label} runs", showlegend=xa == "x",
                marker=dict(symbol=symbol, size=10 if held else 8, color=RUN_C if held else GREY,
                            line=dict(color="white", width=1)),
                customdata=[[r["run_id"]] for r in sel],
                hovertemplate="%{customdata[0]}: %{x:.1f} passes<br>%{y:+.2f} % off<extra>" + name + "</extra>"))
    lim = max(1.0, 1.15 * 100 * max(abs(r[k]) for r in rows for k in ("plain_resid", "effective_resid")))
    notes = [dict(x=x, y=1.0, xref="paper", yref="paper", text=t, showarrow=False, yanchor="bottom",
                  font=dict(size=14)) for x, t in ((0.225, "plain L(N, D)"), (0.775, f"L(N, D′), R* = {r_star:g}"))]
    lo, hi = max(0.1, ep.min() / 1.4), ep.max() * 1.4
    return go.Figure(traces, dict(
        **{**LAYOUT, "height": 430, "margin": dict(l=60, r=20, t=70, b=110)}, annotations=notes,
        title=dict(text="The two forms on the studies' runs: log L − log L_fit", y=0.98),
        xaxis=_pass_axis(lo, hi, title="passes over the corpus", domain=[0, 0.45]),
        xaxis2=_pass_axis(lo, hi, title="passes over the corpus", domain=[0.55, 1]),
        yaxis=dict(title="% off the fit", range=[-lim, lim]), yaxis2=dict(anchor="x2", matches="y")))


def epochs_figure(rows: list[dict]) -> go.Figure:
    """Loss against passes over the corpus, one line per width (held-out solid, training dashed): the gap between
    them is what repetition costs. Dotted: Muennighoff et al.'s guideposts, 4 passes (about as good as fresh text)
    and 16 (little left to gain)."""
    traces = []
    widths = sorted({r["d_model"] for r in rows})
    for d, color in zip(widths, _palette(len(widths))):
        sel = sorted((r for r in rows if r["d_model"] == d), key=lambda r: r["epochs"])
        x = [r["epochs"] for r in sel]
        traces += [go.Scatter(x=x, y=[r["loss"] for r in sel], mode="lines+markers", name=f"d = {d}, held out",
                              line=dict(color=color, width=2.5),
                              hovertemplate=f"d = {d}: %{{x:.1f}} passes, held-out loss %{{y:.4f}}<extra></extra>"),
                   go.Scatter(x=x, y=[r["train_loss"] for r in sel], mode="lines", name=f"d = {d}, training text",
                              line=dict(color=color, width=1.5, dash="dash"),
                              hovertemplate=f"d = {d}: %{{x:.1f}} passes, training loss %{{y:.4f}}<extra></extra>")]
    ep = [r["epochs"] for r in rows]
    lo, hi = min(ep) / 1.3, max(ep) * 1.3
    shapes = [dict(type="line", x0=e, x1=e, y0=0, y1=1, yref="paper", line=dict(color=GREY, dash="dot"))
              for e in (4, 16) if lo < e < hi]
    notes = [dict(x=math.log10(e), y=1, yref="paper", text=t, showarrow=False, xanchor="left", yanchor="top",
                  font=dict(size=11, color="#495057", shadow=HALO))
             for e, t in ((4, " 4 passes: still about as good as fresh text"), (16, " 16: little left to gain"))
             if lo < e < hi]
    return go.Figure(traces, dict(**{**LAYOUT, "height": 460}, shapes=shapes, annotations=notes,
                                  title="The epochs study: Tiny Shakespeare read again and again",
                                  xaxis=_pass_axis(lo, hi, title="passes over the corpus's training part"),
                                  yaxis=dict(title="loss (nats per character)")))


def unique_data_figure(law: ScalingLaw, N: float, unique: float, max_epochs: float = MAX_PASSES) -> go.Figure:
    """Left: loss against passes over a fixed stock, fresh text against the stock repeated. Right: what a token of
    each pass is worth against a fresh one."""
    ep = np.geomspace(1.0, max_epochs, 120)
    c = epochs_curve(law, N, unique, ep)
    worth = epoch_worth(ep)
    traces = [go.Scatter(x=ep, y=c["fresh"], mode="lines", name="fresh text every pass (plain law)",
                         line=dict(color=GREY, dash="dash"), hovertemplate="%{x:.1f} passes: %{y:.4f}<extra>fresh"
                                                                            "</extra>"),
              go.Scatter(x=ep, y=c["repeated"], mode="lines", name="the same text repeated, L(N′, D′)",
                         line=dict(color=OURS, width=3), hovertemplate="%{x:.1f} passes: %{y:.4f}<extra>repeated"
                                                                       "</extra>"),
              go.Scatter(x=ep, y=worth, mode="lines", name="worth of a token of that pass", xaxis="x2", yaxis="y2",
                         line=dict(color=LAW_C, width=3), hovertemplate="pass %{x:.1f}: worth %{y:.2f} of a fresh "
                                                                         "token<extra></extra>")]
    # annotations on a log axis take log10 of their x
    notes = [dict(x=math.log10(e), y=float(epoch_worth(e)), xref="x2", yref="y2",
                  text=f"pass {e}: {float(epoch_worth(e)):.2f}", showarrow=True, arrowhead=0, ax=30, ay=-25,
                  font=dict(size=11, shadow=HALO)) for e in (4, 16) if e <= max_epochs]
    fig = go.Figure(traces, dict(
        **{**LAYOUT, "height": 460}, annotations=notes,
        title=f"N = {human(N)} parameters on a stock of {human(unique)} unique tokens",
        xaxis=dict(type="log", title="passes over the stock", domain=[0, 0.55]),
        xaxis2=dict(type="log", title="pass", domain=[0.68, 1], range=[0, math.log10(max_epochs)]),
        yaxis=dict(title="loss"), yaxis2=dict(anchor="x2", title="worth of a token", range=[0, 1.05])))
    return log_axes(fig)


def constrained_split_figure(law: ScalingLaw, unique: float, C_range=(1e20, 1e26)) -> go.Figure:
    """The compute-optimal N and passes over the stock against compute, with and without the stock's limit."""
    Cs = np.geomspace(*C_range, 40)
    plain = np.array([law.compute_optimal(c) for c in Cs])  # (40, 2)
    held = np.stack(repeated_optima(law, Cs, unique), 1)  # (40, 2)
    traces = [go.Scatter(x=Cs, y=plain[:, 0], mode="lines", name="N, unlimited fresh text",
                         line=dict(color=GREY, dash="dash"), hovertemplate="C = %{x:.2g}: N = %{y:.3s}<extra></extra>"),
              go.Scatter(x=Cs, y=held[:, 0], mode="lines", name=f"N, {human(unique)} unique tokens",
                         line=dict(color=OURS, width=3), hovertemplate="C = %{x:.2g}: N = %{y:.3s}<extra></extra>"),
              go.Scatter(x=Cs, y=plain[:, 1] / unique, mode="lines", name="passes, unlimited text (as if repeated)",
                         xaxis="x2", yaxis="y2", line=dict(color=GREY, dash="dash"),
                         hovertemplate="C = %{x:.2g}: %{y:.1f} passes<extra></extra>"),
              go.Scatter(x=Cs, y=held[:, 1] / unique, mode="lines", name="passes over the stock", xaxis="x2",
                         yaxis="y2", line=dict(color=LAW_C, width=3),
                         hovertemplate="C = %{x:.2g}: %{y:.1f} passes<extra></extra>")]
    fig = go.Figure(traces, dict(
        **{**LAYOUT, "height": 460}, title="Where the budget goes when the text is limited",
        xaxis=dict(type="log", title="compute C (FLOPs)", domain=[0, 0.45]),
        xaxis2=dict(type="log", title="compute C (FLOPs)", domain=[0.55, 1]),
        yaxis=dict(type="log", title="optimal parameters N"),
        yaxis2=dict(type="log", anchor="x2", title="passes over the unique text")))
    return log_axes(fig, xaxis=pretty_sci, xaxis2=pretty_sci)


def stock_figure(stocks: dict[str, float], models=FAMOUS_MODELS) -> go.Figure:
    """Each famous model's training tokens as a bar, with horizontal lines for estimates of the unique text there
    was to draw on."""
    names = [m.name for m in models]
    traces = [go.Bar(x=names, y=[m.D for m in models], name="training tokens D", marker_color=GREY,
                     hovertemplate="%{x}: %{y:.3s} tokens<extra></extra>")]
    shapes, notes = [], []
    for (label, v), dash in zip(stocks.items(), ("dash", "dot", "dashdot")):
        shapes.append(dict(type="line", x0=0, x1=1, xref="paper", y0=v, y1=v, line=dict(color=OURS, dash=dash)))
        notes.append(dict(x=0.01, xref="paper", y=math.log10(v), text=f"{label}: {human(v)} tokens", showarrow=False,
                          xanchor="left", yanchor="bottom", font=dict(size=11, color=OURS, shadow=HALO)))
    fig = go.Figure(traces, dict(**{**LAYOUT, "height": 440}, shapes=shapes, annotations=notes,
                                 title="Famous models' tokens against the unique text there was",
                                 yaxis=dict(type="log", title="tokens"), xaxis=dict(tickangle=-30)))
    return log_axes(fig)


def inference_figure(law: ScalingLaw, target: float, inference_tokens: float, best: dict, chin: dict) -> go.Figure:
    """Lifetime FLOPs (training + serving) of every model that reaches ``target``, against its size: Chinchilla's
    optimum (least training) and the inference-aware one (least lifetime) marked."""
    n_min = smallest_model(law, target)
    n = n_min * np.geomspace(1.02, 60.0, 200)
    d = data_for_loss(law, n, target)
    train = FLOPS_PER_PARAM_TOKEN * n * d
    total = lifetime_flops(n, d, inference_tokens)
    traces = [go.Scatter(x=n, y=train, mode="lines", name="training only, 6ND", line=dict(color=GREY, dash="dash"),
                         customdata=d / n, hovertemplate="N = %{x:.3s}: %{y:.3g} FLOPs, %{customdata:.0f} tokens per "
                                                         "parameter<extra>training</extra>"),
              go.Scatter(x=n, y=total, mode="lines", name=f"training + serving {human(inference_tokens)} tokens",
                         line=dict(color=OURS, width=3), customdata=d / n,
                         hovertemplate="N = %{x:.3s}: %{y:.3g} FLOPs, %{customdata:.0f} tokens per parameter"
                                       "<extra>lifetime</extra>"),
              go.Scatter(x=[chin["N"]], y=[float(lifetime_flops(chin["N"], chin["D"], inference_tokens))],
                         mode="markers", name="Chinchilla's optimum", marker=dict(color=GREY, size=13, symbol="square"),
                         hovertemplate="Chinchilla: N = %{x:.3s}, lifetime %{y:.3g} FLOPs<extra></extra>"),
              go.Scatter(x=[best["N"]], y=[best["total_flops"]], mode="markers", name="least lifetime cost",
                         marker=dict(color=OURS, size=15, symbol="star", line=dict(color="black", width=1)),
                         hovertemplate="inference-aware: N = %{x:.3s}, lifetime %{y:.3g} FLOPs<extra></extra>")]
    # the y range from the least cost to eight times it: near the smallest model the cost runs off to infinity
    least = float(min(train.min(), total.min()))
    fig = go.Figure(traces, dict(**{**LAYOUT, "height": 460},
                                 title=f"Every model that reaches a loss of {target:.3f}",
                                 xaxis=dict(type="log", title="parameters N"),
                                 yaxis=dict(type="log", title="FLOPs",
                                            range=[math.log10(least / 1.3), math.log10(least * 8)])))
    return log_axes(fig, yaxis=pretty_sci)
