"""core.training.study_job: a study in a process group of its own, paused, resumed, stopped, one at a time per server."""
import json
import os

import pytest

from core.training import study_job
from tests.polling import stays, wait_until
from core.data.corpus import pydoc_text
from core.training.study_grid import StudyError
from core.training.study_files import read_rows
from core.jobs import running_jobs
from core.training.study_job import StudyJob

pytestmark = pytest.mark.slow  # each study starts Python, torch and two workers: seconds, more on a busy machine


@pytest.fixture
def micro(tmp_path):
    """(corpus path, grid file) of a 6-run study that takes seconds."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(pydoc_text())
    grid = tmp_path / "micro.json"
    grid.write_text(json.dumps({"widths": [8, 16, 24], "tokens": [2048, 4096], "n_ctx": 32, "batch_size": 8}))
    return corpus, str(grid)


def wait_for(job, test, timeout=240):
    """The first status that passes ``test``; the job's status and log in the failure if none does in time."""
    seen = []
    try:
        wait_until(lambda: test(seen.append(job.status()) or seen[-1]), timeout=timeout, every=0.2)
    except AssertionError:
        raise AssertionError(f"timed out: {job.status()} {job.log_tail()}") from None
    return seen[-1]


def group_states(job) -> set[str]:
    """The run states (R, S, T, ...) of the study's processes, read from /proc."""
    states = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == job.proc.pid:  # its process group
                states.add(fields[0])
    return states


def test_pause_resume_and_finish(micro, tmp_path):
    corpus, grid = micro
    job = StudyJob(corpus, grid, folder=tmp_path / "study", workers=2, nice=0)
    assert job.status().state == "new"
    job.start()
    s = wait_for(job, lambda s: s.done >= 1)
    job.pause()
    assert job.status().state == "paused"
    wait_until(lambda: group_states(job) <= {"T", "t", "Z"})  # every process of the study is stopped
    frozen = job.status().done
    stays(lambda: job.status().done == frozen, 2)
    job.resume()
    s = wait_for(job, lambda s: s.state in ("finished", "failed"))
    assert s.state == "finished", s.message
    assert s.done == s.total == 6 and len(s.rows) == 6
    assert (tmp_path / "study" / "README.md").is_file()  # the card is written at the end


def test_stop_keeps_whole_rows_and_resume_continues(micro, tmp_path):
    corpus, grid = micro
    job = StudyJob(corpus, grid, folder=tmp_path / "study", workers=1, nice=0)
    job.start()
    wait_for(job, lambda s: s.done >= 1)
    job.stop()
    s = job.status()
    assert s.state == "stopped" and not s.active
    kept = read_rows(job.runs_csv)
    assert 1 <= len(kept) < 6
    assert s.can_resume
    job.resume()  # a stopped study starts again on its folder and trains only what is missing
    s = wait_for(job, lambda s: s.state in ("finished", "failed"))
    assert s.state == "finished", s.message
    assert read_rows(job.runs_csv)[:len(kept)] == kept


def test_one_study_at_a_time_and_bad_input(micro, tmp_path, monkeypatch):
    corpus, grid = micro
    first = StudyJob(corpus, grid, folder=tmp_path / "a", workers=1, nice=0)
    first.start()
    try:
        second = StudyJob(corpus, grid, folder=tmp_path / "b", workers=99, nice=0)  # every core jobs may hold
        second.start()
        s = second.status()
        assert (s.state, s.ahead, second.proc) == ("queued", 0, None)  # it waits for first's core
        assert running_jobs("study") == 2
        first.stop()
        wait_for(second, lambda s: s.state != "queued")  # it started on the freed cores by itself
        second.stop()
    finally:
        first.stop()
        second.stop()
    assert running_jobs("study") == 0
    small = tmp_path / "small.txt"
    small.write_text("a few words " * 100)
    with pytest.raises(StudyError, match="too small for the full grid"):
        StudyJob(small, "full", folder=tmp_path / "c").start()
    assert not (tmp_path / "c" / "runs.csv").exists()


