"""core.training.study_job: a study killed from outside takes its workers with it and says so; a refused start leaves no
temporary folder behind (issue 26, item 12)."""
import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from core.serve.cores import CoreBudget, set_server_budget
from core.training.study_grid import StudyError
from core.training.study_job import StudyJob
from tests.polling import wait_until
from tests.test_study_job import micro  # noqa: F401  (a fixture: a 6-run study that takes seconds)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads processes from /proc")

# a stand-in for ``python -m core.study``: one child in its process group, then it waits (no torch, no runs)
FAKE_STUDY = [sys.executable, "-c", "import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"]


def children(pid: int) -> dict[int, str]:
    """pid -> command line of the live (not zombie) children of ``pid``, read from /proc."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found[int(name)] = cmdline
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has ended: it holds no memory, only its exit status)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def end_group(pid: int):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture
def two_job_cores():
    """A server budget whose jobs may hold two cores (the default on 2 cores keeps one for pages): the study below
    runs two workers."""
    previous = set_server_budget(CoreBudget(cores=3, job_cores=2))
    yield
    set_server_budget(previous)


@linux_only
@pytest.mark.slow  # starts Python, torch and two workers
def test_a_killed_study_takes_its_workers_with_it_and_says_so(micro, tmp_path, two_job_cores):
    corpus, grid = micro
    job = StudyJob(corpus, grid, folder=tmp_path / "study", workers=2, nice=0)
    job.start()
    main = job.proc.pid
    try:
        wait_until(lambda: job.status().done >= 1, timeout=240, every=0.2)
        wait_until(lambda: sum("spawn_main" in c for c in children(main).values()) == 2, timeout=60, every=0.1)
        kids = children(main)  # the two workers (and multiprocessing's resource tracker)
        os.kill(main, signal.SIGKILL)
        job.proc.wait(30)
        # the workers die with their parent without the handle's help (nothing polls status() here) ...
        wait_until(lambda: not any(alive(p) for p in kids), timeout=30, every=0.1)
        s = job.status()
        assert s.state == "failed" and not s.active, s
        assert "killed (SIGKILL)" in s.message, s.message
        assert f"{s.done} of 6 runs were kept" in s.message, s.message
        assert 1 <= s.done < 6 and s.can_resume
    finally:
        end_group(main)


@linux_only
def test_the_handle_ends_the_group_of_a_study_that_died(micro, monkeypatch):
    corpus, grid = micro
    monkeypatch.setattr(StudyJob, "command", lambda self: FAKE_STUDY)
    job = StudyJob(corpus, grid, workers=1, nice=0)
    job.start()
    main = job.proc.pid
    try:
        wait_until(lambda: len(children(main)) == 1, timeout=30)
        (child,) = children(main)
        os.kill(main, signal.SIGKILL)
        job.proc.wait(30)
        # ... and a handle that sees its study's process dead ends whatever is left of its process group
        wait_until(lambda: job.status().state == "failed" and not alive(child), timeout=30)
        assert "killed (SIGKILL)" in job.status().message
        assert "0 of 6 runs were kept" in job.status().message
    finally:
        end_group(main)


def test_a_refused_start_leaves_no_temporary_folder(micro, tmp_path, monkeypatch):
    corpus, grid = micro
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))  # where mkdtemp makes the te-study-* folders
    monkeypatch.setattr(StudyJob, "command", lambda self: FAKE_STUDY)
    first = StudyJob(corpus, grid, folder=tmp_path / "first", workers=1, nice=0)
    first.start()
    try:
        second = StudyJob(corpus, grid, workers=99)  # a folder of its own, made only when it really starts
        second.start()
        assert second.status().state == "queued"  # the jobs' cores are first's
        assert list(tmp.glob("te-study-*")) == []
        second.stop()
        assert second.status().state == "new" and list(tmp.glob("te-study-*")) == []
    finally:
        main = first.proc.pid
        first.stop()
        end_group(main)
    small = tmp_path / "small.txt"
    small.write_text("a few words " * 100)
    fourth = StudyJob(small, "full")
    with pytest.raises(StudyError, match="too small"):
        fourth.start()
    assert list(tmp.glob("te-study-*")) == []
    assert second is not None and fourth is not None  # the handles are alive: no finaliser has removed anything
