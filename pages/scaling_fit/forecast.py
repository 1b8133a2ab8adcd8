"""The Your scaling law page's forecast section (issue 45): the law proposes the next run and says where its loss
should land, the learner writes down a forecast, the run trains in the background, both forecasts are scored.
State and the run's job live in ui.forecast; the numbers in core.views.scaling_forecast."""
from __future__ import annotations

import streamlit as st

from core.analysis.scaling import FitError
from core.analysis.scaling_runs import MIN_RUNS
from core.figures.forecast_figures import forecast_figure
from core.views import scaling_forecast as vf
from ui import forecast as fcui
from ui.charts import chart
from ui.jobs import job_controls
from pages.scaling_fit import share

SCORE_FORMATS = {**{k: "%.4f" for k in ("loss", "law", "yours", "law's score", "your score")},
                 **{k: "%+.4f" for k in ("law's log error", "your log error")}}


def show_forecast(shipped_meta, shipped_rows, shakespeare, calibration: dict | None):
    """The whole section: its prose, the proposal, the two forecasts, Train it, the run under way, the record."""
    st.subheader("Forecast the next run, train it, score the forecast")
    st.markdown(
        "A law earns its keep by predicting a run nobody has trained yet. The law fitted to a study proposes the next "
        "run (by default the compute-optimal one at twice the largest compute so far) and says where its held-out "
        "loss should land, with an 80 % interval. Write down your own forecast, train the run here, and both "
        "forecasts are scored. The score is Gneiting and Raftery's interval score: the interval's width, plus a "
        "penalty of 2/α for every unit by which the run lands outside it, so a narrow interval that misses costs "
        "more than an honest wide one.")
    st.latex(r"\mathrm{IS}_\alpha(l, u; y) = (u - l) + \frac{2}{\alpha}(l - y)\,\mathbb{1}[y < l] + "
             r"\frac{2}{\alpha}(y - u)\,\mathbb{1}[y > u], \qquad \alpha = 0.2")
    link = share.read_link()  # base, width and D: applied as the widgets they set are drawn
    bases = fcui.bases(shipped_meta, shipped_rows, shakespeare, st.session_state.get("scal_study_job"))
    job, status = fcui.poll()
    fcui.show_lost()
    if not bases:
        st.info(f"A forecast needs a law: the shipped study could not be read and your study has fewer than "
                f"{MIN_RUNS} runs so far.")
    else:
        _bet(bases, job, calibration)
        share.copy_link(link)
    if job is not None:
        st.fragment(run_every=2.0 if status.moving else None)(_run_view)(status.moving)
    records = fcui.records()
    table = vf.record_table(records)
    if table:
        st.markdown("##### Your forecasts this session")
        st.dataframe(table, hide_index=True, width="stretch", key="scal_fc_table",
                     column_config={k: st.column_config.NumberColumn(format=f) for k, f in SCORE_FORMATS.items()})
        summ = vf.record_summary(records)
        st.markdown(f"The law's interval held {summ['law_hits']} of {summ['n']}, yours {summ['your_hits']}. "
                    + vf.winner(summ))


