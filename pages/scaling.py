"""Scaling laws: the lecture's L(N, D), its plateaus, the compute budget and its compute-optimal split, famous
models judged by it. Fitting the law to runs is the next page (pages/scaling_fit.py), which reads the law chosen here
from the session. Every number is computed in core (scaling, scaling_view); this page holds widgets, prose, figures."""
import streamlit as st

from core.views import scaling_view as sv
from core.analysis.cost import FLOPS_PER_PARAM_TOKEN as P  # the 6 of C = 6ND, in every formula and sentence below
from core.serve.fmt import human, latex_sci, sci
from core.analysis.scaling import BUDGET_DEFAULTS, LAW_PRESETS
from core.figures.scaling_figures import isoflop_curves, loss_map, loss_vs_D, loss_vs_N
from ui import chart, ensure_frame, shipped_config
from pages.scaling.parts import show_inference, show_unique_data
from core.serve.links import Field, LinkSpec
from ui.links import link_box, use_link

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request
FAMOUS_HEADERS = {"model": "model", "parameters": "N", "tokens": "D", "tokens / parameter": "D/N",
                  "compute (FLOPs)": "C (FLOPs)", "optimal N": "N opt", "optimal D": "D opt",
                  "optimal tokens / parameter": "D/N opt", "loss": "loss", "loss at the optimum": "loss opt",
                  "lower by": "lower by"}  # the famous-models table's columns: full name -> header
SLIDER_STEP = 0.01  # one arrow key press on a constant's slider; the box under it takes sv.SLIDERS' finer step


def apply_preset():
    if st.session_state["scal_preset"] in LAW_PRESETS:
        st.session_state.update(sv.slider_values(LAW_PRESETS[st.session_state["scal_preset"]]))


def to_custom():
    st.session_state["scal_preset"] = sv.CUSTOM


# each constant has a slider (steps of 0.01, a change one sees in the charts) and a box under it for an exact value
# (sv.SLIDERS' steps: a fit's four decimals); the two are kept equal by these callbacks, and by box_follows below
# for a slider moved elsewhere (a preset, the fit page's button)
def slider_moved(key: str):
    st.session_state[f"{key}_box"] = st.session_state[key]
    to_custom()


def box_typed(key: str):
    st.session_state[key] = st.session_state[f"{key}_box"]
    to_custom()


def box_follows():
    for key in sv.SLIDERS:
        if st.session_state.get(f"{key}_box") != st.session_state[key]:
            st.session_state[f"{key}_box"] = st.session_state[key]


if "scal_logA" not in st.session_state:  # no law on the sliders yet: a first visit, or the fit page seen first
    st.session_state["scal_preset"] = sv.chosen_preset(st.session_state)
    apply_preset()
LINK_KEYS = {"logA": "scal_logA", "logB": "scal_logB", "alpha": "scal_alpha", "beta": "scal_beta", "E": "scal_E"}
LINK = LinkSpec({"preset": Field(("choice", tuple(LAW_PRESETS))),  # a preset, or the five constants of a custom law
                 **{u: Field(("float", *sv.SLIDERS[k][1:3])) for u, k in LINK_KEYS.items()}})
link = use_link(LINK)
if "preset" in link.values:
    st.session_state["scal_preset"] = link.values["preset"]
    apply_preset()
if set(link.values) & set(LINK_KEYS):  # constants of its own: the law on the sliders is a custom one
    st.session_state.update({LINK_KEYS[u]: v for u, v in link.values.items() if u in LINK_KEYS})
    to_custom()

st.title("Scaling laws")
st.markdown(
    "Train a transformer with $N$ parameters on $D$ tokens and its final loss is, to a good approximation, a sum "
    "of three terms: one that shrinks as the model grows, one that shrinks as the data grows, and a floor that "
    "neither can lower. The constants below come from fits to hundreds of real training runs; move them and "
    "every chart on this page follows. Nothing here needs the sidebar's model: the models these laws speak "
    f"of are far larger{sv.size_note(shipped_config()[0])}.")
