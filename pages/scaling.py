import math
import os
from pathlib import Path

import numpy as np
import streamlit as st

from core.fmt import human, latex_sci, sci
from core.cost import FLOPS_PER_PARAM_TOKEN
from core.scaling import (BUDGET_DEFAULTS, CHINCHILLA_RUNS, FAMOUS_MODELS, GRID, LAW_PRESETS, FitError, ScalingLaw,
                          budget_flops, famous_table, fit_scaling_law)
from core.scaling_figures import fit_figure, isoflop_curves, loss_map, loss_vs_D, loss_vs_N
from core.scaling_runs import MAX_RUNS, MIN_RUNS, Runs, RunsError, parse_runs, synthetic_runs
from core.params import count_parameters
from core.corpus import TRAIN_FRACTION, pydoc_text, read_text_file, shakespeare_path
from core.study import (GRIDS, SHIPPED_STUDY, StudyError, comparison_rows, corpus_problem, dropped_note,
                        estimate_seconds, open_study, read_fit, rows_to_arrays, usable_rows)
from core.study_figures import frontier_figure, residual_figure, study_figure
from core.study_job import BusyError as StudyBusy, StudyJob, grid_choices
from ui import chart, ensure_frame, gated, job_controls, offer_shakespeare_fetch, shipped_config

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request

CUSTOM = "Custom (your sliders)"
# slider key -> (label, low, high, step, format); A and B move on a log scale, the exponents and E directly
SLIDERS = {
    "scal_logA": ("log₁₀ A", 0.0, 8.0, 0.001, "%.3f"),
    "scal_logB": ("log₁₀ B", 0.0, 8.0, 0.001, "%.3f"),
    "scal_alpha": ("α", 0.01, 1.5, 0.0001, "%.4f"),
    "scal_beta": ("β", 0.01, 1.5, 0.0001, "%.4f"),
    "scal_E": ("L∞ (E)", 0.0, 5.0, 0.0001, "%.4f"),
}
EXAMPLE_LAW_NAME = "Epoch replication (Besiroglu et al. 2024)"
P = FLOPS_PER_PARAM_TOKEN  # the 6 of C = 6ND, for the formulas


def rough_time(seconds: float) -> str:
    """A duration the way one says it: 'about 40 seconds', 'about 12 minutes'."""
    if seconds < 90:
        return f"about {max(10, round(seconds, -1)):.0f} seconds"
    return f"about {round(seconds / 60):.0f} minutes"


def _stamp(folder: Path) -> str:
    """Changes when the study's files are rewritten, so the cache rereads them."""
    try:
        return ":".join(str(p.stat().st_mtime_ns) for p in sorted(folder.iterdir()))
    except OSError:
        return ""


@st.cache_data(max_entries=4, show_spinner=False)
def shipped_study(folder: str, stamp: str):
    """(study.json, usable rows, [(row, why not)], fit.json, problems) of the shipped study (core.study.open_study)."""
    return open_study(folder)


def slider_values(law: ScalingLaw) -> dict:
    """The slider positions showing ``law`` (clipped to the slider ranges)."""
    raw = {"scal_logA": math.log10(law.A), "scal_logB": math.log10(law.B), "scal_alpha": law.alpha,
           "scal_beta": law.beta, "scal_E": law.E}
    return {k: round(min(max(v, SLIDERS[k][1]), SLIDERS[k][2]), 4 if SLIDERS[k][3] < 0.001 else 3)
            for k, v in raw.items()}


def apply_preset():
    name = st.session_state["scal_preset"]
    if name in LAW_PRESETS:
        st.session_state.update(slider_values(LAW_PRESETS[name]))


def to_custom():
    st.session_state["scal_preset"] = CUSTOM


def load_law(law: ScalingLaw):
    st.session_state.update(slider_values(law))
    st.session_state["scal_preset"] = CUSTOM


if "scal_logA" not in st.session_state:
    st.session_state.setdefault("scal_preset", next(iter(LAW_PRESETS)))
    apply_preset()

st.title("Scaling laws")
largest = max(m.N for m in FAMOUS_MODELS)
shipped, _ = shipped_config()
size_note = "" if shipped is None else (
    f" (the largest in the table below, {human(largest)} parameters, has {largest / count_parameters(shipped)['total']:,.0f} "
    f"times the {count_parameters(shipped)['total']:,} of this app's shipped model)")
