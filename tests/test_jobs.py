"""core.jobs and core.serve.cores: one runner (thread jobs here, process jobs in test_training_job.py's style with a
tiny run), one budget of cores shared with the page gate, queueing with positions, and the heartbeat that stops a job
its page no longer touches."""
import threading

import pytest

from core.jobs import JobBusy, ThreadJob, running_jobs
from core.serve import cores
from core.serve.cores import CoreBudget
from core.serve.gate import Gate
from tests.polling import stays, wait_until


@pytest.fixture
def budget(monkeypatch):
    """A budget of 4 cores, jobs at most 2 of them, for the test; the server's own afterwards."""
    b = CoreBudget(cores=4, job_cores=2)
    previous = cores.set_server_budget(b)
    yield b
    cores.set_server_budget(previous)


def endless(progress):
    """Work that steps until stopped (a step per 10 ms)."""
    n = 0
    while not progress.stopped():
        n += 1
        progress.step(n, 10 ** 9)
        threading.Event().wait(0.01)


def test_budget_grants_in_arrival_order_and_says_who_is_ahead():
    b = CoreBudget(cores=3, job_cores=2)
    granted = []
    a = b.claim(1, lambda: granted.append("a"))
    c = b.claim(2, lambda: granted.append("c"))   # 1 + 2 > the jobs' 2: waits
    d = b.claim(1, lambda: granted.append("d"))   # would fit, but never passes c
    assert a.granted and not c.granted and not d.granted
    assert (c.ahead, d.ahead, a.ahead) == (0, 1, None)
    a.release()
    assert c.granted and not d.granted and d.ahead == 0 and granted == ["c"]
    c.release()
    assert d.granted and granted == ["c", "d"] and b.job_held == 1


def test_a_page_run_never_takes_a_core_a_job_holds_or_waits_for():
    b = CoreBudget(cores=2, job_cores=1)
    job = b.claim(1)
    assert job.granted
    assert b.try_take_page() and not b.try_take_page()  # 2 cores: one the job's, one the page's
    second = b.claim(1)
    assert not second.granted  # the jobs' share is held
    job.release()
    assert second.granted      # the freed core went to the job in line, not to a page
    assert not b.try_take_page()
    b.give_page()
    assert b.try_take_page()


def test_the_gate_draws_its_slots_from_the_budget():
    b = CoreBudget(cores=2, job_cores=1)
    gate = Gate(slots=2, budget=b)
    claim = b.claim(1)
    told, got, leave = [], threading.Event(), threading.Event()

    def page():
        gate.acquire(on_wait=told.append)
        got.set()
        leave.wait(10)
    with gate.enter():
        assert b.page_held == 1
        t = threading.Thread(target=page)
        t.start()
        wait_until(lambda: told == [0], timeout=10)  # a slot is free in the gate, but no core in the budget
        assert gate.running == 1 and not got.is_set()
    wait_until(got.is_set, timeout=10)  # the waiting thread got the freed core
    assert gate.running == 1 and b.page_held == 1
    leave.set()
    t.join(10)
    wait_until(lambda: gate.running == 0, timeout=10)  # its thread ended holding it: reclaimed at the next look
    assert gate.running == 0 and b.page_held == 0
    claim.release()


def test_jobs_queue_for_cores_with_positions_and_start_by_themselves(budget):
    jobs = [ThreadJob(endless, f"job {i}", 10 ** 9, owner=f"o{i}", cores=1).start() for i in range(4)]
    try:
        wait_until(lambda: [j.status().state for j in jobs[:2]] == ["running", "running"])
        s2, s3 = jobs[2].status(), jobs[3].status()
        assert (s2.state, s2.ahead, s3.state, s3.ahead) == ("queued", 0, "queued", 1)
        assert "it is next" in s2.queue_words and "1 job ahead" in s3.queue_words
        assert budget.job_held == 2
        jobs[0].stop(wait=10)
        wait_until(lambda: jobs[2].status().state == "running")
        assert jobs[3].status().ahead == 0 and budget.job_held == 2
        jobs[3].stop()  # a queued job leaves the line at once
        assert jobs[3].status().state == "stopped" and budget.waiting == 0
    finally:
        for j in jobs:
            j.stop(wait=10)
    assert budget.job_held == 0 and running_jobs("thread") == 0


def test_a_thread_job_pauses_gives_its_cores_back_and_resumes(budget):
    job = ThreadJob(endless, "paused job", 10 ** 9, cores=2).start()
    try:
        wait_until(lambda: job.status().step > 3)
        job.pause()
        wait_until(lambda: job.status().state == "paused")
        assert budget.job_held == 0  # paused: its cores are free for others
        step = job.status().step
        stays(lambda: job.status().step == step, 0.2)
        job.resume()
        wait_until(lambda: job.status().step > step)
        assert job.status().state == "running" and budget.job_held == 2
    finally:
        assert job.stop(wait=10)
    assert job.status().state == "stopped" and job.result is None and budget.job_held == 0


def test_one_job_per_owner_and_a_finished_job_has_its_result(budget):
    first = ThreadJob(endless, "first", 10 ** 9, owner="me").start()
    try:
        with pytest.raises(JobBusy, match="you are first already"):
            ThreadJob(endless, "second", 10, owner="me").start()
    finally:
        first.stop(wait=10)
    done = ThreadJob(lambda p: 42, "answer", 1, owner="me").start()
    assert done.join(10) and done.result == 42 and done.status().state == "finished"
    broken = ThreadJob(lambda p: 1 / 0, "broken", 1).start()
    assert broken.join(10) and broken.status().state == "failed" and "ZeroDivisionError" in broken.status().message


def test_a_job_its_page_stops_touching_is_stopped(budget, monkeypatch):
    monkeypatch.setenv("TE_JOB_HEARTBEAT_S", "0.3")
    watched = ThreadJob(endless, "abandoned", 10 ** 9, owner="gone").watch("tab-1").start()
    kept = ThreadJob(endless, "kept", 10 ** 9, owner="here").watch("tab-2").start()
    free = ThreadJob(endless, "no session", 10 ** 9, owner="cli").start()  # queued: the jobs' 2 cores are taken
    try:
        stop_touching = threading.Event()

        def touch():
            while not stop_touching.wait(0.05):
                kept.touch()
        toucher = threading.Thread(target=touch, daemon=True)
        toucher.start()
        wait_until(lambda: watched.status().state == "stopped", timeout=30)
        wait_until(lambda: free.status().state == "running")  # it got the abandoned job's cores
        assert kept.status().state == "running"
        stop_touching.set()
        wait_until(lambda: kept.status().state == "stopped", timeout=30)
    finally:
        for j in (watched, kept, free):
            j.stop(wait=10)


def test_a_job_whose_session_ended_is_stopped_and_one_in_doubt_is_kept(budget):
    alive = {"a": True}
    gone = ThreadJob(endless, "a's job", 10 ** 9).watch("a", lambda s: alive[s]).start()
    doubt = ThreadJob(endless, "b's job", 10 ** 9).watch("b", lambda s: 1 / 0).start()
    try:
        wait_until(lambda: gone.status().state == "running")
        alive["a"] = False
        wait_until(lambda: gone.status().state == "stopped", timeout=30)
        gone.touch(), doubt.touch()
        assert doubt.status().state == "running"
    finally:
        gone.stop(wait=10)
        doubt.stop(wait=10)
