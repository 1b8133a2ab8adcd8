"""The forecast part of the Your scaling law page: which runs a forecast is made from, the law and bootstrap of those
runs (cached), the run trained for a forecast (a one-run study in the background), and the session's record.

Session state: ``scal_fc_records`` (every forecast, settled or not), ``scal_fc_job`` (the handle of the run under
way) and ``scal_fc_pending`` (its record until the run is in)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from core.analysis.scaling_runs import MIN_RUNS, Runs
from core.training.forecast_run import PlannedRun, start_run
from core.training.study_grid import StudyError
from core.training.study_files import read_meta, rows_to_arrays, usable_rows
from core.jobs import JobBusy
from core.training.study_job import StudyJob
from core.views import scaling_forecast as vf
from ui.cached import bootstrapped
from ui.compute import gated

fitted_boot = gated(bootstrapped, "the bootstrap")  # 200 refits in one batch: seconds, in the compute line


@dataclass
class Base:
    """Runs a forecast can be made from: the study's settings (study.json) and its corpus."""
    key: str
    label: str
    meta: dict
    rows: list[dict]
    corpus: Path | None          # None: the corpus is not on this machine (no run can be trained)
    corpus_note: str = ""        # why not


def bases(shipped_meta, shipped_rows, shakespeare: Path | None, job: StudyJob | None) -> dict[str, Base]:
    """The shipped study (always, when it could be read) and the session's own study once it has enough runs."""
    out = {}
    if shipped_meta and len(shipped_rows) >= MIN_RUNS:
        out["shipped"] = Base("shipped", f"the shipped study ({len(shipped_rows)} runs)", shipped_meta, shipped_rows,
                              shakespeare, "" if shakespeare else
                              "Tiny Shakespeare is not on this machine, so no run can be trained from the shipped "
                              "study; fetch it in the grid section below, or run a study of your own.")
    if job is not None:
        s = job.status()
        rows, _ = usable_rows(s.rows)
        meta = job_meta(job)
        if meta and len(rows) >= MIN_RUNS:
            out["yours"] = Base("yours", f"your study ({len(rows)} runs, {job.corpus_name})", meta, rows,
                                job.corpus_path if job.corpus_path.is_file() else None,
                                "" if job.corpus_path.is_file() else "your study's corpus file is gone")
    return out


def job_meta(job: StudyJob) -> dict | None:
    try:
        return read_meta(job.folder) if job.folder else None
    except StudyError:
        return None


def records() -> list[dict]:
    return st.session_state.setdefault("scal_fc_records", [])


def fit_rows(base: Base) -> list[dict]:
    """The base's runs and the runs trained for its settled forecasts: what the law is fitted to."""
    return base.rows + vf.joined_rows(records(), base.key)


def law_and_boot(rows: list[dict]):
    """(law, bootstrap) of the rows, cached on their CSV text; core.analysis.scaling.FitError when none fits."""
    N, D, L = rows_to_arrays(rows)
    return fitted_boot(Runs(N, D, L).to_csv())


def start(base: Base, plan: PlannedRun, record: dict) -> str | None:
    """Start the run of ``plan``; None, or why it could not start."""
    if base.corpus is None:
        return base.corpus_note
    try:
        job = start_run(base.meta, plan, base.corpus)
    except (StudyError, JobBusy) as e:
        return str(e)
    st.session_state["scal_fc_job"] = job
    st.session_state["scal_fc_pending"] = record
    return None


def poll() -> tuple[StudyJob | None, object]:
    """(the run's handle, its status); settles the record once the run is in (and reruns the page so that its point
    joins the fit), or drops it if the run failed or was stopped for good."""
    job = st.session_state.get("scal_fc_job")
    if job is None:
        return None, None
    s = job.status()
    if s.state == "finished" and s.rows:
        records().append(vf.settle(st.session_state.pop("scal_fc_pending"), s.rows[0]))
        st.session_state.pop("scal_fc_job")
        st.rerun()
    if s.state == "finished":  # finished with no row (runs.csv unreadable, say): said once, and the run let go
        st.session_state.pop("scal_fc_job")
        st.session_state.pop("scal_fc_pending", None)
        st.session_state["scal_fc_lost"] = (f"The run finished but left no result{': ' + s.problem if s.problem else ''}"
                                            "; train it again.")
        return None, None
    return job, s


def show_lost():
    """The word that a run finished with no result (poll let it go), once."""
    msg = st.session_state.pop("scal_fc_lost", None)
    if msg:
        st.warning(msg, icon="⚠️")


def drop():
    """Forget the run under way (stopped or failed) and its record."""
    job = st.session_state.pop("scal_fc_job", None)
    if job is not None:
        job.stop(wait=None)
    st.session_state.pop("scal_fc_pending", None)