st.markdown(
    "Train a transformer with $N$ parameters on $D$ tokens and its final loss is, to a good approximation, a sum "
    "of three terms: one that shrinks as the model grows, one that shrinks as the data grows, and a floor that "
    "neither can lower. The constants below come from fits to hundreds of real training runs; move them and "
    "every chart on this page follows. Nothing here needs the sidebar's model: the models these laws speak "
    f"of are far larger{size_note}. At the bottom of the page the same law is fitted to tiny models trained on this "
    "machine, and you can train a grid of your own."
)
st.latex(r"L(N, D) = \underbrace{\frac{A}{N^{\alpha}}}_{\text{capacity}} + "
         r"\underbrace{\frac{B}{D^{\beta}}}_{\text{data}} + \underbrace{L_\infty}_{\text{floor}}")

# ---------------------------------------------------------------- the constants
st.subheader("The constants")
cols = st.columns([2.2, 1, 1, 1, 1, 1])
cols[0].selectbox("Preset", list(LAW_PRESETS) + [CUSTOM], key="scal_preset", on_change=apply_preset,
                  help="Chinchilla: the constants printed in Hoffmann et al. (2022), App. D.2. Epoch: the same fit "
                       "redone by Besiroglu et al. (2024) on data read off the original paper's figure.")
for col, (key, (label, lo, hi, step, fmt)) in zip(cols[1:], SLIDERS.items()):
    col.slider(label, lo, hi, step=step, format=fmt, key=key, on_change=to_custom)
preset = st.session_state["scal_preset"]
s = st.session_state
law = LAW_PRESETS.get(preset) or ScalingLaw(10 ** s["scal_logA"], 10 ** s["scal_logB"], s["scal_alpha"], s["scal_beta"],
                                         s["scal_E"])
st.latex(rf"L(N, D) = \frac{{{law.A:.4g}}}{{N^{{{law.alpha:.4g}}}}} + \frac{{{law.B:.4g}}}{{D^{{{law.beta:.4g}}}}}"
         rf" + {law.E:.4g}")

# ---------------------------------------------------------------- L against N and against D
st.subheader("More parameters help only until the data runs out")
st.markdown(
    "Left: each curve fixes the number of training tokens $D$ and grows the model. The capacity term falls "
    "away as a power law, and the curve lands on a plateau set by the data alone (dashed). Past that point a "
    "bigger model buys nothing; only a curve with more data goes lower. Right: the same story with the roles "
    "swapped, a fixed model fed ever more tokens. The dotted line is the floor $L_\\infty$."
)
st.latex(r"\lim_{N\to\infty} L(N, D) = L_\infty + \frac{B}{D^{\beta}} \qquad "
         r"\lim_{D\to\infty} L(N, D) = L_\infty + \frac{A}{N^{\alpha}}")
left, right = st.columns(2)
chart(loss_vs_N(law), width="stretch", key="scal_fig_N", where=left)
chart(loss_vs_D(law), width="stretch", key="scal_fig_D", where=right)

# ---------------------------------------------------------------- the budget constraint and the map
st.subheader("A compute budget fixes the product ND")
st.markdown(
    f"Each training token costs about {P} FLOPs per parameter (a forward pass and a backward pass twice as "
    f"expensive), so a budget of $C$ FLOPs allows any $N$ and $D$ whose product is $C/{P}$. On the map below every "
    "dotted black line is one budget; walking along it trades parameters for tokens. The orange curve joins the "
    "best point of every budget. Each famous model is a diamond, joined to the optimum for its own compute: "
    "hover it for the numbers."
)
st.latex(rf"C \approx {P}\,N\,D")
chart(loss_map(law), width="stretch", key="scal_fig_map")

chin = next(m for m in FAMOUS_MODELS if m.name == "Chinchilla")
n_c, d_c = law.compute_optimal(chin.compute)
st.markdown(
    f"At Chinchilla's own compute ({P} × {human(chin.N)} × {human(chin.D)} = {sci(chin.compute)} "
    f"FLOPs) these constants put the optimum at N = {human(n_c)} parameters and D = {human(d_c)} tokens: "
    f"**{d_c / n_c:.1f} tokens per parameter**. Chinchilla itself was trained with {chin.D / chin.N:.0f}."
)
ratios = {name: (lambda nd: nd[1] / nd[0])(p.compute_optimal(chin.compute)) for name, p in LAW_PRESETS.items()}
st.caption(
    "The two presets disagree here: " + "; ".join(f"{name}: {r:.1f} tokens per parameter" for name, r in ratios.items())
    + ". Besiroglu et al. (2024) found that the constants printed in the 2022 paper do not reproduce its own "
    "recommendation, and refitting the same data gives the second set."
)
rows = famous_table(law)
st.dataframe(
    [{"model": r["model"], "parameters": human(r["N"]), "tokens": human(r["D"]), "tokens / parameter": r["tokens_per_param"],
      "compute (FLOPs)": sci(r["compute"]), "optimal N": human(r["N_opt"]), "optimal D": human(r["D_opt"]),
      "optimal tokens / parameter": r["opt_tokens_per_param"], "loss": r["loss"], "loss at the optimum": r["optimal_loss"],
      "lower by": r["excess_loss"], "source": r["source"]} for r in rows],
    hide_index=True, width="stretch", key="scal_famous",
    column_config={k: st.column_config.NumberColumn(format=f) for k, f in (
        ("tokens / parameter", "%.1f"), ("optimal tokens / parameter", "%.1f"), ("loss", "%.4f"),
        ("loss at the optimum", "%.4f"), ("lower by", "%.4f"))})
