"""Two sections of the Your scaling law page (issue 45): how well the shipped study forecasts its own larger runs,
and how many passes over Tiny Shakespeare are worth it (the shipped epochs study, and the two forms on your own
study). Numbers and sentences in core.views.scaling_forecast; the shipped analysis is forecast.json."""
from __future__ import annotations

import streamlit as st

from core.analysis.scaling import R_STAR_D, R_STAR_N, FitError
from core.analysis.scaling_runs import MIN_RUNS, Runs, RunsError
from core.figures.forecast_figures import calibration_figure, epochs_figure, forms_figure
from core.training.study_files import rows_to_arrays, usable_rows
from core.views import scaling_forecast as vf
from ui import forecast as fcui
from ui.cached import compared_forms
from ui.charts import chart
from ui.compute import gated


def show_calibration(analysis: dict | None, problem: str | None, folder_name: str):
    st.markdown("##### How well does the shipped study forecast its own larger runs?")
    if problem:
        st.warning(f"The shipped forecast analysis cannot be shown: {problem}", icon="⚠️")
        return
    if analysis is None:
        st.info("The shipped study has no forecast.json yet: `python -m core.forecast_study --out "
                "assets/studies/shakespeare-char` makes it.")
        return
    cal = analysis["calibration"]
    st.markdown(
        f"The same test on the shipped runs, made without waiting: the law and its {cal['resamples']} resamples are "
        f"fitted to the {len(cal['fitted'])} runs of least compute, and each of the {len(cal['rows'])} larger runs "
        "is forecast as if it had not been trained. " + vf.calibration_verdict(cal) + " " + vf.bias_sentence(cal))
    chart(calibration_figure(cal["rows"]), width="stretch", key="scal_cal_fig")
    st.dataframe(vf.calibration_table(cal), hide_index=True, width="stretch", key="scal_cal_table")
    st.caption(f"Mean interval score (α = 0.2): the law alone {cal['law_mean_score']:.4f}, with the runs' scatter "
               f"{cal['mean_score']:.4f}. Made by `python -m core.forecast_study --out "
               f"assets/studies/{folder_name}`; the rows are in `assets/studies/{folder_name}/forecast.json`.")


def show_repetition(analysis: dict | None):
    st.subheader("When the data runs out: how many passes over Tiny Shakespeare are worth it?")
    st.markdown(
        "Tiny Shakespeare's training part is about a million characters, so a run of three million characters reads "
        "it three times. Hoffmann et al.'s law counts every token alike, fresh or not. Muennighoff et al. (2023) "
        "trained 400 models on repeated data and found each further pass worth less: a token seen on its R-th "
        f"repetition counts for a share of a fresh one that falls by a factor of e every R* ≈ {R_STAR_D} "
        "repetitions. Their effective data D′ replaces D in the law; N′ does the same for parameters beyond what "
        f"the unique text can use (R*_N ≈ {R_STAR_N}).")
    st.latex(r"D' = U + U R^{*} \left(1 - e^{-R/R^{*}}\right), \qquad R = \frac{D}{U} - 1, \qquad "
             r"L(N, D') = \frac{A}{N^{\alpha}} + \frac{B}{D'^{\beta}} + L_\infty")
    if analysis is not None:
        forms = analysis["forms"]
        st.markdown(
            "Our test: both forms fitted to the 24 runs of the shipped study (at most three passes) forecast nine "
            "runs trained for this question, of 6, 12 and 24 passes (`assets/studies/shakespeare-char-epochs`). "
            + vf.forms_verdict(forms))
        chart(forms_figure(forms["rows"], forms["r_star"]), width="stretch", key="scal_forms_fig")
        st.markdown(vf.epochs_answer(analysis))
        chart(epochs_figure(analysis["epochs"]), width="stretch", key="scal_epochs_fig")
        st.caption("Solid: the held-out loss; dashed: the loss on as much training text. The gap between them is the "
                   "model learning the training text by heart. The dotted lines are Muennighoff et al.'s guideposts.")
    job = st.session_state.get("scal_study_job")
    rows = usable_rows(job.status().rows)[0] if job is not None else []
    unique = vf.unique_of(fcui.job_meta(job)) if job is not None else None
    if len(rows) < MIN_RUNS or not unique:
        return
    st.markdown("##### The two forms on your study")
    N, D, L = rows_to_arrays(rows)
    try:
        forms = gated(compared_forms, "the two forms")(Runs(N, D, L).to_csv(), unique)
    except (FitError, RunsError) as e:
        st.warning(f"The two forms could not be fitted to your runs: {e}", icon="⚠️")
        return
    st.markdown(f"Fitted to your smaller runs (D counted against {unique:,} training tokens), judged on the larger "
                "ones. " + vf.forms_verdict(forms))
    chart(forms_figure(forms["rows"], forms["r_star"]), width="stretch", key="scal_forms_yours")