st.latex(r"L(N, D) = \underbrace{\frac{A}{N^{\alpha}}}_{\text{capacity}} + "
         r"\underbrace{\frac{B}{D^{\beta}}}_{\text{data}} + \underbrace{L_\infty}_{\text{floor}}")

# ---------------------------------------------------------------- the constants
st.subheader("The constants")
box_follows()
# two rows of three, each column wide enough for a slider one can drag and a box one can type in
cols = [c for row in range(2) for c in st.columns(3, gap="medium")]
cols[0].selectbox("Preset", list(LAW_PRESETS) + [sv.CUSTOM], key="scal_preset", on_change=apply_preset,
                  persist_state="session",
                  help="Chinchilla: the constants printed in Hoffmann et al. (2022), App. D.2. Epoch: the same fit "
                       "redone by Besiroglu et al. (2024) on data read off the original paper's figure.")
for col, (key, (label, lo, hi, step, fmt)) in zip(cols[1:], sv.SLIDERS.items()):
    # kept for the session: the fit page names this law, and its button moves these sliders to a fit
    col.slider(label, lo, hi, step=SLIDER_STEP, format=fmt, key=key, on_change=slider_moved, args=(key,),
               persist_state="session", help=f"Drag, or use the arrow keys: steps of {SLIDER_STEP}. Type an exact "
                                             "value in the box below.")
    col.number_input(f"{label}, exact", lo, hi, step=step, format=fmt, key=f"{key}_box", on_change=box_typed,
                     args=(key,), label_visibility="collapsed")
law = sv.shown_law(st.session_state["scal_preset"], st.session_state)
st.latex(rf"L(N, D) = \frac{{{law.A:.4g}}}{{N^{{{law.alpha:.4g}}}}} + \frac{{{law.B:.4g}}}{{D^{{{law.beta:.4g}}}}}"
         rf" + {law.E:.4g}")

# ---------------------------------------------------------------- L against N and against D
st.subheader("More parameters help only until the data runs out")
st.markdown(
    "Left: each curve fixes the number of training tokens $D$ and grows the model. The capacity term falls "
    "away as a power law, and the curve lands on a plateau set by the data alone (dashed). Past that point a "
    "bigger model buys nothing; only a curve with more data goes lower. Right: the same story with the roles "
    "swapped, a fixed model fed ever more tokens. The dotted line is the floor $L_\\infty$.")
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
    "hover it for the numbers.")
st.latex(rf"C \approx {P}\,N\,D")
chart(loss_map(law), width="stretch", key="scal_fig_map")
chin = sv.CHINCHILLA_MODEL
n_c, d_c, r_c = sv.split(law, chin.compute)
st.markdown(
    f"At Chinchilla's own compute ({P} × {human(chin.N)} × {human(chin.D)} = {sci(chin.compute)} "
    f"FLOPs) these constants put the optimum at N = {human(n_c)} parameters and D = {human(d_c)} tokens: "
    f"**{r_c:.1f} tokens per parameter**. Chinchilla itself was trained with {chin.tokens_per_param:.0f}.")
st.caption(
    "The two presets disagree here: " + "; ".join(f"{name}: {r:.1f} tokens per parameter"
                                                  for name, r in sv.preset_ratios(chin.compute).items())
    + ". Besiroglu et al. (2024) found that the constants printed in the 2022 paper do not reproduce its own "
    "recommendation, and refitting the same data gives the second set.")
famous, worst = sv.famous_rows(law)
# every column fits the page under a short header (the full name in its tooltip); the sources, long citations,
# go in an expander under the table
st.dataframe([{k: v for k, v in r.items() if k != "source"} for r in famous], hide_index=True, width="stretch",
             key="scal_famous", column_config={
                 k: (st.column_config.NumberColumn(short, format=sv.FAMOUS_FORMATS[k], help=k) if k in sv.FAMOUS_FORMATS
                     else st.column_config.TextColumn(short, help=k if short != k else None))
                 for k, short in FAMOUS_HEADERS.items()})
with st.expander("Where each model's N and D come from"):
    st.markdown("\n".join(f"- **{r['model']}**: {r['source']}" for r in famous))
