"""A forecast as a Class round (issue 45): the class votes on where the next run's loss will land, in four bins cut
by the law's point and 80 % interval; the teacher trains the run (the same background run as on Your scaling law,
ui.forecast) and reveals the bin it landed in. The rules in core.views.scaling_forecast."""
from __future__ import annotations

import streamlit as st

from core.analysis.scaling import FitError
from core.serve.fmt import rough_time
from core.data.corpus import read_text_file, shakespeare_path
from core.training.forecast_run import study_grid
from core.training.study_files import SHIPPED_STUDY
from core.views import scaling_forecast as vf
from core.views.scaling_study import grid_estimate, study_stamp
from ui import forecast as fcui
from ui.cached import shipped_study


def forecast_round() -> tuple[str, tuple, dict] | str:
    """(question, choices, meta) of a round on the run the shipped study's law proposes next (or the run set on the
    Your scaling law page in this session), or why there is none."""
    meta, rows, _, _, _ = shipped_study(str(SHIPPED_STUDY), study_stamp(SHIPPED_STUDY))
    base = fcui.bases(meta, rows, shakespeare_path(), None).get("shipped")
    if base is None:
        return "the shipped study cannot be read"
    if base.corpus is None:
        return base.corpus_note
    rows = fcui.fit_rows(base)
    try:
        law, boot = fcui.law_and_boot(rows)
    except FitError as e:
        return str(e)
    prop = vf.proposal(law, base, rows)
    width = st.session_state.get("scal_fc_width", prop.plan.d_model)
    tokens = st.session_state.get("scal_fc_tokens", prop.plan.D)
    plan = vf.plan(base, rows, width, tokens)
    if plan.problem:
        return f"the run set on Your scaling law cannot train here: {plan.problem}"
    try:
        return vf.class_round("shipped", plan, vf.forecast_for(law, boot, plan))
    except FitError as e:  # too few resamples gave a law for an 80 % interval
        return str(e)


def forecast_reveal(info: dict) -> tuple[str, str] | None:
    """The teacher's side of a forecast round: how long the run should take, *Train the run*, the run step by step
    until it is in, then (answer, words) to reveal; None while there is nothing to reveal yet."""
    meta = info["meta"]
    done = [r for r in fcui.records() if r.get("round") == info["round"] and r.get("actual") is not None]
    if done:
        st.caption("The run is in: reveal where it landed once the class has voted.")
        return vf.class_answer(meta, info["choices"], done[-1]["actual"])
    job, s = fcui.poll()
    fcui.show_lost()
    pending = st.session_state.get("scal_fc_pending")
    if job is not None and pending and pending.get("round") == info["round"]:
        # the fragment redraws the bar every 2 s while the run moves, not the whole page (its vote count and
        # buttons stay as they are); poll() reruns the page once the run is in
        st.fragment(run_every=2.0 if s.moving else None)(_run_view)(meta)
        return None
    st.caption(estimate_words(meta))
    if st.button("Train the run", key="class_fc_train", type="primary", disabled=job is not None,
                 help="Trains the run in the background on the shipped study's settings; reveal once it is in."):
        base, plan = _plan(meta)
        why = fcui.start(base, plan, {**vf.class_record(meta), "round": info["round"]})
        if why:
            st.error(why)
        else:
            st.rerun()
    return None


def _plan(meta: dict):
    """(base, plan) of the round's run: the shipped study's settings at the round's width and tokens."""
    meta_, rows = shipped_study(str(SHIPPED_STUDY), study_stamp(SHIPPED_STUDY))[:2]
    base = fcui.bases(meta_, rows, shakespeare_path(), None)["shipped"]
    return base, vf.plan(base, fcui.fit_rows(base), meta["d_model"], meta["D"])


def estimate_words(meta: dict) -> str:
    """How long the round's run should take here, before it starts: the Your scaling law page's estimate of a
    grid (core.views.scaling_study.grid_estimate: the model's pace timed on a few steps on this server, as busy as
    it is now), measured once per run asked about in this session (a second or two of timing)."""
    key = (meta["d_model"], meta["D"])
    kept = st.session_state.get("class_fc_estimate")
    if not kept or kept[0] != key:
        try:
            base, plan = _plan(meta)
            grid = study_grid(base.meta, plan.d_model, plan.D)
            est = grid_estimate(grid, read_text_file(base.corpus), base.rows)
        except Exception:  # noqa: BLE001 - a missing estimate must not hide the button; the bar still tells
            est = None
        kept = (key, getattr(est, "seconds", est))
        st.session_state["class_fc_estimate"] = kept
    seconds = kept[1]
    took = (f"The run should take {rough_time(seconds)} on this server (its pace timed on a few steps here, as "
            "busy as the server is now). " if seconds else "")
    return took + "Once it starts, the bar below follows its steps, its training loss and the time left."


def _run_view(meta: dict):
    """The run under way: step of steps, its training loss, a bar that moves and the time left."""
    job, s = fcui.poll()
    if job is None:
        return
    share, words = vf.run_progress(s, meta["d_model"], meta["D"])
    st.progress(share, text=words)
    if s.state in ("failed", "stopped"):
        st.error(f"The run did not finish{': ' + s.message if s.message else ''}.")
        if st.button("Clear", key="class_fc_clear"):
            fcui.drop()
            st.rerun()  # the whole page: *Train the run* comes back


def show_forecast_question(meta: dict):
    """What every participant sees of a forecast round above the question: the run and the law's forecast."""
    st.caption("Forecast · the law of the shipped scaling study (24 tiny models trained on Tiny Shakespeare)")
    st.markdown(f"The next run: a model of width d = {meta['d_model']} ({meta['N']:,} parameters outside the "
                f"embedding) trained on {meta['D']:,} characters, {meta['epochs']:.1f} passes over the text. The law "
                f"predicts a held-out loss of **{meta['point']:.3f}**, with an 80 % interval from {meta['lower']:.3f} "
                f"to {meta['upper']:.3f}. Is the law right, and is it as sure as it should be?")