def test_a_dropped_handle_ends_its_study_and_its_folder(micro):
    import gc

    corpus, grid = micro
    job = StudyJob(corpus, grid, workers=1, nice=0)  # a temporary folder of its own
    job.start()
    folder, proc = job.folder, job.proc
    del job
    gc.collect()
    proc.wait(30)
    assert not folder.exists()


def test_every_state_status_gives_is_named_and_active_means_alive(tmp_path):
    """Drive status() through each of its branches with real processes (alive: one waiting on its stdin; ended:
    with each kind of exit) and collect the states it gives."""
    import signal
    import subprocess
    import sys

    from core.training.study_grid import ROW_FIELDS

    def ended(code: int) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
        p.wait(30)
        return p

    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"widths": [8], "tokens": [2048]}))
    job = StudyJob(tmp_path / "unused.txt", str(grid), folder=tmp_path / "study")
    (tmp_path / "study").mkdir()
    seen, alive = set(), set()
    seen.add(job.status().state)  # never started, no runs
    (tmp_path / "study" / "runs.csv").write_text(",".join(ROW_FIELDS) + "\n" + ",".join(
        ["d8-D2048", "8", "1", "2", "64", "16", "2", "1600", "3000", "2048", "2.5", "2.4", "1.0", "1337", "muon",
         "1.0", "1.0"]) + "\n")
    seen.add(job.status().state)  # never started, runs from before
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        job.proc = proc
        for paused, stopping, progress in ((False, False, None), (False, False, "running"), (False, False, "fitting"),
                                           (True, False, None), (False, True, None)):
            job._paused, job._stopping = paused, stopping
            (tmp_path / "study" / "progress.json").write_text(json.dumps({"state": progress or "starting"}))
            s = job.status()
            alive.add(s.state)
            assert s.active, s.state
    finally:
        proc.kill()
        proc.wait(30)
    job._paused = job._stopping = False
    for p in (ended(0), ended(130), ended(2), proc):  # finished, stopped by itself, an error, killed (SIGKILL)
        job.proc = p
        s = job.status()
        seen.add(s.state)
        assert not s.active, s.state
    assert proc.returncode == -signal.SIGKILL and "SIGKILL" in job.status().message
    # active means the process is alive (or the job waits for its cores), and every such state occurs
    assert alive | {"queued"} == set(study_job.ACTIVE)
    assert seen | alive | {"queued"} == set(study_job.STATES)


def test_an_unreadable_runs_csv_is_named_in_the_status(tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"widths": [8], "tokens": [2048]}))
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "runs.csv").write_bytes(b"\xff\xfe not text")
    s = StudyJob(tmp_path / "unused.txt", str(grid), folder=tmp_path / "study").status()
    assert s.rows == [] and str(tmp_path / "study" / "runs.csv") in s.problem and "cannot be read" in s.problem


def test_a_run_under_way_says_its_step_loss_and_time_left(tmp_path):
    """One run of some seconds, in the study's own process and worker: its status moves step by step (issue 54: a
    forecast run read 0 % and no time left from start to end), then the run is in and the steps are gone."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(pydoc_text())
    grid = tmp_path / "one.json"
    steps = 1500  # d = 32, 16 x 32 tokens a step: 10-40 s on one core (busy or not), long enough for a pace
    grid.write_text(json.dumps({"widths": [32], "tokens": [steps * 16 * 32], "n_ctx": 32, "batch_size": 16}))
    job = StudyJob(corpus, str(grid), folder=tmp_path / "study", workers=1, nice=0)
    job.start()
    try:
        first = wait_for(job, lambda s: s.step is not None or not s.active)
        assert first.state == "running" and first.steps == steps and 0 < first.step <= steps, first
        assert first.loss > 0
        # once its pace is measured (a few seconds of steps), the time left at that pace: the study's own estimate
        # has none before a run is in
        later = wait_for(job, lambda s: s.eta_s is not None or s.done)
        if not later.done:
            assert later.step > first.step and 0 < later.eta_s < 600, later
        s = wait_for(job, lambda s: not s.active)
        assert s.state == "finished", s.message
        assert (s.step, s.steps, s.loss) == (None, None, None) and s.done == 1
        assert not list((tmp_path / "study").glob(".live-*"))
    finally:
        job.stop()