worst = max(rows, key=lambda r: r["excess_loss"])
st.caption(f"By these constants the worst-proportioned model in the table is {worst['model']}: the same compute "
           f"spent optimally would have reached a loss {worst['excess_loss']:.3f} nats lower. Later models are "
           "deliberately trained far past the optimum: a smaller model is cheaper to serve.")

# ---------------------------------------------------------------- iso-FLOP curves
st.subheader("Iso-FLOP curves: one budget, every split")
st.markdown(
    "Each curve spends one fixed budget: moving right buys parameters with tokens, $D = C/6N$. Too small a model "
    "wastes the data term, too large a model starves it; the valley in between is the compute-optimal model. "
    "Circles mark the lowest point found on the curve, crosses the closed-form optimum derived below: they land "
    "on top of each other."
)
chart(isoflop_curves(law), width="stretch", key="scal_fig_isoflop")

# ---------------------------------------------------------------- the budget calculator and the derivation
st.subheader("Spend a budget: the Lagrange optimum")
calc, derivation = st.columns([1, 1.7], gap="large")
with calc:
    st.markdown(
        f"Defaults: the lecture's ${BUDGET_DEFAULTS['dollars'] / 1e6:.0f} million, one H100 rented at "
        f"${BUDGET_DEFAULTS['dollars_per_gpu_hour']:.2f} per hour, its {BUDGET_DEFAULTS['peak_flops'] / 1e12:.0f} "
        f"TFLOP/s dense BF16 peak, and {BUDGET_DEFAULTS['utilisation']:.0%} of that peak actually used, "
        "typical of large runs.".replace("$", r"\$"))
    dollars = st.number_input("Budget (US dollars)", min_value=1.0, max_value=1e12, value=BUDGET_DEFAULTS["dollars"],
                              step=1e6, format="%.0f", key="scal_dollars")
    price = st.number_input("Price per GPU-hour (dollars)", min_value=0.01, max_value=1000.0,
                            value=BUDGET_DEFAULTS["dollars_per_gpu_hour"], step=0.25, key="scal_price")
    peak = st.number_input("Peak throughput per GPU (TFLOP/s)", min_value=0.1, max_value=1e5,
                           value=BUDGET_DEFAULTS["peak_flops"] / 1e12, step=10.0, key="scal_peak")
    util = st.slider("Utilisation (share of peak)", 0.05, 1.0, BUDGET_DEFAULTS["utilisation"], 0.01, key="scal_util")
    C = budget_flops(dollars, price, peak * 1e12, util)
    n_opt, d_opt = law.compute_optimal(C)
    m1, m2 = st.columns(2)
    m1.metric("FLOPs C", sci(C), help=f"{dollars / price:,.0f} GPU-hours")
    m2.metric("Tokens per parameter", f"{d_opt / n_opt:.1f}")
    m3, m4 = st.columns(2)
    m3.metric("Optimal N", human(n_opt), help="parameters")
    m4.metric("Optimal D", human(d_opt), help="training tokens")
    m5, m6 = st.columns(2)
    m5.metric("Predicted loss", f"{float(law.loss(n_opt, d_opt)):.4f}")
    m6.metric("Floor L∞", f"{law.E:.4f}")
