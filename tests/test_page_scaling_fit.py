"""AppTest of the Your scaling law page: the law it names from the Scaling laws page, fitting uploaded or pasted
runs and loading the fit into that page's sliders, and the studies (shipped, started here, refused, broken)."""
import json

import numpy as np
import pytest
from core.training import study_job

from core.views import scaling_view as sv
from core.analysis.scaling import CHINCHILLA, EPOCH_2024, ScalingLaw
from core.analysis.scaling_runs import MAX_BYTES, synthetic_runs
from tests.test_page_scaling import charts, text_of  # the same readers of the page's charts and text

PAGE, LAW_PAGE = "pages/scaling_fit.py", "pages/scaling.py"
EPOCH = "Epoch replication (Besiroglu et al. 2024)"


@pytest.fixture
def fit_page(open_page):
    """fit_page(): the fit page, freshly opened."""
    return lambda: open_page(PAGE)


def switch(at, page):
    """``at`` on ``page`` (the learner's click in the menu); the session, and so the law, stay."""
    at.switch_page(page)
    at.run()
    assert not at.exception, f"{page}: {at.exception[0].message}"
    return at


def chart_titled(at, start: str) -> dict:
    for el in at.get("plotly_chart"):
        spec = json.loads(el.proto.spec)
        if spec["layout"].get("title", {}).get("text", "").startswith(start):
            return spec
    raise AssertionError(f"no chart titled {start!r}")


def law_link(at) -> str:
    return next(el.proto.label for el in at.get("page_link") if el.proto.page == "scaling")


def test_the_chosen_law_is_the_default_preset_until_one_is_picked():
    assert sv.chosen_law({}) == (sv.DEFAULT_PRESET, CHINCHILLA) and sv.DEFAULT_PRESET.startswith("Chinchilla")
    assert sv.chosen_law({"scal_preset": EPOCH}) == (EPOCH, EPOCH_2024)
    assert sv.chosen_preset({"scal_preset": sv.CUSTOM, "scal_alpha": 0.5}) == sv.DEFAULT_PRESET  # no whole custom law
    law = ScalingLaw(A=100.0, B=1000.0, alpha=0.3, beta=0.4, E=1.5)
    assert sv.chosen_law(sv.custom_state(law)) == (sv.CUSTOM, law)


def test_the_page_names_the_law_chosen_on_the_law_page(fit_page, open_page):
    at = fit_page()
    assert at.title[0].value == "Your scaling law"
    assert law_link(at).startswith("The law page shows Chinchilla") and "α = 0.34" in law_link(at)
    assert "Chinchilla (Hoffmann et al. 2022)* and *Epoch replication" in text_of(at)  # the presets it compares with
    at = open_page(LAW_PAGE)
    at.selectbox(key="scal_preset").select(EPOCH).run()
    switch(at, PAGE)
    assert law_link(at).startswith(f"The law page shows {EPOCH}: α = {EPOCH_2024.alpha:.4g}")
    switch(at, LAW_PAGE)  # and back: the law page kept the learner's choice
    assert at.selectbox(key="scal_preset").value == EPOCH and at.slider(key="scal_alpha").value == 0.3478


def fit_table(at) -> dict:
    """The fitted-constants table by constant (the study tables have no "fitted" column)."""
    table = next(d.value for d in at.dataframe if "fitted" in d.value.columns)
    return {r["constant"]: r for r in table.to_dict("records")}


def test_example_fit_is_shown_against_the_true_constants(fit_page):
    at = fit_page()
    rows = fit_table(at)
    assert "fit" in charts(at)
    assert rows["α"]["true"] == EPOCH_2024.alpha
    assert abs(rows["α"]["fitted"] - EPOCH_2024.alpha) < 0.05 and abs(rows["L∞ (E)"]["fitted"] - EPOCH_2024.E) < 0.05
    assert {m.label: m.value for m in at.metric}["Runs"] == "250"


