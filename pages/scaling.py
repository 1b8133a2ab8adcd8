import math

import streamlit as st

from core.fmt import human, latex_sci, sci
from core.cost import FLOPS_PER_PARAM_TOKEN
from core.scaling import (BUDGET_DEFAULTS, FAMOUS_MODELS, GRID, PRESETS, FitError, ScalingLaw, budget_flops,
                          famous_table, fit_scaling_law)
from core.scaling_figures import fit_figure, isoflop_curves, loss_map, loss_vs_D, loss_vs_N
from core.scaling_runs import MAX_RUNS, MIN_RUNS, RunsError, parse_runs, synthetic_runs
from core.params import count_parameters
from ui import ensure_frame, shipped_config

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


def slider_values(law: ScalingLaw) -> dict:
    """The slider positions showing ``law`` (clipped to the slider ranges)."""
    raw = {"scal_logA": math.log10(law.A), "scal_logB": math.log10(law.B), "scal_alpha": law.alpha,
           "scal_beta": law.beta, "scal_E": law.E}
    return {k: round(min(max(v, SLIDERS[k][1]), SLIDERS[k][2]), 4 if SLIDERS[k][3] < 0.001 else 3)
            for k, v in raw.items()}


def apply_preset():
    name = st.session_state["scal_preset"]
    if name in PRESETS:
        st.session_state.update(slider_values(PRESETS[name]))


def to_custom():
    st.session_state["scal_preset"] = CUSTOM


def load_law(law: ScalingLaw):
    st.session_state.update(slider_values(law))
    st.session_state["scal_preset"] = CUSTOM


if "scal_logA" not in st.session_state:
    st.session_state.setdefault("scal_preset", next(iter(PRESETS)))
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
    f"of are far larger{size_note}."
)
st.latex(r"L(N, D) = \underbrace{\frac{A}{N^{\alpha}}}_{\text{capacity}} + "
         r"\underbrace{\frac{B}{D^{\beta}}}_{\text{data}} + \underbrace{L_\infty}_{\text{floor}}")

# ---------------------------------------------------------------- the constants
st.subheader("The constants")
cols = st.columns([2.2, 1, 1, 1, 1, 1])
cols[0].selectbox("Preset", list(PRESETS) + [CUSTOM], key="scal_preset", on_change=apply_preset,
                  help="Chinchilla: the constants printed in Hoffmann et al. (2022), App. D.2. Epoch: the same fit "
                       "redone by Besiroglu et al. (2024) on data read off the original paper's figure.")
for col, (key, (label, lo, hi, step, fmt)) in zip(cols[1:], SLIDERS.items()):
    col.slider(label, lo, hi, step=step, format=fmt, key=key, on_change=to_custom)
preset = st.session_state["scal_preset"]
s = st.session_state
law = PRESETS.get(preset) or ScalingLaw(10 ** s["scal_logA"], 10 ** s["scal_logB"], s["scal_alpha"], s["scal_beta"],
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
left.plotly_chart(loss_vs_N(law), width="stretch", key="scal_fig_N")
right.plotly_chart(loss_vs_D(law), width="stretch", key="scal_fig_D")

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
st.plotly_chart(loss_map(law), width="stretch", key="scal_fig_map")

chin = next(m for m in FAMOUS_MODELS if m.name == "Chinchilla")
n_c, d_c = law.compute_optimal(chin.compute)
st.markdown(
    f"At Chinchilla's own compute ({P} × {human(chin.N)} × {human(chin.D)} = {sci(chin.compute)} "
    f"FLOPs) these constants put the optimum at N = {human(n_c)} parameters and D = {human(d_c)} tokens: "
    f"**{d_c / n_c:.1f} tokens per parameter**. Chinchilla itself was trained with {chin.D / chin.N:.0f}."
)
ratios = {name: (lambda nd: nd[1] / nd[0])(p.compute_optimal(chin.compute)) for name, p in PRESETS.items()}
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
st.plotly_chart(isoflop_curves(law), width="stretch", key="scal_fig_isoflop")

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
def fitted(csv_text: str) -> ScalingLaw:
    runs = parse_runs(csv_text)
    return fit_scaling_law(runs.N, runs.D, runs.loss)


runs, truth, given = None, None, True
try:
    if source.startswith("Example"):
        truth = PRESETS[EXAMPLE_LAW_NAME]
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
    b.plotly_chart(fit_figure(fit, runs.N, runs.D, runs.loss), width="stretch", key="scal_fig_fit")
    b.caption("Each run is drawn twice: on the left with the fitted data term taken off its loss, on the right "
              "with the capacity term taken off. If the law fits, every point sits on the curve.")
