"""A study's runs step by step (issue 54: a forecast run of 500 s showed a bar at 0 % to the end): each run writes its
step, steps, last loss and pace while it trains, run_study gathers them into progress.json's "live" list, and
StudyJob.status() gives the run under way's step, steps and loss, with the time left at its own pace."""
import json
import math
import subprocess
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest

from core.training import study_live
from core.data.corpus import pydoc_text
from core.training.study_grid import Grid, train_one
from core.training.study_files import read_progress
from core.training.study_run import run_study
from core.training.study_job import StudyJob, StudyStatus
from core.training.study_live import LIVE_PREFIX, StepReport, seconds_left
from core.views.scaling_forecast import run_progress
from tests.test_study import same_runs

# one run of about 300 steps of a d = 8 model: a second or two, long enough to be seen mid-way
ONE = Grid("one", widths=(8,), tokens=(300 * 8 * 32,), n_ctx=32, batch_size=8)


class ThreadEngine:
    """Trains each run in a thread of this process and, as LocalEngine does, asks should_stop while it trains;
    keeps every progress.json it sees meanwhile."""
    name = "thread"

    def __init__(self, folder):
        self.folder, self.seen = folder, []

    def check(self):
        pass

    def run(self, specs, should_stop):
        for s in specs:
            out = []
            t = threading.Thread(target=lambda: out.append(train_one(s)))
            t.start()
            while t.is_alive():
                t.join(0.01)
                should_stop()
                self.seen.append(read_progress(self.folder))
            yield out[0]


@pytest.fixture(scope="module")
def text():
    return pydoc_text()


def test_a_study_under_way_writes_its_runs_step_steps_and_loss_into_progress_json(tmp_path, text, monkeypatch):
    # as often as the test looks, a pace from the second report: the throttle and the pace have tests of their own
    monkeypatch.setattr(study_live, "LIVE_EVERY_S", 0.02)
    monkeypatch.setattr(study_live, "RATE_MIN_S", 0.0)
    engine = ThreadEngine(tmp_path)
    rows = run_study(ONE, text, "pydoc", tmp_path, engine)
    steps = ONE.specs()[0].steps
    live = [p["live"][0] for p in engine.seen if p and p.get("live")]
    assert live, "progress.json never said where the run was"
    assert {r["run"] for r in live} == {rows[0]["run_id"]} and {r["steps"] for r in live} == {steps}
    assert all(0 < r["step"] <= steps and math.isfinite(r["loss"]) for r in live)
    assert all(r["rate"] > 0 for r in live if r["step"] > live[0]["step"])  # the first report has no pace yet
    seen_steps = [r["step"] for r in live]
    assert seen_steps == sorted(seen_steps) and len(set(seen_steps)) >= 3  # it moved while the run trained
    done = read_progress(tmp_path)
    assert done["state"] == "trained" and done["live"] == []  # once in, the run is no longer under way
    assert not list(tmp_path.glob(f"{LIVE_PREFIX}*"))  # and its file is gone from the study's folder


def test_reporting_changes_nothing_in_the_run(tmp_path, text):
    spec = ONE.specs(text)[0]
    assert same_runs([train_one(spec)]) == same_runs([train_one(replace(spec, live_file=str(tmp_path / "x.json")))])


def test_a_run_reports_at_most_once_a_second_and_always_its_last_step(tmp_path):
    path = tmp_path / "live.json"
    report = StepReport(str(path), "d8-D1", 100)
    for step in range(1, 100):  # far quicker than a second
        report(step, 2.0)
    assert json.loads(path.read_text())["step"] == 1
    report(100, 1.01)
    last = json.loads(path.read_text())
    # the loss: the mean of the 99 steps since the last write (98 at 2.0, one at 1.01), not the last batch's alone
    assert (last["step"], last["steps"], last["loss"], last["run"]) == (100, 100, 1.99, "d8-D1")
    StepReport(str(tmp_path / "no-such-folder" / "x.json"), "r", 10)(1, 2.0)  # a report never fails the run


