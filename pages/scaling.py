"""Scaling laws: the lecture's L(N, D), its compute-optimal split, a fit to your runs, tiny models trained here.
Every number is computed in core (scaling, scaling_view, scaling_study, study); this page holds widgets, prose and
figures."""
import os

import streamlit as st

from core import scaling_study as ss, scaling_view as sv
from core.corpus import TRAIN_FRACTION, pydoc_text, read_text_file, shakespeare_path
from core.cost import FLOPS_PER_PARAM_TOKEN as P  # the 6 of C = 6ND, in every formula and sentence below
from core.fmt import human, latex_sci, number_word, sci
from core.scaling import BUDGET_DEFAULTS, CHINCHILLA_RUNS, HUBER_DELTA, LAW_PRESETS, N_STARTS, FitError, ScalingLaw
from core.scaling_figures import fit_figure, isoflop_curves, loss_map, loss_vs_D, loss_vs_N
from core.scaling_runs import MAX_RUNS, MIN_RUNS, RunsError, parse_runs
from core.study import (GRIDS, SHIPPED_STUDY, StudyError, corpus_problem, dropped_note, estimate_seconds, open_study,
                        usable_rows)
from core.study_figures import frontier_figure, residual_figure, study_figure
from core.study_job import BusyError as StudyBusy, StudyJob, grid_choices
from ui import chart, ensure_frame, gated, job_controls, offer_shakespeare_fetch, shipped_config

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request


@st.cache_data(max_entries=4, show_spinner=False)
def shipped_study(folder: str, stamp: tuple):
    """(study.json, usable rows, [(row, why not)], fit.json, problems) of the shipped study (core.study.open_study)."""
    return open_study(folder)


@st.cache_data(max_entries=16, show_spinner="Fitting: L-BFGS from every starting point ...")
def _fitted(csv_text: str) -> ScalingLaw:
    return sv.fit_csv(csv_text)


fitted = gated(_fitted, "the fit")  # thousands of L-BFGS starts wait in the compute line; a cached fit does not


def apply_preset():
    if st.session_state["scal_preset"] in LAW_PRESETS:
        st.session_state.update(sv.slider_values(LAW_PRESETS[st.session_state["scal_preset"]]))


def to_custom():
    st.session_state["scal_preset"] = sv.CUSTOM


def load_law(law: ScalingLaw):
    st.session_state.update(sv.slider_values(law))
    st.session_state["scal_preset"] = sv.CUSTOM


if "scal_logA" not in st.session_state:
    st.session_state.setdefault("scal_preset", next(iter(LAW_PRESETS)))
    apply_preset()

st.title("Scaling laws")
st.markdown(
    "Train a transformer with $N$ parameters on $D$ tokens and its final loss is, to a good approximation, a sum "
    "of three terms: one that shrinks as the model grows, one that shrinks as the data grows, and a floor that "
    "neither can lower. The constants below come from fits to hundreds of real training runs; move them and "
    "every chart on this page follows. Nothing here needs the sidebar's model: the models these laws speak "
    f"of are far larger{sv.size_note(shipped_config()[0])}. At the bottom of the page the same law is fitted to tiny "
    "models trained on this machine, and you can train a grid of your own.")
st.latex(r"L(N, D) = \underbrace{\frac{A}{N^{\alpha}}}_{\text{capacity}} + "
         r"\underbrace{\frac{B}{D^{\beta}}}_{\text{data}} + \underbrace{L_\infty}_{\text{floor}}")

# ---------------------------------------------------------------- the constants
st.subheader("The constants")
cols = st.columns([2.2, 1, 1, 1, 1, 1])
cols[0].selectbox("Preset", list(LAW_PRESETS) + [sv.CUSTOM], key="scal_preset", on_change=apply_preset,
                  help="Chinchilla: the constants printed in Hoffmann et al. (2022), App. D.2. Epoch: the same fit "
                       "redone by Besiroglu et al. (2024) on data read off the original paper's figure.")