with derivation:
    st.markdown("Minimise the loss on the budget line with a Lagrange multiplier $\\lambda$:")
    st.latex(rf"\mathcal{{L}}(N, D, \lambda) = \frac{{A}}{{N^{{\alpha}}}} + \frac{{B}}{{D^{{\beta}}}} + L_\infty "
             rf"+ \lambda\,({P}ND - C)")
    st.markdown("Set both partial derivatives to zero and multiply each by its variable:")
    st.latex(rf"\frac{{\partial \mathcal{{L}}}}{{\partial N}} = -\alpha A N^{{-\alpha-1}} + {P}\lambda D = 0"
             rf"\;\Rightarrow\; \alpha A N^{{-\alpha}} = {P}\lambda ND")
    st.latex(rf"\frac{{\partial \mathcal{{L}}}}{{\partial D}} = -\beta B D^{{-\beta-1}} + {P}\lambda N = 0"
             rf"\;\Rightarrow\; \beta B D^{{-\beta}} = {P}\lambda ND")
    st.markdown("The right-hand sides agree, so at the optimum the two bottlenecks stand in a fixed ratio:")
    st.latex(r"\alpha \frac{A}{N^{\alpha}} = \beta \frac{B}{D^{\beta}}")
    st.markdown(f"Substitute $D = C/{P}N$ and solve for $N$; $D$ follows from the budget:")
    st.latex(rf"N^{{\alpha+\beta}} = \frac{{\alpha A}}{{\beta B}} \left(\frac{{C}}{{{P}}}\right)^{{\beta}}")
    st.latex(rf"N_{{opt}} = G \left(\frac{{C}}{{{P}}}\right)^{{\frac{{\beta}}{{\alpha+\beta}}}}")
    st.latex(rf"D_{{opt}} = G^{{-1}} \left(\frac{{C}}{{{P}}}\right)^{{\frac{{\alpha}}{{\alpha+\beta}}}}, \qquad "
             rf"G = \left(\frac{{\alpha A}}{{\beta B}}\right)^{{\frac{{1}}{{\alpha+\beta}}}}")
    st.markdown("With the constants above and this budget:")
    st.latex(rf"G = {law.G:.4g}, \qquad \frac{{C}}{{{P}}} = {latex_sci(C / P)}")
    st.latex(rf"N_{{opt}} = {law.G:.4g} \times \left({latex_sci(C / P)}\right)^{{{law.beta / (law.alpha + law.beta):.4f}}}"
             rf" = {latex_sci(n_opt)}")
    st.latex(rf"D_{{opt}} = \frac{{C}}{{{P}\,N_{{opt}}}} = {latex_sci(d_opt)}")
    st.caption(f"Both exponents are near one half when α ≈ β: a ten times bigger budget buys about "
               f"{10 ** (law.beta / (law.alpha + law.beta)):.2f}× the parameters and "
               f"{10 ** (law.alpha / (law.alpha + law.beta)):.2f}× the tokens with these constants.")

# ---------------------------------------------------------------- fit your own runs
st.subheader("Fit the law to your own runs")
st.markdown(
    f"Give at least {MIN_RUNS} training runs as rows of $N$, $D$ and final loss (nats per token), as a CSV with "
    f"the header `N,D,loss` (counts may be written like `70B` or `1.4T`; at most {MAX_RUNS:,} runs). The fit "
    "is the one of Hoffmann et al.: a Huber loss on the logarithm of the loss, minimised by L-BFGS from each of "
    f"{math.prod(len(v) for v in GRID.values()):,} starting points, the best kept."
)
st.latex(r"\min_{a, b, e, \alpha, \beta} \sum_i \mathrm{Huber}_{10^{-3}}\!\Big(\mathrm{LSE}\big(a - \alpha \log N_i,\;"
         r" b - \beta \log D_i,\; e\big) - \log L_i\Big)")
st.latex(r"A = e^{a}, \quad B = e^{b}, \quad L_\infty = e^{e}, \qquad "
         r"\mathrm{LSE}(u, v, w) = \log\left(e^{u} + e^{v} + e^{w}\right)")
source = st.radio("Runs", ["Example: 250 synthetic runs", "Upload a CSV", "Paste rows"], horizontal=True,
                  key="scal_fit_source")


@st.cache_data(max_entries=16, show_spinner="Fitting: L-BFGS from every starting point ...")
def _fitted(csv_text: str) -> ScalingLaw:
    runs = parse_runs(csv_text)
    return fit_scaling_law(runs.N, runs.D, runs.loss, threads=None)  # the page run's own thread count (core.threads)


def fitted(csv_text: str) -> ScalingLaw:
    """The fit (thousands of L-BFGS starts at once) waits in the compute line when the server is busy; a fit that
    is cached does not."""
    return gated(_fitted, "the fit")(csv_text)


runs, truth, given = None, None, True
try:
    if source.startswith("Example"):
        truth = LAW_PRESETS[EXAMPLE_LAW_NAME]
        runs = synthetic_runs(truth, n=250, noise=0.01, seed=0)
        st.caption(f"Drawn from the {EXAMPLE_LAW_NAME} constants with 1 % noise on each loss, over Chinchilla's "
                   "range of sizes; the fit does not know the constants.")
        st.download_button("Download these runs as CSV", runs.to_csv(), "example_runs.csv", "text/csv",
                           key="scal_download")
    elif source == "Upload a CSV":
        up = st.file_uploader("CSV with columns N, D, loss", type=["csv", "txt"], key="scal_upload")
        given = up is not None
        runs = parse_runs(up.getvalue()) if given else None
    else:
        text = st.text_area("Rows: N, D, loss", key="scal_paste", height=160, max_chars=200_000,
                            placeholder="N,D,loss\n400M,8B,2.95\n1B,20B,2.60\n...")
        given = bool(text.strip())
        runs = parse_runs(text) if given else None