def test_the_pace_leaves_out_the_first_step_and_follows_the_latest_training(tmp_path, monkeypatch):
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(study_live, "time", SimpleNamespace(time=lambda: clock.now))
    path = tmp_path / "live.json"
    report = StepReport(str(path), "r", 1000)

    def at(t, step):
        clock.now = t
        report(step, 2.0)
        return json.loads(path.read_text())["rate"]

    assert at(10.0, 1) is None  # 10 s for the first step (allocations, a snapshot): no pace from it
    assert at(11.0, 11) is None  # nor from a second of steps: too few to say minutes
    assert at(15.0, 51) == 10.0 and at(16.0, 61) == 10.0
    assert at(100.0, 71) == pytest.approx(10 / 84, abs=1e-3)  # paused for a while: slow ...
    assert at(101.0, 81) is None and at(106.0, 131) == 10.0  # ... only until the pause falls out of the window


@pytest.fixture
def one_run_job(tmp_path):
    """A StudyJob of one run whose 'process' is a sleep: status() reads the folder as for a study under way."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("x")
    grid = tmp_path / "one.json"
    grid.write_text(json.dumps({"widths": [8], "tokens": [9600], "n_ctx": 32, "batch_size": 8}))
    job = StudyJob(corpus, str(grid), folder=tmp_path / "study")
    job.folder.mkdir()
    job.proc = subprocess.Popen(["sleep", "60"])
    yield job
    job.proc.kill()
    job.proc.wait()


def test_status_gives_the_run_under_ways_step_loss_and_time_left(one_run_job):
    now = time.time()
    (one_run_job.folder / "progress.json").write_text(json.dumps(
        {"state": "running", "total": 1, "done": 0, "eta_s": None, "time": now,
         "live": [{"run": "d8-D9600", "step": 100, "steps": 300, "loss": 1.9, "rate": 4.0, "time": now}]}))
    s = one_run_job.status()
    assert (s.state, s.step, s.steps, s.loss) == ("running", 100, 300, 1.9)
    assert s.eta_s == pytest.approx(200 / 4.0, abs=1.0)  # 200 steps left at 4 a second: before, no time left at all
    one_run_job._paused = True
    s = one_run_job.status()
    assert s.state == "paused" and s.step == 100 and s.eta_s is None  # a paused run's time left would go stale


def test_status_without_a_run_under_way_has_no_step(one_run_job):
    (one_run_job.folder / "progress.json").write_text(json.dumps({"state": "running", "total": 1, "done": 0}))
    s = one_run_job.status()
    assert (s.step, s.steps, s.loss) == (None, None, None)
    assert StudyStatus(state="running", done=0, total=1, rows=[]).step is None  # the fields are optional


def test_time_left_at_the_runs_own_pace():
    assert seconds_left({"step": 10, "steps": 110, "rate": 2.0, "time": 1000.0}, now=1010.0) == 40.0
    assert seconds_left({"step": 110, "steps": 110, "rate": 2.0, "time": 1000.0}, now=1000.0) == 0.0
    assert seconds_left({"step": 1, "steps": 2, "rate": 0}) == math.inf


def status(state="running", step=None, steps=None, loss=None, eta_s=None, done=0):
    return SimpleNamespace(state=state, step=step, steps=steps, loss=loss, eta_s=eta_s, done=done, total=1)


def test_the_bar_moves_with_the_steps_and_says_the_loss_and_the_time_left():
    assert run_progress(status("starting"), 128, 3_366_912) == (
        0.0, "Training d = 128 on 3,366,912 characters: Starting the workers")
    share, words = run_progress(status(step=822, steps=3288, loss=1.7344, eta_s=130.0), 128, 3_366_912)
    assert share == pytest.approx(0.25)
    assert words == ("Training d = 128 on 3,366,912 characters: step 822 of 3,288, training loss 1.734, about 2 "
                     "minutes left")
    assert run_progress(status(step=3288, steps=3288, loss=1.5, eta_s=0.0), 128, 3_366_912)[1].endswith(
        "measuring the held-out loss")
    assert "(paused)" in run_progress(status("paused", 822, 3288, 1.7), 128, 3_366_912)[1]
    assert run_progress(status("finished"), 128, 3_366_912)[0] == 1.0
    # the run is in but its process has not ended yet: the bar stays full (it fell back to 0 % "Training")
    assert run_progress(status("running", done=1), 128, 3_366_912) == (
        1.0, "Training d = 128 on 3,366,912 characters: done")