for col, (key, (label, lo, hi, step, fmt)) in zip(cols[1:], sv.SLIDERS.items()):
    col.slider(label, lo, hi, step=step, format=fmt, key=key, on_change=to_custom)
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
st.dataframe(famous, hide_index=True, width="stretch", key="scal_famous",
             column_config={k: st.column_config.NumberColumn(format=f) for k, f in sv.FAMOUS_FORMATS.items()})
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

# ---------------------------------------------------------------- fit your own runs
st.subheader("Fit the law to your own runs")
st.markdown(
    f"Give at least {MIN_RUNS} training runs as rows of $N$, $D$ and final loss (nats per token), as a CSV with "
    f"the header `N,D,loss` (counts may be written like `70B` or `1.4T`; at most {MAX_RUNS:,} runs). The fit "
    "is the one of Hoffmann et al.: a Huber loss on the logarithm of the loss, minimised by L-BFGS from each of "
    f"{N_STARTS:,} starting points, the best kept.")
st.latex(rf"\min_{{a, b, e, \alpha, \beta}} \sum_i \mathrm{{Huber}}_{{{latex_sci(HUBER_DELTA)}}}\!\Big("
         r"\mathrm{LSE}\big(a - \alpha \log N_i,\; b - \beta \log D_i,\; e\big) - \log L_i\Big)")
st.latex(r"A = e^{a}, \quad B = e^{b}, \quad L_\infty = e^{e}, \qquad "
         r"\mathrm{LSE}(u, v, w) = \log\left(e^{u} + e^{v} + e^{w}\right)")
source = st.radio("Runs", [f"Example: {sv.EXAMPLE_RUNS} synthetic runs", "Upload a CSV", "Paste rows"],
                  horizontal=True, key="scal_fit_source")
runs, truth, given = None, None, True
try:
    if source.startswith("Example"):
        truth, runs = sv.example_runs()
        st.caption(f"Drawn from the {sv.EXAMPLE_LAW} constants with {100 * sv.EXAMPLE_NOISE:g} % noise on each loss, "
                   "over Chinchilla's range of sizes; the fit does not know the constants.")
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
    a, b = st.columns([1, 2.4])
    with a:
        st.dataframe(sv.fit_table(fit, truth), hide_index=True, width="stretch", key="scal_fit_table",
                     column_config={k: st.column_config.NumberColumn(format="%.4g") for k in ("fitted", "true")})
        st.metric("Runs", f"{len(runs)}")
        st.metric("RMS error of log loss", f"{fit.rms_log_error(runs.N, runs.D, runs.loss):.4f}")
        n_f, d_f, _ = sv.split(fit, chin.compute)
        st.caption(f"At Chinchilla's compute this fit's optimum is {human(n_f)} parameters on {human(d_f)} tokens.")
        st.button("Use the fitted constants above", key="scal_use_fit", on_click=load_law, args=(fit,),
                  help="Moves the sliders to the fitted values, so every chart on the page shows your law.")
        if sv.sliders_clip(fit):
            st.caption("Some fitted constants lie outside the sliders' ranges; the sliders will stop at their ends.")
    chart(fit_figure(fit, runs.N, runs.D, runs.loss), width="stretch", key="scal_fig_fit", where=b)
    b.caption("Each run is drawn twice: on the left with the fitted data term taken off its loss, on the right "
              "with the capacity term taken off. If the law fits, every point sits on the curve.")

# ---------------------------------------------------------------- your own scaling law: a study trained here
st.subheader("Your own scaling law: tiny models trained on this machine")
shipped_meta, shipped_rows, shipped_bad, shipped_json, shipped_problems = shipped_study(
    str(SHIPPED_STUDY), ss.study_stamp(SHIPPED_STUDY))
st.markdown(
    "The laws above were fitted to hundreds of runs on thousands of GPUs. The same experiment fits on a laptop "
    "if the models are tiny: train models of several sizes on several amounts of text, each once, and fit "
    "the same formula to their final losses. " + ss.shipped_summary(shipped_meta, shipped_rows))