except RunsError as e:
    st.error(str(e), icon="⚠️")
if not given:
    st.info("Add runs above to fit them.")

fit = None
if runs is not None:
    for w in runs.warnings:
        st.warning(w, icon="⚠️")
    try:
        fit = fitted(runs.to_csv())
    except FitError as e:
        st.error(str(e), icon="⚠️")
if fit is not None:
    true = truth.constants() if truth else None
    table = [{"constant": name, "fitted": value, **({"true": true[name]} if true else {})}
             for name, value in fit.constants().items()]
    a, b = st.columns([1, 2.4])
    with a:
        st.dataframe(table, hide_index=True, width="stretch", key="scal_fit_table",
                     column_config={"fitted": st.column_config.NumberColumn(format="%.4g"),
                                    "true": st.column_config.NumberColumn(format="%.4g")})
        st.metric("Runs", f"{len(runs)}")
        st.metric("RMS error of log loss", f"{fit.rms_log_error(runs.N, runs.D, runs.loss):.4f}")
        n_f, d_f = fit.compute_optimal(chin.compute)
        st.caption(f"At Chinchilla's compute this fit's optimum is {human(n_f)} parameters on {human(d_f)} tokens.")
        st.button("Use the fitted constants above", key="scal_use_fit", on_click=load_law, args=(fit,),
                  help="Moves the sliders to the fitted values, so every chart on the page shows your law.")
        shown = slider_values(fit)
        if abs(10 ** shown["scal_logA"] / fit.A - 1) > 0.01 or abs(10 ** shown["scal_logB"] / fit.B - 1) > 0.01 or any(
                abs(shown[k] - v) > 1e-3 for k, v in (("scal_alpha", fit.alpha), ("scal_beta", fit.beta), ("scal_E", fit.E))):
            st.caption("Some fitted constants lie outside the sliders' ranges; the sliders will stop at their ends.")
    chart(fit_figure(fit, runs.N, runs.D, runs.loss), width="stretch", key="scal_fig_fit", where=b)
    b.caption("Each run is drawn twice: on the left with the fitted data term taken off its loss, on the right "
              "with the capacity term taken off. If the law fits, every point sits on the curve.")

# ---------------------------------------------------------------- your own scaling law: a study trained here
st.subheader("Your own scaling law: tiny models trained on this machine")
shipped_meta, shipped_rows, shipped_bad, shipped_fit, shipped_problems = shipped_study(str(SHIPPED_STUDY),
                                                                                       _stamp(SHIPPED_STUDY))
g = shipped_meta["grid"] if shipped_meta else None
st.markdown(
    "The laws above were fitted to hundreds of runs on thousands of GPUs. The same experiment fits on a laptop "
    "if the models are tiny: train models of several sizes on several amounts of text, each once, and fit "
    "the same formula to their final losses. "
    + ("" if g is None else
       f"The study below did that on this project's machine: {len(shipped_rows)} character-level models, widths "
       f"d = {', '.join(map(str, g['widths']))} at depth {g['n_layers']}, each trained on "
       f"{', '.join(human(t) for t in sorted({r['D'] for r in shipped_rows}))} characters of "
       f"{shipped_meta['corpus']}, with the training loop of the Training page. Below it you can run a grid yourself "
       "and watch the points arrive."))
st.caption("N here is the non-embedding count (Kaplan et al. 2020): the blocks and the final LayerNorm, without the "
           "token embedding, the position table and the output map, which are a large share of a model this small "
           "and do little of the modelling the capacity term describes; Hoffmann et al. count every parameter "
           "(runs.csv has both). D counts characters, and the loss is the validation loss over every full window of "
           "the held-out 10 %, in nats per character.")


def _g3(v: float) -> str:
    """Three significant digits; a bound that the bootstrap drove to zero reads as 0."""
    return "0" if abs(v) < 1e-6 else f"{v:.3g}"


def comparison_table(law: ScalingLaw, intervals: dict | None, key: str):
    rows = comparison_rows(law, intervals)
    table = [{"constant": r["constant"], "this study": r["this study"],
              "95% interval": "–" if intervals is None else f"{_g3(r['95% low'])} to {_g3(r['95% high'])}",
              "Chinchilla 2022": r["Chinchilla 2022"], "Epoch 2024": r["Epoch 2024"]} for r in rows]
    st.dataframe(table, hide_index=True, width="stretch", key=key,
                 column_config={k: st.column_config.NumberColumn(format="%.3g")
                                for k in ("this study", "Chinchilla 2022", "Epoch 2024")})


