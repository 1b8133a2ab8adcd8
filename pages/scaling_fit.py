"""Your scaling law: the law of the Scaling laws page (pages/scaling.py) fitted to runs: rows you give it, the shipped
study of tiny models trained on this machine, and a grid you run yourself. Every number is computed in core
(scaling_view, scaling_study, study); this page holds widgets, prose and figures."""
import os

import streamlit as st
from core.views import scaling_study as ss

from core.views import scaling_view as sv
from core.data.corpus import TRAIN_FRACTION, shakespeare_path
from core.serve.fmt import human, latex_sci, number_word
from core.analysis.scaling import CHINCHILLA_RUNS, HUBER_DELTA, LAW_PRESETS, N_STARTS, FitError, ScalingLaw
from core.figures.scaling_figures import fit_figure
from core.analysis.scaling_runs import MAX_RUNS, MIN_RUNS, RunsError, parse_runs
from core.training.study_grid import GRIDS, StudyError, corpus_problem
from core.training.study_files import SHIPPED_STUDY, dropped_note, usable_rows
from core.figures.study_figures import frontier_figure, residual_figure, study_figure
from core.jobs import JobBusy
from core.training.study_job import StudyJob, grid_choices
from ui import chart, ensure_frame, gated, job_controls, keep_alive, offer_shakespeare_fetch, session_alive, session_id
from ui.cached import fitted_law, forecast_analysis, shipped_study
from pages.scaling_fit.forecast import show_forecast
from pages.scaling_fit.repetition import show_calibration, show_repetition

ensure_frame()  # run inside app.py's frame even when this page's URL is the first request


fitted = gated(fitted_law, "the fit")  # thousands of L-BFGS starts wait in the compute line; a cached fit does not


def load_law(law: ScalingLaw):
    st.session_state.update(sv.custom_state(law))  # the law page's keys: its sliders keep them for the session


st.title("Your scaling law")
preset, law = sv.chosen_law(st.session_state)  # the law page's choice, or its default when it was never opened
st.markdown(
    "The Scaling laws page draws $L(N, D) = A/N^{\\alpha} + B/D^{\\beta} + L_\\infty$ with the constants others "
    "fitted to hundreds of large training runs: " + " and ".join(f"*{name}*" for name in LAW_PRESETS) + ". Here the "
    "same formula is fitted to runs, first to rows you give it, then to tiny models trained on this machine, and "
    "each fit is set beside those presets.")
st.page_link("pages/scaling.py", icon=":material/trending_down:",
             label=f"The law page shows {preset}: α = {law.alpha:.4g}, β = {law.beta:.4g}, L∞ = {law.E:.4g}")

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
runs, truth, given = None, None, True  # given: runs were put in (an empty box is no error)
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
        fit = fitted(runs.to_csv())  # keyed on the text: the same runs are fitted once
    except FitError as e:
        st.error(str(e), icon="⚠️")
if fit is not None:
    a, b = st.columns([1, 2.4])
    with a:
        st.dataframe(sv.fit_table(fit, truth), hide_index=True, width="stretch", key="scal_fit_table",
                     column_config={k: st.column_config.NumberColumn(format="%.4g") for k in ("fitted", "true")})
        st.metric("Runs", f"{len(runs)}")
        st.metric("RMS error of log loss", f"{fit.rms_log_error(runs.N, runs.D, runs.loss):.4f}")
        n_f, d_f, _ = sv.split(fit, sv.CHINCHILLA_MODEL.compute)
        st.caption(f"At Chinchilla's compute this fit's optimum is {human(n_f)} parameters on {human(d_f)} tokens.")
        st.button("Use the fitted constants above", key="scal_use_fit", on_click=load_law, args=(fit,),
                  help="Moves the law page's sliders to the fitted values, so every chart there shows your law.")
        if sv.sliders_clip(fit):
            st.caption("Some fitted constants lie outside the sliders' ranges; the sliders will stop at their ends.")
    chart(fit_figure(fit, runs.N, runs.D, runs.loss), width="stretch", key="scal_fig_fit", where=b)
    b.caption("Each run is drawn twice: on the left with the fitted data term taken off its loss, on the right "
              "with the capacity term taken off. If the law fits, every point sits on the curve.")

# ---------------------------------------------------------------- your own scaling law: a study trained here
st.subheader("Your own scaling law: tiny models trained on this machine")
shipped_meta, shipped_rows, shipped_bad, shipped_json, shipped_problems = shipped_study(
    str(SHIPPED_STUDY), ss.study_stamp(SHIPPED_STUDY))  # the stamp in the key: rewritten files are reread
st.markdown(
    "The published laws were fitted to hundreds of runs on thousands of GPUs. The same experiment fits on a laptop "
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
corpora = ss.study_corpora(tiny_shakespeare)
c1, c2 = st.columns([1, 1.4])
corpus_key = c1.radio("Corpus", list(corpora), format_func=corpora.get, key="scal_study_corpus")
if tiny_shakespeare is None and offer_shakespeare_fetch(key="scal_study_fetch"):
    st.rerun()  # fetched: the corpus list above now offers it
choices = grid_choices()
grid_name = c2.radio("Grid", list(choices), format_func=choices.get, key="scal_study_grid", horizontal=False)
corpus_name, corpus_text, corpus_path = ss.study_corpus(corpus_key, tiny_shakespeare)
problem = corpus_problem(GRIDS[grid_name], corpus_text, corpus_name)
st.caption(ss.grid_note(GRIDS[grid_name], ss.grid_estimate(GRIDS[grid_name], corpus_text, shipped_rows),
                        os.cpu_count()))  # each width and a refit timed here
if problem:
    st.error(problem, icon="⚠️")

job: StudyJob | None = st.session_state.get("scal_study_job")
keep_alive(job)  # a study this tab stops touching is stopped (core.jobs.runner)
busy = job is not None and job.status().active  # one study per session: no second start while one runs
if st.button("Start the study", type="primary", key="scal_study_start", disabled=busy or bool(problem),
             help="Trains every run of the grid in the background; starting again replaces your previous study."):
    try:
        st.session_state["scal_study_job"] = ss.start_study(grid_name, corpus_name, corpus_text, path=corpus_path,
                                                            old=job).watch(session_id(), session_alive)
    except (JobBusy, StudyError) as e:
        st.error(str(e), icon="⚠️")
    else:
        st.rerun()
if busy:
    st.caption("Your study is running: stop it to start another.")


def study_view(job: StudyJob, polling: bool):
    s = job.status()
    job_controls(job, s, polling, "scal_study",
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
    polling = job.status().moving  # redrawn every 2 s only while runs move: a finished study costs nothing
    st.fragment(run_every=2.0 if polling else None)(study_view)(job, polling)


# ---------------------------------------------------------------- forecasts, and when the data runs out
analysis, analysis_problem = forecast_analysis(str(SHIPPED_STUDY), ss.study_stamp(SHIPPED_STUDY))
show_forecast(shipped_meta, shipped_rows, tiny_shakespeare, analysis["calibration"] if analysis else None)
show_calibration(analysis, analysis_problem, SHIPPED_STUDY.name)
show_repetition(analysis)