st.caption("N here is the non-embedding count (Kaplan et al. 2020): the blocks and the final LayerNorm, without the "
           "token embedding, the position table and the output map, which are a large share of a model this small "
           "and do little of the modelling the capacity term describes; Hoffmann et al. count every parameter "
           "(runs.csv has both). D counts characters, and the loss is the validation loss over every full window of "
           f"the held-out {100 * (1 - TRAIN_FRACTION):.0f} %, in nats per character.")


def show_study(rows: list[dict], f: ss.StudyFit, key: str, title: str = "Your study"):
    """The runs with the fitted law, the constants beside the published ones, the residuals and the frontier."""
    chart(study_figure(rows, f.law, title=title, unfitted=f.unfitted), width="stretch", key=f"{key}_fig")
    if f.law is None:
        return
    r2, rms = ss.fit_quality(rows, f.law)
    m1, m2, m3, _ = st.columns([1, 1, 1, 2])
    m1.metric("Runs in the study", f"{len(rows)}")
    m2.metric("R² of log loss", f"{r2:.4f}",
              help="The share of the runs' variance in log loss that the fitted law explains.")
    m3.metric("RMS error", f"{rms:.2f} %",
              help="Root mean square of log L − log L_fit: the typical distance of a run from the fit.")
    st.dataframe(ss.comparison_table(f.law, f.intervals), hide_index=True, width="stretch", key=f"{key}_table",
                 column_config={k: st.column_config.NumberColumn(format="%.3g")
                                for k in ("this study", "Chinchilla 2022", "Epoch 2024")})
    st.caption(ss.intervals_note(f.boot, f.intervals))
    left, right = st.columns([1, 1.25])
    chart(residual_figure(rows, f.law), width="stretch", key=f"{key}_resid", where=left)
    chart(frontier_figure(f.law, rows, LAW_PRESETS), width="stretch", key=f"{key}_frontier", where=right)
    st.caption(ss.scale_note(f.law, rows))


shipped = ss.shipped_fit(shipped_rows, shipped_bad, shipped_json, shipped_problems, fitted)
if shipped_rows:
    show_study(shipped_rows, shipped, "scal_shipped", title="The shipped study")
    st.caption(ss.wall_note(shipped_meta, os.cpu_count()) + ". Its card (README.md, with the exact command) and "
               f"runs.csv are in `assets/studies/{SHIPPED_STUDY.name}`.")
else:
    st.warning(f"The shipped study (assets/studies) {'has no usable runs' if shipped_bad else 'could not be read'}; "
               "run a grid below to make your own.", icon="⚠️")
for problem in shipped.warnings:
    st.warning(f"The shipped study: {problem}", icon="⚠️")

st.markdown("##### Why your exponents need not be Chinchilla's")
ours = ss.exponent_notes(shipped_meta, shipped_rows)
st.markdown(
    "- **Other data.** Chinchilla learned from a vast mixture of web pages, books and code, where more text keeps "
    f"bringing new words, facts and styles. {ours['here']}How fast the data term falls depends on how much there is "
    "left to learn from more of the same text: a property of the corpus, not of transformers.\n"
    "- **Another unit.** A character carries far less than a BPE token (English runs about four characters to a "
    "token), so L and E are nats per character here and nats per token there, and those constants cannot be "
    "compared. If every token were the same number of characters, counting D in characters would only rescale "
    "B, and measuring the loss per character would scale A, B and E alike: the exponents survive a change of "
    "unit, so they can be compared, with the other caveats.\n"
    f"- **A short lever.** {ours['lever']}Hoffmann et al. trained over {CHINCHILLA_RUNS['count']} models from "
    f"{human(CHINCHILLA_RUNS['N'][0])} to over {human(CHINCHILLA_RUNS['N'][1])} parameters on "
    f"{human(CHINCHILLA_RUNS['D'][0])} to {human(CHINCHILLA_RUNS['D'][1])} tokens. Over a short range a power law "
    "plus a floor is poorly pinned: a larger α with a lower E fits almost as well as a smaller α with a higher E, "
    "which is what wide intervals say." + ours["shape"]
    + "\n- **One recipe for all.** Every run here has the same learning rates, batch size and depth; only the "
    "width changes. A rate that suits one size a little better than another, or a batch too large for the "
    "smallest budgets, tilts the fitted exponents. Hoffmann et al. grew depth and width together." + ours["short"])