def show_study(rows: list[dict], law: ScalingLaw | None, intervals: dict | None, key: str, boot: dict | None = None,
               title: str = "Your study", unfitted: str = f"the runs so far (the law is fitted from {MIN_RUNS} runs on)"):
    """The runs with the fitted law, the constants beside the published ones, the residuals and the frontier."""
    chart(study_figure(rows, law, title=title, unfitted=unfitted), width="stretch", key=f"{key}_fig")
    if law is None:
        return
    N, D, loss = rows_to_arrays(rows)
    m1, m2, m3, _ = st.columns([1, 1, 1, 2])
    m1.metric("Runs in the study", f"{len(rows)}")
    m2.metric("R² of log loss", f"{law.r2_log(N, D, loss):.4f}",
              help="The share of the runs' variance in log loss that the fitted law explains.")
    m3.metric("RMS error", f"{100 * law.rms_log_error(N, D, loss):.2f} %",
              help="Root mean square of log L − log L_fit: the typical distance of a run from the fit.")
    comparison_table(law, intervals, key=f"{key}_table")
    note = ("E is in nats per character here and in nats per token in the papers, so it cannot be compared with "
            "theirs; nor can A and B, which carry the units of N and D. ")
    if boot is not None:
        note += (f"Intervals: 2.5th to 97.5th percentile of {boot['resamples'] - boot['failed']} refits to runs drawn "
                 f"with replacement (a bootstrap over runs; {boot['failed']} of {boot['resamples']} resamples pinned "
                 "down no law). Wide intervals on the constants go with a narrow band of predictions: a larger α "
                 "with a lower E fits these runs almost as well as a smaller α with a higher E.")
    elif intervals is None:
        note += "The intervals come when the study has finished: it then refits resampled runs."
    st.caption(note)
    left, right = st.columns([1, 1.25])
    chart(residual_figure(rows, law), width="stretch", key=f"{key}_resid", where=left)
    chart(frontier_figure(law, rows, LAW_PRESETS), width="stretch", key=f"{key}_frontier", where=right)
    C = float(np.median(FLOPS_PER_PARAM_TOKEN * N * D))
    split = {name: (lambda nd: nd[1] / nd[0])(l.compute_optimal(C)) for name, l in (
        ("this fit", law), ("Chinchilla's constants", LAW_PRESETS["Chinchilla (Hoffmann et al. 2022)"]),
        ("Epoch's", LAW_PRESETS["Epoch replication (Besiroglu et al. 2024)"]))}
    said = ", ".join(f"{r:.0f} by {name}" if r >= 10 else f"{r:.1f} by {name}" for name, r in split.items())
    smallest = FLOPS_PER_PARAM_TOKEN * CHINCHILLA_RUNS["N"][0] * CHINCHILLA_RUNS["D"][0]
    st.caption(f"At C = {sci(C)} FLOPs (the median run's compute) the compute-optimal number of tokens per parameter "
               f"is {said}. Hoffmann et al.'s smallest runs used about {sci(smallest)} FLOPs, with N counting every "
               "parameter and D counting BPE tokens: on this map the published frontiers are extrapolated "
               f"{math.log10(smallest / C):.0f} decades down, to another unit of D.")


def refit(rows: list[dict]) -> tuple[ScalingLaw | None, str | None]:
    """(the law fitted here to the rows, None), (None, why it failed), or (None, None) for too few rows."""
    if len(rows) < MIN_RUNS:
        return None, None
    N, D, loss = rows_to_arrays(rows)
    try:
        return fitted(Runs(N, D, loss).to_csv()), None
    except (FitError, RunsError) as e:
        return None, str(e)


if shipped_rows:
    law, refit_error = (ScalingLaw(**shipped_fit["law"]), None) if shipped_fit else refit(shipped_rows)
    if shipped_problems and law is not None and shipped_fit is None:
        shipped_problems = [f"{shipped_problems[0]}; the fit shown is made here from its runs, without intervals"]
    show_study(shipped_rows, law, shipped_fit["bootstrap"]["intervals"] if shipped_fit else None, "scal_shipped",
               boot=shipped_fit["bootstrap"] if shipped_fit else None, title="The shipped study")
    sessions = shipped_meta.get("sessions", [])
    wall = sum(x.get("wall_s", 0) for x in sessions)
    loads = [v for x in sessions for v in (x.get("load_start"), x.get("load_end")) if v is not None]
    busy_note = (f", shared with other work (load average {min(loads):.1f} to {max(loads):.1f} on "
                 f"{os.cpu_count()} cores)" if loads and max(loads) > 1.5 * (os.cpu_count() or 1) else "")
    st.caption(f"The shipped study took {rough_time(wall)} of wall time"
               + (f" on {sessions[-1]['machine'].split(',')[0]}" if sessions and sessions[-1].get("machine") else "")
               + busy_note
               + f". Its card (README.md, with the exact command) and runs.csv are in `assets/studies/{SHIPPED_STUDY.name}`.")