def _bet(bases: dict, job, calibration: dict | None):
    share.apply_base(bases)
    key = st.radio("Forecast from", list(bases), format_func=lambda k: bases[k].label, horizontal=True,
                   key="scal_fc_base", disabled=job is not None)
    base = bases[key]
    rows = fcui.fit_rows(base)
    try:
        law, boot = fcui.law_and_boot(rows)
    except FitError as e:
        st.error(str(e), icon="⚠️")
        return
    joined = rows[len(base.rows):]
    prop = vf.proposal(law, base, rows)
    st.caption(f"The law of {len(rows)} runs" + (f" ({len(joined)} of them trained for forecasts)" if joined else "")
               + f", refitted to {len(boot.params)} resamples of them for the intervals"
               + (f" ({boot.failed} gave no law)" if boot.failed else "") + ". " + prop.note)
    vf.reset_widgets(st.session_state, prop, key, len(rows))
    share.apply_run()  # a link's width and D, over the proposal's
    w1, w2, w3 = st.columns([1, 1, 2])
    width = w1.selectbox("Width d", vf.WIDTH_CHOICES, key="scal_fc_width", disabled=job is not None,
                         help="The model's width; depth, context, batch, recipe and seed are the study's.")
    tokens = w2.number_input("Characters D", min_value=1_000, max_value=200_000_000, step=100_000, key="scal_fc_tokens",
                             disabled=job is not None,
                             help="Characters seen in training, rounded to whole steps of the study's batch.")
    plan = vf.plan(base, rows, width, tokens)
    try:
        fc = vf.forecast_for(law, boot, plan)
    except FitError as e:  # too few resamples gave a law for an interval (core.analysis.forecast.min_resamples)
        st.error(str(e), icon="⚠️")
        return
    w3.markdown(vf.plan_note(plan, prop))
    m = st.columns([1, 1.6, 1.6, 1])
    m[0].metric("The law's point", f"{fc.point:.4f}", help="nats per character, held-out")
    m[1].metric("Its 80 % interval", f"{fc.lower:.3f} to {fc.upper:.3f}",
                help="The refitted laws' predictions, each with a residual of its own fit added: where a new run "
                     "should land.")
    m[2].metric("The law alone", f"{fc.law_lower:.3f} to {fc.law_upper:.3f}",
                help="The refitted laws' predictions only: the uncertainty of the curve, the kind of interval papers "
                     "publish.")
    m[3].metric("Passes over the corpus", f"{plan.epochs:.1f}")
    st.markdown("**Your forecast** (it starts as the law's; change it before you train):")
    if calibration:
        st.caption(vf.hint(calibration))
    vf.reset_bet(st.session_state, fc, key, plan)
    y1, y2, y3, y4 = st.columns([1, 1, 1, 1.3])
    mine = (y1.number_input("Your point", 0.01, 20.0, step=0.01, format="%.4f", key="scal_fc_point"),
            y2.number_input("Lower end (10 %)", 0.01, 20.0, step=0.01, format="%.4f", key="scal_fc_lower"),
            y3.number_input("Upper end (90 %)", 0.01, 20.0, step=0.01, format="%.4f", key="scal_fc_upper"))
    problem = vf.bet_problem(*mine)
    if problem:
        st.error(problem, icon="⚠️")
    if plan.problem:
        st.error(f"This run cannot train here: {plan.problem}.", icon="⚠️")
    elif base.corpus is None:
        st.warning(base.corpus_note, icon="⚠️")
    if y4.button("Train it", type="primary", key="scal_fc_train",
                 disabled=bool(problem or plan.problem or base.corpus is None or job is not None),
                 help="Trains this run in the background on the study's settings; its point then joins the fit."):
        why = fcui.start(base, plan, vf.new_record(key, plan, fc, mine))
        if why:
            st.error(why, icon="⚠️")
        else:
            st.rerun()
    pending = st.session_state.get("scal_fc_pending")
    shown = (pending["your_point"], pending["your_lower"], pending["your_upper"]) if pending else \
        (None if problem else mine)
    chart(forecast_figure(rows, joined, law, fc, shown), width="stretch", key="scal_fc_fig")


def _run_view(polling: bool):
    """The run under way: its controls and progress, polled every 2 s while it moves."""
    job, s = fcui.poll()
    fcui.show_lost()
    if job is None:
        return
    job_controls(job, s, polling, "scal_fc", stop_help="Ends the run; its forecast is dropped.")
    pending = st.session_state["scal_fc_pending"]
    share, words = vf.run_progress(s, pending["d_model"], pending["D"])  # step by step, as on the Class page
    st.progress(share, text=words)
    if s.state in ("failed", "stopped"):
        st.error(f"The run did not finish{': ' + s.message if s.message else ''}. Its forecast is dropped.",
                 icon="⚠️")
        st.button("Clear", key="scal_fc_clear", on_click=fcui.drop)