st.caption(f"By these constants the worst-proportioned model in the table is {worst['model']}: the same compute "
           f"spent optimally would have reached a loss {worst['excess_loss']:.3f} nats lower. Later models are "
           "deliberately trained far past the optimum: a smaller model is cheaper to serve.")

# ---------------------------------------------------------------- iso-FLOP curves
st.subheader("Iso-FLOP curves: one budget, every split")
st.markdown(
    f"Each curve spends one fixed budget: moving right buys parameters with tokens, $D = C/{P}N$. Too small a model "
    "wastes the data term, too large a model starves it; the valley in between is the compute-optimal model. "
    "Circles mark the lowest point found on the curve, crosses the closed-form optimum derived below: they land "
    "on top of each other.")
chart(isoflop_curves(law), width="stretch", key="scal_fig_isoflop")

# ---------------------------------------------------------------- the budget calculator and the derivation
st.subheader("Spend a budget: the Lagrange optimum")
calc, derivation = st.columns([1, 1.7], gap="large")
with calc:
    st.markdown(
        f"Defaults: the lecture's ${BUDGET_DEFAULTS['dollars'] / 1e6:.0f} million, one H100 rented at "
        f"${BUDGET_DEFAULTS['dollars_per_gpu_hour']:.2f} per hour, its {sv.PEAK_TFLOPS:.0f} "
        f"TFLOP/s dense BF16 peak, and {BUDGET_DEFAULTS['utilisation']:.0%} of that peak actually used, "
        "typical of large runs.".replace("$", r"\$"))
    dollars = st.number_input("Budget (US dollars)", min_value=1.0, max_value=1e12, value=BUDGET_DEFAULTS["dollars"],
                              step=1e6, format="%.0f", key="scal_dollars")
    price = st.number_input("Price per GPU-hour (dollars)", min_value=0.01, max_value=1000.0,
                            value=BUDGET_DEFAULTS["dollars_per_gpu_hour"], step=0.25, key="scal_price")
    peak = st.number_input("Peak throughput per GPU (TFLOP/s)", min_value=0.1, max_value=1e5,
                           value=sv.PEAK_TFLOPS, step=10.0, key="scal_peak")
    util = st.slider("Utilisation (share of peak)", 0.05, 1.0, BUDGET_DEFAULTS["utilisation"], 0.01, key="scal_util")
    budget = sv.spend(law, dollars, price, peak, util)
    m1, m2 = st.columns(2)
    m1.metric("FLOPs C", sci(budget.C), help=f"{budget.gpu_hours:,.0f} GPU-hours")
    m2.metric("Tokens per parameter", f"{budget.tokens_per_param:.1f}")
    m3, m4 = st.columns(2)
    m3.metric("Optimal N", human(budget.N), help="parameters")
    m4.metric("Optimal D", human(budget.D), help="training tokens")
    m5, m6 = st.columns(2)
    m5.metric("Predicted loss", f"{budget.loss:.4f}")
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
    st.latex(rf"G = {law.G:.4g}, \qquad \frac{{C}}{{{P}}} = {latex_sci(budget.ND)}")
    st.latex(rf"N_{{opt}} = {law.G:.4g} \times \left({latex_sci(budget.ND)}\right)^{{{law.N_exponent:.4f}}}"
             rf" = {latex_sci(budget.N)}")
    st.latex(rf"D_{{opt}} = \frac{{C}}{{{P}\,N_{{opt}}}} = {latex_sci(budget.D)}")
    st.caption("Both exponents are near one half when α ≈ β: a ten times bigger budget buys about "
               "{:.2f}× the parameters and {:.2f}× the tokens with these constants.".format(*sv.tenfold(law)))


# ---------------------------------------------------------------- when the text runs out; sized for use
show_unique_data(law)
show_inference(law)

# ---------------------------------------------------------------- on to your own runs
st.page_link("pages/scaling_fit.py", icon=":material/scatter_plot:",
             label="These constants were fitted to other people's runs: the next page fits the same law to yours, "
                   "and to tiny models trained on this machine.")

st.divider()
link_box(LINK, {"preset": st.session_state["scal_preset"]} if st.session_state["scal_preset"] in LAW_PRESETS else
         {u: round(float(st.session_state[k]), 4) for u, k in LINK_KEYS.items()})