else:
    refit_error = None
    st.warning(f"The shipped study (assets/studies) {'has no usable runs' if shipped_bad else 'could not be read'}; "
               "run a grid below to make your own.", icon="⚠️")
for problem in shipped_problems + ([dropped_note(shipped_bad)] if shipped_bad else []) + ([refit_error] if refit_error
                                                                                           else []):
    st.warning(f"The shipped study: {problem}", icon="⚠️")

st.markdown("##### Why your exponents need not be Chinchilla's")
if shipped_rows:
    Ns, Ds = [r["N"] for r in shipped_rows], [r["D"] for r in shipped_rows]
    passes = max(Ds) / (TRAIN_FRACTION * shipped_meta["corpus_chars"])
    smallest = min(shipped_rows, key=lambda r: r["N"])
    here = (f"Tiny Shakespeare is one author's plays, {human(shipped_meta['corpus_chars'])} characters, and the "
            f"largest budget here reads its training part {passes:.1f} times over. ")
    lever = (f"Here N spans {max(Ns) / min(Ns):.0f}× ({human(min(Ns))} to {human(max(Ns))} parameters) and D "
             f"{max(Ds) / min(Ds):.0f}×; ")
    shape = (f" The smallest model (d = {smallest['d_model']}, {smallest['n_layers']} blocks, {smallest['n_heads']} "
             f"head{'s' if smallest['n_heads'] > 1 else ''}) is limited by its shape as much as by its count.")
    short = (f"\n- **Short runs.** On the smallest budget a run takes only {min(r['steps'] for r in shipped_rows):,} "
             "optimisation steps, so its loss says how far the optimiser got as much as how much text it saw. The "
             "loss then falls steeply as D grows, which makes β large, and a large β against a small α sends "
             "the compute-optimal frontier towards bigger models.")
else:
    here, lever, shape, short = "", "", "", ""
st.markdown(
    "- **Other data.** Chinchilla learned from a vast mixture of web pages, books and code, where more text keeps "
    f"bringing new words, facts and styles. {here}How fast the data term falls depends on how much there is left "
    "to learn from more of the same text: a property of the corpus, not of transformers.\n"
    "- **Another unit.** A character carries far less than a BPE token (English runs about four characters to a "
    "token), so L and E are nats per character here and nats per token there, and those constants cannot be "
    "compared. If every token were the same number of characters, counting D in characters would only rescale "
    "B, and measuring the loss per character would scale A, B and E alike: the exponents survive a change of "
    "unit, so they can be compared, with the other caveats.\n"
    f"- **A short lever.** {lever}Hoffmann et al. trained over {CHINCHILLA_RUNS['count']} models from "
    f"{human(CHINCHILLA_RUNS['N'][0])} to over {human(CHINCHILLA_RUNS['N'][1])} parameters on "
    f"{human(CHINCHILLA_RUNS['D'][0])} to {human(CHINCHILLA_RUNS['D'][1])} tokens. Over a short range a power law plus a floor is poorly pinned: a larger "
    "α with a lower E fits almost as well as a smaller α with a higher E, which is what wide intervals say." + shape
    + "\n- **One recipe for all.** Every run here has the same learning rates, batch size and depth; only the "
    "width changes. A rate that suits one size a little better than another, or a batch too large for the "
    "smallest budgets, tilts the fitted exponents. Hoffmann et al. grew depth and width together." + short)

# ---------------------------------------------------------------- run a grid yourself
st.markdown("##### Run a grid yourself")
st.markdown(
    "Pick a corpus and a grid and start it: the runs train in the background, in processes of their own (one per "
    "core), and each point appears on the plots as its run finishes. With eight runs or more the law is fitted to "
    "them; when all are done the study refits resampled runs for the intervals. You can leave the page meanwhile.")
corpora = {}
tiny_shakespeare = shakespeare_path()
if tiny_shakespeare is not None:
    corpora["shakespeare"] = f"Tiny Shakespeare ({tiny_shakespeare.name})"
corpora["pydoc"] = "Python's reference documentation (ships with Python)"
c1, c2 = st.columns([1, 1.4])
corpus_key = c1.radio("Corpus", list(corpora), format_func=corpora.get, key="scal_study_corpus")
if tiny_shakespeare is None and offer_shakespeare_fetch(key="scal_study_fetch"):
    st.rerun()
