"""A forecast as a Class round (issue 45): the teacher asks where the next run's loss will land, students vote on the
four bins the law's point and 80 % interval cut, the run is trained (here a finished run is handed to the session,
as the background job hands it) and the bin it landed in is revealed, checked against the bins by hand."""
import pytest

from core.serve import classroom as C
from core.data.corpus import CORPUS_ENV, shakespeare_path
from tests.test_page_classroom import _button, _radio, store_path, words  # noqa: F401  (a fixture)
from tests.test_page_scaling_forecast import ROWS, FakeJob
from pages.classroom.views import choice_label

PAGE = "pages/classroom.py"


class RunningJob:
    """A forecast run a quarter of the way through, as core.training.study_job.StudyJob reports it."""

    def __init__(self, steps: int):
        self.steps = steps

    def status(self):
        from core.training.study_job import StudyStatus

        return StudyStatus(state="running", done=0, total=1, rows=[], eta_s=170.0, step=self.steps // 4,
                           steps=self.steps, loss=1.7344)

    def stop(self, wait=None):
        pass


def test_without_the_corpus_a_forecast_round_says_why_not(open_page, store_path, tmp_path, monkeypatch):
    monkeypatch.setenv(CORPUS_ENV, str(tmp_path / "no-such-file.txt"))
    monkeypatch.setattr("core.data.corpus.fetched_shakespeare_path", lambda: tmp_path / "none.txt")
    teacher = open_page(PAGE, timeout=300)
    teacher.button(key="class_start").click().run()
    teacher.radio(key="class_kind").set_value("Forecast the next run").run()
    assert not teacher.exception
    assert "Not as a class question" in words(teacher) and "Tiny Shakespeare is not on this machine" in words(teacher)
    assert teacher.button(key="class_open").disabled


@pytest.mark.skipif(shakespeare_path() is None, reason="needs Tiny Shakespeare: a forecast round trains on the "
                    "shipped study's corpus")
def test_a_forecast_round_from_question_to_the_bin_the_run_landed_in(open_page, store_path):
    teacher = open_page(PAGE, timeout=300)
    teacher.button(key="class_start").click().run()
    code, secret = teacher.session_state["class_teacher"]
    teacher.radio(key="class_kind").set_value("Forecast the next run").run()
    teacher.button(key="class_open").click().run()
    assert not teacher.exception
    info = C.SqliteStore(store_path).round_info(code)
    meta, choices = info["meta"], info["choices"]
    lo, mid, hi = meta["edges"]
    assert lo < mid < hi and len(choices) == 4 and choices[0] == f"below {lo:.3f}"

    student = open_page(PAGE, query={"class": code})
    assert "The law predicts a held-out loss of" in words(student)
    _radio(student, "class_choice_1_1").set_value(choices[0]).run()
    _button(student, "class_vote_1_1").click().run()
    assert f"Recorded: **{choice_label(choices[0])}** (vote 1)" in words(student)  # Markdown characters escaped

    # before the run: how long it should take on this server (issue 54: there was no estimate before or during)
    assert "The run should take about" in words(teacher) and "on this server" in words(teacher)

    # under way: the step, the training loss, a bar that moves and the time left (a status as the study gives it)
    from core.views.scaling_forecast import class_record
    teacher.session_state["scal_fc_job"] = RunningJob(meta["steps"])
    teacher.session_state["scal_fc_pending"] = {**class_record(meta), "round": info["round"]}
    teacher.run()
    assert not teacher.exception
    bar = teacher.get("progress")[0].proto
    assert bar.value == 25  # a quarter of the steps made: the bar stood at 0 % through the whole run before
    assert bar.text == (f"Training d = {meta['d_model']} on {meta['D']:,} characters: step {meta['steps'] // 4:,} of "
                        f"{meta['steps']:,}, training loss 1.734, about 3 minutes left")
    assert not [b for b in teacher.button if b.key == "class_fc_train"]  # no second run while this one trains

    # the run comes in below the law's interval: the first bin
    loss = lo - 0.05
    row = {**ROWS[0], "run_id": f"d{meta['d_model']}-D{meta['D']}", "N": meta["N"], "D": meta["D"], "loss": loss}
    teacher.session_state["scal_fc_job"] = FakeJob(row)
    teacher.run()
    assert not teacher.exception
    assert "The run is in: reveal where it landed" in words(teacher)
    teacher.button(key="class_reveal").click().run()
    info = C.SqliteStore(store_path).round_info(code)
    assert info["revealed"] and info["answer"] == choices[0]
    assert f"The run's held-out loss: {loss:.4f}" in info["words"] and "outside its interval" in info["words"]
    student.run()
    assert f"The run landed: {choices[0]}" in words(student)  # plain text (pages.classroom.views.answer_words)