@pytest.mark.parametrize("name, data, words", [
    ("photo.csv", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00", "binary data"),
    ("runs.csv", b"N,tokens\n1e9,1e10\n", "Missing column loss"),
    ("empty.csv", b"", "empty"),
    ("few.csv", b"N,D,loss\n1e9,1e10,2.5\n", "Only 1 run"),
    ("neg.csv", b"N,D,loss\n" + b"1e9,1e10,2.5\n" * 9 + b"-1e9,1e10,2.5\n", "N = -1e9 must be a positive"),
    ("huge.csv", b"N,D,loss\n" + b"1e9,1e10,2.5\n" * (MAX_BYTES // 13 + 1), "MB"),
])
def test_bad_uploads_get_a_clear_message(name, data, words, fit_page):
    at = fit_page()
    at.radio(key="scal_fit_source").set_value("Upload a CSV").run()
    at.file_uploader(key="scal_upload").set_value((name, data, "text/csv")).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and words in errors[0], errors
    assert "fit" not in charts(at)  # nothing fitted, and the rest of the page still stands
    chart_titled(at, "The shipped study")


def test_pasted_rows_fit_and_load_into_the_law_pages_sliders(open_page):
    at = open_page(LAW_PAGE)
    at.selectbox(key="scal_preset").select(EPOCH).run()
    switch(at, PAGE)
    at.radio(key="scal_fit_source").set_value("Paste rows").run()
    assert any("Add runs" in i.value for i in at.info)
    at.text_area(key="scal_paste").input("To be, or not to be:").run()
    assert not at.exception
    assert any("Missing columns N, D, loss" in e.value for e in at.error)
    runs = synthetic_runs(CHINCHILLA, n=60, noise=0.0, seed=5)
    at.text_area(key="scal_paste").input(runs.to_csv()).run()
    assert not at.exception and not at.error
    rows = {constant: r["fitted"] for constant, r in fit_table(at).items()}
    assert rows["α"] == pytest.approx(0.34, abs=1e-3) and rows["β"] == pytest.approx(0.28, abs=1e-3)
    assert "fit" in charts(at)
    at.button(key="scal_use_fit").click().run()
    assert not at.exception
    assert law_link(at).startswith("The law page shows Custom") and "α = 0.34," in law_link(at)
    switch(at, LAW_PAGE)  # the law page shows the fit, whatever preset it had
    assert at.selectbox(key="scal_preset").value.startswith("Custom")
    assert at.slider(key="scal_alpha").value == pytest.approx(0.34, abs=1e-3)
    assert at.slider(key="scal_E").value == pytest.approx(1.69, abs=1e-3)


def test_a_pasted_field_past_the_csv_limit_gets_a_message(fit_page):
    at = fit_page()
    at.radio(key="scal_fit_source").set_value("Paste rows").run()
    at.text_area(key="scal_paste").input("N,D,loss\n1e9,1e10," + "9" * 199_000 + "\n").run()  # within max_chars
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "Line 2 has a field longer than 131,072 characters" in errors[0], errors
    assert "fit" not in charts(at)
    chart_titled(at, "The shipped study")


def test_a_fit_outside_the_slider_ranges_says_the_sliders_will_clip(fit_page):
    at = fit_page()
    at.radio(key="scal_fit_source").set_value("Paste rows").run()
    runs = synthetic_runs(ScalingLaw(A=400.0, B=400.0, alpha=0.3, beta=0.3, E=6.0), n=40, noise=0.0, seed=1)
    at.text_area(key="scal_paste").input(runs.to_csv()).run()
    assert not at.exception and not at.error
    assert any("outside the sliders' ranges" in c.value for c in at.caption)
    at.button(key="scal_use_fit").click().run()
    assert not at.exception
    switch(at, LAW_PAGE)
    assert at.slider(key="scal_E").value == 5.0  # the slider's end


def test_runs_with_a_flat_loss_are_refused_not_crashed(fit_page):
    # 20 runs whose loss barely moves: the unconstrained fit finds exponents <= 0 (no optimum exists)
    rng = np.random.default_rng(0)
    rows = ["N,D,loss"] + [f"{n:.3g},{d:.3g},{2.0 * (1 + 0.001 * rng.standard_normal()):.5f}"
                           for n in (1e7, 3e7, 1e8, 3e8, 1e9) for d in (1e9, 3e9, 1e10, 3e10)]
    at = fit_page()
    at.radio(key="scal_fit_source").set_value("Paste rows").run()
    at.text_area(key="scal_paste").input("\n".join(rows)).run()
    assert not at.exception
    assert "fit" not in charts(at)
    assert any("no loss that falls as a power law" in e.value or "infinite constants" in e.value for e in at.error)


# ---------------------------------------------------------------- the study: shipped, started here, refused

def test_the_shipped_study_is_shown_with_its_fit_from_the_first_visit(fit_page):
    from core.training.study_files import SHIPPED_STUDY, read_study

    meta, rows, fit = read_study(SHIPPED_STUDY)
    at = fit_page()
    spec = chart_titled(at, "The shipped study: the runs (points) and the fitted law")
    shown = sorted(y for t in spec["data"] if t["mode"] == "markers" and t.get("xaxis") == "x"
                   for y in decode(t["y"]))
    assert shown == pytest.approx(sorted(r["loss"] for r in rows))
    assert any(t["mode"] == "lines" for t in spec["data"])  # the fitted curves through the points
    chart_titled(at, "Residuals")
    frontier = chart_titled(at, "Compute-optimal frontiers at this study's scale")
    names = {t.get("name") for t in frontier["data"]}
    assert {"this study's frontier", "Chinchilla's frontier", "Epoch replication's frontier"} <= names
    table = next(d.value for d in at.dataframe if "Chinchilla 2022" in d.value.columns)
    alpha = table[table["constant"].str.startswith("α")].iloc[0]
    lo, hi = fit["bootstrap"]["intervals"]["alpha"]
    assert alpha["this study"] == pytest.approx(fit["law"]["alpha"]) and alpha["Chinchilla 2022"] == 0.34
    assert alpha["95% interval"] == f"{lo:.3g} to {hi:.3g}"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["R² of log loss"] == f"{fit['r2_log']:.4f}" and metrics["Runs in the study"] == str(len(rows))
    assert "Why your exponents need not be Chinchilla's" in text_of(at)


def decode(values):
    """A Plotly array from the spec: a list, or plotly 6's base64 typed array."""
    import base64

    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def test_a_corpus_too_small_for_the_grid_is_refused(fit_page):
    at = fit_page()
    at.radio(key="scal_study_corpus").set_value("pydoc").run()
    at.radio(key="scal_study_grid").set_value("full").run()
    assert not at.exception
    assert any("too small for the full grid" in e.value for e in at.error)
    assert at.button(key="scal_study_start").disabled
    at.radio(key="scal_study_grid").set_value("small").run()
    assert not any("too small" in e.value for e in at.error) and not at.button(key="scal_study_start").disabled


@pytest.mark.slow
def test_a_tiny_study_starts_and_stops(fit_page):
    from core.training.study_files import read_rows

    at = fit_page()
    at.radio(key="scal_study_corpus").set_value("pydoc").run()
    at.radio(key="scal_study_grid").set_value("tiny").run()
    at.button(key="scal_study_start").click().run()
    assert not at.exception
    job = at.session_state["scal_study_job"]
    try:
        assert job.status().active and job.grid_name == "tiny"
        assert at.button(key="scal_study_start").disabled  # one study per session
        assert at.button(key="scal_study_stop").disabled is False
        at.button(key="scal_study_stop").click().run()
        assert not at.exception
        job.proc.wait(60)
        at.run()
        s = job.status()
        assert s.state == "stopped" and not s.active
        read_rows(job.runs_csv)  # whatever finished is whole (read_rows refuses a partial row)
        assert any("Stopped" in p.proto.text for p in at.get("progress"))
        assert not at.button(key="scal_study_start").disabled
        assert not at.button(key="scal_study_resume").disabled  # a stopped study can go on where it stopped
    finally:
        job.stop()


def test_a_studys_points_and_fit_are_drawn_from_its_folder(open_page, tmp_path):
    import shutil

    from core.training.study_files import SHIPPED_STUDY
    from core.training.study_job import StudyJob

    for name in ("runs.csv", "study.json"):
        shutil.copy(SHIPPED_STUDY / name, tmp_path / name)
    job = StudyJob(tmp_path / "unused.txt", "full", folder=tmp_path)  # never started: it shows what the folder holds
    at = open_page(PAGE, state={"scal_study_job": job})
    figs = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    titles = [f["layout"].get("title", {}).get("text", "") for f in figs]
    assert "Your study: the runs (points) and the fitted law L(N, D) (lines)" in titles  # fitted: 24 runs
    assert "The shipped study: the runs (points) and the fitted law L(N, D) (lines)" in titles
    assert any(b.label == "Download runs.csv" for b in at.get("download_button"))


def test_a_broken_shipped_study_is_reported_not_crashed(open_page, tmp_path, monkeypatch):
    from core.training import study_files as study

    (tmp_path / "runs.csv").write_text("this is not a study\n")
    (tmp_path / "study.json").write_text("{}")
    monkeypatch.setattr(study, "SHIPPED_STUDY", tmp_path)
    at = open_page(PAGE)
    assert any("shipped study" in w.value and "could not be read" in w.value for w in at.warning)
    assert not at.button(key="scal_study_start").disabled  # a grid can still be run


# ---------------------------------------------------------------- a study with a bad run or a bad file

def study_copy(folder, losses=None, files=("runs.csv", "study.json")) -> list[dict]:
    """The shipped study's files in ``folder``, the loss of each run named in ``losses`` ({run_id: text})
    replaced; its rows as csv reads them (strings)."""
    import csv
    import io
    import shutil

    from core.training.study_files import SHIPPED_STUDY

    for name in files:
        shutil.copy(SHIPPED_STUDY / name, folder / name)
    raw = list(csv.DictReader(io.StringIO((SHIPPED_STUDY / "runs.csv").read_text())))
    for r in raw:
        r["loss"] = (losses or {}).get(r["run_id"], r["loss"])
    lines = [",".join(raw[0])] + [",".join(r.values()) for r in raw]
    (folder / "runs.csv").write_text("\n".join(lines) + "\n")
    return raw


def points(spec) -> list[float]:
    """The losses of a study figure's left panel (loss against N), sorted."""
    return sorted(y for t in spec["data"] if t["mode"] == "markers" and t.get("xaxis") == "x" for y in decode(t["y"]))


def ended_process(code: int = 0):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    p.wait(30)
    return p


def test_a_diverged_run_in_your_study_is_named_and_the_rest_fitted(open_page, tmp_path):
    from core.training.study_job import StudyJob

    raw = study_copy(tmp_path, {"d16-D300032": "nan", "d96-D3000320": "-1"})
    job = StudyJob(tmp_path / "unused.txt", "full", folder=tmp_path)  # never started: it shows what the folder holds
    at = open_page(PAGE, state={"scal_study_job": job})
    note = next(w.value for w in at.warning if "left out of the fit" in w.value)
    assert "2 runs are left out" in note
    assert "d16-D300032 (N = 6,304, D = 300,032): its loss is NaN (the run diverged)" in note
    assert "d96-D3000320 (N = 222,144, D = 3,000,320): its loss is -1" in note
    spec = chart_titled(at, "Your study: the runs (points) and the fitted law")  # fitted: 22 runs are enough
    keep = sorted(float(r["loss"]) for r in raw if r["run_id"] not in ("d16-D300032", "d96-D3000320"))
    assert points(spec) == pytest.approx(keep)
    assert any(t["mode"] == "lines" for t in spec["data"])
    assert {m.label: m.value for m in at.metric}.get("Runs in the study") is not None
    chart_titled(at, "The shipped study")  # the rest of the page stands


def test_an_unreadable_fit_json_of_a_finished_study_is_named_and_the_runs_refitted(open_page, tmp_path):
    from core.training.study_job import StudyJob

    raw = study_copy(tmp_path)
    (tmp_path / "fit.json").write_text("{not json")
    job = StudyJob(tmp_path / "unused.txt", "full", folder=tmp_path)
    job.proc = ended_process(0)  # a study that has finished
    at = open_page(PAGE, state={"scal_study_job": job})
    assert any(p.proto.text.startswith("Finished") for p in at.get("progress"))
    assert any(str(tmp_path / "fit.json") in w.value and "cannot be read" in w.value for w in at.warning)
    spec = chart_titled(at, "Your study: the runs (points) and the fitted law")
    assert points(spec) == pytest.approx(sorted(float(r["loss"]) for r in raw))
    assert any(t["mode"] == "lines" for t in spec["data"])  # refitted on the page from the runs


def test_an_unreadable_runs_csv_of_your_study_is_named(open_page, tmp_path):
    from core.training.study_job import StudyJob

    (tmp_path / "runs.csv").write_text("this is not a study\n")
    job = StudyJob(tmp_path / "unused.txt", "full", folder=tmp_path)
    at = open_page(PAGE, state={"scal_study_job": job})
    assert any(str(tmp_path / "runs.csv") in e.value and "not a study's runs.csv" in e.value for e in at.error)
    chart_titled(at, "The shipped study")
    assert not at.button(key="scal_study_start").disabled


def test_a_diverged_run_or_a_bad_fit_json_in_the_shipped_study_loses_only_that(open_page, tmp_path, monkeypatch):
    from core.training import study_files as study
    from core.analysis.scaling import fit_scaling_law

    raw = study_copy(tmp_path, {"d48-D600064": "nan"}, files=("runs.csv", "study.json", "fit.json"))
    keep = [r for r in raw if r["run_id"] != "d48-D600064"]
    alpha = fit_scaling_law(*(np.array([float(r[k]) for r in keep]) for k in ("N", "D", "loss"))).alpha
    monkeypatch.setattr(study, "SHIPPED_STUDY", tmp_path)
    at = open_page(PAGE)
    warnings = "\n".join(w.value for w in at.warning)
    assert "d48-D600064 (N = 55,776, D = 600,064): its loss is NaN" in warnings
    assert "fit.json was fitted to 24 runs, not to the 23 usable ones" in warnings  # so the 23 are fitted here
    spec = chart_titled(at, "The shipped study: the runs (points) and the fitted law")
    assert points(spec) == pytest.approx(sorted(float(r["loss"]) for r in keep))
    table = next(d.value for d in at.dataframe if "Chinchilla 2022" in d.value.columns)
    row = table[table["constant"].str.startswith("α")].iloc[0]
    assert row["this study"] == pytest.approx(alpha, rel=1e-6) and row["95% interval"] == "–"
    (tmp_path / "fit.json").write_text('{"runs": 23}')
    at = open_page(PAGE)
    assert any(str(tmp_path / "fit.json") in w.value and "not a study's fit.json" in w.value for w in at.warning)
    spec = chart_titled(at, "The shipped study: the runs (points) and the fitted law")  # refitted here
    assert points(spec) == pytest.approx(sorted(float(r["loss"]) for r in keep))
    assert "Why your exponents need not be Chinchilla's" in text_of(at)


@pytest.mark.parametrize("state", sorted(set(study_job.STATES)
                                         | set(study_job.ACTIVE)))
def test_every_state_of_a_study_has_a_label(open_page, tmp_path, state):
    from core.training.study_job import StudyJob, StudyStatus

    job = StudyJob(tmp_path / "unused.txt", "full", folder=tmp_path)
    job.status = lambda: StudyStatus(state=state, done=0, total=24, rows=[])
    at = open_page(PAGE, state={"scal_study_job": job})
    bar = next(p.proto.text for p in at.get("progress"))
    assert bar.endswith("0 of 24 runs done (full grid on unused.txt)") and not bar.startswith(state), bar