choices = grid_choices()
grid_name = c2.radio("Grid", list(choices), format_func=choices.get, key="scal_study_grid", horizontal=False)
grid = GRIDS[grid_name]
corpus_text = read_text_file(tiny_shakespeare) if corpus_key == "shakespeare" else pydoc_text()
problem = corpus_problem(grid, corpus_text, corpora[corpus_key].split(" (")[0])
estimate = estimate_seconds(grid, shipped_rows)
st.caption(f"Widths d = {', '.join(map(str, grid.widths))} at depth {grid.n_layers}; budgets D = "
           f"{', '.join(human(grid.steps(t) * grid.tokens_per_step) for t in grid.tokens)} characters."
           + ("" if estimate is None else f" It takes {rough_time(estimate)} on {os.cpu_count()} idle cores (from the "
              "shipped study's runs), longer while others train.")
           + (f" {len(grid.widths) * len(grid.tokens)} runs are too few to fit five constants: this grid only shows "
              f"the trend (the fit needs {MIN_RUNS})." if len(grid.widths) * len(grid.tokens) < MIN_RUNS else ""))
if problem:
    st.error(problem, icon="⚠️")

job: StudyJob | None = st.session_state.get("scal_study_job")
status = job.status() if job else None
busy = status is not None and status.active
if st.button("Start the study", type="primary", key="scal_study_start", disabled=busy or bool(problem),
             help="Trains every run of the grid in the background; starting again replaces your previous study."):
    folder = StudyJob.new_folder()
    if corpus_key == "shakespeare":
        path = tiny_shakespeare
    else:
        path = folder / "corpus.txt"
        path.write_text(corpus_text, encoding="utf-8")
    new = StudyJob(path, grid_name, folder=folder, temporary=True, corpus_name=corpora[corpus_key].split(" (")[0])
    try:
        new.start()
    except (StudyBusy, StudyError) as e:
        st.error(str(e), icon="⚠️")
    else:
        if job is not None:
            job.stop(wait=None)
        st.session_state["scal_study_job"] = new
        st.rerun()
if busy:
    st.caption("Your study is running: stop it to start another.")


def study_view(job: StudyJob, polling: bool):
    s = job.status()
    job_controls(job, s, polling, "scal_study", StudyBusy,
                 resume_help="A paused study goes on; a stopped one starts again and trains only the runs it lacks.",
                 stop_help="Ends the runs under way; the finished runs stay.")
    label = {"new": "Not started", "starting": "Starting the workers", "running": "Training",
             "paused": "Paused", "stopping": "Stopping", "stopped": "Stopped", "finished": "Finished",
             "failed": "Failed"}[s.state]
    eta = f", {rough_time(s.eta_s)} left" if s.eta_s else ""
    st.progress(s.done / max(1, s.total), text=f"{label}: {s.done} of {s.total} runs done{eta} "
                                              f"({job.grid_name} grid on {job.corpus_name})")
    if s.state == "failed":
        st.error(f"The study failed: {s.message}", icon="⚠️")
    if s.problem:
        st.error(f"Your study's runs cannot be shown: {s.problem}", icon="⚠️")
        return
    rows, bad = usable_rows(s.rows)
    if bad:
        st.warning(dropped_note(bad), icon="⚠️")
    if not rows:
        if not bad:
            st.info("The first points appear when the first runs finish (the largest models go first).")
        return
    law, fit_error = refit(rows)
    done_fit = None
    if s.state == "finished":
        try:
            done_fit = read_fit(job.folder)
        except StudyError as e:
            st.warning(f"{e}; the fit shown is made here from the runs, without intervals.", icon="⚠️")
    if done_fit:
        law = ScalingLaw(**done_fit["law"])
    unfitted = (f"its {len(rows)} runs (too few to fit five constants: the fit needs {MIN_RUNS})"
                if s.total < MIN_RUNS and s.done == s.total else
                f"the runs so far (the law is fitted from {MIN_RUNS} runs on)")
    show_study(rows, law, done_fit["bootstrap"]["intervals"] if done_fit else None, "scal_yours",
               boot=done_fit["bootstrap"] if done_fit else None, unfitted=unfitted)
    if fit_error:
        st.warning(fit_error, icon="⚠️")
    elif law is None and s.total >= MIN_RUNS:
        st.caption(f"{len(rows)} runs so far; the fit starts at {MIN_RUNS}.")
    st.download_button("Download runs.csv", job.runs_csv.read_bytes(), "runs.csv", "text/csv",
                       key="scal_study_download", on_click="ignore")


if job is not None:
    polling = job.status().moving
    st.fragment(run_every=2.0 if polling else None)(study_view)(job, polling)