# ---------------------------------------------------------------- run a grid yourself
st.markdown("##### Run a grid yourself")
st.markdown(
    "Pick a corpus and a grid and start it: the runs train in the background, in processes of their own (one per "
    f"core), and each point appears on the plots as its run finishes. With {number_word(MIN_RUNS)} runs or more the "
    "law is fitted to them; when all are done the study refits resampled runs for the intervals. You can leave the "
    "page meanwhile.")
tiny_shakespeare = shakespeare_path()
corpora = {"shakespeare": f"Tiny Shakespeare ({tiny_shakespeare.name})"} if tiny_shakespeare is not None else {}
corpora["pydoc"] = "Python's reference documentation (ships with Python)"
c1, c2 = st.columns([1, 1.4])
corpus_key = c1.radio("Corpus", list(corpora), format_func=corpora.get, key="scal_study_corpus")
if tiny_shakespeare is None and offer_shakespeare_fetch(key="scal_study_fetch"):
    st.rerun()
choices = grid_choices()
grid_name = c2.radio("Grid", list(choices), format_func=choices.get, key="scal_study_grid", horizontal=False)
corpus_name = corpora[corpus_key].split(" (")[0]
corpus_text = read_text_file(tiny_shakespeare) if corpus_key == "shakespeare" else pydoc_text()
problem = corpus_problem(GRIDS[grid_name], corpus_text, corpus_name)
st.caption(ss.grid_note(GRIDS[grid_name], estimate_seconds(GRIDS[grid_name], shipped_rows), os.cpu_count()))
if problem:
    st.error(problem, icon="⚠️")

job: StudyJob | None = st.session_state.get("scal_study_job")
busy = job is not None and job.status().active
if st.button("Start the study", type="primary", key="scal_study_start", disabled=busy or bool(problem),
             help="Trains every run of the grid in the background; starting again replaces your previous study."):
    try:
        path = tiny_shakespeare if corpus_key == "shakespeare" else None  # None: the text goes into the study's folder
        st.session_state["scal_study_job"] = ss.start_study(grid_name, corpus_name, corpus_text, path=path, old=job)
    except (StudyBusy, StudyError) as e:
        st.error(str(e), icon="⚠️")
    else:
        st.rerun()
if busy:
    st.caption("Your study is running: stop it to start another.")


def study_view(job: StudyJob, polling: bool):
    s = job.status()
    job_controls(job, s, polling, "scal_study", StudyBusy,
                 resume_help="A paused study goes on; a stopped one starts again and trains only the runs it lacks.",
                 stop_help="Ends the runs under way; the finished runs stay.")
    done, text = ss.progress(s, job.grid_name, job.corpus_name)
    st.progress(done, text=text)
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
    f = ss.live_fit(s, rows, job.folder, fitted)
    for w in f.warnings:
        st.warning(w, icon="⚠️")
    show_study(rows, f, "scal_yours")
    if f.fit_error:
        st.warning(f.fit_error, icon="⚠️")
    elif f.waiting:
        st.caption(f.waiting)
    st.download_button("Download runs.csv", job.runs_csv.read_bytes(), "runs.csv", "text/csv",
                       key="scal_study_download", on_click="ignore")


if job is not None:
    polling = job.status().moving
    st.fragment(run_every=2.0 if polling else None)(study_view)(job, polling)
